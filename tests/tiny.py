"""A tiny local tokenizer and tiny randomly initialised causal LMs for fast, offline tests.

`make_tiny_tokenizer()` builds a word-level tokenizer (with a ChatML-style chat template, EOS = PAD = `<|im_end|>`)
over the words of the paper's prompts plus a few hundred common words; `make_tiny_causal_lm(tokenizer)` builds a
2-layer Llama or Qwen2 model over its vocabulary. Both are deterministic and build in milliseconds.
"""

from __future__ import annotations

import re

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from elical_hf.settings import prompts


SPECIAL_TOKENS = ["<unk>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

QWEN3_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
"""Qwen3's generation-prompt logic (its template, cut to what a question prompt uses): thinking is on unless the
caller passes `enable_thinking=False`, which writes an empty reasoning block before the answer."""

THINK_TOKENS = ["<think>", "</think>"]
"""Qwen3's reasoning tags: added tokens that are not special (decoding keeps them in the text)."""

EXTRA_WORDS = """
system user assistant you are a helpful the of and to in is was for on that with by as at from it an be this which
or who what when where why how whom whose did does do has have had were not no yes one two three four five ten
paris france london england berlin germany rome italy madrid spain tokyo japan shakespeare hamlet william dickens
capital city country wrote written author king queen river mountain year born died first largest war world book
play film song team president 1600 1776 1945 2000 water gold red blue green answer question correct unknown sure
i think it's maybe probably about around name called known famous because there their they he she his her we our
""".split()


def _prompt_words() -> list[str]:
    texts = [value for name, value in vars(prompts).items() if name.endswith("_PROMPT") and isinstance(value, str)]
    return re.findall(r"\w+|[^\w\s]+", " ".join(texts).replace("{", " ").replace("}", " "))


def make_tiny_tokenizer(reasoning: bool = False) -> PreTrainedTokenizerFast:
    """A word-level tokenizer (split on whitespace and punctuation; each word lowercase and capitalized) with a
    ChatML-style chat template; with `reasoning`, Qwen3's: [`QWEN3_CHAT_TEMPLATE`] and the [`THINK_TOKENS`].

    Special tokens: `<unk>` (0), `<|im_start|>` (1), `<|im_end|>` (2, EOS and PAD). Unknown words map to `<unk>`.
    Punctuation `. , ? ! : ' " -` and the digits are in the vocabulary; decoding joins tokens with spaces.
    """
    words = _prompt_words() + EXTRA_WORDS + list(".,?!:'\"-") + [str(d) for d in range(10)]
    words += [w.capitalize() for w in words if w.isalpha()]
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for word in words:
        vocab.setdefault(word, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="<unk>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>"],
        model_max_length=512,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    if reasoning:
        tokenizer.add_tokens(THINK_TOKENS)
        tokenizer.chat_template = QWEN3_CHAT_TEMPLATE
    return tokenizer


def make_tiny_causal_lm(
    tokenizer: PreTrainedTokenizerFast,
    arch: str = "llama",
    seed: int = 0,
    attn_implementation: str = "eager",
    **config_overrides,
) -> LlamaForCausalLM | Qwen2ForCausalLM:
    """A randomly initialised 2-layer causal LM (hidden 32, 4 heads, 2 KV heads) over `tokenizer`'s vocabulary.

    Args:
        tokenizer: The tokenizer whose size, EOS and PAD ids the model takes.
        arch (`str`): `"llama"`, `"qwen2"` or `"qwen3"`.
        seed (`int`): Seed of the weights; the global RNG state is left untouched.
        attn_implementation (`str`): `"eager"` (default, exact and fast at this size) or `"sdpa"`.
        config_overrides: Any other config field, e.g. `initializer_range=0.2` for peakier distributions.

    Returns:
        The model in float32, in eval mode, with `generation_config` EOS/PAD set to the tokenizer's EOS.
    """
    configs = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
               "qwen3": (Qwen3Config, Qwen3ForCausalLM)}
    if arch not in configs:
        raise ValueError(f"Unknown arch {arch!r}; choose one of {sorted(configs)}.")
    config_class, model_class = configs[arch]
    eos = tokenizer.eos_token_id
    kwargs = dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    kwargs.update(config_overrides)
    config = config_class(**kwargs)
    config._attn_implementation = attn_implementation
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    return model.eval()


def mark_trained(folder) -> None:
    """Give a saved, untrained confidence model a training-history entry, so `elical-hf evaluate` (which refuses
    untrained heads) scores it in tests whose subject is something else."""
    import os

    from elical_hf.settings.configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig

    config = ConfidenceConfig.from_json_file(os.path.join(folder, CONFIDENCE_CONFIG_NAME))
    config.training_history = [{"stage": "calibration", "label_column": "correctness", "num_examples": 1}]
    config.save_pretrained(folder)


def perturbed_confidence_model(base: str, scale: float = 0.2, **load_kwargs):
    """The confidence model of `base` with every trainable weight (LoRA and head) moved by a seeded draw of standard
    deviation `scale`, so its adapter and head are not at their initial values (a trained-looking model)."""
    import torch

    from elical_hf import AutoModelForConfidence

    model = AutoModelForConfidence.from_pretrained(base, **load_kwargs)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(scale * torch.randn(parameter.shape, generator=generator))
    return model
