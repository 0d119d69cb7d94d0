"""The option groups several commands share, each option declared once: [`ModelArguments`] (the model a command loads
and how), [`RecordArguments`] (the records it reads), [`ShardArguments`], [`LexicalScoringArguments`],
[`OverwriteArguments`] (and a floor down `TrainingArguments`' trackers, `settings.training_options.TrackerOptions`);
[`only`] gives a command the part of a group it has. No torch here: `elical-hf <command> --help` reads these.

A command's own options are a dataclass, declared beside its step in `elical_hf/steps/<command>.py`, that inherits
the groups it uses (`ThresholdArguments(RecordArguments)`), or, for `elical-hf train`, a separate dataclass beside
[`ModelArguments`] and [`~elical_hf.training.training_args.ConfidenceTrainingArguments`], as TRL's scripts take
`(script_args, training_args, model_args)`. Help text lives on the field, once; [`api_key_env_help`] and
[`name_value_pairs`] are the help and the reader several options share.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from ..settings.configuration import HEAD_INITS, HEAD_TYPES
from ..models.default_model import DEFAULT_MODEL


__all__ = ["LexicalScoringArguments", "ModelArguments", "OptionGroup", "OverwriteArguments", "QuestionArguments",
           "RecordArguments", "ShardArguments", "api_key_env_help", "check_dtype_option", "name_value_pairs", "only"]

Options = TypeVar("Options")


class OptionGroup:
    """The base of the option groups: their `__post_init__` checks chain through `super().__post_init__()`, so a
    command's dataclass that inherits several groups runs the checks of each."""

    def __post_init__(self) -> None:
        pass


@functools.cache
def only(options: type[Options], *names: str) -> type[Options]:
    """
    The option group `options` with only the options `names`, for a command that has just those: a subclass whose
    other fields are class constants at their defaults (`None` where there is none), so the command neither shows
    nor accepts them and code that reads them still can. The same call returns the same class.

    Example: `class SelectLabelsArguments(only(RecordArguments, "records", "allow_other_model", "batch_size"))`.
    """
    known = {f.name: f for f in dataclasses.fields(options) if f.init}
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ValueError(f"{options.__name__} has no option(s) {unknown}.")
    fixed = {name: f for name, f in known.items() if name not in names}
    namespace: dict[str, Any] = {
        "__module__": options.__module__,
        "__qualname__": f"{options.__qualname__}[{', '.join(names)}]",
        "__annotations__": {name: ClassVar[Any] for name in fixed},
    }
    for name, f in fixed.items():  # a ClassVar is no field: no option, no __init__ argument, not in asdict
        namespace[name] = f.default_factory() if f.default_factory is not dataclasses.MISSING else (
            None if f.default is dataclasses.MISSING else f.default)
    return dataclass(kw_only=True)(type(namespace["__qualname__"], (options,), namespace))


def api_key_env_help(endpoint_option: str) -> str:
    """The help of the option that names the environment variable holding `endpoint_option`'s bearer token
    (`judge --judge_api_key_env`, `sample --api_key_env`: two flags, one text)."""
    return (f"The NAME of the environment variable holding the {endpoint_option}'s bearer token (e.g. OPENAI_API_KEY; "
            "the token itself never goes on the command line, where `ps` shows it). Default: no token. A --config "
            "file may name only OPENAI_API_KEY or an ELICAL_HF_* variable (put the key in, e.g., "
            "ELICAL_HF_JUDGE_API_KEY); any other only the command line can name.")


def name_value_pairs(items: list[str], what: str) -> dict[str, str]:
    """`NAME=VALUE` items of option `what` (`evaluate --model`, `--field_sources`) as a dict; a `ValueError` for a
    malformed item or a name given twice (one would be lost)."""
    pairs: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise ValueError(f"{what} must look like NAME=VALUE, got {item!r}.")
        if name in pairs:
            raise ValueError(f"{what} names {name} twice ({name}={pairs[name]} and {item}): each needs a name of its "
                             "own, or one would be silently dropped.")
        pairs[name] = value
    return pairs



def check_dtype_option(value: str) -> str:
    """Return a `--dtype` value (`auto`, `float32`, `bfloat16`, `float16`, ...) once it is known to name a dtype,
    so that a typo fails when the options are parsed, before any data or model is loaded."""
    if value == "auto":
        return value
    from ..settings.precision import parse_dtype  # torch, only once a dtype is named

    try:
        parse_dtype(value)
    except ValueError as error:
        raise ValueError(f"--dtype: {error}") from None
    return value


