"""The decoding loop behind [`~elical_hf.signals.generate_answers`] and [`~elical_hf.signals.complete_prompts`].

One batch of prompts is prefilled once (optionally a prefix shared by all prompts of the batch, once for the batch);
the KV cache is copied for the greedy row and the k sample rows, which decode together; finished rows leave the batch.
Sampling follows Hugging Face semantics (repetition penalty, temperature, top-k, top-p) with one seeded
`torch.Generator` per sample row (`sample_seed`), so results do not depend on batching.
"""

from __future__ import annotations

import hashlib
import time
from contextlib import nullcontext
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from tqdm.auto import tqdm

from ..models.kv_prefix import SharedPrefill, cache_kwarg, forward_parameters, prefill_shared_prefix, reserve_positions
from ..models.packed_linear import packed_linears
from ..models.prefix_attention import prefix_attention
from ..settings.prompts import shared_prefix_length


if TYPE_CHECKING:
    from .settings import SamplingSettings


def sample_seed(seed: int, question: str, sample_index: int) -> int:
    """Seed of one sample row: SHA-256 of (`seed`, `sample_index`, `question`), stable across processes and runs."""
    digest = hashlib.sha256(f"{seed}\x1f{sample_index}\x1f{question}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def apply_repetition_penalty(scores: torch.Tensor, token_ids: torch.Tensor, penalty: float, inplace: bool = False
                             ) -> torch.Tensor:
    """Hugging Face repetition penalty: logits of the tokens in `token_ids` (`(rows, n)`, repeats allowed) are divided
    by `penalty`, or multiplied by it where negative. Returns a new tensor, or `scores` changed with `inplace=True`."""
    picked = scores.gather(1, token_ids)
    picked = torch.where(picked < 0, picked * penalty, picked / penalty)
    return scores.scatter_(1, token_ids, picked) if inplace else scores.scatter(1, token_ids, picked)


_TIE_MARGIN = 16


