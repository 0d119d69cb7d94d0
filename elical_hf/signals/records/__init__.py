"""HonestyBench records, the one currency of elical-hf: their schema, their files, what their paths say, and the one
reader that gives any records input as a `datasets.Dataset` with the trainer's columns.

- [`schema`](schema.py): the flat record shape ([`normalize_record`]) and the training columns a record's judgements
  give ([`training_columns`]);
- [`storage`](storage.py): `.jsonl` / `.parquet` files read a batch at a time and written atomically, and the
  manifests of `elical-hf sample` and `elical-hf judge` folders;
- [`layout`](layout.py): the model, dataset and split a file's path names, and the paper's split of a record;
- [`reader`](reader.py): [`load_records`], the one reader every command and step uses;
- [`lm_eval_logs`](lm_eval_logs.py): lm-evaluation-harness `--log_samples` output read as judged greedy answers
  ([`read_lm_eval_records`]; `load_records` reads such files through it).
"""

from .layout import (
    DATASET_ALIASES, HONESTYBENCH_REPO, PAPER_SPLITS, SPLIT_WORDS, canonical_dataset, paper_split, parse_record_path,
)
from .lm_eval_logs import CORRECTNESS_METRICS, QUESTION_KEYS, is_lm_eval_samples, read_lm_eval_records
from .reader import (
    JUDGE_OPTIONS, check_records_match, check_records_model, check_unique_records, judged_records, load_records,
    require_judgement, same_model,
)
from .schema import (
    RECORD_FEATURES, RECORD_MARKERS, SAMPLE_FIELDS, TRAINING_FEATURES, first_samples, is_record, is_records_table,
    normalize_record, record_features, training_columns,
)
from .storage import (
    JUDGED_MANIFEST_FORMAT, MANIFEST_FORMAT, MANIFEST_NAME, RECORD_EXTENSIONS, check_complete_samples,
    iter_record_batches, read_metadata, read_records, record_files, record_format, save_records,
)


__all__ = [
    "CORRECTNESS_METRICS", "DATASET_ALIASES", "HONESTYBENCH_REPO", "JUDGED_MANIFEST_FORMAT", "JUDGE_OPTIONS",
    "MANIFEST_FORMAT", "MANIFEST_NAME", "PAPER_SPLITS", "QUESTION_KEYS", "RECORD_EXTENSIONS", "RECORD_FEATURES",
    "RECORD_MARKERS", "SAMPLE_FIELDS", "SPLIT_WORDS", "TRAINING_FEATURES", "canonical_dataset",
    "check_complete_samples", "check_records_match", "check_records_model", "check_unique_records", "first_samples",
    "is_lm_eval_samples", "is_record", "is_records_table", "iter_record_batches", "judged_records", "load_records",
    "normalize_record", "paper_split", "parse_record_path", "read_lm_eval_records", "read_metadata", "read_records",
    "record_features", "record_files", "record_format", "require_judgement", "same_model", "save_records",
    "training_columns",
]
