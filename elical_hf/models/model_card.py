"""The model card of a confidence model, rendered from the Jinja template in `model_cards/` into a
`huggingface_hub.ModelCard`: part of every saved model folder (`README.md`), like its `confidence_config.json`.

A confidence model carries a [`ConfidenceModelCardData`] (user metadata, evaluation results, training logs) that
[`~elical_hf.training.callbacks.ConfidenceCardCallback`] fills while training; `save_pretrained` renders it together
with the model's [`ConfidenceConfig`] (base model, training history, decision threshold, prompt) into `README.md`, so a
card never needs editing by hand. Evaluation results live in the card's `model-index` and are read back on load.
"""

from __future__ import annotations

import html
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..utils.atomic import atomic_write_text
from ..settings.configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig
from .hub_ids import is_hub_id
from ..metrics import METRIC_NAMES
from ..metrics.evaluate_mixin import CITATION as PAPER_CITATION


MODEL_CARD_TEMPLATE = "confidence_model_card.md"
GENERATED_MARKER = "<!-- elical-hf: generated card; `push` re-renders it (remove this line to keep your edits) -->"
RELIABILITY_IMAGE = "reliability.png"

PAPER_TITLE = "Annotation-Efficient Universal Honesty Alignment"
PAPER_URL = "https://arxiv.org/abs/2510.17509"
CITATION = PAPER_CITATION  # one citation: the metric modules' (they ship it inside their standalone copies)

LIBRARY_NAME = "elical-hf"
PIPELINE_TAG = "text-classification"  # the Hub's fixed task list has no confidence estimation: question in, score out
MODEL_TAGS = ["elical-hf", "confidence-estimation", "honesty", "calibration", "peft", "lora"]
TASK_TYPE = "text-classification"
TASK_NAME = "Confidence estimation (honesty)"
_STAGE_TEXT = {
    "elicitation": "Elicitation: regress self-consistency (share of sampled answers equivalent to the greedy one)",
    "calibration": "Calibration: regress correctness (share of sampled answers judged correct)",
}


def templates_dir() -> Path:
    """The folder of the card templates: `elical_hf/model_cards/` in a wheel, the repository's `model_cards/` in a
    source or editable install."""
    here = Path(__file__).resolve().parents[1]  # the package folder
    for folder in (here / "model_cards", here.parent / "model_cards"):
        if (folder / MODEL_CARD_TEMPLATE).is_file():
            return folder
    raise FileNotFoundError(f"The card templates are missing from {here / 'model_cards'}; reinstall elical-hf.")


@dataclass
class EvaluationResult:
    """Confidence-quality metrics of a model on one evaluation set (one row of the card's evaluation table).

    Args:
        dataset (`str`): Short name of the set, e.g. `"nq"` or `"squad"`.
        split (`str`): Its split, e.g. `"in_domain_test"`, `"ood_test"` or `"test"`.
        metrics (`dict[str, float]`): e.g. `{"auroc": 0.84, "ece": 0.05, "alignment": 78.1}` (AUROC and ECE in
            [0, 1], alignment in percent, as [`elical_hf.metrics.compute_all`] returns them).
        dataset_id (`str`, *optional*): Hub dataset id (defaults to the set's name in the `model-index`).
        dataset_config (`str`, *optional*): The `load_dataset` config name.
    """

    dataset: str
    split: str
    metrics: dict[str, float]
    dataset_id: str | None = None
    dataset_config: str | None = None