def filter_candidates(scores: torch.Tensor, top_k: int, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k then top-p filtering with Hugging Face semantics, on the surviving candidates only.

    Args:
        scores (`torch.FloatTensor` of shape `(rows, vocab)`):
            Logits after repetition penalty and temperature.
        top_k (`int`): Tokens below the k-th largest logit are removed (ties with it are kept); `0` disables.
        top_p (`float`): Keep the smallest most-likely set with probability >= `top_p`, at least one token.

    Returns:
        `tuple[torch.FloatTensor, torch.LongTensor]`: candidate logits sorted in decreasing order, with removed ones
        set to `-inf`, and their token ids. Tokens outside the candidates are removed.
    """
    vocab = scores.shape[-1]
    if 0 < top_k < vocab:
        # Ties with the k-th logit are kept too (common with bf16 logits): look a few places further, count if needed.
        values, ids = torch.topk(scores, min(top_k + _TIE_MARGIN, vocab), dim=-1)
        kth = values[:, top_k - 1 : top_k]
        if values.shape[-1] < vocab and bool((values[:, -1:] == kth).any()):
            values, ids = torch.topk(scores, int((scores >= kth).sum(-1).max()), dim=-1)
        values = values.masked_fill(values < kth, float("-inf"))
    else:
        values, ids = torch.sort(scores, dim=-1, descending=True)
    if top_p < 1.0:
        probs = values.softmax(-1)
        mass_before = probs.cumsum(-1) - probs
        remove = mass_before >= top_p
        remove[:, 0] = False
        values = values.masked_fill(remove, float("-inf"))
    return values, ids


def _sample(values: torch.Tensor, ids: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
    """Draw one token per row by inverse CDF, with one uniform number from each row's own generator."""
    uniforms = torch.stack([torch.rand((), generator=g, dtype=torch.float64) for g in generators])
    cdf = values.softmax(-1).double().cumsum(-1)
    target = (uniforms.to(cdf.device) * cdf[:, -1]).unsqueeze(-1)
    pick = torch.searchsorted(cdf, target, right=True).clamp_(max=cdf.shape[-1] - 1)
    return ids.gather(-1, pick).squeeze(-1)


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    generation_config = getattr(model, "generation_config", None)
    for value in (getattr(generation_config, "eos_token_id", None), tokenizer.eos_token_id):
        if value is not None:
            ids.update([value] if isinstance(value, int) else value)
    if not ids:
        raise ValueError("Neither the model's generation_config nor the tokenizer defines an EOS token.")
    return ids


def _keep_rows(cache: Any, rows: torch.Tensor, *tensors: torch.Tensor | None) -> list[torch.Tensor | None]:
    """Keep only `rows` of the KV cache (in place) and of each of `tensors` (`None` stays `None`)."""
    cache.batch_select_indices(rows)
    return [tensor[rows] if tensor is not None else None for tensor in tensors]


def answer_record(greedy: str, tokens: list[str], logprobs: list[float], samples: list[str], generated: int) -> dict:
    """One question's answers in the record schema of [`~elical_hf.signals.generate_answers`] (every backend's)."""
    return {"greedy_response": greedy, "greedy_tokens": tokens, "greedy_logprobs": logprobs,
            "greedy_cumulative_logprobs": float(sum(logprobs)), "sampling_response": samples,
            "num_generated_tokens": generated}


def cut_at_stop(text: str, stop_strings: list[str]) -> str:
    """`text` up to the first of `stop_strings` it contains (all of it when it contains none)."""
    cuts = [i for i in (text.find(s) for s in stop_strings) if i >= 0]
    return text[: min(cuts)] if cuts else text


LEAVE_SHARE = 0.25
"""In bfloat16 on a CPU, finished rows leave the decoding batch (a copy of every layer's cache for the rows that stay)
once they are this share of it; until then they ride along, their tokens dropped. Leaving at every finish copied the
cache ~10 times per 96-row batch at k=5; waiting for a quarter ran 1.02x (k=5) and 1.04x (k=20) faster in bf16 on
machine B, and 0.94x in float32, whose steps cost their matmuls, so float32 rows leave at once (medians of 5 alternated
runs of `benchmarks/sampling_speed.py`'s settings; docs/benchmarks.md section 2)."""


def leave_share(dtype: torch.dtype, device: torch.device) -> float:
    """The share of a decoding batch its finished rows make up before they leave it: [`LEAVE_SHARE`] in bfloat16 on a
    CPU, where a step costs its operators' count more than its rows; 0 (at once) elsewhere."""
    return LEAVE_SHARE if dtype == torch.bfloat16 and torch.device(device).type == "cpu" else 0.0


REPEATED_PREFIX_MAX = 64
"""The longest shared prompt prefix whose KV cache the sampler repeats for every row in bfloat16 on a CPU, instead of
attending to it apart ([`~elical_hf.models.prefix_attention`]): there the fused attention over the repeated ~32-token
chat-template prefix ran 1.11x (k=5) and 1.15x (k=20) faster than the cascade's own softmax (`benchmarks/
sampling_speed.py`, docs/benchmarks.md section 2). Longer prefixes (Verbal-10's ~870 tokens of demonstrations) stay
apart: repeated, they would cost ~20 MB of cache per row."""


class Decoder:
    """Decodes one batch of prompts: the greedy row and k sample rows per prompt, from one shared prefill."""

    def __init__(
        self, model, tokenizer, settings: SamplingSettings, autocast_dtype: torch.dtype | None, greedy_only=False,
        share_prefix: bool = False, on_prefill: Callable[[list[str]], list[bool] | None] | None = None,
        cancelled: Callable[[str], bool] | None = None, top_logprobs: int = 0,
        on_token: Callable[[str, int, float, list[tuple[int, float]] | None], None] | None = None,
    ):
        self.model, self.tokenizer, self.settings = model, tokenizer, settings
        # Called with the batch's questions right after its prefill (the model may keep what that prefill computed,
        # e.g. the confidence gate's hidden states); a list of booleans it returns says which prompts go on to decode.
        self.on_prefill = on_prefill
        # Called with a question after each decoding step of its rows: True stops them there (a server's client left;
        # their output is what they decoded so far), and a batch whose rows all stopped ends.
        self.cancelled = cancelled
        # The greedy rows also keep, per step, the `top_logprobs` most likely tokens of the distribution the greedy
        # pick was made from (`greedy_top_logprobs`: `(token id, log-probability)` pairs), and `on_token` is called
        # with each greedy token as it is decoded: (question, token id, its log-probability, those pairs or None).
        self.top_logprobs, self.on_token = top_logprobs, on_token
        # Prompts of a batch that start with the same tokens (few-shot demonstrations, a long instruction) prefill
        # that prefix once: far fewer prefill tokens, the same positions and attention; floats may differ slightly.
        self.share_prefix = share_prefix
        self.num_samples = 0 if greedy_only else settings.num_samples  # greedy only: one row per prompt
        self.eos_ids = _eos_ids(model, tokenizer)
        # The pad id only fills masked slots (real tokens are always found through the attention mask).
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids)
        self.cache_kwarg = cache_kwarg(model)
        self.keep_last_only = "logits_to_keep" in forward_parameters(model)
        self.autocast_dtype = autocast_dtype
        self.leave_share = leave_share(autocast_dtype or model.dtype, model.device)
        # Tokens in the tail decoded to look for stop strings: each token adds at least one byte.
        self.stop_window = max((len(s.encode("utf-8")) for s in settings.stop_strings), default=0) + 2
        self._last_prefix: tuple[list[int], Any] | None = None  # (tokens, cache) of the last separate prefix

    def _forward(self, input_ids, attention_mask, position_ids, cache) -> torch.Tensor:
        kwargs = {self.cache_kwarg: cache, "use_cache": True}
        if self.keep_last_only:
            kwargs["logits_to_keep"] = 1
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **kwargs)
        return out.logits[:, -1].float()

    def _finished(self, tokens: list[int]) -> bool:
        if tokens[-1] in self.eos_ids or len(tokens) >= self.settings.max_new_tokens:
            return True
        if not self.settings.stop_strings:
            return False
        tail = self.tokenizer.decode(tokens[-self.stop_window :], skip_special_tokens=True)
        return any(s in tail for s in self.settings.stop_strings)

    def _next_tokens(self, logits, greedy, row_ids, seen, generators, logprobs, tops, done) -> torch.Tensor:
        """Greedy rows: argmax of the logits (after `greedy_repetition_penalty` when it is not 1), logging the raw
        log-probability of the chosen token (and the `top_logprobs` most likely tokens' in `tops`) unless the row is
        `done` (finished, riding along). Sample rows: penalty, temperature, top-k, top-p, then a draw from the row's
        own generator."""
        settings = self.settings
        next_tokens = torch.empty(len(row_ids), dtype=torch.long, device=logits.device)
        if greedy.any():
            raw = logits[greedy]
            penalized = raw
            if settings.greedy_repetition_penalty != 1.0:
                penalized = apply_repetition_penalty(raw, seen[greedy], settings.greedy_repetition_penalty)
            chosen = penalized.argmax(-1)
            next_tokens[greedy] = chosen
            log_probs = raw.log_softmax(-1)
            chosen_logprobs = log_probs.gather(-1, chosen[:, None]).squeeze(-1).tolist()
            rows = [(i, r) for i, r in zip(greedy.nonzero().squeeze(-1).tolist(), row_ids[greedy].tolist())]
            for (i, r), logprob in zip(rows, chosen_logprobs):
                if not done[i]:
                    logprobs[r].append(logprob)
            if self.top_logprobs:
                values, ids = log_probs.topk(min(self.top_logprobs, log_probs.shape[-1]), dim=-1)
                for (i, r), pairs in zip(rows, zip(ids.tolist(), values.tolist())):
                    if not done[i]:
                        tops[r].append(list(zip(*pairs)))
        if not greedy.all():
            sampled = ~greedy
            scores = logits[sampled]  # a copy (boolean indexing): penalised and scaled in place, rows x vocab is large
            if seen is not None:
                apply_repetition_penalty(scores, seen[sampled], settings.repetition_penalty, inplace=True)
            if settings.temperature != 1.0:  # as in transformers, which skips a temperature of 1
                scores.div_(settings.temperature)
            values, ids = filter_candidates(scores, settings.top_k, settings.top_p)
            next_tokens[sampled] = _sample(values, ids, [generators[r] for r in row_ids[sampled].tolist()])
        return next_tokens

    def __call__(self, questions: list[str], prompt_ids: list[list[int]]) -> list[dict]:
        # One autocast region per batch: autocast keeps low-precision copies of the weights until it exits. It does
        # so under `no_grad` but not under `inference_mode`, where every step would re-cast every weight.
        dtype, device_type = self.autocast_dtype, self.model.device.type
        autocast = torch.autocast(device_type, dtype=dtype) if dtype is not None else nullcontext()
        with torch.no_grad(), autocast:
            return self._decode(questions, prompt_ids)

    def _prefill(self, prompt_ids: list[list[int]]) -> SharedPrefill:
        """Left-padded prompts run through the model. With `share_prefix`, a token prefix common to every prompt
        (kept when >= `MIN_SHARED_PREFIX` tokens) is run once, and the rest of each prompt after it, padded between the
        prefix and the rest ([`~elical_hf.models.kv_prefix.prefill_shared_prefix`]). Where the model supports it, the
        prefix's cache is not repeated per row ([`~elical_hf.models.prefix_attention`]; except a short prefix in bf16
        on a CPU, [`REPEATED_PREFIX_MAX`]), and a prefix that the previous batch ran (Verbal-10's demonstrations in
        every batch) is not run again."""
        shared = shared_prefix_length(prompt_ids) if self.share_prefix else 0
        dtype = self.autocast_dtype or self.model.dtype
        apart = not (shared <= REPEATED_PREFIX_MAX and dtype == torch.bfloat16 and self.model.device.type == "cpu")
        reused = None
        if apart and self._last_prefix is not None:  # every prompt starts with it and goes on after it
            tokens, cache = self._last_prefix
            if all(len(ids) > len(tokens) and ids[: len(tokens)] == tokens for ids in prompt_ids):
                shared, reused = len(tokens), cache
        prefill = prefill_shared_prefix(self._forward, prompt_ids, shared, self.model.config, self.model.device,
                                        padding_side="left", pad_id=self.pad_id,
                                        prefix_model=self.model if apart else None, prefix=reused)
        self._last_prefix = (list(prompt_ids[0][:shared]), prefill.prefix) if prefill.prefix is not None else None
        return prefill

    def _decode(self, questions: list[str], prompt_ids: list[list[int]]) -> list[dict]:
        settings, device, group = self.settings, self.model.device, self.num_samples + 1
        prefill = self._prefill(prompt_ids)
        cache = prefill.cache
        # with a separate prefix cache, the model sees the rows' own columns of the mask only (and attends to the
        # prefix inside `prefix_attention`)
        own, prefix = (prefill.shared, prefill.prefix) if prefill.prefix is not None else (0, None)
        keep = self.on_prefill(questions) if self.on_prefill is not None else None
        row_ids, logits, attention_mask, next_pos, seen = self._start_rows(prefill, keep)
        is_greedy = torch.arange(len(prompt_ids) * group, device=device) % group == 0
        generators = [
            None if j == 0 else torch.Generator().manual_seed(sample_seed(settings.seed, q, j - 1))
            for q in questions
            for j in range(group)
        ]
        tokens: list[list[int]] = [[] for _ in range(len(is_greedy))]
        logprobs: list[list[float]] = [[] for _ in range(len(is_greedy))]
        tops: list[list[list[tuple[int, float]]]] = [[] for _ in range(len(is_greedy))]
        done = [False] * len(row_ids)  # rows of the batch that have finished (they may ride along a few steps)
        while len(row_ids):
            rows = row_ids.tolist()
            next_tokens = self._next_tokens(logits, is_greedy[row_ids], row_ids, seen, generators, logprobs, tops,
                                            done)
            for i, (r, t) in enumerate(zip(rows, next_tokens.tolist())):
                if done[i]:
                    continue
                tokens[r].append(t)
                if self.on_token is not None and r % group == 0:
                    self.on_token(questions[r // group], t, logprobs[r][-1], tops[r][-1] if self.top_logprobs else None)
                done[i] = self._finished(tokens[r]) or (self.cancelled is not None and
                                                        self.cancelled(questions[r // group]))
            if all(done):
                break
            finished = sum(done)
            if finished and finished >= self.leave_share * len(done):  # finished rows leave the batch and its cache
                keep = torch.tensor([i for i, d in enumerate(done) if not d], device=device)
                row_ids, next_tokens, next_pos, attention_mask, seen = _keep_rows(
                    cache, keep, row_ids, next_tokens, next_pos, attention_mask, seen)
                done = [False] * len(row_ids)
            if seen is not None:
                seen = torch.cat([seen, next_tokens[:, None]], dim=-1)
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(next_tokens), 1))], dim=-1)
            with prefix_attention(self.model, prefix) if prefix is not None else nullcontext():
                logits = self._forward(next_tokens[:, None], attention_mask[:, own:], next_pos[:, None], cache)
            next_pos = next_pos + 1
        return self._results(len(prompt_ids), tokens, logprobs, tops)

    def _start_rows(self, prefill: SharedPrefill, keep: list[bool] | None) -> tuple:
        """The rows that decode after `prefill`: rows q*group (greedy) and q*group+1..q*group+k (samples) share
        prompt q's cache, made room in for the new tokens; the rows of a prompt `keep` leaves out leave before their
        first token. Returns their `(row ids, logits, attention mask, next positions, tokens seen)`."""
        settings, group = self.settings, self.num_samples + 1
        input_ids, cache = prefill.input_ids, prefill.cache
        reserve_positions(cache, settings.max_new_tokens, repeats=group)  # decoding writes in place, no concatenation
        logits = prefill.output.repeat_interleave(group, dim=0)
        attention_mask = prefill.attention_mask.repeat_interleave(group, dim=0)
        next_pos = attention_mask.sum(-1)
        row_ids = torch.arange(len(attention_mask), device=self.model.device)
        seen = None  # token ids seen by each row (for the repetition penalty); pad slots repeat a real prompt token
        if (settings.repetition_penalty != 1.0 and self.num_samples) or settings.greedy_repetition_penalty != 1.0:
            seen = torch.where(attention_mask[::group].bool(), input_ids, input_ids[:, -1:])
            seen = seen.repeat_interleave(group, dim=0)
        if keep is not None and not all(keep):
            rows = torch.tensor(keep, device=self.model.device).repeat_interleave(group).nonzero().squeeze(-1)
            return _keep_rows(cache, rows, row_ids, logits, attention_mask, next_pos, seen)
        return row_ids, logits, attention_mask, next_pos, seen

    def _results(self, batch: int, tokens: list[list[int]], logprobs: list[list[float]], tops: list) -> list[dict]:
        """One result per prompt from its rows' tokens: texts cut at the stop strings, the greedy row's tokens and
        log-probabilities."""
        group, results = self.num_samples + 1, []
        for q in range(batch):
            rows = range(q * group, (q + 1) * group)
            texts = [self.tokenizer.decode(tokens[r], skip_special_tokens=True) for r in rows]
            texts = [cut_at_stop(t, self.settings.stop_strings).strip() for t in texts]
            greedy_tokens = self.tokenizer.batch_decode([[t] for t in tokens[q * group]])
            results.append(answer_record(texts[0], greedy_tokens, logprobs[q * group], texts[1:],
                                         sum(len(tokens[r]) for r in rows)))
            if self.top_logprobs:
                results[-1]["greedy_top_logprobs"] = tops[q * group]
        return results


ROWS_PER_CPU_THREAD = 64
"""Decoding rows per batch per CPU thread when `batch_size` is automatic (measured on SmolLM2-135M, 2 threads: 84-168
rows ran within 10% of the fastest at k = 5 and k = 20, 42 rows 30% slower; `docs/benchmarks.md`)."""
GPU_ROWS = 512


def auto_batch_size(rows_per_prompt: int, device: torch.device | str = "cpu") -> int:
    """Prompts per batch for `rows_per_prompt` decoding rows each (k + 1 with k samples): about
    `ROWS_PER_CPU_THREAD` rows per thread on a CPU (at most 1024), `GPU_ROWS` on an accelerator."""
    if torch.device(device).type == "cpu":
        rows = min(1024, ROWS_PER_CPU_THREAD * torch.get_num_threads())
    else:
        rows = GPU_ROWS
    return max(1, round(rows / rows_per_prompt))


def context_length(model: Any) -> int | None:
    """The most positions `model` was built for (`max_position_embeddings` of its text config), or `None`."""
    config = model.config
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    length = getattr(config, "max_position_embeddings", None)
    return length if isinstance(length, int) and length > 0 else None


def check_prompt_lengths(
    prompt_ids: list[list[int]], limit: int | None, max_new_tokens: int, names: list[str]
) -> None:
    """Refuse prompts that, with `max_new_tokens` answer tokens, do not fit a context of `limit` positions (the model
    would decode past the positions it knows, with only transformers' warning): one `ValueError` naming the first
    ones (`names[i]` says which question prompt `i` is) with their token counts. `limit=None` checks nothing."""
    if limit is None:
        return
    over = [(name, len(ids)) for name, ids in zip(names, prompt_ids) if len(ids) + max_new_tokens > limit]
    if over:
        shown = ", ".join(f"{name} ({n:,} tokens)" for name, n in over[:3])
        more = f" and {len(over) - 3} more" if len(over) > 3 else ""
        raise ValueError(
            f"{len(over)} of {len(prompt_ids)} question(s) do not fit the model's context of {limit:,} tokens with "
            f"max_new_tokens={max_new_tokens}: {shown}{more} (prompt tokens, template included). Shorten or drop "
            "them, or lower max_new_tokens."
        )


def decode_all(decoder: Decoder, keys: list[str], prompt_ids: list[list[int]], progress: bool, desc: str,
               pack: bool = False) -> list:
    """Run `decoder` over all prompts in batches of similar length; results in input order. `pack`: the model's
    linear layers run on weights packed once for the whole run ([`~elical_hf.models.packed_linear.packed_linears`];
    for bulk work, where packing's one-off cost is small beside the steps it speeds up)."""
    model, batch_size = decoder.model, decoder.settings.batch_size
    if batch_size is None:
        batch_size = auto_batch_size(decoder.num_samples + 1, model.device)
    order = sorted(range(len(keys)), key=lambda i: -len(prompt_ids[i]))  # similar lengths batch together
    results: list[dict | None] = [None] * len(keys)
    was_training = model.training
    model.eval()
    bar = tqdm(total=len(keys), unit="q", desc=desc, disable=not progress)
    start, generated = time.perf_counter(), 0
    rows = batch_size * (decoder.num_samples + 1)
    try:
        with packed_linears(model, decoder.autocast_dtype or model.dtype, rows) if pack else nullcontext():
            for begin in range(0, len(order), batch_size):
                idx = order[begin : begin + batch_size]
                for i, result in zip(idx, decoder([keys[i] for i in idx], [prompt_ids[i] for i in idx])):
                    results[i] = result
                    generated += result["num_generated_tokens"]
                bar.update(len(idx))
                elapsed = max(time.perf_counter() - start, 1e-9)
                bar.set_postfix(q_s=f"{bar.n / elapsed:.2f}", tok_s=f"{generated / elapsed:.1f}")
    finally:
        bar.close()
        model.train(was_training)
    return results
