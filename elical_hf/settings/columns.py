"""The column names records and training tables share.

One vocabulary for both: a judged record *is* a training row once its targets are derived, so the greedy answer's
correctness is `greedy_correctness` everywhere, the HonestyBench schema's name, in records, training tables, the
collator's batches and the trainer's dev metrics. No torch here: the record readers and the trainer's data module both
read it.
"""

from __future__ import annotations


__all__ = ["CONSISTENCY_COLUMN", "CORRECTNESS_COLUMN", "EVAL_LABEL_COLUMN", "QUESTION_COLUMN"]

QUESTION_COLUMN = "question"
CONSISTENCY_COLUMN = "consistency"
"""Stage 1's target: the share of sampled answers judged equivalent to the greedy one."""
CORRECTNESS_COLUMN = "correctness"
"""Stage 2's target: the share of sampled answers judged correct."""
EVAL_LABEL_COLUMN = "greedy_correctness"
"""The evaluation label: whether the greedy answer is correct (the HonestyBench schema's field; `bool` or 0/1)."""