@dataclass
class ConfidenceModelCardData:
    r"""
    What a confidence model's card says besides its [`ConfidenceConfig`]; attached to the model as
    `model_card_data` (see [`get_card_data`]).

    Parameters:
        model_id (`str`, *optional*): Hub id the card's usage snippet loads (set by `push_to_hub`).
        language (`str` or `list[str]`, *optional*, defaults to `"en"`): Language of the questions.
        license (`str`, *optional*): License of the adapter weights.
        datasets (`list[str]`, *optional*): Hub ids of the training data (e.g. `"Shiyunee/HonestyBench"`).
        tags (`list[str]`, *optional*): Extra tags (the library's are always added).
        evaluations (`list[EvaluationResult]`, *optional*): Evaluation results; see [`add_evaluation`].
        source (`str`, *optional*): Where the weights come from when they were not trained here (e.g. a converted
            release of the paper).

    Filled automatically (not constructor arguments): `generated_from_trainer`, `training_logs` (one row per
    evaluation during training), `dev_metrics` (the last of them).
    """

    model_id: str | None = None
    language: str | list[str] | None = "en"
    license: str | None = None
    datasets: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    evaluations: list[EvaluationResult] = field(default_factory=list)
    source: str | None = None

    generated_from_trainer: bool = field(default=False, init=False)
    training_logs: list[dict[str, Any]] = field(default_factory=list, init=False)
    dev_metrics: dict[str, Any] = field(default_factory=dict, init=False)

    def add_tags(self, *tags: str) -> None:
        self.tags += [tag for tag in tags if tag not in self.tags]

    def add_evaluation(
        self,
        dataset: str,
        metrics: dict[str, float],
        split: str = "test",
        dataset_id: str | None = None,
        dataset_config: str | None = None,
    ) -> None:
        """
        Record (or replace) the metrics of one evaluation set.

        Args:
            dataset (`str`), split (`str`, *optional*, defaults to `"test"`), dataset_id (`str`, *optional*),
            dataset_config (`str`, *optional*): See [`EvaluationResult`].
            metrics (`dict[str, float]`): e.g. the output of [`elical_hf.metrics.compute_all`]; non-numeric values
                and `threshold` (a setting of the alignment rule, not a quality measure) are left out.
        """
        numbers = {
            k: float(v)
            for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "threshold"
        }
        if not numbers:
            raise ValueError(f"No numeric metric to record for {dataset!r}: {metrics!r}.")
        key = (dataset, split, dataset_config)
        self.evaluations = [e for e in self.evaluations if (e.dataset, e.split, e.dataset_config) != key]
        self.evaluations.append(EvaluationResult(dataset, split, numbers, dataset_id, dataset_config))

    def eval_results(self) -> list[Any]:
        """The evaluations as `huggingface_hub.EvalResult`s (the card's `model-index`). The `model-index` tells
        evaluations apart by dataset id, config and split, not by name: sets of one Hub dataset (the datasets of
        HonestyBench) without a config of their own are given their name as the config."""
        from huggingface_hub import EvalResult

        return [
            EvalResult(
                task_type=TASK_TYPE,
                task_name=TASK_NAME,
                dataset_type=entry.dataset_id or entry.dataset,
                dataset_name=entry.dataset,
                dataset_config=entry.dataset_config or (entry.dataset if entry.dataset_id else None),
                dataset_split=entry.split,
                metric_type=name,
                metric_name=METRIC_NAMES.get(name, name),
                metric_value=value,
            )
            for entry in self.evaluations
            for name, value in entry.metrics.items()
        ]

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> ConfidenceModelCardData:
        """Read back the metadata and evaluations of a card this library generated in `folder` (else defaults)."""
        path = Path(folder) / "README.md"
        if not path.is_file() or GENERATED_MARKER not in path.read_text(encoding="utf-8"):
            return cls()
        from huggingface_hub import ModelCard

        data = ModelCard.load(path).data
        name = data.get("model_name")
        card = cls(
            model_id=name if name and "/" in name else None,  # a Hub id, not a folder name
            language=data.get("language", "en"),
            license=data.get("license"),
            datasets=list(data.get("datasets") or []),
            tags=[t for t in data.get("tags") or [] if t not in MODEL_TAGS],
        )
        grouped: dict[tuple[Any, ...], dict[str, float]] = {}
        for result in data.eval_results or []:
            key = (result.dataset_name, result.dataset_split or "test", result.dataset_type, result.dataset_config)
            grouped.setdefault(key, {})[result.metric_type] = result.metric_value
        for (name, split, dataset_id, config), metrics in grouped.items():
            dataset_id = dataset_id if dataset_id != name else None
            config = None if dataset_id and config == name else config  # the name standing in (see eval_results)
            card.add_evaluation(name, metrics, split, dataset_id, config)
        return card


