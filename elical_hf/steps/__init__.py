"""The method's steps as library functions, records in, records or results out: what the `elical-hf` commands, the
demo and the replication script compose. One module per command, named for it (`steps/judge.py` is `elical-hf
judge`), holding the command's `*Arguments` dataclass and its step.

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

Every step takes its command's parsed options, as TRL's scripts take theirs: `step(args, *, <objects in memory>)`,
`args` the command's `*Arguments` dataclass ([`train`]: [`TrainArguments`], [`~elical_hf.ConfidenceTrainingArguments`]
and [`~elical_hf.steps.arguments.ModelArguments`]; [`sample`]: [`SampleArguments`] and
[`~elical_hf.signals.SamplingSettings`]), which Python callers build too (records in memory go in `args.records`).
What they hold in memory goes beside it, as the Trainer takes a dataset beside its arguments: a backend, a completion
function, confidences and label draws computed elsewhere. The commands read the environment (API keys, a Slurm
array) in their `main`, never the dataclasses.
"""

from .baselines import BaselinesArguments, score_baselines
from .diagnose import DiagnoseArguments, diagnose
from .evaluate import (
    TEST_SPLITS, EvaluateArguments, Evaluation, check_trained_model, evaluate, test_records, write_evaluation,
)
from .judge import Filled, JudgeArguments, judge
from .monitor import MonitorArguments, monitor
from .probe_layers import ProbeLayersArguments, ProbeSettings, probe_confidences, probe_layers, probe_layers_to_markdown
from .sample import SampleArguments, Sampled, load_questions, sample
from .select_labels import SelectLabelsArguments, select_labels
from .threshold import ThresholdArguments, threshold
from .train import TrainArguments, train, training_table


__all__ = [
    "TEST_SPLITS", "BaselinesArguments", "DiagnoseArguments", "EvaluateArguments", "Evaluation", "Filled",
    "JudgeArguments", "MonitorArguments", "ProbeLayersArguments", "ProbeSettings", "SampleArguments", "Sampled",
    "SelectLabelsArguments", "ThresholdArguments", "TrainArguments", "check_trained_model", "diagnose", "evaluate",
    "judge", "load_questions", "monitor", "probe_confidences", "probe_layers", "probe_layers_to_markdown", "sample",
    "score_baselines", "select_labels", "test_records", "threshold", "train", "training_table", "write_evaluation",
]
