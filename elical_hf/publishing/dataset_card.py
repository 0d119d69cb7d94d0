"""A HonestyBench dataset repository: the records' data files ([`~elical_hf.signals.honestybench.
write_honestybench_files`]) plus the dataset card rendered here from `model_cards/honestybench_dataset_card.md`, whose
`configs` make `datasets.load_dataset` find them. [`~elical_hf.push_honestybench`] publishes such a folder.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..data.questions import bundled_manifest
from ..models.model_card import CITATION, PAPER_TITLE, PAPER_URL, templates_dir
from ..settings.prompts import CORRECTNESS_PROMPT, SEMANTIC_CONSISTENCY_PROMPT
from ..signals.honestybench import HonestyBenchFiles, write_honestybench_files
from ..signals.lexical_judge import CORRECTNESS_JUDGES
from ..signals.openai_client import without_credentials


__all__ = ["DATASET_CARD_TEMPLATE", "DEFAULT_CONFIG", "render_honestybench_card", "write_honestybench"]

DATASET_CARD_TEMPLATE = "honestybench_dataset_card.md"
DEFAULT_CONFIG = "default"
"""The config of every record (all models and datasets): what `load_dataset(repo)` loads without a config name."""


def write_honestybench(
    source: Any,
    folder: str | os.PathLike,
    *,
    path_parser: Callable[[str], Mapping[str, str | None]] | None = None,
    pretty_name: str = "HonestyBench",
) -> list[dict[str, Any]]:
    r"""
    Write HonestyBench records as a Hub dataset repository: `data/<model>/<dataset>/<split>.parquet` plus a dataset
    card whose `configs` make `datasets.load_dataset(folder_or_repo, "<model>--<dataset>")` (or `"<model>"` for all
    of a model's datasets, or no config name for every record) load them with the splits `train` /
    `in_domain_test` / `ood_test`. Publish the folder with [`~elical_hf.push_honestybench`]; read it back with
    [`~elical_hf.signals.load_honestybench`].

    Args:
        source: Records files or folders (model, dataset and split read from each record's fields, else from the
            path, see [`~elical_hf.signals.parse_record_path`]); or a list of records with `model` and `dataset`
            fields; or a mapping `{"<model>/<dataset>/<split>": records or a file}`.
        folder (`str`): Where to write; must not exist or be empty.
        path_parser (`Callable`, *optional*): Maps a file's relative path to `{"model", "dataset", "split"}`.
        pretty_name (`str`, *optional*, defaults to `"HonestyBench"`): Title of the card.

    Returns:
        `list[dict]`: one entry per file: `model`, `dataset`, `split`, `path`, `num_examples`, `num_bytes`.
    """
    files = write_honestybench_files(source, folder, path_parser=path_parser)
    render_honestybench_card(files, pretty_name).save(Path(folder) / "README.md")
    return files.parts


def _size_category(count: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if count < limit:
            return name
    return "1M<n<10M"


def _sources(dataset_names: list[str]) -> list[dict[str, str]]:
    known = bundled_manifest()  # the bundled subsets' sources: license, citation, url
    rows = []
    for name in dataset_names:
        entry = known.get(name, {})
        rows.append(
            {
                "name": name,
                "license": entry.get("license", "not recorded here: see the source dataset"),
                "license_id": entry["license"].lower().replace(" ", "-") if "license" in entry else None,
                "citation": entry.get("citation", ""),
                "url": entry.get("url", ""),
                "split": entry.get("source_split", ""),
            }
        )
    return rows


def _judge_text(kind: str, name: str) -> str:
    name = without_credentials(name)  # (records judged through a URL with a password named their judge by it)
    if kind == "correctness" and name.split("@")[0] in CORRECTNESS_JUDGES:
        return f"`{name}`: string matching of the answer against the gold aliases (no model involved)"
    if name.startswith("embedding"):
        return (f"`{name}`: cosine similarity of sentence embeddings of the greedy answer and each sample, "
                "thresholded (`elical_hf.signals.EmbeddingJudge`; no generative model involved)")
    if name.startswith("lexical"):
        return f"`{name}`: ROUGE-L between the greedy answer and each sample, thresholded (no model involved)"
    return f"`{name}`: an LLM judge, asked the paper's prompt below at temperature 0"


def _add_merged_config(name: str, parts: list[dict[str, Any]], folder: str, labels: tuple[str, str], features: Any,
                       into: tuple[list, list, list], first: bool = False) -> None:
    """Add the config `name` of every file of `parts` (all below `folder`, as `<folder>/<dataset>/<split>.parquet`)
    to the card's `configs`, `dataset_info` and table rows `into` (at their start with `first`); `labels` are its
    model and dataset cells in the table."""
    splits = sorted({p["split"] for p in parts})
    totals = {s: sum(p["num_examples"] for p in parts if p["split"] == s) for s in splits}
    sizes = {s: sum(p["num_bytes"] for p in parts if p["split"] == s) for s in splits}
    entries = ({"config_name": name, "data_files": [{"split": s, "path": f"{folder}/*/{s}.parquet"} for s in splits]},
               {"config_name": name, "features": features._to_yaml_list(),
                "splits": [{"name": s, "num_bytes": sizes[s], "num_examples": totals[s]} for s in splits]},
               {"config": name, "model": labels[0], "dataset": labels[1],
                "splits": ", ".join(f"{s} ({totals[s]:,})" for s in splits)})
    for target, entry in zip(into, entries):
        target.insert(0 if first else len(target), entry)


def render_honestybench_card(files: HonestyBenchFiles, pretty_name: str = "HonestyBench") -> Any:
    """
    Render the dataset card of a HonestyBench repository from `model_cards/honestybench_dataset_card.md`.

    Args:
        files ([`~elical_hf.signals.honestybench.HonestyBenchFiles`]): The data files written by
            [`~elical_hf.signals.honestybench.write_honestybench_files`], their schema, judges and sample counts.
        pretty_name (`str`, *optional*, defaults to `"HonestyBench"`): The card's title.

    Returns:
        `huggingface_hub.DatasetCard`: YAML `configs` (one per model and dataset, `<model>--<dataset>`, one per
        model with all its datasets, `<model>`, and `default` with every record), `dataset_info` (features and split
        sizes), licenses of the sources, and the text.
    """
    from huggingface_hub import DatasetCard, DatasetCardData

    parts, features, judges, samples = files.parts, files.features, files.judges, files.samples_per_record
    configs, infos, rows = [], [], []
    for model in sorted({p["model"] for p in parts}):
        mine = [p for p in parts if p["model"] == model]
        for dataset in sorted({p["dataset"] for p in mine}):
            files = [p for p in mine if p["dataset"] == dataset]
            configs.append({"config_name": f"{model}--{dataset}", "data_files": [
                {"split": p["split"], "path": p["path"]} for p in files]})
            infos.append({"config_name": f"{model}--{dataset}", "features": features._to_yaml_list(),
                          "splits": [{"name": p["split"], "num_bytes": p["num_bytes"],
                                      "num_examples": p["num_examples"]} for p in files]})
            rows.append({"config": f"{model}--{dataset}", "model": model, "dataset": dataset,
                         "splits": ", ".join(f"{p['split']} ({p['num_examples']:,})" for p in files)})
        model_folder = mine[0]["path"].split("/")[1]
        _add_merged_config(model, mine, f"data/{model_folder}", (model, "all of the above"), features,
                           (configs, infos, rows))
    if parts and DEFAULT_CONFIG not in {p["model"] for p in parts}:  # else that model's own config is the default
        _add_merged_config(DEFAULT_CONFIG, parts, "data/*", ("all models", "all"), features, (configs, infos, rows),
                           first=True)
    sources = _sources(sorted({p["dataset"] for p in parts}))
    licenses = sorted({s["license_id"] for s in sources if s["license_id"]})
    if any(s["license_id"] is None for s in sources):
        licenses.append("unknown")
    total = sum(p["num_examples"] for p in parts)
    metadata = DatasetCardData(
        pretty_name=pretty_name,
        language=["en"],
        license=licenses,
        size_categories=[_size_category(total)],
        task_categories=["question-answering", "text-classification"],
        tags=["honesty", "calibration", "confidence-estimation", "elical-hf"],
        configs=configs,
        dataset_info=infos,
    )
    # List(Value('string')) -> List(string)
    schema = [{"name": name, "type": re.sub(r"Value\('(\w+)'\)", r"\1", str(f))} for name, f in features.items()]
    return DatasetCard.from_template(
        metadata,
        template_path=str(templates_dir() / DATASET_CARD_TEMPLATE),
        title=pretty_name,
        configs=rows,
        example_config=next((row["config"] for row in rows if row["config"] != DEFAULT_CONFIG), ""),
        total=total,
        schema=schema,
        sources=sources,
        correctness_judges=[_judge_text("correctness", n) for n in judges.get("correctness", [])],
        consistency_judges=[_judge_text("consistency", n) for n in judges.get("consistency", [])],
        samples=", ".join(str(k) for k in samples) or "none",
        correctness_prompt=CORRECTNESS_PROMPT,
        consistency_prompt=SEMANTIC_CONSISTENCY_PROMPT,
        paper_title=PAPER_TITLE,
        paper_url=PAPER_URL,
        citation=CITATION,
    )
