"""Model weights stored in another dtype than the one loaded are read one tensor at a time (`loading.load_model`):
transformers maps a safetensors file whole and keeps it mapped until every tensor is converted, which held the
embedded default's float32 copy (513 MiB) beside its bfloat16 weights while the demo loaded a model."""

from __future__ import annotations

import pytest
import torch
import transformers.modeling_utils
from transformers import AutoConfig, AutoModelForCausalLM

from elical_hf import AutoModelForConfidence
from elical_hf.utils.loading import load_model, load_pretrained, stored_in_other_dtype


@pytest.fixture
def mapped_whole(monkeypatch) -> list[str]:
    """The files transformers' own loader opens (it memory-maps each one whole until the load ends)."""
    opened: list[str] = []
    real = transformers.modeling_utils.safe_open

    def spy(file, *args, **kwargs):
        opened.append(str(file))
        return real(file, *args, **kwargs)

    monkeypatch.setattr(transformers.modeling_utils, "safe_open", spy)
    return opened


def transformers_load(folder: str, dtype: torch.dtype):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)


@pytest.mark.parametrize("sharded", [False, True])
def test_a_float32_checkpoint_loaded_in_bf16_is_read_tensor_by_tensor_and_is_the_same_model(tmp_path, sharded):
    from tests.conftest import save_tiny_base
    from tests.tiny import make_tiny_causal_lm, make_tiny_tokenizer

    folder = str(tmp_path / "tiny")
    if sharded:
        make_tiny_causal_lm(make_tiny_tokenizer()).save_pretrained(folder, max_shard_size="100KB")
    else:
        save_tiny_base(folder)
    config = load_pretrained(AutoConfig.from_pretrained, folder)
    files = stored_in_other_dtype(folder, dtype=torch.bfloat16)
    assert len(files) > 1 if sharded else len(files) == 1

    ours, theirs = load_model(AutoModelForCausalLM, folder, config=config, dtype=torch.bfloat16), transformers_load(
        folder, torch.bfloat16)
    assert type(ours) is type(theirs) and ours.dtype == torch.bfloat16
    mine, reference = ours.state_dict(), theirs.state_dict()
    assert mine.keys() == reference.keys()
    assert all(torch.equal(mine[key], reference[key]) for key in mine)
    assert ours.config.to_dict() == theirs.config.to_dict() and ours.name_or_path == theirs.name_or_path == folder
    assert ours.generation_config.to_dict() == theirs.generation_config.to_dict()
    assert (ours.lm_head.weight is ours.model.embed_tokens.weight) == (
        theirs.lm_head.weight is theirs.model.embed_tokens.weight)


def test_transformers_maps_the_file_whole_only_when_no_tensor_is_converted(tiny_llama, mapped_whole):
    """A confidence model of a float32 base in bf16 (the embedded default under the bf16 policy) never has the
    float32 file mapped whole; in float32 it is mapped as before (zero copy: the weights are the mapped pages)."""
    model = AutoModelForConfidence.from_pretrained(tiny_llama, dtype=torch.bfloat16)
    assert model.get_base_model().model.embed_tokens.weight.dtype == torch.bfloat16
    assert mapped_whole == []
    AutoModelForConfidence.from_pretrained(tiny_llama, dtype=torch.float32)
    assert [name.rsplit("/", 1)[-1] for name in mapped_whole] == ["model.safetensors"]


def test_the_confidences_do_not_depend_on_how_the_weights_were_read(tiny_llama, monkeypatch):
    from elical_hf.utils import loading

    questions = ["who wrote hamlet", "capital of france"]
    torch.manual_seed(0)
    read_by_tensor = AutoModelForConfidence.from_pretrained(tiny_llama, dtype=torch.bfloat16).confidence(questions)
    monkeypatch.setattr(loading, "stored_in_other_dtype", lambda *args, **kwargs: [])  # transformers' own path
    torch.manual_seed(0)
    mapped = AutoModelForConfidence.from_pretrained(tiny_llama, dtype=torch.bfloat16).confidence(questions)
    assert read_by_tensor == mapped


def test_what_is_left_to_transformers(tiny_llama):
    assert stored_in_other_dtype(tiny_llama, dtype=torch.float32) == []  # stored so: mapped, zero copy
    assert stored_in_other_dtype(tiny_llama, dtype="auto") == []
    assert stored_in_other_dtype(tiny_llama, dtype=torch.bfloat16, device_map={"": "cpu"}) == []
    assert stored_in_other_dtype("HuggingFaceTB/SmolLM2-135M-Instruct", dtype=torch.bfloat16) == []  # a Hub id


def test_remote_code_is_refused_on_the_tensor_by_tensor_path_too(tiny_llama):
    config = load_pretrained(AutoConfig.from_pretrained, tiny_llama)
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        load_model(AutoModelForCausalLM, tiny_llama, config=config, dtype=torch.bfloat16, trust_remote_code=True)
