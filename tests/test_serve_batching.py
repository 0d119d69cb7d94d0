"""The server's micro-batcher, in-process: batches fill up to their size within the wait, a job whose client left
before its batch never runs, a failing batch is run again job by job (only the failing job fails) and the loop goes
on, jobs of different keys run as separate calls."""

from __future__ import annotations

import asyncio

import pytest

from elical_hf.serve.batching import MicroBatcher


def recording(seen: list[list[int]]):
    def run(jobs: list[int]) -> list[int]:
        if any(job < 0 for job in jobs):
            raise RuntimeError("a negative job")
        seen.append(list(jobs))
        return [job * 10 for job in jobs]
    return run


def test_jobs_that_arrive_together_run_in_batches_of_at_most_max_batch_size():
    seen: list[list[int]] = []

    async def main() -> list[int]:
        batcher = MicroBatcher(recording(seen), max_batch_size=4, max_wait=0.05)
        try:
            return await asyncio.gather(*(batcher.submit(i) for i in range(10)))
        finally:
            await batcher.close()

    assert asyncio.run(main()) == [i * 10 for i in range(10)]
    assert [len(batch) for batch in seen] == [4, 4, 2] and sorted(sum(seen, [])) == list(range(10))


def test_a_job_cancelled_before_its_batch_never_runs_and_the_counts_say_so():
    seen: list[list[int]] = []

    async def main() -> tuple[int, dict]:
        batcher = MicroBatcher(recording(seen), max_batch_size=8, max_wait=0.2)
        try:
            gone = asyncio.ensure_future(batcher.submit(1))
            kept = asyncio.ensure_future(batcher.submit(2))
            await asyncio.sleep(0.02)
            gone.cancel()  # its client left while the batch was still collecting
            return await kept, batcher.counts
        finally:
            await batcher.close()

    result, counts = asyncio.run(main())
    assert result == 20 and seen == [[2]]
    assert counts["dropped"] == 1 and counts["jobs"] == 1 and counts["batches"] == 1


def test_a_failing_batch_is_run_again_job_by_job_and_the_next_batch_runs():
    seen: list[list[int]] = []

    async def main() -> tuple[list, int]:
        batcher = MicroBatcher(recording(seen), max_batch_size=8, max_wait=0.05)
        try:
            failed = await asyncio.gather(batcher.submit(-1), batcher.submit(3), return_exceptions=True)
            return failed, await batcher.submit(4), batcher.counts
        finally:
            await batcher.close()

    (failed, alone), later, counts = asyncio.run(main())
    assert isinstance(failed, RuntimeError) and "negative" in str(failed) and alone == 30
    assert later == 40 and seen == [[3], [4]] and counts["rerun"] == 1


def test_jobs_with_different_keys_run_as_separate_calls_in_key_order():
    seen: list[list[int]] = []

    async def main() -> list[int]:
        batcher = MicroBatcher(recording(seen), max_batch_size=8, max_wait=0.05, key=lambda job: job % 3)
        try:
            return await asyncio.gather(*(batcher.submit(i) for i in (5, 3, 4, 6, 1)))
        finally:
            await batcher.close()

    assert asyncio.run(main()) == [50, 30, 40, 60, 10]
    assert seen == [[3, 6], [4, 1], [5]]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="max_batch_size"):
        MicroBatcher(lambda jobs: jobs, max_batch_size=0)
    with pytest.raises(ValueError, match="max_wait"):
        MicroBatcher(lambda jobs: jobs, max_wait=-1)
