"""Micro-batching: requests that arrive close together are scored and decoded in one call.

[`MicroBatcher`] keeps one asyncio queue. Its loop takes the first waiting request, waits `max_wait` seconds for
more (or until `max_batch_size` are waiting), and runs the whole batch in one call of `run` on its single worker
thread, so the model only ever runs on one thread, one batch at a time, and the event loop keeps accepting requests
meanwhile (they form the next batch). A request whose client went away before its batch started is dropped; one
that goes away during it gets its result discarded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar


logger = logging.getLogger(__name__)

Job = TypeVar("Job")


class MicroBatcher(Generic[Job]):
    """
    Collect jobs submitted from coroutines into batches and run each batch with `run` on one worker thread.

    Args:
        run (`Callable[[list[Job]], list[Any]]`): Computes one result per job, in order. An exception it raises
            becomes the result of every job of the batch.
        max_batch_size (`int`, *optional*, defaults to 16): The most jobs per call.
        max_wait (`float`, *optional*, defaults to 0.005): Seconds to wait after a batch's first job for others.
    """

    def __init__(self, run: Callable[[list[Job]], list[Any]], max_batch_size: int = 16, max_wait: float = 0.005):
        if max_batch_size < 1:
            raise ValueError(f"`max_batch_size` must be >= 1, got {max_batch_size}.")
        if max_wait < 0:
            raise ValueError(f"`max_wait` must be >= 0 seconds, got {max_wait}.")
        self.run, self.max_batch_size, self.max_wait = run, max_batch_size, max_wait
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="elical-serve")
        self.queue: asyncio.Queue | None = None
        self.task: asyncio.Task | None = None
        self.counts = {"batches": 0, "jobs": 0, "largest_batch": 0, "dropped": 0, "discarded": 0}
        """Batches run, jobs computed, the largest batch, jobs dropped before their batch (their client left) and
        results discarded (the client left during the batch)."""

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
        live = [(job, future) for job, future in batch if not future.done()]  # done: cancelled, its client left
        self.counts["dropped"] += len(batch) - len(live)
        return live

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._next_batch()
            if not batch:
                continue
            self.counts["batches"] += 1
            self.counts["jobs"] += len(batch)
            self.counts["largest_batch"] = max(self.counts["largest_batch"], len(batch))
            try:
                results = await loop.run_in_executor(self.executor, self.run, [job for job, _ in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"the batch function returned {len(results)} results for {len(batch)} jobs")
            except Exception as error:  # noqa: BLE001 - every job of the batch is told, the loop goes on
                logger.exception("A batch of %d requests failed", len(batch))
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            for (_, future), result in zip(batch, results):
                if future.done():  # the client went away meanwhile
                    self.counts["discarded"] += 1
                else:
                    future.set_result(result)

    async def close(self) -> None:
        """Stop the batch loop and the worker thread (after the batch in progress)."""
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
        self.executor.shutdown(wait=True)