def get_card_data(model: Any) -> ConfidenceModelCardData:
    """The [`ConfidenceModelCardData`] of a confidence model (created on first use), shared by its PEFT wrapper."""
    model = getattr(model, "module", model)  # DDP / accelerate wrappers
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    data = inner.__dict__.get("model_card_data")
    if data is None:
        data = ConfidenceModelCardData()
        inner.model_card_data = data
    return data


def _fmt(value: Any, digits: int = 4) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return "" if value is None else str(value)


_MARKDOWN_ESCAPES = {"\\": "\\\\", "`": "\\`", "|": "\\|", "[": "\\[", "]": "\\]", "*": "\\*", "~": "\\~"}


def markdown_text(value: Any) -> str:
    r"""`value` (a name taken from data or from the user: a domain, a dataset, a column, a path) as inert, one-line
    text of a card: runs of whitespace (newlines too) become one space, `&`, `<` and `>` HTML entities, and `\`,
    `` ` ``, `|`, `[`, `]`, `*`, `~` and `_` (but inside a word) are escaped with a backslash, so that it never ends a
    table row or cell, opens a code span, a link or emphasis, or becomes HTML on the Hub's page (inside backticks use
    [`code_span`]).

    Example:

    ```python
    >>> markdown_text("a|b\n<script>")
    'a\\|b &lt;script&gt;'

    ```
    """
    text = html.escape(" ".join(str(value).split()), quote=False)
    text = "".join(_MARKDOWN_ESCAPES.get(character, character) for character in text)
    return re.sub(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])", r"\\_", text)  # `_` inside a word emphasises nothing


