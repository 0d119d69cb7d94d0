#!/usr/bin/env python
"""Build the QA subsets bundled in ``elical_hf/resources/qa``.

One-off, deterministic: the same source files, ``--per-dataset`` and ``--seed`` give byte-identical
``.jsonl.gz`` files and ``manifest.json``. Usage (from the repository root)::

    python examples/data/build_bundled_qa.py --source ../shared/data/qa --per-dataset 2000 --seed 42

For each dataset: read every row, drop rows with an empty question or without a non-empty answer
alias (empty aliases are removed from the kept rows), de-duplicate by normalized question text
(lowercase, whitespace collapsed; the first occurrence wins), draw ``random.Random(seed).sample`` of
``N`` row positions (all rows if fewer), sort them so the original file order is kept, and write
``{"id": "<name>-<line index in the source file>", "question": ..., "answer": [...]}`` per line.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
from pathlib import Path

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


def write_gzip_jsonl(path: Path, rows: list[dict]) -> None:
    payload = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
        gz.write(payload)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=REPO_ROOT / ".." / "shared" / "data" / "qa")
    parser.add_argument("--per-dataset", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)

    OUT_DIR.mkdir(parents=True, exist_ok=True)
    manifest: dict = {
        "description": "Deterministic subsets of the open-domain QA evaluation splits used by the "
        "HonestyBench paper (converted to one format by the paper's authors).",
        "build_command": f"python examples/data/build_bundled_qa.py --per-dataset {args.per_dataset} --seed {args.seed}",
        "per_dataset": args.per_dataset,
        "seed": args.seed,
        "datasets": {},
    }
    for name, info in DATASETS.items():
        kept, n_source = clean_rows(args.source / info["source_file"])
        n = min(args.per_dataset, len(kept))
        picked = sorted(random.Random(args.seed).sample(range(len(kept)), n))
        rows = [
            {"id": f"{name}-{kept[i][0]}", "question": kept[i][1], "answer": kept[i][2]} for i in picked
        ]
        out = OUT_DIR / f"{name}.jsonl.gz"
        write_gzip_jsonl(out, rows)
        manifest["datasets"][name] = {
            "file": out.name,
            "rows": len(rows),
            "source_file": info["source_file"],
            "source_rows": n_source,
            "source_rows_after_filtering": len(kept),
            "source_split": info["source_split"],
            "role": info["role"],
            "license": info["license"],
            "citation": info["citation"],
            "url": info["url"],
            "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
        }
        print(f"{name:16s} {len(rows):5d} / {len(kept):5d} kept / {n_source:5d} source  {out.stat().st_size:8d} B")
    (OUT_DIR / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    total = sum(p.stat().st_size for p in OUT_DIR.iterdir() if p.is_file())
    print(f"total size of {OUT_DIR}: {total} B")


if __name__ == "__main__":
    main()
