"""The one shared-prefix KV helper (`elical_hf.models.kv_prefix`): the prefix run once gives what a full forward pass over
each whole sequence gives, on either padding side; and the one cache-argument rule."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from elical_hf.models.kv_prefix import cache_kwarg, forward_parameters, position_ids_from_attention_mask, prefill_shared_prefix

from tests.tiny import make_tiny_causal_lm, make_tiny_tokenizer


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def backbone(request):
    return make_tiny_causal_lm(make_tiny_tokenizer(), arch=request.param, initializer_range=0.3).model.eval()


SEQUENCES = [
    list(range(3, 40)) + [50, 51, 52],
    list(range(3, 40)) + [60],
    list(range(3, 40)) + [70, 71, 72, 73, 74],
]
SHARED = 37


def recording_run(backbone, calls):
    """A `run` for the helper that calls `backbone` and records the shapes and positions it was given."""

    def run(input_ids, attention_mask, position_ids, cache):
        calls.append((tuple(input_ids.shape), tuple(attention_mask.shape), position_ids.tolist()))
        return backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                        use_cache=True, **{cache_kwarg(backbone): cache}).last_hidden_state

    return run


@pytest.mark.float32
@pytest.mark.parametrize("side", ["left", "right"])
def test_prefix_once_equals_each_sequence_run_whole(backbone, side):
    calls = []
    with torch.no_grad():
        prefill = prefill_shared_prefix(recording_run(backbone, calls), SEQUENCES, SHARED, backbone.config, "cpu",
                                        padding_side=side, pad_id=2)
        whole = [backbone(input_ids=torch.tensor([ids])).last_hidden_state[0] for ids in SEQUENCES]
    assert [shape for shape, _, _ in calls] == [(1, SHARED), (3, 5)]  # the prefix once, then the rows' own tokens
    assert calls[0][2] == [list(range(SHARED))] and calls[1][1] == (3, SHARED + 5)  # the mask covers the cache too
    assert prefill.shared == SHARED and prefill.cache.get_seq_length() == SHARED + 5
    assert prefill.attention_mask.sum(-1).tolist() == [len(ids) for ids in SEQUENCES]
    for row, ids in enumerate(SEQUENCES):
        own = len(ids) - SHARED
        columns = slice(5 - own, 5) if side == "left" else slice(0, own)
        real = prefill.input_ids[row, SHARED:][columns]
        assert prefill.input_ids[row, :SHARED].tolist() == ids[:SHARED] and real.tolist() == ids[SHARED:]
        assert set(prefill.input_ids[row, SHARED:].tolist()) - set(ids) <= {2}  # padded with pad_id
        assert calls[1][2][row][columns] == list(range(SHARED, len(ids)))  # positions count real tokens only
        torch.testing.assert_close(prefill.output[row, columns], whole[row][SHARED:], atol=1e-5, rtol=0)


@pytest.mark.float32
def test_no_shared_prefix_runs_each_row_whole_once(backbone):
    calls = []
    with torch.no_grad():
        prefill = prefill_shared_prefix(recording_run(backbone, calls), SEQUENCES, 0, backbone.config, "cpu")
        alone = backbone(input_ids=torch.tensor([SEQUENCES[1]])).last_hidden_state[0]
    assert [shape for shape, _, _ in calls] == [(3, 42)] and prefill.shared == 0
    assert prefill.input_ids.shape == (3, 42) and prefill.input_ids[1, -38:].tolist() == SEQUENCES[1]
    torch.testing.assert_close(prefill.output[1, -38:], alone, atol=1e-5, rtol=0)


def test_padding_side_is_checked():
    with pytest.raises(ValueError, match="padding_side"):
        prefill_shared_prefix(lambda *args: None, SEQUENCES, 0, None, "cpu", padding_side="middle")


def test_positions_count_real_tokens_only():
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 0]])
    assert position_ids_from_attention_mask(mask).tolist() == [[0, 0, 0, 1], [0, 1, 2, 2]]


class TakesCache(nn.Module):
    def forward(self, input_ids, cache=None, logits_to_keep=0):
        return input_ids


class TakesPastKeyValues(nn.Module):  # the name of transformers releases before `cache`
    def forward(self, input_ids, past_key_values=None):
        return input_ids


class Wrapper(nn.Module):
    """Like a PEFT wrapper: its own forward passes everything on; `get_base_model()` is the model."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def get_base_model(self):
        return self.inner

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs)


