"""The bfloat16 twins of the float32 equivalence tests: the same properties, with tolerances derived from bf16.

The policy runs bf16 wherever the CPU has it natively (and on GPUs), so these properties must hold there too. Every
test here pins the policy to bf16 (emulated, slower, on CPUs without native bf16: tiny models only). Why the
tolerances are what they are:

- bf16 keeps 8 significant bits: one rounding moves a value by up to 2^-8 (0.4%) of itself.
- Another batch layout (padding side, rows of other lengths, a shared prefix run once) changes the order of the
  reductions in every matmul and attention, so each bf16 rounding on the way to the pooled hidden state h may land on
  the other side: each feature moves by about 2^-8 of itself, the head's logit w.h by about 2^-8 sum_i |w_i h_i|, and
  the confidence by at most a quarter of that (sigmoid's slope is at most 1/4). `confidence_atol` allows 4 such
  roundings: the worst of 90 random tiny models (both archs, both paddings, with and without a shared prefix) used
  0.84 of one.
- Properties that do not depend on arithmetic stay exact in any dtype: which token is pooled, which rows leave
  the batch, what the gate decides for the confidence it reports.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from elical_hf import AutoModelForConfidence, ConfidenceConfig
from elical_hf.data.encoding import encode_prompts, pad_batch
from elical_hf.gate import base_model_only
from elical_hf.models.modeling import last_token_indices
from elical_hf.signals.generation import build_prompt_ids
from elical_hf.signals import SamplingSettings
from tests.test_convert import QUESTIONS as RELEASE_QUESTIONS, build_release
from tests.test_gate import MAX_NEW_TOKENS, between, peaky_base, perturbed  # noqa: F401 - peaky_base: a fixture
from tests.test_modeling import QUESTIONS, long_prefix_model, shared_and_plain_gradients, trained_like


pytestmark = pytest.mark.bfloat16

BF16_EPS = 2.0**-8
"""Relative rounding of one bf16 operation (8 significant bits)."""
ROUNDINGS = 4
"""bf16 roundings of the head's logit allowed between two batch layouts (the worst case measured used 0.84)."""
GREEDY_MARGIN = 8 * BF16_EPS
"""A greedy token is the argmax up to this share of the logits' scale: two paths to the same logits may round a near
tie either way in bf16 (8 roundings' worth of slack), never more."""


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)  # fresh LoRA A matrices are drawn from the global generator


def confidence_atol(model, questions: list[str]) -> torch.Tensor:
    """Per question: how far bf16 rounding may move its confidence (`ROUNDINGS` x 2^-8 x sum_i |w_i h_i| / 4)."""
    features = model.prompt_features(questions).float()
    weight = model.get_base_model().confidence_head.weight.float()
    return ROUNDINGS * BF16_EPS * (features.abs() @ weight.abs().T).squeeze(-1) / 4


def assert_within(got, expected, atol: torch.Tensor) -> None:
    got, expected = torch.as_tensor(got, dtype=torch.float32), torch.as_tensor(expected, dtype=torch.float32)
    assert bool(((got - expected).abs() <= atol).all()), f"{got.tolist()} vs {expected.tolist()} (atol {atol.tolist()})"


def test_bf16_is_what_the_models_run_in(tiny_llama):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    assert model.get_input_embeddings().weight.dtype == torch.bfloat16
    assert model.get_base_model().confidence_head.weight.dtype == torch.float32  # the head stays float32


def test_padding_side_moves_the_confidence_by_bf16_rounding_only_and_pools_the_same_token(tiny_base):
    model = trained_like(AutoModelForConfidence.from_pretrained(tiny_base))
    tokenizer = model.tokenizer
    alone = torch.tensor([model.confidence([q])[0] for q in QUESTIONS])
    encoded = encode_prompts(QUESTIONS, tokenizer, model.confidence_config)
    for side in ("right", "left"):
        tokenizer.padding_side = side
        assert_within(model.confidence(QUESTIONS), alone, confidence_atol(model, QUESTIONS))
        batch = pad_batch(encoded, tokenizer)
        pooled = batch["input_ids"].gather(1, last_token_indices(batch["attention_mask"])[:, None]).squeeze(1)
        assert pooled.tolist() == [ids[-1] for ids in encoded]  # exact: the last real token, on either side
    assert len({round(float(c), 3) for c in alone}) == len(QUESTIONS), "questions should not all score the same"


def test_shared_prefix_moves_confidences_and_features_by_bf16_rounding_only(tiny_base):
    model = long_prefix_model(tiny_base)
    inner = model.get_base_model()
    shared = torch.tensor(model.confidence(QUESTIONS, batch_size=len(QUESTIONS)))
    shared_features = model.prompt_features(QUESTIONS, batch_size=len(QUESTIONS))
    inner.share_prompt_prefix = False
    plain = torch.tensor(model.confidence(QUESTIONS, batch_size=len(QUESTIONS)))
    plain_features = model.prompt_features(QUESTIONS, batch_size=len(QUESTIONS))
    assert_within(shared, plain, confidence_atol(model, QUESTIONS))
    # Features: each element within a few roundings of its own scale (rtol), and each row nearest its own twin.
    scale = plain_features.abs().amax(-1, keepdim=True)
    assert bool(((shared_features - plain_features).abs() <= 16 * BF16_EPS * scale).all())
    distances = torch.cdist(shared_features.float(), plain_features.float())
    assert distances.argmin(-1).tolist() == list(range(len(QUESTIONS)))