def code_span(value: Any, in_table: bool = False) -> str:
    """`value` as an inline code span of a card, one line, delimited by more backticks than any run inside it (so it
    cannot close early; CommonMark's rule), e.g. a path or Hub id the library names. `in_table`: a span in a table
    cell, whose `|` is escaped (GFM shows it as `|` there; unescaped it would end the cell)."""
    text = " ".join(str(value).split())
    if in_table:
        text = text.replace("|", "\\|")
    runs = [len(run) for run in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    return f"{fence} {text} {fence}" if text.startswith("`") or text.endswith("`") else f"{fence}{text}{fence}"


def _code_fence(text: str) -> str:
    """A Markdown code fence longer than any run of backticks in `text` (at least three), so `text` cannot end it."""
    runs = [len(run) for run in re.findall(r"`+", text)]
    return "`" * max(3, max(runs, default=0) + 1)


def _history_rows(config: ConfidenceConfig) -> list[dict[str, str]]:
    rows = []
    for number, entry in enumerate(config.training_history, 1):
        stage = entry.get("stage", "?")
        frozen = "head only (LoRA frozen)" if config.use_lora else "head only (no LoRA)"
        trainable = "LoRA + head" if entry.get("lora_trainable") else frozen
        dev = entry.get("dev_metrics") or {}
        rows.append(
            {
                "number": str(number),
                "stage": _STAGE_TEXT.get(stage, stage),
                "target": code_span(entry.get("label_column", ""), in_table=True),
                "examples": _fmt(entry.get("num_examples")),
                "trainable": trainable,
                "epochs": _fmt(entry.get("epochs"), 2),
                "learning_rate": f"{entry['learning_rate']:g}" if entry.get("learning_rate") else "",
                "batch": _fmt(entry.get("effective_batch_size")),
                "dev": ", ".join(f"{METRIC_NAMES.get(k, k)} {_fmt(v)}" for k, v in dev.items() if k in METRIC_NAMES),
            }
        )
    return rows


def _label_budget(config: ConfidenceConfig) -> int | None:
    labelled = [e.get("num_examples") for e in config.training_history if e.get("stage") == "calibration"]
    return labelled[-1] if labelled else None


def _lora_settings(folder: Path | None) -> dict[str, Any]:
    if folder is None or not (folder / "adapter_config.json").is_file():
        return {}
    adapter = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    return {
        "r": adapter.get("r"),
        "alpha": adapter.get("lora_alpha"),
        "targets": ", ".join(sorted(adapter.get("target_modules") or [])),
    }


def render_model_card(
    config: ConfidenceConfig, card_data: ConfidenceModelCardData | None = None, folder: str | os.PathLike | None = None
) -> Any:
    """
    Render a confidence model's card from `model_cards/confidence_model_card.md`.

    Args:
        config ([`ConfidenceConfig`]): The model's config (base model, history, threshold, prompt).
        card_data ([`ConfidenceModelCardData`], *optional*): Metadata and evaluations.
        folder (`str`, *optional*): The saved model's folder: its `adapter_config.json` gives the LoRA settings,
            and a `reliability.png` in it is shown in the card.

    Returns:
        `huggingface_hub.ModelCard`: YAML metadata (`library_name: elical-hf`, `base_model`, `datasets`, `tags`,
        `pipeline_tag`, `model-index`) and the rendered text.
    """
    from huggingface_hub import ModelCard, ModelCardData

    card_data = card_data or ConfidenceModelCardData()
    folder = Path(folder) if folder is not None else None
    model_name = card_data.model_id or (folder.resolve().name if folder is not None else "confidence-model")
    base = config.base_model_name_or_path
    tags = MODEL_TAGS + [t for t in card_data.tags if t not in MODEL_TAGS]
    metadata = ModelCardData(
        base_model=base,
        datasets=card_data.datasets or None,
        eval_results=card_data.eval_results() or None,
        language=card_data.language,
        library_name=LIBRARY_NAME,
        license=card_data.license,
        model_name=model_name,
        pipeline_tag=PIPELINE_TAG,
        tags=tags,
        base_model_relation="adapter" if base else None,
    )
    names = {m for e in card_data.evaluations for m in e.metrics}
    usage_id = json.dumps(card_data.model_id or "<your-namespace>/<this-model>")
    metric_names = [m for m in METRIC_NAMES if m in names] + sorted(names - set(METRIC_NAMES))
    evaluations = [
        {"dataset": markdown_text(e.dataset), "split": markdown_text(e.split),
         "values": [_fmt(e.metrics.get(m), 2 if m == "alignment" else 4) for m in metric_names]}
        for e in card_data.evaluations
    ]
    return ModelCard.from_template(
        metadata,
        template_path=str(templates_dir() / MODEL_CARD_TEMPLATE),
        marker=GENERATED_MARKER,
        model_id=usage_id,  # a Python string literal, in fences it cannot close
        usage_fence=_code_fence(usage_id),
        title=markdown_text(model_name),
        base=base if not base or is_hub_id(base) else code_span(base),
        base_on_hub=bool(base) and is_hub_id(base),
        base_weights_source=config.base_weights_source and markdown_text(config.base_weights_source),
        threshold=config.decision_threshold,
        retrieve_threshold=config.retrieve_threshold,
        risk_control=_card_risk_control(config.risk_control),
        domain_thresholds=_card_domain_thresholds(config.domain_thresholds),
        prompt_template=config.prompt_template,
        prompt_fence=_code_fence(config.prompt_template or ""),
        use_chat_template=config.use_chat_template,
        feature_layer=config.feature_layer_index(),
        num_layers=(config.base_model_signature or {}).get("num_hidden_layers"),
        history=_history_rows(config),
        label_budget=_label_budget(config),
        stages=config.trained_stages,
        lora=_lora_settings(folder),
        metric_headers=[markdown_text(METRIC_NAMES.get(m, m)) for m in metric_names],
        evaluations=evaluations,
        dev_metrics={METRIC_NAMES.get(k, k): _fmt(v) for k, v in card_data.dev_metrics.items() if k in METRIC_NAMES},
        source=card_data.source,  # Markdown the library writes (`convert-official`: its paths as inert code spans)
        has_reliability=folder is not None and (folder / RELIABILITY_IMAGE).is_file(),
        reliability_image=RELIABILITY_IMAGE,
        paper_title=PAPER_TITLE,
        paper_url=PAPER_URL,
        citation=CITATION,
    )


def _card_risk_control(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """`risk_control` with the words it takes from the user (where the rows came from) made card text."""
    if not record:
        return record
    return {**record, **{key: code_span(record[key]) for key in ("records", "split") if record.get(key)}}


def _card_domain_thresholds(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """`domain_thresholds` as the card shows it: `by` as card text, and `rows`, one `(name as card text, entry)` per
    domain (a list: two names may read alike once escaped, and each keeps its row)."""
    if not value:
        return value
    return {**value, "by": code_span(value.get("by")), "by_header": markdown_text(value.get("by")),
            "rows": [(markdown_text(name), entry) for name, entry in value["domains"].items()]}


def write_model_card(model: Any, folder: str | os.PathLike) -> str:
    """Write `README.md` for `model` (a confidence model) into its saved `folder`; returns the card's path."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    card = render_model_card(inner.confidence_config, get_card_data(model), folder)
    atomic_write_text(os.path.join(folder, "README.md"), str(card))
    return os.path.join(folder, "README.md")


def folder_card_text(folder: str | os.PathLike, model_id: str | None = None,
                     config: ConfidenceConfig | None = None) -> str:
    """The card of a saved model folder re-rendered from its files (`confidence_config.json`, `adapter_config.json`,
    the evaluations of its current card, `reliability.png`), for the Hub id `model_id` when given; with `config`, the
    card of the folder once its `confidence_config.json` is `config` (written with it in one update,
    [`~elical_hf.models.saved_model`])."""
    if config is None:
        config = ConfidenceConfig.from_json_file(os.path.join(folder, CONFIDENCE_CONFIG_NAME))
    card_data = ConfidenceModelCardData.from_folder(folder)
    card_data.model_id = model_id or card_data.model_id
    return str(render_model_card(config, card_data, folder))


def card_metrics(cell: dict[str, Any]) -> dict[str, float]:
    """One cell of an evaluation table ([`~elical_hf.evaluation.tables.evaluate_table`], or its `results.json` where an
    undefined metric is `null`) in the card's units: AUROC and ECE in [0, 1], alignment in percent; undefined metrics
    left out."""
    scales = {"auroc": 100, "ece": 100, "alignment": 1}
    return {name: cell[name] / scale for name, scale in scales.items()
            if isinstance(cell.get(name), (int, float)) and cell[name] == cell[name]}  # drop NaN and null (undefined)


def record_folder_evaluations(
    folder: str | os.PathLike, results: dict[str, dict[str, Any]], split: str = "test", dataset_id: str | None = None
) -> str:
    """Add evaluation results to the card of a saved model folder and re-render it (e.g. after `elical-hf evaluate`).

    Args:
        folder (`str`): A saved confidence model folder.
        results (`dict`): Dataset (or average) name -> metrics as [`~elical_hf.evaluation.tables.evaluate_table`] gives
            them (AUROC and ECE x100, alignment in percent); stored in the card's units (AUROC and ECE in [0, 1]).
        split (`str`, *optional*, defaults to `"test"`), dataset_id (`str`, *optional*): See [`EvaluationResult`].

    Returns:
        `str`: the card's path.
    """
    config = ConfidenceConfig.from_json_file(os.path.join(folder, CONFIDENCE_CONFIG_NAME))
    card_data = ConfidenceModelCardData.from_folder(folder)
    for dataset, cell in results.items():
        if metrics := card_metrics(cell):
            card_data.add_evaluation(dataset, metrics, split=split, dataset_id=dataset_id)
    atomic_write_text(os.path.join(folder, "README.md"), str(render_model_card(config, card_data, folder)))
    return os.path.join(folder, "README.md")
