"""Micro-batching: requests that arrive close together are scored and decoded in one call.

[`MicroBatcher`] keeps one asyncio queue. Its loop takes the first waiting request, waits `max_wait` seconds for
more (or until `max_batch_size` are waiting), and runs the batch on its single worker thread, so the model only ever
runs on one thread, one call at a time, and the event loop keeps accepting requests meanwhile (they form the next
batch). A batch of jobs with different `key`s (answer lengths) runs as one call per key, shortest first, each
answered as soon as its call returns. A request whose client went away before its call started is dropped; one that
goes away during it gets its result discarded. A call that raises is run again one job at a time, so that only the
job that fails gets the exception. A job that `run` computed only part of ([`UNFINISHED`]: a large request done slice
by slice) goes back to the end of the queue, so that the requests that arrived meanwhile are not held up by all of it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar


logger = logging.getLogger(__name__)

Job = TypeVar("Job")


class Unfinished:
    """The type of [`UNFINISHED`]."""

    def __repr__(self) -> str:
        return "UNFINISHED"


UNFINISHED = Unfinished()
"""What `run` returns for a job it computed only part of: the job goes back to the end of the queue and is run again
with a later batch (its state is the job's own), after the jobs that arrived meanwhile."""


class MicroBatcher(Generic[Job]):
    """
    Collect jobs submitted from coroutines into batches and run each batch with `run` on one worker thread.

    Args:
        run (`Callable[[list[Job]], list[Any]]`): Computes one result per job, in order ([`UNFINISHED`] for a job
            to run again later). When it raises for a call of several jobs, each of them is run again alone: the
            exception of a job that fails alone is its result (raised by [`submit`]); the others get theirs.
        max_batch_size (`int`, *optional*, defaults to 16): The most jobs per batch.
        max_wait (`float`, *optional*, defaults to 0.005): Seconds to wait after a batch's first job for others.
        key (`Callable[[Job], Any]`, *optional*): Jobs of a batch with different keys run as separate calls, in
            the keys' order (sortable values; e.g. the answer length first, so that short answers are not held up by
            long ones).
    """

    def __init__(self, run: Callable[[list[Job]], list[Any]], max_batch_size: int = 16, max_wait: float = 0.005,
                 key: Callable[[Job], Any] | None = None):
        if max_batch_size < 1:
            raise ValueError(f"`max_batch_size` must be >= 1, got {max_batch_size}.")
        if max_wait < 0:
            raise ValueError(f"`max_wait` must be >= 0 seconds, got {max_wait}.")
        self.run, self.max_batch_size, self.max_wait, self.key = run, max_batch_size, max_wait, key
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="elical-serve")
        self.queue: asyncio.Queue | None = None
        self.task: asyncio.Task | None = None
        self.counts = {"batches": 0, "jobs": 0, "largest_batch": 0, "dropped": 0, "discarded": 0, "rerun": 0,
                       "continued": 0}
        """Calls of `run`, jobs computed, the largest call, jobs dropped before their call (their client left),
        results discarded (the client left during the call), calls that failed and were run again job by job, and
        jobs put back in the queue unfinished."""

    async def submit(self, job: Job) -> Any:
        """Queue `job` and wait for its result (the batch loop starts with the first job)."""
        if self.task is None or self.task.done():
            self.queue = asyncio.Queue()
            self.task = asyncio.get_running_loop().create_task(self._loop())
        future = asyncio.get_running_loop().create_future()
        self.queue.put_nowait((job, future))
        return await future

    async def _next_batch(self) -> list[tuple[Job, asyncio.Future]]:
        batch = [await self.queue.get()]
        if self.max_wait and self.queue.qsize() < self.max_batch_size - 1:
            await asyncio.sleep(self.max_wait)
        while len(batch) < self.max_batch_size and not self.queue.empty():
            batch.append(self.queue.get_nowait())
        return batch

    def _parts(self, batch: list[tuple[Job, asyncio.Future]]) -> list[list[tuple[Job, asyncio.Future]]]:
        if self.key is None:
            return [batch]
        parts: dict[Any, list[tuple[Job, asyncio.Future]]] = {}
        for item in batch:
            parts.setdefault(self.key(item[0]), []).append(item)
        return [parts[key] for key in sorted(parts)]

    async def _loop(self) -> None:
        while True:
            for part in self._parts(await self._next_batch()):
                await self._run(part)

    async def _run(self, batch: list[tuple[Job, asyncio.Future]]) -> None:
        """One call of `run` for the jobs of `batch` whose client is still there; a failed call of several jobs is
        run again one job at a time."""
        live = [(job, future) for job, future in batch if not future.done()]  # done: cancelled, its client left
        self.counts["dropped"] += len(batch) - len(live)
        if not live:
            return
        self.counts["batches"] += 1
        self.counts["jobs"] += len(live)
        self.counts["largest_batch"] = max(self.counts["largest_batch"], len(live))
        try:
            results = await asyncio.get_running_loop().run_in_executor(self.executor, self._call,
                                                                        [job for job, _ in live])
        except Exception as error:  # noqa: BLE001 - only the job that fails alone is told, the loop goes on
            if len(live) == 1:
                if not live[0][1].done():
                    live[0][1].set_exception(error)
                return
            logger.warning("A batch of %d requests failed (%s: %s): running each of them alone.", len(live),
                           type(error).__name__, error)
            self.counts["rerun"] += 1
            for item in live:
                await self._run([item])
            return
        for (job, future), result in zip(live, results):
            if future.done():  # the client went away meanwhile
                self.counts["discarded"] += 1
            elif result is UNFINISHED:  # behind the jobs that arrived meanwhile
                self.counts["continued"] += 1
                self.queue.put_nowait((job, future))
            else:
                future.set_result(result)

    def _call(self, jobs: list[Job]) -> list[Any]:
        results = self.run(jobs)
        if len(results) != len(jobs):
            raise RuntimeError(f"the batch function returned {len(results)} results for {len(jobs)} jobs")
        return results

    async def close(self) -> None:
        """Stop the batch loop and the worker thread (after the call in progress)."""
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
        self.executor.shutdown(wait=True)