def test_shared_prefix_gradients_agree_in_direction(tiny_llama):
    """Gradients through the shared-prefix pass and the plain pass: bf16 rounds each intermediate, so elements differ
    by rounding, but each parameter's gradient points the same way (cosine > 0.99) with the same norm (within 5%)."""
    grads = [{n: g.float().flatten() for n, g in run.items()} for run in shared_and_plain_gradients(tiny_llama)]
    for name, shared in grads[0].items():
        plain = grads[1][name]
        if plain.norm() == 0:
            continue
        assert torch.nn.functional.cosine_similarity(shared, plain, dim=0) > 0.99, name
        assert abs(float(shared.norm() / plain.norm()) - 1) < 0.05, name


def test_converted_model_matches_the_float32_reference_to_bf16_rounding(tiny_llama, tmp_path):
    """The authors' release (computed in float32 by their code) converted and scored in bf16."""
    from elical_hf import convert_official

    (tmp_path / "release").mkdir()
    reference = build_release(tiny_llama, tmp_path / "release")
    model = AutoModelForConfidence.from_pretrained(convert_official(tmp_path / "release", tmp_path / "out"))
    assert model.get_input_embeddings().weight.dtype == torch.bfloat16
    # bf16 weights as well as bf16 arithmetic: twice the roundings of a batch-layout change
    assert_within(model.confidence(RELEASE_QUESTIONS), reference, 2 * confidence_atol(model, RELEASE_QUESTIONS))


def greedy_within_bf16_rounding(base: str, question: str, answer_tokens: list[str]) -> None:
    """Each token of a greedy answer is the argmax of the bf16 base model's logits at its step, up to a near tie
    that bf16 may round either way (`GREEDY_MARGIN` of the logits' scale); teacher-forced in one plain pass."""
    lm = AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(base)
    prompt = build_prompt_ids(tokenizer, [question], SamplingSettings(num_samples=1))[0]
    answer = tokenizer.convert_tokens_to_ids(answer_tokens)
    with torch.no_grad():
        logits = lm(torch.tensor([prompt + answer])).logits[0, len(prompt) - 1 : -1].float()
    for step, (row, token) in enumerate(zip(logits, answer)):
        margin = GREEDY_MARGIN * float(row.abs().max())
        assert float(row[token]) >= float(row.max()) - margin, f"{question!r}: token {step} is not a greedy choice"


def test_gate_answers_are_the_bf16_base_models_greedy_answers(peaky_base):
    model = perturbed(peaky_base, use_lora=True)
    before = model.confidence(QUESTIONS)
    with base_model_only(model):
        base_confidences = model.confidence(QUESTIONS)
    atol = confidence_atol(model, QUESTIONS)
    assert bool(((torch.tensor(before) - torch.tensor(base_confidences)).abs() > atol).any())  # the LoRA matters
    threshold = between(before, 0)
    results = model.answer(QUESTIONS, threshold=threshold, max_new_tokens=MAX_NEW_TOKENS)
    assert_within([r["confidence"] for r in results], before, atol)  # scored with the LoRA
    for question, result in zip(QUESTIONS, results):
        expected = "answer" if result["confidence"] >= threshold else "abstain"
        assert result["decision"] == expected  # exact: the decision follows the confidence it reports
        if expected == "answer":
            greedy_within_bf16_rounding(peaky_base, question, result["answer_tokens"])  # answered without the LoRA
    assert [r["decision"] for r in results].count("answer") == len(QUESTIONS) - 1


def test_zero_overhead_gate_in_bf16(peaky_base):
    model = perturbed(peaky_base, use_lora=False)
    expected = model.confidence(QUESTIONS)
    results = model.answer(QUESTIONS, threshold=0.0, max_new_tokens=MAX_NEW_TOKENS)
    assert_within([r["confidence"] for r in results], expected, confidence_atol(model, QUESTIONS))
    for question, result in zip(QUESTIONS, results):
        assert result["decision"] == "answer" and result["answer_tokens"]
        greedy_within_bf16_rounding(peaky_base, question, result["answer_tokens"])


def test_activation_checkpointing_trains_to_the_same_weights_up_to_bf16_rounding(tiny_llama, tmp_path):
    """Checkpointing recomputes the backbone's activations (and runs the shared prefix per row) in bf16: the same
    losses step by step (to 1%), and the trained LoRA and head where the run without it ends, up to rounding. Adam
    moves every weight by about the learning rate whatever its gradient's size, so an element whose tiny gradient
    bf16 rounds to the other sign moves the other way: compared per tensor as a whole (relative norm within 10%), not
    element by element."""
    from transformers import set_seed

    from elical_hf import ConfidenceTrainer
    from tests.test_trainer import make_args, make_rows

    system = " ".join(["you are a helpful assistant who answers the question of the user"] * 4)
    finals, losses = [], []
    for checkpointing in (False, True):
        set_seed(0)
        model = AutoModelForConfidence.from_pretrained(tiny_llama, confidence_config=ConfidenceConfig(system_prompt=system))
        args = make_args(tmp_path, f"ckpt-{checkpointing}", num_train_epochs=1, activation_checkpointing=checkpointing)
        trainer = ConfidenceTrainer(model, args=args, train_dataset=make_rows(12))
        trainer.train()
        losses.append([entry["loss"] for entry in trainer.state.log_history if "loss" in entry])
        finals.append({n: p.detach().float().clone() for n, p in model.named_parameters() if p.requires_grad})
    assert len(losses[0]) >= 2 and losses[0] == pytest.approx(losses[1], rel=0.01)
    assert finals[0].keys() == finals[1].keys()
    for name, value in finals[0].items():
        assert float((finals[1][name] - value).norm()) <= 0.1 * float(value.norm()) + 1e-6, name