@dataclass(kw_only=True)
class ModelArguments(OptionGroup):
    """
    The model a command loads, and how (TRL's `ModelConfig`): `elical-hf train`'s base model and the confidence
    model built on it; `sample` and `serve` have its `dtype` ([`only`]).

    [`model_init_kwargs`] turns them into the keyword arguments of
    [`~elical_hf.AutoModelForConfidence.from_pretrained`], which `train` stores in
    [`~elical_hf.ConfidenceTrainingArguments.model_init_kwargs`].
    """

    model_name_or_path: str = field(default=DEFAULT_MODEL, metadata={"help": "Base causal LM (Hub id or folder)."})
    dtype: str = field(
        default="auto",
        metadata={"help": "Weights dtype: 'auto' (the precision policy: bf16 on GPUs that support it and on CPUs where "
                  "it is native and faster, else float32), or 'float32' / 'bfloat16' / 'float16'."},
    )
    load_in_4bit: bool = field(
        default=False,
        metadata={"help": "Load the frozen backbone in 4 bits (QLoRA: NF4, bitsandbytes, one CUDA GPU), computing in "
                  "--dtype; for 7B-class backbones on one GPU."},
    )
    head_type: str = field(
        default="linear",
        metadata={"help": "Head of the fresh models: 'linear' (the paper's) or 'mlp' (H -> H/2 -> H/4 -> 1 with ReLU, "
                  "the reference code's no-LoRA ablation head).", "choices": list(HEAD_TYPES)},
    )
    head_init: str = field(
        default="normal",
        metadata={"help": "How a fresh head is drawn: 'normal' (transformers' N(0, 0.02), bias 0) or 'torch_default' "
                  "(PyTorch's uniform +-1/sqrt(H), the reference code's).", "choices": list(HEAD_INITS)},
    )
    feature_layer: int | None = field(
        default=None,
        metadata={"help": "The hidden state the head reads, as transformers' output_hidden_states indexes them: i = "
                  "the residual stream after decoder block i (no final norm), the number of layers = the final, "
                  "normed state (the default, the paper's); negative counts from the end (-1 final, -8 the 8th from "
                  "the end). Only the blocks up to it run and get a LoRA."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_dtype_option(self.dtype)

    def model_init_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of `from_pretrained`: `dtype` resolved by the precision policy (the decision a run
        records), `load_in_4bit`, and the head options that differ from their defaults (a run that leaves them keeps
        the run manifest it had before they existed, so it still resumes)."""
        from ..settings.precision import resolve_dtype

        defaults = {f.name: f.default for f in dataclasses.fields(ModelArguments)}
        heads = {name: getattr(self, name) for name in ("head_type", "head_init", "feature_layer")
                 if getattr(self, name) != defaults[name]}
        return {"dtype": resolve_dtype(self.dtype), "load_in_4bit": self.load_in_4bit, **heads}


@dataclass(kw_only=True)
class RecordArguments(OptionGroup):
    """
    The records a command reads ([`~elical_hf.signals.records.load_records`]) and the model run on them: what every
    command that reads records shares (each has the part of it it uses, [`only`]).

    `records` is a file, a folder (HonestyBench layout, `elical-hf sample` / `judge` output) or a Hub dataset; built
    in Python, it may also hold records in memory.
    """

    records: str = field(metadata={"help": "Records: a .jsonl / .parquet file, a folder (HonestyBench layout or "
                                   "`elical-hf sample` / `judge` output) or a Hub dataset."})
    allow_incomplete: bool = field(
        default=False,
        metadata={"help": "Read an unfinished `elical-hf sample` folder (manifest complete: false) anyway; the number "
                  "of missing rows is printed. Without it such a folder is refused."},
    )
    allow_other_model: bool = field(
        default=False,
        metadata={"help": "Use answers of another model than the one this command works with: records of another "
                  "model than the one trained or scored (e.g. of the model it was fine-tuned from), or with `sample "
                  "--backend openai` a server serving another model than --model. Without it they are refused."},
    )
    batch_size: int = field(
        default=16, metadata={"help": "Questions (or prompts) per batch of the model this command runs."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size < 1:
            raise ValueError(f"--batch_size must be >= 1, got {self.batch_size}.")


@dataclass(kw_only=True)
class QuestionArguments(OptionGroup):
    """The questions a command reads ([`~elical_hf.steps.load_questions`]): `sample` answers them, `monitor` scores
    them."""

    questions: str = field(
        metadata={
            "help": "Question table (jsonl/json/parquet/csv/arrow file, saved dataset folder or Hub dataset "
            "`<repo>[:<config>[:<split>]]`, e.g. `cais/mmlu:all:test`) with a `question` column (`id`, `answer`, "
            "`dataset` optional; multiple-choice questions in cais/mmlu's, the reference code's or our layout), or "
            "`bundled:<name>[:<limit>]` for the bundled sets (several: `bundled:nq:100,squad:50`; MMLU: "
            "`bundled:mmlu:57`)."
        }
    )


@dataclass(kw_only=True)
class LexicalScoringArguments(OptionGroup):
    """How ROUGE-L compares two answers (`judge --consistency lexical`, the Consis-Lex baseline)."""

    lexical_scoring: str = field(
        default="rouge_score",
        metadata={"help": "ROUGE-L of the `rouge_score` package, or `reference` (the paper's code: the `rouge` "
                  "package, split at '.', case- and punctuation-sensitive, distinct words).",
                  # signals.lexical_judge.LEXICAL_SCORINGS, a floor up (tests/test_rouge_reference.py keeps them equal)
                  "choices": ["rouge_score", "reference"]},
    )


@dataclass(kw_only=True)
class ShardArguments(OptionGroup):
    """How a resumable command (`sample`, `judge`) writes its records: shard by shard."""

    shard_size: int = field(default=64, metadata={"help": "Records (one per question) per shard: the unit of "
                                                  "resumption, a rerun redoes only the missing shards."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.shard_size < 1:
            raise ValueError(f"--shard_size must be >= 1, got {self.shard_size}.")


@dataclass(kw_only=True)
class OverwriteArguments(OptionGroup):
    """What a command that writes an `--output_dir` (`train`, `evaluate`, `export`) does with one that holds files."""

    overwrite_output_dir: bool = field(default=False, metadata={"help": "Write into an --output_dir that holds files, "
                                       "replacing what is there: train trains anew (without it the same run resumes), "
                                       "evaluate replaces its results, export its folder. Without it it is refused."})
