"""Publish to the Hugging Face Hub: confidence models, the HonestyBench dataset, the metric Spaces and the gate Space.

Every upload is one commit (`HfApi.upload_folder`) of a staged temporary copy, so the repository gets all of the files
or none of them, a folder being written meanwhile is never uploaded half-written, and nothing is reported as
published before the commit has succeeded. Loading goes the other way through
`AutoModelForConfidence.from_pretrained("<namespace>/<repo>")` and `datasets.load_dataset`.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..utils.atomic import json_text, umask_permissions
from ..settings.configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig, backbone_signature
from ..evaluation.drift import REFERENCE_NAME
from ..utils.files import links_leaving
from ..models.hub_ids import hub_id_of_local_copy, is_hub_id, validate_hub_repo_id
from ..models.model_card import RELIABILITY_IMAGE
from .eval_results import EVAL_RESULTS_FILE, EvalResultsSource, stage_card
from .local_paths import publish_no_local_paths
from .metric_modules import METRIC_MODULES


logger = logging.getLogger(__name__)

ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json", CONFIDENCE_CONFIG_NAME)
MODEL_FILES = frozenset({
    *ADAPTER_FILES, "README.md", RELIABILITY_IMAGE,
    # the tokenizer, as `save_pretrained` of any tokenizer class writes it, and its chat template
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json",
    "vocab.txt", "merges.txt", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "chat_template.jinja",
    "chat_template.json",
    # the training history the trainer writes beside the model
    "training_args.json", "trainer_state.json", "all_results.json", "train_results.json", "eval_results.json",
    # the calibration rows' confidences `elical-hf threshold` saves, the reference of `elical-hf monitor`
    REFERENCE_NAME,
})
"""The top-level files of a confidence model folder that [`push_folder`] publishes; any other file is refused unless
named in `extra_files` (pickles and hidden files are never published)."""
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
METRIC_SPACE_FILES = ("README.md", "app.py", "requirements.txt")


class HubPublishError(OSError):
    """An upload to the Hub failed (network, authentication, server). Nothing was reported as published."""


def _recorded_hub_id(name: str | None, override: bool = False) -> str | None:
    """`name` when it is a Hub id, the Hub id of a recognised local copy (Hub cache snapshot, dequantized embedded
    model), else `None`."""
    if not name:
        return None
    if is_hub_id(name, local_wins=not override):  # an explicit `base_model_name_or_path` is taken as a Hub id
        return name
    known = hub_id_of_local_copy(name) if os.path.isdir(os.path.expanduser(name)) else None
    if known is not None:
        logger.info("The base model %s is a local copy of %s; the adapter names the latter.", name, known[0])
        return known[0]
    return None


def _hub_base_id(name: str | None, folder: str, override: bool) -> str:
    """The base model's Hub id for a published adapter: `name` itself, or the Hub id of a recognised local copy
    (Hub cache snapshot, dequantized embedded model); a clear error for any other local path (or nothing)."""
    hint = 'Pass `base_model_name_or_path="<org>/<model>"` (command line: `--base_model <org>/<model>`)'
    if not name:
        raise ValueError(f"{folder} does not name its base model. {hint}.")
    hub_id = _recorded_hub_id(name, override)
    if hub_id is not None:
        return hub_id
    what = "The base model you gave" if override else f"The base model of {folder}"
    raise ValueError(
        f"{what}, {name!r}, is a local path, not a Hub id: a published adapter must name the base model's Hub id "
        f"so that others can load it. {hint}, with the Hub id of the model whose weights these are."
    )


def _check_named_base(folder: str, config: Mapping[str, Any], recorded: str | None, base: str,
                      token: str | None) -> None:
    """Refuse to publish the adapter of `folder` under a base model it was not trained on: `base` (the Hub id given
    for publishing) must be the Hub model the folder records, when it records one, and its backbone must have the
    signature the adapter was trained on (`base_model_signature`: architecture, hidden size, layers, vocabulary)."""
    trained_on = _recorded_hub_id(recorded)
    if trained_on is not None and trained_on.lower() != base.lower():
        raise ValueError(
            f"{folder} was trained on {trained_on!r}, but it was asked to be published with the base model {base!r}: "
            "an adapter only works on the base it was trained on. Leave out --base_model (base_model_name_or_path)."
        )
    expected = config.get("base_model_signature")
    if not expected:  # saved before signatures were recorded: nothing to compare
        return
    from transformers import AutoConfig

    from ..models.default_model import resolve_model_path
    from ..utils.loading import load_pretrained

    try:
        found = backbone_signature(load_pretrained(AutoConfig.from_pretrained, resolve_model_path(base)[0],
                                                   token=token))
    except (OSError, ValueError) as error:
        raise ValueError(
            f"Cannot check that {base!r} is the base model of {folder}: its config could not be read "
            f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}). Publish with the Hub id of "
            "the model the adapter was trained on, once the Hub (or its cache) has it."
        ) from None
    if found != expected:
        differences = ", ".join(f"{key} {expected.get(key)!r} vs {found.get(key)!r}"
                                for key in sorted(set(expected) | set(found)) if expected.get(key) != found.get(key))
        raise ValueError(
            f"{folder} holds an adapter trained on another backbone than {base!r} ({differences}): publishing it "
            f"under that base would give a model that does not load. Pass the Hub id of the model it was trained on."
        )


def _rewrite_json(path: Path, **values: Any) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(values)
    path.write_text(json_text(data, sort_keys=True) + "\n", encoding="utf-8")


def _publishable(folder: Path, allowed: Callable[[str], bool], extra_files: Sequence[str], what: str) -> list[Path]:
    """The top-level files of `folder` to publish: those `allowed` says a `what` needs and the `extra_files` named on
    purpose; hidden files, `.pyc` and pickles (with a warning) are left out. Any other file is refused in one
    `ValueError` that lists them all, before anything is copied: a key or a notes file beside the model is never
    published by accident."""
    extra = set(extra_files)
    missing = sorted(name for name in extra if os.path.basename(name) != name or name.startswith(".")
                     or not (folder / name).is_file())  # a path (`sub/key.pem`, `/abs/x`) names no top-level file
    if missing:
        raise ValueError(f"--include {', '.join(missing)}: not a file at the top of {folder} (only top-level, "
                         "non-hidden files can be included).")
    chosen, unknown = [], []
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or not path.is_file() or path.suffix == ".pyc":
            continue
        if path.suffix in PICKLE_SUFFIXES:
            logger.warning("Not uploading %s: pickled files are never published.", path.name)
        elif allowed(path.name) or path.name in extra:
            chosen.append(path)
        else:
            unknown.append(path.name)
    linked = [f"{path.name} -> {os.readlink(path)}" for path in chosen
              if path.is_symlink() and path.resolve().parent != folder.resolve()]
    if linked:  # a model file's name over another file's bytes (links leaving the folder are refused before)
        raise ValueError(f"{folder} holds symbolic links to files below it: {', '.join(linked)}. Refusing to publish "
                         "their contents under a model file's name; copy the file to the top of the folder instead.")
    if unknown:
        raise ValueError(f"{folder} holds files a {what} does not need: {', '.join(unknown)}. Refusing to publish "
                         "them (a key or private notes would become public); move them out of the folder, or name "
                         "the ones to publish with --include (`extra_files=`).")
    return chosen


def _stage_model_folder(folder: str, staging: Path, extra_files: Sequence[str] = ()) -> None:
    """Copy a saved model's top-level files ([`MODEL_FILES`] and `extra_files`; no pickles, no sub-folders, no hidden
    files) into `staging`; refuse any other file, an incomplete folder, or one that changed while it was copied."""
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"No model folder at {folder}.")
    marker = root / CONFIDENCE_CONFIG_NAME
    if not marker.is_file():
        raise ValueError(
            f"{folder} has no {CONFIDENCE_CONFIG_NAME}: it is not a complete confidence model (an interrupted save, or "
            "not saved with `save_pretrained`). Refusing to upload it."
        )
    missing = [name for name in ADAPTER_FILES if not (root / name).is_file()]
    if missing:
        raise ValueError(f"{folder} is missing {missing}; save the model with `save_pretrained` first.")
    _refuse_links_leaving(folder, recursive=False)
    before = marker.stat()
    for path in _publishable(root, MODEL_FILES.__contains__, extra_files, "confidence model"):
        shutil.copy2(path, staging / path.name)
    after = marker.stat() if marker.is_file() else None
    if after is None or (after.st_mtime_ns, after.st_size, after.st_ino) != (
            before.st_mtime_ns, before.st_size, before.st_ino):
        raise ValueError(f"{folder} changed while it was being staged (a save in progress?); retry once it is done.")


def _refuse_links_leaving(folder: str | os.PathLike, recursive: bool) -> None:
    """Raise a `ValueError` when `folder` holds symbolic links to files or folders outside it: publishing the folder
    would upload what they point to (a key, another project's files)."""
    leaving = links_leaving(folder, recursive=recursive)
    if leaving:
        raise ValueError(
            f"{folder} holds symbolic links to outside it ({', '.join(leaving)}): refusing to publish what they point "
            "to. Copy the files into the folder, or remove the links."
        )


def _network_errors() -> tuple[type[BaseException], ...]:
    """OSError (which the Hub client's HTTP errors subclass) and the transport errors of its HTTP library."""
    errors: list[type[BaseException]] = [OSError]
    for module in ("httpx2", "httpx"):  # huggingface_hub 2.x uses httpx2, 1.x httpx
        try:
            errors.append(importlib.import_module(module).HTTPError)
        except ImportError:
            pass
    return tuple(errors)


def _commit_folder(staging: Path, repo_id: str, *, repo_type: str, private: bool | None, token: str | None,
                   revision: str | None, commit_message: str, space_sdk: str | None = None,
                   replaced: Sequence[str] = ()) -> Any:
    """Create the repo if needed (and the branch `revision`), then upload `staging` in one commit, which also deletes
    the files `replaced` names that `staging` no longer holds."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True, space_sdk=space_sdk)
        if revision not in (None, "main"):
            api.create_branch(repo_id, branch=revision, repo_type=repo_type, exist_ok=True)
        info = api.upload_folder(
            folder_path=staging, repo_id=repo_id, repo_type=repo_type, revision=revision, commit_message=commit_message,
            delete_patterns=list(replaced) or None,
        )
    except _network_errors() as error:
        raise HubPublishError(
            f"Publishing to {repo_id} failed: {type(error).__name__}: {error}. The files go up in a single commit, so "
            "the repository holds all of them or none; nothing was published by this attempt as far as the client "
            "knows. Retry when the connection (or token) is fixed."
        ) from error
    logger.info("Published %s %s at commit %s (%s).", repo_type, repo_id, info.oid, info.commit_url)
    return info


def push_folder(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    private: bool | None = None,
    token: str | None = None,
    commit_message: str | None = None,
    revision: str | None = None,
    base_model_name_or_path: str | None = None,
    extra_files: Sequence[str] = (),
    eval_results: EvalResultsSource | None = None,
) -> Any:
    r"""
    Publish a saved confidence model folder to the Hub in one commit.

    Uploaded: `adapter_model.safetensors` (LoRA + head), `adapter_config.json` and `confidence_config.json` (both
    naming the base model's Hub id), the tokenizer files and chat template, `README.md` (the card, re-rendered for
    `repo_id` unless you removed its "generated" marker line), `.eval_results/elical-hf.yaml` (the card's evaluation
    results, which the Hub shows on the model page and in benchmark leaderboards; none when there are none),
    `reliability.png`, the trainer's JSON history and the monitor's reference ([`MODEL_FILES`]; the records a threshold
    was chosen on, and any absolute local path in a JSON file (`training_args.json`'s `output_dir`, ...), named by
    their last part only: [`~elical_hf.publishing.local_paths.publish_no_local_paths`]), and the `extra_files` you
    name. Any other top-level file (a key, notes) is refused before anything is published; pickles, hidden files
    and sub-folders (checkpoints) are left out.

    Args:
        folder (`str`): A folder written by `save_pretrained` (it must hold `confidence_config.json`).
        repo_id (`str`): `<namespace>/<name>`; created if missing.
        private (`bool`, *optional*): Visibility of a newly created repo.
        token (`str`, *optional*): Hub token (default: the logged-in one).
        commit_message (`str`, *optional*): Defaults to a summary of the model's training stages.
        revision (`str`, *optional*): Branch to commit to (created from `main` if missing).
        base_model_name_or_path (`str`, *optional*): The base model's Hub id, when the folder names a local path
            (not needed for a Hub cache snapshot or the embedded default's offline copy: their Hub id is known).
            Checked before anything is published: its config (from the Hub or its cache) must match the backbone
            signature the adapter recorded.
        extra_files (`list[str]`, *optional*): Names of other top-level files of the folder to publish too.
        eval_results ([`~elical_hf.publishing.eval_results.EvalResultsSource`], *optional*): An `elical-hf evaluate`
            report to add to the card's evaluations, and the Hub dataset of results evaluated on local records.

    Returns:
        `huggingface_hub.CommitInfo`: the commit (`oid`, `commit_url`, `repo_url`), returned only once it succeeded.

    Raises:
        `ValueError`: invalid repo id, incomplete folder, base model only known as a local path (the message asks
            for its Hub id), or a `base_model_name_or_path` the adapter was not trained on (another Hub model than
            the one the folder records, or a backbone of another architecture or size than its recorded signature).
        [`HubPublishError`]: the upload failed; nothing is reported as published (the files go up in one commit:
            all of them or none).
    """
    validate_hub_repo_id(repo_id)
    folder = os.fspath(folder)
    with tempfile.TemporaryDirectory(prefix="elical-hf-push-") as tmp:
        staging = Path(tmp)
        _stage_model_folder(folder, staging, extra_files)
        umask_permissions(staging)
        ConfidenceConfig.from_json_file(os.path.join(folder, CONFIDENCE_CONFIG_NAME))  # a broken one is not published
        config = json.loads((staging / CONFIDENCE_CONFIG_NAME).read_text(encoding="utf-8"))
        adapter = json.loads((staging / "adapter_config.json").read_text(encoding="utf-8"))
        named = config.get("base_model_name_or_path") or adapter.get("base_model_name_or_path")
        base = _hub_base_id(base_model_name_or_path or named, folder, override=base_model_name_or_path is not None)
        if base_model_name_or_path is not None:
            _check_named_base(folder, config, named, base, token)
        _rewrite_json(staging / "adapter_config.json", base_model_name_or_path=base)
        _rewrite_json(staging / CONFIDENCE_CONFIG_NAME, base_model_name_or_path=base)
        publish_no_local_paths(staging)  # no local path of the user's is published
        stage_card(staging, repo_id, base, eval_results)
        stages = [entry.get("stage", "?") for entry in config.get("training_history") or []]
        message = commit_message or f"Upload confidence model ({' + '.join(stages) or 'untrained'}) with elical-hf"
        return _commit_folder(  # results of an earlier push that this one no longer has are not left behind
            staging, repo_id, repo_type="model", private=private, token=token, revision=revision,
            commit_message=message, replaced=[EVAL_RESULTS_FILE],
        )


def push_model(model: Any, repo_id: str, **kwargs: Any) -> Any:
    """Save `model` (a [`PeftModelForConfidence`]) to a temporary folder and [`push_folder`] it; same arguments."""
    validate_hub_repo_id(repo_id)
    with tempfile.TemporaryDirectory(prefix="elical-hf-save-") as tmp:
        model.save_pretrained(tmp)
        return push_folder(tmp, repo_id, **kwargs)


# -- HonestyBench -----------------------------------------------------------------------------------------------------


def push_honestybench(
    source: Any,
    repo_id: str,
    *,
    private: bool | None = None,
    token: str | None = None,
    commit_message: str | None = None,
    revision: str | None = None,
    path_parser: Callable[[str], Mapping[str, str | None]] | None = None,
    pretty_name: str = "HonestyBench",
) -> Any:
    """[`~elical_hf.write_honestybench`] into a temporary folder, then publish it as the dataset
    repo `repo_id` in one commit.

    Returns:
        `huggingface_hub.CommitInfo`, once the commit succeeded. Raises [`HubPublishError`] when the upload fails.
    """
    from .dataset_card import write_honestybench

    validate_hub_repo_id(repo_id)
    roots = [source] if isinstance(source, (str, os.PathLike)) else source if isinstance(source, (list, tuple)) else []
    for root in roots:
        if isinstance(root, (str, os.PathLike)) and os.path.isdir(root):
            _refuse_links_leaving(root, recursive=True)
    with tempfile.TemporaryDirectory(prefix="elical-hf-dataset-") as tmp:
        parts = write_honestybench(source, tmp, path_parser=path_parser, pretty_name=pretty_name)
        message = commit_message or f"Upload {pretty_name}: {sum(p['num_examples'] for p in parts):,} records"
        return _commit_folder(
            Path(tmp), repo_id, repo_type="dataset", private=private, token=token, revision=revision,
            commit_message=message,
        )


# -- metric Spaces ----------------------------------------------------------------------------------------------------


def push_metric_space(
    name: str,
    repo_id: str,
    *,
    folder: str | os.PathLike | None = None,
    private: bool | None = None,
    token: str | None = None,
    commit_message: str | None = None,
    extra_files: Sequence[str] = (),
) -> Any:
    r"""
    Publish an evaluate metric module as a Gradio Space, so that `evaluate.load("<repo_id>")` finds it.

    Args:
        name (`str`): `"honesty_auroc"`, `"honesty_ece"` or `"honesty_alignment"` (or any name with `folder=`).
        repo_id (`str`): The Space, `<namespace>/<name>`; the module is uploaded as `<name of the repo>.py`, the
            file name evaluate looks for.
        folder (`str`, *optional*): A metric folder of your own (`<name>.py`, `README.md`, `app.py`,
            `requirements.txt`, and the module's local imports: other `.py` files), uploaded as it is; any other
            file is refused unless named in `extra_files`. Without it, the library metric
            `name` is assembled from its single sources (`metric_cards.write_metric_space`: the module, the
            `functional.py` and `evaluate_mixin.py` it imports, its card, the widget and the requirements).
        private (`bool`, *optional*), token (`str`, *optional*), commit_message (`str`, *optional*),
            extra_files (`list[str]`, *optional*): As for models.

    Returns:
        `huggingface_hub.CommitInfo`, once the commit succeeded.
    """
    from huggingface_hub import RepoCard

    validate_hub_repo_id(repo_id)
    if folder is None and name not in METRIC_MODULES:
        raise ValueError(f"Unknown metric {name!r}; choose one of {METRIC_MODULES} or pass `folder=`.")
    if folder is not None:
        folder = Path(folder)
        missing = [f for f in (f"{name}.py", *METRIC_SPACE_FILES) if not (folder / f).is_file()]
        if missing:
            raise FileNotFoundError(f"The metric folder {folder} lacks {missing}.")
        _refuse_links_leaving(folder, recursive=False)
        files = _publishable(folder, lambda name: name in METRIC_SPACE_FILES or name.endswith(".py"), extra_files,
                             "metric Space")
    elif extra_files:
        raise ValueError(f"extra_files (--include) {list(extra_files)}: the library metric {name!r} is assembled from "
                         "its sources; pass folder= (a metric folder) to publish files of your own.")
    module = repo_id.split("/")[1]
    with tempfile.TemporaryDirectory(prefix="elical-hf-space-") as tmp:
        staging = Path(tmp)
        if folder is None:
            from .metric_cards import write_metric_space

            folder = write_metric_space(name, staging, module_name=module)
        else:
            for path in files:
                target = f"{module}.py" if path.name == f"{name}.py" else path.name
                shutil.copy2(path, staging / target)
            if module != name:  # the widget loads the module file next to it by name
                app = staging / "app.py"
                app.write_text(app.read_text(encoding="utf-8").replace(f"{name}.py", f"{module}.py"), encoding="utf-8")
        card = RepoCard.load(staging / "README.md")
        if card.data.get("sdk") not in (None, "gradio"):
            logger.warning("%s/README.md says sdk: %s; a metric Space runs gradio.", folder, card.data.get("sdk"))
        card.data.sdk = "gradio"
        card.data.app_file = card.data.get("app_file") or "app.py"
        card.data.tags = list(dict.fromkeys([*(card.data.get("tags") or []), "evaluate", "metric"]))
        card.save(staging / "README.md")
        return _commit_folder(
            staging, repo_id, repo_type="space", private=private, token=token, revision=None,
            commit_message=commit_message or f"Upload the {name} metric with elical-hf", space_sdk="gradio",
        )


# -- the gate Space ----------------------------------------------------------------------------------------------------

GATE_SPACE_APP = Path(__file__).resolve().parents[1] / "spaces" / "gate" / "app.py"
GATE_SPACE_GRADIO = "6.31.0"
"""The gradio version the gate Space's app is tested with (`tests/test_gate_space.py`), its card's `sdk_version`."""

_GATE_CARD = """\
---
title: EliCal gate
emoji: 🚦
colorFrom: green
colorTo: red
sdk: gradio
sdk_version: {gradio}
app_file: app.py
pinned: false
models:
- {model}
tags:
- elical
- confidence-estimation
- abstention
---

# Answer or abstain: `{model}`

Type a question: [`{model}`](https://huggingface.co/{model}) scores it before the first token, and its base model
answers only when the confidence reaches the threshold (the slider starts at the model's saved decision threshold).
Made with [elical-hf](https://pypi.org/project/elical-hf/) (`elical-hf push {model} <space> --kind gate-space`).
"""


def push_gate_space(
    model: str,
    repo_id: str,
    *,
    private: bool | None = None,
    token: str | None = None,
    commit_message: str | None = None,
) -> Any:
    r"""
    Publish the answer/abstain gate of a published confidence model as a Gradio Space: a question box, the
    confidence, the decision and the answer, with the threshold as a slider (`elical_hf/spaces/gate/app.py`).

    Args:
        model (`str`): The confidence model's Hub repo (`<namespace>/<name>`, published with [`push_folder`]); the
            Space loads it when it starts.
        repo_id (`str`): The Space, `<namespace>/<name>`; created if missing.
        private (`bool`, *optional*), token (`str`, *optional*), commit_message (`str`, *optional*): As for models.

    Returns:
        `huggingface_hub.CommitInfo`, once the commit succeeded.

    Uploaded: `app.py`, `gate.json` (`{"model": model}`), `requirements.txt` (elical-hf; gradio comes from the card's
    `sdk_version`) and `README.md` (the Space card, linking the model).
    """
    from ..version import __version__

    validate_hub_repo_id(repo_id)
    if os.path.exists(model):
        raise ValueError(f"{model} is a local path: the Space loads its model from the Hub. Publish it first "
                         f"(`elical-hf push {model} <namespace>/<model>`), then push the Space for that repo.")
    validate_hub_repo_id(model)
    with tempfile.TemporaryDirectory(prefix="elical-hf-gate-space-") as tmp:
        staging = Path(tmp)
        shutil.copy2(GATE_SPACE_APP, staging / "app.py")
        (staging / "gate.json").write_text(json_text({"model": model}) + "\n", encoding="utf-8")
        (staging / "requirements.txt").write_text(f"elical-hf>={__version__}\n", encoding="utf-8")
        (staging / "README.md").write_text(_GATE_CARD.format(model=model, gradio=GATE_SPACE_GRADIO), encoding="utf-8")
        return _commit_folder(
            staging, repo_id, repo_type="space", private=private, token=token, revision=None,
            commit_message=commit_message or f"Gate Space for {model} (elical-hf)", space_sdk="gradio",
        )
