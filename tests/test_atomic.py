"""`elical_hf.utils.atomic`: a failed write leaves the old file or folder as it was and no temporary behind."""

from __future__ import annotations

import pytest

from elical_hf.utils.atomic import atomic_file, atomic_folder, atomic_write_text


def test_atomic_write_text_replaces_the_file(tmp_path):
    path = tmp_path / "a.json"
    path.write_text("old")
    atomic_write_text(path, "new ü\n")
    assert path.read_text(encoding="utf-8") == "new ü\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_a_failed_file_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError, match="interrupted"):
        with atomic_file(path) as tmp:
            with open(tmp, "w") as handle:
                handle.write("half")
            raise RuntimeError("interrupted")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_atomic_folder_replaces_the_folder_and_stages_under_its_name(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "stale.txt").write_text("from an earlier run")
    with atomic_folder(target) as staging:
        assert staging.name == "model" and staging != target and not any(staging.iterdir())
        assert (target / "stale.txt").exists()  # nothing changes before the block ends
        (staging / "weights.bin").write_text("w")
    assert sorted(p.name for p in target.iterdir()) == ["weights.bin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_failed_folder_build_keeps_the_old_folder(tmp_path):
    target = tmp_path / "nested" / "model"
    with pytest.raises(RuntimeError):
        with atomic_folder(target) as staging:
            (staging / "half.bin").write_text("w")
            raise RuntimeError("interrupted")
    assert not target.exists() and list(target.parent.iterdir()) == []