def test_cache_kwarg_reads_the_forward_signature(backbone):
    assert cache_kwarg(backbone) in forward_parameters(backbone)  # the name this transformers release uses
    assert cache_kwarg(TakesPastKeyValues()) == "past_key_values"
    assert cache_kwarg(TakesCache()) == "cache" and cache_kwarg(Wrapper(TakesCache())) == "cache"
    assert "logits_to_keep" in forward_parameters(Wrapper(TakesCache()))
    assert "logits_to_keep" not in forward_parameters(backbone)


def _filled_cache(rows: int = 3, length: int = 4):
    from transformers import DynamicCache

    cache = DynamicCache()
    generator = torch.Generator().manual_seed(0)
    for layer in range(2):
        cache.update(torch.randn(rows, 2, length, 5, generator=generator),
                     torch.randn(rows, 2, length, 5, generator=generator), layer)
    return cache


def test_reserved_room_holds_what_concatenation_holds():
    from elical_hf.models.kv_prefix import ReservedLayer, reserve_positions

    plain, reserved = _filled_cache(), _filled_cache()
    reserve_positions(reserved, extra=2)
    assert all(isinstance(layer, ReservedLayer) for layer in reserved.layers)
    generator = torch.Generator().manual_seed(1)

    def step(rows: int, new: int = 1) -> None:
        keys, values = (torch.randn(rows, 2, new, 5, generator=generator) for _ in range(2))
        for layer in range(2):
            expected, got = plain.update(keys, values, layer), reserved.update(keys, values, layer)
            assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])

    step(3)
    for cache in (plain, reserved):  # rows leave the batch, and the batch is repeated, as the decoder does
        cache.batch_select_indices(torch.tensor([0, 2]))
        cache.batch_repeat_interleave(2)
    step(4)
    step(4)  # past the room: the buffer grows
    step(4, new=3)
    for layer_plain, layer_reserved in zip(plain.layers, reserved.layers):
        assert torch.equal(layer_plain.keys, layer_reserved.keys)
        assert torch.equal(layer_plain.values, layer_reserved.values)
    assert reserved.get_seq_length() == plain.get_seq_length() == 10
    reserved.crop(-2), plain.crop(-2)
    assert torch.equal(reserved.layers[0].keys, plain.layers[0].keys) and reserved.get_seq_length() == 8
    step(4)


def test_only_plain_dynamic_layers_get_room():
    from transformers.cache_utils import DynamicSlidingWindowLayer

    from elical_hf.models.kv_prefix import ReservedLayer, reserve_positions

    cache = _filled_cache()
    window = DynamicSlidingWindowLayer(sliding_window=8)
    window.update(torch.zeros(3, 2, 4, 5), torch.zeros(3, 2, 4, 5))
    cache.layers.append(window)
    reserve_positions(cache, extra=3)
    assert [type(layer) for layer in cache.layers] == [ReservedLayer, ReservedLayer, DynamicSlidingWindowLayer]


def test_room_and_repeat_in_one_copy_equal_repeat_then_room():
    """`reserve_positions(cache, extra, repeats)` is `batch_repeat_interleave(repeats)` then the room, for every layer
    kind: plain layers in one copy, the others repeated only."""
    from transformers.cache_utils import DynamicSlidingWindowLayer

    from elical_hf.models.kv_prefix import ReservedLayer, reserve_positions

    def with_window(cache):
        window = DynamicSlidingWindowLayer(sliding_window=8)
        window.update(torch.arange(60.0).view(3, 2, 2, 5), -torch.arange(60.0).view(3, 2, 2, 5))
        cache.layers.append(window)
        return cache

    expected, combined = with_window(_filled_cache()), with_window(_filled_cache())
    expected.batch_repeat_interleave(4)
    reserve_positions(expected, extra=3)
    reserve_positions(combined, extra=3, repeats=4)
    assert [type(layer) for layer in combined.layers] == [ReservedLayer, ReservedLayer, DynamicSlidingWindowLayer]
    for want, got in zip(expected.layers, combined.layers):
        assert got.keys.shape[0] == 12 and torch.equal(got.keys, want.keys) and torch.equal(got.values, want.values)
    assert combined.layers[0]._key_buffer.shape[-2] == combined.layers[0].keys.shape[-2] + 3
    keys, values = torch.ones(12, 2, 1, 5), torch.zeros(12, 2, 1, 5)
    for layer in range(3):
        want, got = expected.update(keys, values, layer), combined.update(keys, values, layer)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.float32
