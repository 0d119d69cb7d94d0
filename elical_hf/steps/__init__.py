"""The method's steps as library functions, records in, records or results out: what the `elical-hf` commands, the
demo and the replication script compose.

| step | in | out |
|---|---|---|
| [`sample`] | questions | records with a greedy answer and k samples |
| [`judge`] | records | records with correctness / consistency judgements |
| [`score_baselines`] | records | records with `confidence_<name>` of the training-free baselines |
| [`diagnose`] | judged records | will elicitation help (the teacher's AUROC) |
| [`train`] | judged records (or training tables) | stage-1, EliCal and Cal-Only models |
| [`select_labels`] | a stage-1 model, a pool of records | the records to label |
| [`threshold`] | a model, labelled records | its answer/abstain threshold, saved with it |
| [`monitor`] | a model, new unlabelled questions | do their confidences still look like the calibration set's |
| [`probe_layers`] | a model, judged train records | the layer whose state knows best (probe AUROC by layer) |
| [`evaluate`] | test records, models, probes, other confidences | tables, paired differences, label curves, decisions |

Every records input goes through [`~elical_hf.signals.records.load_records`]: a file, a folder, a Hub dataset or
records in memory.

The steps that only commands run take the command's parsed options, as TRL's scripts take theirs: [`train`] takes
([`TrainArguments`], [`~elical_hf.ConfidenceTrainingArguments`], [`~elical_hf.arguments.ModelArguments`]);
[`threshold`], [`monitor`], [`select_labels`] and [`probe_layers`] their `*Arguments` dataclass (which holds the shared
[`~elical_hf.arguments.RecordArguments`]). The steps the demo and the replication script also call with records,
confidences or a backend in memory ([`sample`], [`judge`], [`score_baselines`], [`diagnose`], [`evaluate`]) take
keyword arguments, which their commands fill from their parsed options.
"""

from .diagnosing import diagnose
from .evaluating import TEST_SPLITS, Evaluation, check_trained_model, evaluate, test_records, write_evaluation
from .judging import Filled, judge, score_baselines
from .monitoring import MonitorArguments, monitor
from .probing import ProbeLayersArguments, ProbeSettings, probe_confidences, probe_layers, probe_layers_to_markdown
from .sampling import Sampled, load_questions, sample
from .training import (
    SelectLabelsArguments, ThresholdArguments, TrainArguments, select_labels, threshold, train, training_table,
)


__all__ = [
    "TEST_SPLITS", "Evaluation", "Filled", "MonitorArguments", "ProbeLayersArguments", "ProbeSettings", "Sampled",
    "SelectLabelsArguments", "ThresholdArguments", "TrainArguments", "check_trained_model", "diagnose", "evaluate",
    "judge", "load_questions", "monitor", "probe_confidences", "probe_layers", "probe_layers_to_markdown", "sample",
    "score_baselines", "select_labels", "test_records", "threshold", "train", "training_table", "write_evaluation",
]
