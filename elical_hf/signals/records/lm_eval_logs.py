"""lm-evaluation-harness logs as records: what `lm_eval run ... --log_samples --output_path OUT` writes, read as judged
greedy answers (generated, or the option a multiple-choice task ranks first), so `elical-hf evaluate` scores a
confidence model against lm-eval's own correctness.

lm-eval (0.4) writes, under `OUT/<model name, sanitized>/`, one `results_<date>.json` per run (the run's `model_name`
and each task's config) and one `samples_<task>_<date>.jsonl` per task: a line per document and filter, with the
document (`doc`), the prompt and generation settings (`arguments`), the model's answer before and after the task's
filters (`resps`, `filtered_resps`), the filter's name (`filter`), the names of the per-sample metrics (`metrics`) and
their values (`exact_match: 1.0`, ...). [`read_lm_eval_records`] turns each document of a generation task
(`output_type: generate_until`) or a multiple-choice task (`multiple_choice`: MMLU, ARC, ...; one log-likelihood
request per option) into one record; [`~elical_hf.signals.records.load_records`] does so for any such file or folder it
is given (a `.jsonl` file whose first line has lm-eval's fields, [`is_lm_eval_samples`]).

A record holds one greedy answer and no sampled answers: it serves evaluation, not training.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import os
import re
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

from ...utils.files import text_lines
from ...settings.multiple_choice import LETTERS, multiple_choice_row
from .layout import canonical_dataset, paper_split
from .storage import normalize_at


__all__ = [
    "CORRECTNESS_METRICS", "LM_EVAL_JUDGE", "LM_EVAL_MARKERS", "QUESTION_KEYS", "is_lm_eval_samples",
    "iter_lm_eval_batches", "latest_lm_eval_runs", "lm_eval_results_file", "lm_eval_split", "read_lm_eval_records",
    "refuse_lm_eval_results",
]

logger = logging.getLogger(__name__)

LM_EVAL_MARKERS = ("doc_id", "doc", "arguments", "filtered_resps", "filter", "metrics")
"""Fields every line of an lm-eval samples file has (`evaluator.evaluate` with `log_samples`)."""

QUESTION_KEYS = ("question", "problem", "query", "input")
"""Keys of an lm-eval document that hold the bare question, tried in this order (`nq_open`, `triviaqa`, `gsm8k`,
`webqs` and `truthfulqa_gen` name it `question`; `hendrycks_math` / `minerva_math` `problem`; `bbh` `input`). A document
with none of them gives its prompt instead (`arguments`: the task's description, few-shot examples and template);
name another key with `question_key`."""

CORRECTNESS_METRICS = ("exact_match", "em", "exact", "acc", "contains")
"""Per-sample metrics that say whether an answer is right (0 or 1), tried in this order: the first one a task logs is
its `greedy_correctness`. Scores between 0 and 1 (`f1`, `bleu`, `rouge*`) are not correctness; name another 0/1 metric
with `correctness_metric`."""

GENERATION_OUTPUT_TYPE = "generate_until"
MULTIPLE_CHOICE_OUTPUT_TYPE = "multiple_choice"
CHOICE_METRIC = "acc"
"""The per-sample metric of a multiple-choice task that scores its answer, the option of highest raw log-likelihood."""
LM_EVAL_JUDGE = "lm-eval:"
"""Prefix of a record's `correctness_judge` read from an lm-eval log (`"lm-eval:exact_match"`)."""

_SAMPLES_FILE = re.compile(r"samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?)\.jsonl")
"""`samples_<task>_<date>.jsonl`, as lm-eval's `EvaluationTracker.save_results_samples` names it."""


def is_lm_eval_samples(path: str | os.PathLike) -> bool:
    """Whether `path` is an lm-eval samples file: a `.jsonl` file whose first line is a JSON object with every field
    of [`LM_EVAL_MARKERS`]."""
    path = os.fspath(path)
    if not path.lower().endswith(".jsonl") or not os.path.isfile(path):
        return False
    with open(path, "rb") as handle:
        for raw in handle:
            if raw.strip():
                try:
                    first = json.loads(raw)
                except ValueError:
                    return False
                return isinstance(first, dict) and all(key in first for key in LM_EVAL_MARKERS)
    return False


def lm_eval_results_file(samples_path: str | os.PathLike) -> str | None:
    """The `results_<date>.json` written with a `samples_<task>_<date>.jsonl` file (same folder, same date; or
    `<name>_<date>.json` when `--output_path` named a `.json` file), else `None`."""
    folder, name = os.path.split(os.path.abspath(os.fspath(samples_path)))
    named = _SAMPLES_FILE.fullmatch(name)
    if named is None:
        return None
    preferred = os.path.join(folder, f"results_{named['date']}.json")
    if os.path.isfile(preferred):
        return preferred
    others = sorted(n for n in os.listdir(folder) if n.endswith(f"_{named['date']}.json"))
    return os.path.join(folder, others[0]) if others else None


def latest_lm_eval_runs(files: list[str]) -> list[str]:
    """`files` without the lm-eval samples files of a task that a later run of the same task and model wrote into the
    same folder: lm-eval never overwrites a log, it adds `samples_<task>_<later date>.jsonl` beside the earlier one,
    and two runs of one task hold the same questions twice. The latest run of each task and model (the `model_name`
    of its results file: with `--output_path NAME.json` every model's runs share one folder) is kept, as lm-eval's
    own tools read a log folder (`lm_eval.utils.get_latest_filename`); the skipped files are named in the log. A
    file given alone is always read."""
    runs: dict[tuple[str, str, str | None], list[tuple[str, str]]] = {}
    for file in files:
        named = _SAMPLES_FILE.fullmatch(os.path.basename(file))
        if named is not None and is_lm_eval_samples(file):
            model = (_results_of(file) or {}).get("model_name")
            key = (os.path.dirname(os.path.abspath(file)), named["task"], model)
            runs.setdefault(key, []).append((named["date"], file))
    skipped = {file for run in runs.values() for _, file in sorted(run)[:-1]}
    if skipped:
        logger.warning("Reading the latest lm-eval run of each task: skipped %d samples file(s) of earlier runs of "
                       "the same task and model in the same folder (%s); pass a file to read that run.", len(skipped),
                       ", ".join(sorted(skipped)))
    return [file for file in files if file not in skipped]


_RESULTS_FILE = re.compile(r"results_(?P<date>\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?)\.json")


def refuse_lm_eval_results(path: str | os.PathLike) -> None:
    """Refuse an lm-eval `results_<date>.json` given as records: it holds the run's aggregate scores, not one answer
    per question; the `samples_<task>_<date>.jsonl` files beside it (`--log_samples`) do."""
    path = os.fspath(path)
    named = _RESULTS_FILE.fullmatch(os.path.basename(path))
    if named is None or not os.path.isfile(path):
        return
    folder = os.path.dirname(os.path.abspath(path))
    if any(_SAMPLES_FILE.fullmatch(n) and n.endswith(f"_{named['date']}.jsonl") for n in os.listdir(folder)):
        raise ValueError(f"{path} is an lm-eval results file (aggregate scores); its per-question answers are in the "
                         f"samples_<task>_{named['date']}.jsonl files beside it: pass the folder {folder} (or one of "
                         "those files).")
    raise ValueError(f"{path} is an lm-eval results file (aggregate scores) without samples files beside it: rerun "
                     "lm_eval with --log_samples and pass its output folder.")


@lru_cache(maxsize=32)
def _results(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    """A results file's content, read once per version (modification time and size) of the file."""
    with open(path, encoding="utf-8") as handle:
        results = json.load(handle)
    if not isinstance(results, dict):
        raise ValueError(f"{path} is not an lm-eval results file (a JSON object).")
    return results


def _results_of(samples_path: str) -> dict[str, Any] | None:
    """The content of the results file written with `samples_path` ([`lm_eval_results_file`]); `None` without one."""
    results_path = lm_eval_results_file(samples_path)
    if results_path is None:
        return None
    stat = os.stat(results_path)
    try:
        return _results(results_path, stat.st_mtime_ns, stat.st_size)
    except json.JSONDecodeError as error:
        raise ValueError(f"{results_path} (the lm-eval results file of {samples_path}) is not valid JSON: {error}") \
            from None


def _run_info(samples_path: str, task: str) -> tuple[str | None, dict[str, Any]]:
    """The run's model name and `task`'s config, from the results file beside `samples_path`; without one, the model
    is the folder lm-eval named after it (`/` written `__`) and the config is empty."""
    results = _results_of(samples_path)
    if results is None:
        folder = os.path.basename(os.path.dirname(os.path.abspath(samples_path)))
        logger.warning("%s: no lm-eval results file beside it (results_<date>.json); the model is read from its "
                       "folder's name (%s) and the evaluated split is taken to be a test split.", samples_path, folder)
        return folder.replace("__", "/") or None, {}
    return results.get("model_name") or None, (results.get("configs") or {}).get(task) or {}


def lm_eval_split(task: str, config: Mapping[str, Any]) -> str:
    """The paper's split of a task's records: the split lm-eval evaluated (`test_split`, else `validation_split`, as
    lm-eval chooses; a test split when unknown) mapped by [`~elical_hf.signals.records.paper_split`] for the paper's
    datasets (`nq_open` -> `nq` -> `in_domain_test`; an in-domain dataset's train split stays `train`, which is not
    evaluated), and `ood_test` for any other task: none is among the paper's training datasets."""
    dataset = canonical_dataset(task)
    part = paper_split(dataset, config.get("test_split") or config.get("validation_split") or "test")
    return "ood_test" if dataset is None or part == "other" else part


def _task_of(path: str) -> str:
    named = _SAMPLES_FILE.fullmatch(os.path.basename(path))
    if named is None:
        raise ValueError(f"{path}: an lm-eval samples file is named samples_<task>_<date>.jsonl (the task is read from "
                         "its name); rename it as lm-eval wrote it.")
    return named["task"]


def _gold(target: Any) -> list[str]:
    """The task's target (`doc_to_target`, logged as text): a list of answers when it is a list literal
    (`"['Paris', 'paris']"`), else the one answer."""
    text = str(target)
    if text.startswith("["):
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return [text]
        if isinstance(value, list):
            return [str(v) for v in value]
    return [text]


def _correct(value: Any, metric: str, where: str) -> bool:
    if isinstance(value, bool) or (isinstance(value, (int, float)) and value in (0, 1)):
        return bool(value)
    raise ValueError(f"{where}: the metric {metric!r} is {value!r}, not 0 or 1: it does not say whether the answer is "
                     "right. Pass another metric as `correctness_metric`.")


class _Task:
    """What one samples file's lines share: its task, model, split, kind, filter, metric and question key."""

    def __init__(self, path: str, first: Mapping[str, Any], question_key: str | None, correctness_metric: str | None,
                 filter_name: str | None):
        self.path, self.question_key, self.prompted = path, question_key, False
        self.task = _task_of(path)
        self.model, self.config = _run_info(path, self.task)
        self.split = lm_eval_split(self.task, self.config)
        output_type = self.config.get("output_type") or _output_type(first)
        if output_type not in (GENERATION_OUTPUT_TYPE, MULTIPLE_CHOICE_OUTPUT_TYPE):
            raise ValueError(
                f"{path}: task {self.task!r} is a {output_type} task: lm-eval scores one given continuation by its "
                "log-likelihood, so its log holds neither a generated answer nor a choice among options whose "
                f"correctness a confidence model predicts. elical-hf reads generation tasks ({GENERATION_OUTPUT_TYPE}: "
                f"nq_open, triviaqa, ...) and multiple-choice tasks ({MULTIPLE_CHOICE_OUTPUT_TYPE}: mmlu, arc, ...)."
            )
        self.choice = output_type == MULTIPLE_CHOICE_OUTPUT_TYPE
        filters = [f["name"] for f in self.config.get("filter_list") or [] if isinstance(f, dict) and "name" in f]
        self.filter = filter_name or first["filter"]
        if filter_name is not None and filters and filter_name not in filters:
            raise ValueError(f"{path}: task {self.task!r} has no filter {filter_name!r}; its filters: {filters}.")
        if len(filters) > 1 and filter_name is None:
            logger.info("%s: task %s has the filters %s; reading the answers of the first, %r (pass `filter_name` for "
                        "another).", path, self.task, filters, self.filter)
        self.metric = self._metric(list(first["metrics"]), correctness_metric)
        gen_kwargs = _gen_kwargs(first)
        if gen_kwargs.get("do_sample") or float(gen_kwargs.get("temperature") or 0) > 0:
            logger.warning("%s: task %s sampled its answers (%s), so they are not greedy answers: the evaluation label "
                           "is the correctness of the greedy answer.", path, self.task,
                           {k: gen_kwargs.get(k) for k in ("do_sample", "temperature")})

    def _metric(self, logged: list[str], asked: str | None) -> str:
        """The 0/1 metric read as `greedy_correctness`: `acc` for a multiple-choice task (it scores the option read as
        the answer), else `asked` or the first of [`CORRECTNESS_METRICS`] the task logs."""
        if self.choice and (CHOICE_METRIC not in logged or asked not in (None, CHOICE_METRIC)):
            raise ValueError(
                f"{self.path}: multiple-choice task {self.task!r} logs the metrics {logged}"
                f"{f' (correctness_metric {asked!r})' if asked else ''}: its answer is the option of highest "
                f"log-likelihood, whose correctness lm-eval logs as {CHOICE_METRIC!r}; add it to the task's "
                "metric_list."
            )
        if asked is not None:
            if asked not in logged:
                raise ValueError(f"{self.path}: task {self.task!r} logs no metric {asked!r}; it logs {logged}.")
            return asked
        metric = next((m for m in CORRECTNESS_METRICS if m in logged), None)
        if metric is None:
            raise ValueError(
                f"{self.path}: task {self.task!r} logs the metrics {logged}, none of which says whether an answer is "
                f"right ({', '.join(CORRECTNESS_METRICS)}: 0 or 1 per sample); a confidence model is scored "
                "against that. Pass `correctness_metric` if one of its metrics is 0 or 1."
            )
        return metric

    def record(self, sample: Mapping[str, Any], where: str) -> dict[str, Any]:
        if self.metric not in sample:
            raise ValueError(f"{where}: no {self.metric!r} value (the line logs {sample.get('metrics')}).")
        doc = sample.get("doc") if isinstance(sample.get("doc"), dict) else {}
        record = {"id": str(sample["doc_id"])}
        record.update(self._choice(doc, sample, where) if self.choice else self._generated(doc, sample, where))
        record.update(greedy_correctness=_correct(sample[self.metric], self.metric, where),
                      correctness_judge=LM_EVAL_JUDGE + self.metric, lm_eval_filter=self.filter, dataset=self.task,
                      model=self.model, source_split=self.split)
        if self.choice and self.task in ("mmlu", f"mmlu_{doc.get('subject')}"):
            # lm-eval's MMLU: one task per subject, each counting its docs from 0; one dataset, the paper's MMLU split
            record.update(id=f"{self.task}-{sample['doc_id']}", dataset="mmlu", source_split="mmlu")
        return record

    def _generated(self, doc: Mapping[str, Any], sample: Mapping[str, Any], where: str) -> dict[str, Any]:
        """The question, gold answers and answer of a generation task's line."""
        answer = sample["filtered_resps"]
        if isinstance(answer, list):
            if len(answer) != 1 or not isinstance(answer[0], str):
                raise ValueError(f"{where}: `filtered_resps` holds {answer!r}, not one answer (a task that keeps "
                                 "several answers per question, e.g. without a take_first filter, gives no greedy "
                                 "answer).")
            answer = answer[0]
        return {"question": self._question(doc, sample, where), "answer": _gold(sample.get("target")),
                "greedy_response": answer}

    def _choice(self, doc: Mapping[str, Any], sample: Mapping[str, Any], where: str) -> dict[str, Any]:
        """The formatted question, options, gold letter, answer (the option of highest raw log-likelihood, as `acc`
        scores it) and option probabilities (softmax of the log-likelihoods) of a multiple-choice task's line."""
        requests, lls = _requests(sample), _loglikelihoods(sample, where)
        if "acc_mutual_info" in sample["metrics"]:  # lm-eval adds one unconditional request per option after them
            requests, lls = requests[: len(requests) // 2], lls[: len(lls) // 2]
        if len(requests) != len(lls) or len(lls) < 2:
            raise ValueError(f"{where}: {len(requests)} requests and {len(lls)} log-likelihoods: not one request and "
                             "one log-likelihood per option of a multiple-choice question.")
        if _is_cais_mmlu(doc):  # the options and gold of the document, not the letters lm-eval scored
            row = self._row(doc, where)
        else:  # the options are the scored continuations, the stem the prompt (or the document's question_key)
            options = [str(request.get("arg_1", "")).strip() for request in requests]
            stem = self._question(doc, sample, where) if self.question_key else str(requests[0].get("arg_0", ""))
            row = self._row({"question": stem.strip(), "choices": options,
                             "answer": _gold_index(sample.get("target"), len(options), where)}, where)
        if len(row["choices"]) != len(lls):
            raise ValueError(f"{where}: the document has {len(row['choices'])} options but lm-eval scored {len(lls)}.")
        letter = LETTERS[max(range(len(lls)), key=lls.__getitem__)]  # the first highest, as numpy's argmax
        top = max(lls)
        weights = [math.exp(ll - top) for ll in lls]
        choice = {"question": row["question"], "answer": row["answer"], "choices": row["choices"],
                  "greedy_response": letter, "greedy_choice": letter,
                  "option_probabilities": [weight / sum(weights) for weight in weights]}
        return {**choice, "subject": row["subject"]} if isinstance(row.get("subject"), str) else choice

    @staticmethod
    def _row(row: Mapping[str, Any], where: str) -> dict[str, Any]:
        try:
            return multiple_choice_row(row)
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None

    def _question(self, doc: Mapping[str, Any], sample: Mapping[str, Any], where: str) -> str:
        if self.question_key is not None:
            if not isinstance(doc.get(self.question_key), str):
                raise ValueError(f"{where}: the document has no text under {self.question_key!r} (question_key); its "
                                 f"keys: {sorted(doc)}.")
            return doc[self.question_key]
        key = next((k for k in QUESTION_KEYS if isinstance(doc.get(k), str) and doc[k].strip()), None)
        if key is not None:
            return doc[key]
        prompt = _first_request(sample).get("arg_0")
        if not isinstance(prompt, str):
            raise ValueError(f"{where}: no question: the document has none of {QUESTION_KEYS} (its keys: "
                             f"{sorted(doc)}) and the line no prompt; pass `question_key`.")
        if not self.prompted:
            self.prompted = True
            logger.warning("%s: the documents of task %s have none of %s (keys: %s): the question is lm-eval's whole "
                           "prompt (pass `question_key` to read one of their keys).", self.path, self.task,
                           QUESTION_KEYS, sorted(doc))
        return prompt


def _requests(sample: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The requests' arguments as lm-eval logs them, in order (`gen_args_0`, `gen_args_1`, ...): `{"arg_0": prompt,
    "arg_1": generation settings}` for a generation task, `{"arg_0": context, "arg_1": continuation}` per option of a
    multiple-choice task."""
    arguments = sample.get("arguments")
    if not isinstance(arguments, dict):
        return []
    named = {int(key[len("gen_args_"):]): value for key, value in arguments.items()
             if key.startswith("gen_args_") and key[len("gen_args_"):].isdecimal() and isinstance(value, dict)}
    return [named[index] for index in sorted(named)]


def _first_request(sample: Mapping[str, Any]) -> dict[str, Any]:
    """The first request's arguments ([`_requests`]); `{}` when the line has none."""
    return next(iter(_requests(sample)), {})


def _gen_kwargs(sample: Mapping[str, Any]) -> dict[str, Any]:
    kwargs = _first_request(sample).get("arg_1")
    return kwargs if isinstance(kwargs, dict) else {}


def _output_type(sample: Mapping[str, Any]) -> str:
    """A task's `output_type` read from the shape of a line (when no results file gives its config): one request
    whose second argument is the generation settings is `generate_until`, several whose second argument is a
    continuation (text) `multiple_choice`, anything else a log-likelihood task (one continuation, or none)."""
    requests = _requests(sample)
    if len(requests) == 1 and isinstance(requests[0].get("arg_1"), dict):
        return GENERATION_OUTPUT_TYPE
    if len(requests) > 1 and all(isinstance(request.get("arg_1"), str) for request in requests):
        return MULTIPLE_CHOICE_OUTPUT_TYPE
    return "loglikelihood (or loglikelihood_rolling)"


def _loglikelihoods(sample: Mapping[str, Any], where: str) -> list[float]:
    """The log-likelihood of each request of a multiple-choice line: its `filtered_resps`, one `[log-likelihood,
    is_greedy]` pair per request (numbers lm-eval logs as text)."""
    resps = sample.get("filtered_resps")
    if isinstance(resps, list) and all(isinstance(resp, (list, tuple)) and len(resp) == 2 for resp in resps):
        try:
            values = [float(resp[0]) for resp in resps]
        except (TypeError, ValueError):
            values = None
        if values is not None and not any(math.isnan(value) for value in values):
            return values
    raise ValueError(f"{where}: `filtered_resps` holds {resps!r}, not one [log-likelihood, is_greedy] pair per option.")


def _gold_index(target: Any, count: int, where: str) -> int:
    """The gold option of a multiple-choice line read from its `target` (lm-eval logs the index as text)."""
    text = str(target).strip()
    if not text.isdecimal() or int(text) >= count:
        raise ValueError(f"{where}: the target {target!r} is not the index of one of its {count} options (0 to "
                         f"{count - 1}): a multiple-choice task whose target is a text or several indices has no one "
                         "gold option.")
    return int(text)


def _is_cais_mmlu(doc: Mapping[str, Any]) -> bool:
    """Whether a document is in the cais/mmlu layout: `question` (text), `choices` (options), `answer` (an index)."""
    answer = doc.get("answer")
    return isinstance(doc.get("question"), str) and isinstance(doc.get("choices"), list) \
        and isinstance(answer, int) and not isinstance(answer, bool)


def iter_lm_eval_batches(
    path: str | os.PathLike, batch_size: int = 10_000, *, question_key: str | None = None,
    correctness_metric: str | None = None, filter_name: str | None = None,
) -> Iterator[list[dict[str, Any]]]:
    """The records of an lm-eval samples file, `batch_size` at a time (normalized, as
    [`~elical_hf.signals.records.iter_record_batches`] gives them); options as in [`read_lm_eval_records`]."""
    path = os.fspath(path)
    task: _Task | None = None
    rows: list[dict[str, Any]] = []
    kept, seen = 0, {}
    for number, line in text_lines(path):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            sample = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{where} is not valid JSON: {error}") from None
        if not isinstance(sample, dict) or not all(key in sample for key in LM_EVAL_MARKERS):
            raise ValueError(f"{where} is not an lm-eval sample (a JSON object with {', '.join(LM_EVAL_MARKERS)}).")
        task = task or _Task(path, sample, question_key, correctness_metric, filter_name)
        if sample["filter"] != task.filter:
            continue
        first = seen.setdefault(str(sample["doc_id"]), number)
        if first != number:  # a repeated document would count as a document the results file counts
            raise ValueError(f"{where} repeats document {sample['doc_id']} of line {first} (filter {task.filter!r}): "
                             "not a file lm-eval wrote once. Copy or rerun the whole lm-eval run.")
        rows.append(normalize_at(task.record(sample, where), where))
        kept += 1
        if len(rows) == batch_size:
            yield rows
            rows = []
    if task is not None and not kept:
        raise ValueError(f"{path}: no line of the filter {task.filter!r} (filter_name).")
    if task is not None:
        _check_complete(path, task.task, kept)
    if rows:
        yield rows


def _check_complete(path: str, task: str, documents: int) -> None:
    """Refuse a samples file that holds another number of documents (lines of one filter) than the results file
    beside it counts for its task (`n-samples`, its `effective` count after `--limit`): a file cut short by a killed
    run or a partial copy would read as complete."""
    results = _results_of(path)
    counts = ((results or {}).get("n-samples") or {}).get(task)
    expected = counts.get("effective") if isinstance(counts, dict) else counts
    try:
        expected = None if isinstance(expected, bool) or expected is None else int(float(expected))
    except (TypeError, ValueError):
        expected = None
    if results is not None and expected is None:
        logger.warning("%s: %s gives no count of task %s's documents (n-samples), so a samples file cut short cannot "
                       "be told from a complete one.", path, lm_eval_results_file(path), task)
    if expected is not None and documents != expected:
        state = "cut short (a killed run, or a partial copy)" if documents < expected else "not the one that run wrote"
        raise ValueError(f"{path} holds {documents} documents of task {task}, but {lm_eval_results_file(path)} counts "
                         f"{expected} (n-samples): the samples file is {state}. Copy or rerun the whole lm-eval run.")


def read_lm_eval_records(
    path: str | os.PathLike, *, question_key: str | None = None, correctness_metric: str | None = None,
    filter_name: str | None = None,
) -> list[dict[str, Any]]:
    """
    Read lm-evaluation-harness samples (`lm_eval run ... --log_samples --output_path OUT`) as records.

    Each document of a generation task becomes one record: `id` (lm-eval's `doc_id`), `question`, `answer` (the
    task's target), `greedy_response` (the answer after the task's filter, as lm-eval scored it),
    `greedy_correctness` (its 0/1 metric), `correctness_judge` (`"lm-eval:<metric>"`), `lm_eval_filter`, `dataset`
    (the task), `model` (the run's `model_name`, from `results_<date>.json` beside the samples; without it, the
    folder lm-eval named after the model) and `source_split` (its `paper_split` once loaded): `in_domain_test` for
    the in-domain datasets (`nq_open`, `triviaqa`), `mmlu` for a task `mmlu`, `ood_test` else ([`lm_eval_split`]).

    Each document of a multiple-choice task (MMLU, ARC, HellaSwag: one log-likelihood per option) becomes one
    multiple-choice record ([`~elical_hf.settings.multiple_choice`]): `question` (the stem with one `A.<option>` line
    per option), `choices`, `answer` (`[gold letter]`), `greedy_response` and `greedy_choice` (the letter of the option
    of highest raw log-likelihood), `greedy_correctness` (its `acc`), `option_probabilities` (the softmax of the
    options' log-likelihoods, in option order) and `subject` when the document has one, with the fields above. A
    document in the cais/mmlu layout (`question`, `choices`, `answer` an index) gives the stem, options and gold; any
    other gives the stem from the prompt (its first request's context; or its `question_key`), the options from the
    scored continuations and the gold from lm-eval's `target` (an option's index). Records have no sampled answers:
    `elical-hf evaluate` scores them, training refuses them.

    Args:
        path: A `samples_<task>_<date>.jsonl` file, or a folder: every lm-eval samples file below it, of the latest
            run of each task and model ([`latest_lm_eval_runs`]).
        question_key (`str`, *optional*): The document key holding the question (of a multiple-choice task not in
            the cais/mmlu layout: its stem); defaults to the first of [`QUESTION_KEYS`] the document has, else the
            prompt lm-eval sent (with its few-shot examples), which is also a multiple-choice task's default stem.
        correctness_metric (`str`, *optional*): The 0/1 metric that is `greedy_correctness`; defaults to the first of
            [`CORRECTNESS_METRICS`] the task logs (a multiple-choice task's is `acc`).
        filter_name (`str`, *optional*): The task's filter whose answers are read (a task with several filters, e.g.
            gsm8k's `strict-match` and `flexible-extract`, logs each document once per filter); defaults to the first.

    Returns:
        `list[dict]`: the normalized records, file by file, in lm-eval's order.

    Raises:
        `ValueError`: naming the file (and line): a log-likelihood task (no answer among options), a task that logs
            no 0/1 correctness metric (naming those it logs; a multiple-choice task without `acc`), a multiple-choice
            target that is not an option's index, an unknown filter or question key, a folder without samples files,
            a line that is not an lm-eval sample.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(2, "No such file or folder", path)
    from .storage import record_files

    files = latest_lm_eval_runs([f for f in record_files(path) if is_lm_eval_samples(f)])
    if not files:
        raise ValueError(f"No lm-eval samples files (samples_<task>_<date>.jsonl, written with --log_samples) "
                         f"{'under' if os.path.isdir(path) else 'at'} {path}.")
    options = dict(question_key=question_key, correctness_metric=correctness_metric, filter_name=filter_name)
    return [record for file in files for batch in iter_lm_eval_batches(file, **options) for record in batch]
