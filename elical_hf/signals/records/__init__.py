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

from .layout import DATASET_ALIASES, PAPER_SPLITS, SPLIT_WORDS, canonical_dataset, paper_split, parse_record_path
from .lm_eval_logs import CORRECTNESS_METRICS, read_lm_eval_records
from .reader import (
    JUDGE_OPTIONS, check_records_match, check_records_model, check_unique_records, judged_records, load_records,
    require_judgement, same_model,
)
from .schema import RECORD_FEATURES, first_samples, normalize_record, record_features, training_columns
from .storage import (
    JUDGED_MANIFEST_FORMAT, MANIFEST_FORMAT, MANIFEST_NAME, RECORD_EXTENSIONS, iter_record_batches, read_metadata,
    read_records, record_files, record_format, save_records,
)


__all__ = [
    "CORRECTNESS_METRICS", "DATASET_ALIASES", "JUDGED_MANIFEST_FORMAT", "JUDGE_OPTIONS", "MANIFEST_FORMAT",
    "MANIFEST_NAME", "PAPER_SPLITS", "RECORD_EXTENSIONS", "RECORD_FEATURES", "SPLIT_WORDS", "canonical_dataset",
    "check_records_match", "check_records_model", "check_unique_records", "first_samples", "iter_record_batches",
    "judged_records", "load_records", "normalize_record", "paper_split", "parse_record_path", "read_lm_eval_records",
    "read_metadata", "read_records", "record_features", "record_files", "record_format", "require_judgement",
    "same_model", "save_records", "training_columns",
]
