"""Choosing which questions to label from stage-1 confidences (`elical-hf select-labels`)."""

from __future__ import annotations


import numpy as np
import pytest

from elical_hf import AutoModelForConfidence
from elical_hf.cli import main as cli_main
from elical_hf.evaluation.label_selection import SELECTION_STRATEGIES, UNIFORM_BINS, select_for_labelling
from tests.tiny import mark_trained


def skewed_pool(size: int = 2000, seed: int = 0) -> np.ndarray:
    """Mostly low confidences, few high ones (what a small model's stage 1 gives)."""
    return np.random.default_rng(seed).beta(1.2, 6.0, size=size)


@pytest.mark.parametrize("strategy", SELECTION_STRATEGIES)
def test_every_strategy_picks_distinct_sorted_indices_reproducibly(strategy):
    pool = skewed_pool()
    chosen = select_for_labelling(pool, 100, strategy, seed=3)
    assert len(chosen) == len(set(chosen)) == 100 and chosen == sorted(chosen) and 0 <= min(chosen)
    assert chosen == select_for_labelling(pool, 100, strategy, seed=3)
    assert chosen != select_for_labelling(pool, 100, strategy, seed=4)
    assert len(select_for_labelling(pool, len(pool), strategy)) == len(pool)  # the whole pool


def test_quantile_takes_one_question_per_stratum():
    pool = skewed_pool()
    chosen = select_for_labelling(pool, 50, "quantile", seed=1)
    ranks = np.argsort(np.argsort(pool))[chosen]  # each chosen question's rank in the sorted pool
    assert sorted(ranks // 40) == list(range(50))  # strata of 2000 / 50 = 40 ranks, one pick each


def test_uniform_spreads_labels_over_confidence_values():
    pool = skewed_pool()
    bins = np.minimum((pool * UNIFORM_BINS).astype(int), UNIFORM_BINS - 1)
    uniform = np.bincount(bins[select_for_labelling(pool, 100, "uniform", seed=0)], minlength=UNIFORM_BINS)
    random = np.bincount(bins[select_for_labelling(pool, 100, "random", seed=0)], minlength=UNIFORM_BINS)
    sizes = np.bincount(bins, minlength=UNIFORM_BINS)
    # every bin gets the same share (up to one label of rounding), or all it has
    assert (uniform >= np.minimum(sizes, uniform.max() - 1)).all() and uniform.sum() == 100
    assert uniform[5:].sum() > 3 * max(random[5:].sum(), 1)  # rare high confidences get many more labels


def test_bad_requests_are_refused():
    with pytest.raises(ValueError, match="strategy"):
        select_for_labelling([0.1, 0.2], 1, "active")
    with pytest.raises(ValueError, match="num_labels"):
        select_for_labelling([0.1, 0.2], 3)


def test_select_labels_command(tiny_llama, tmp_path, raise_user_errors):
    from elical_hf.signals.records import load_records, save_records

    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(tmp_path / "stage1")
    mark_trained(tmp_path / "stage1")  # select-labels refuses untrained heads
    pool = [{"question": f"who wrote play {i}", "answer": ["x"], "dataset": "nq", "split": "train"} for i in range(30)]
    save_records(pool + [{"question": "a test question", "answer": ["y"], "dataset": "nq", "split": "test"}],
                 tmp_path / "pool.jsonl")
    assert cli_main(["select-labels", str(tmp_path / "stage1"), "--records", str(tmp_path / "pool.jsonl"),
                     "--output", str(tmp_path / "to_label.jsonl"), "--num_labels", "8", "--strategy", "quantile",
                     "--split", "train"]) == 0
    chosen = load_records(tmp_path / "to_label.jsonl")
    assert len(chosen) == 8 and all(r["split"] == "train" for r in chosen)
    with pytest.raises(ValueError, match="num_labels"):
        cli_main(["select-labels", str(tmp_path / "stage1"), "--records", str(tmp_path / "pool.jsonl"),
                  "--output", str(tmp_path / "x.jsonl"), "--num_labels", "99"])
    assert not (tmp_path / "x.jsonl").exists()


def test_select_labels_split_is_a_paper_split(tiny_llama, tmp_path, raise_user_errors):
    """`--split in_domain_test` keeps an in-domain dataset's own test records (as threshold reads `--split`); a split
    the pool does not have is one line naming those it has; the chosen records are written as stored."""
    from elical_hf.signals.records import load_records, save_records

    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(tmp_path / "stage1")
    mark_trained(tmp_path / "stage1")
    pool = [{"question": f"who wrote play {i}", "answer": ["x"], "dataset": "nq", "split": "test",
             "model": tiny_llama} for i in range(12)]
    pool += [{"question": f"who painted {i}", "answer": ["y"], "dataset": "nq", "split": "train", "model": tiny_llama}
             for i in range(12)]
    save_records(pool, tmp_path / "pool.jsonl")
    command = ["select-labels", str(tmp_path / "stage1"), "--records", str(tmp_path / "pool.jsonl"), "--num_labels", "5"]
    assert cli_main([*command, "--output", str(tmp_path / "chosen.jsonl"), "--split", "in_domain_test"]) == 0
    chosen = load_records(tmp_path / "chosen.jsonl", derive=False).to_list()
    assert len(chosen) == 5 and all(r["split"] == "test" and "paper_split" not in r for r in chosen)
    with pytest.raises(ValueError, match="no record of the paper split 'ood_test' \\(it has in_domain_test, train\\)"):
        cli_main([*command, "--output", str(tmp_path / "other.jsonl"), "--split", "ood_test"])