@pytest.mark.parametrize("side", ["left", "right"])
def test_separate_prefix_attention_equals_each_sequence_run_whole(backbone, side):
    from elical_hf.models.prefix_attention import ATTENTION_NAME

    calls = []
    implementation = backbone.config._attn_implementation
    with torch.no_grad():
        prefill = prefill_shared_prefix(recording_run(backbone, calls), SEQUENCES, SHARED, backbone.config, "cpu",
                                        padding_side=side, prefix_model=backbone)
        whole = [backbone(input_ids=torch.tensor([ids])).last_hidden_state[0] for ids in SEQUENCES]
    assert backbone.config._attn_implementation == implementation != ATTENTION_NAME  # switched back after the rows
    assert [shape for shape, _, _ in calls] == [(1, SHARED), (3, 5)] and calls[1][1] == (3, 5)  # own columns only
    assert prefill.prefix.get_seq_length() == SHARED and prefill.prefix.layers[0].keys.shape[0] == 1  # not repeated
    assert prefill.cache.get_seq_length() == 5  # the rows' cache holds their own tokens only
    assert prefill.attention_mask.sum(-1).tolist() == [len(ids) for ids in SEQUENCES]
    for row, ids in enumerate(SEQUENCES):
        own = len(ids) - SHARED
        columns = slice(5 - own, 5) if side == "left" else slice(0, own)
        torch.testing.assert_close(prefill.output[row, columns], whole[row][SHARED:], atol=1e-5, rtol=0)


@pytest.mark.float32
def test_a_prefix_from_an_earlier_batch_is_not_run_again(backbone):
    calls = []
    with torch.no_grad():
        first = prefill_shared_prefix(recording_run(backbone, calls), SEQUENCES, SHARED, backbone.config, "cpu",
                                      prefix_model=backbone)
        calls.clear()
        again = prefill_shared_prefix(recording_run(backbone, calls), SEQUENCES[1:], SHARED, backbone.config, "cpu",
                                      prefix_model=backbone, prefix=first.prefix)
        with pytest.raises(ValueError, match="positions"):
            prefill_shared_prefix(recording_run(backbone, []), SEQUENCES, SHARED - 1, backbone.config, "cpu",
                                  prefix_model=backbone, prefix=first.prefix)
    assert [shape for shape, _, _ in calls] == [(2, 5)] and again.prefix is first.prefix
    assert first.prefix.get_seq_length() == SHARED  # the rows never write into the shared prefix
    torch.testing.assert_close(again.output[1], first.output[2], atol=1e-5, rtol=0)


def test_which_models_attend_to_a_separate_prefix():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from elical_hf.models.prefix_attention import shared_prefix_attention, supports_prefix_attention

    tokenizer = make_tiny_tokenizer()
    assert supports_prefix_attention(make_tiny_causal_lm(tokenizer, arch="llama"))
    assert not supports_prefix_attention(nn.Linear(2, 2))  # no attention interface
    windowed = Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, use_sliding_window=True, sliding_window=4,
                           max_window_layers=0)
    assert not supports_prefix_attention(Qwen2ForCausalLM(windowed))  # its layers see a window, not the prefix
    with pytest.raises(RuntimeError, match="prefix_attention"):
        shared_prefix_attention(nn.Module(), torch.zeros(1, 2, 1, 4), torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, 4),
                                None)
