"""HuggingFace architectures that nothing else here builds, trained one step under "ort" as a new user
would (small configs, default attention, fallback disabled): each once failed to compile (Gemma2's
sliding-window slice past the sequence's start, MobileNetV2's TF-style padding whose gradient is a
crop, EfficientNet's pooling window larger than its 1x1 map and the compute optimizer's undo of a
rewrite). The loss and every gradient are checked against a float64 run of the same model: "ort"'s
float32 error may not exceed eager float32's by more than a small factor."""

from __future__ import annotations

import copy

import pytest
import torch

from ortmodule_helpers import assert_engine_ran, fresh_state

transformers = pytest.importorskip("transformers")

HIDDEN, LAYERS, HEADS, VOCAB, BATCH, SEQ, IMAGE, LABELS = 64, 2, 4, 256, 2, 32, 32, 10


def _gemma2():
    config = transformers.Gemma2Config(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=HEADS // 2, head_dim=16, max_position_embeddings=4 * SEQ,
        pad_token_id=0, bos_token_id=1, eos_token_id=2)
    ids = torch.randint(3, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(7))
    return transformers.Gemma2ForCausalLM(config), {"input_ids": ids, "labels": ids.clone()}


def _images():
    gen = torch.Generator().manual_seed(7)
    return {"pixel_values": torch.randn(BATCH, 3, IMAGE, IMAGE, generator=gen),
            "labels": torch.randint(0, LABELS, (BATCH,), generator=gen)}


def _mobilenet_v2():
    config = transformers.MobileNetV2Config(num_labels=LABELS, image_size=IMAGE, depth_multiplier=0.35,
                                            classifier_dropout_prob=0.0)
    return transformers.MobileNetV2ForImageClassification(config), _images()


def _efficientnet():
    config = transformers.EfficientNetConfig(num_labels=LABELS, image_size=IMAGE, width_coefficient=1.0,
                                             depth_coefficient=0.2, hidden_dim=1280, dropout_rate=0.0,
                                             drop_connect_rate=0.0)
    return transformers.EfficientNetForImageClassification(config), _images()


ARCHITECTURES = {"gemma2": _gemma2, "mobilenet_v2": _mobilenet_v2, "efficientnet": _efficientnet}


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    yield from fresh_state(monkeypatch)


def _step(model, batch, call):
    loss = call(**batch).loss
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_one_training_step_matches_float64(name):
    torch.manual_seed(0)
    model, batch = ARCHITECTURES[name]()
    model.train()
    exact = copy.deepcopy(model).double()
    eager = copy.deepcopy(model)
    batch64 = {k: v.double() if v.is_floating_point() else v for k, v in batch.items()}
    loss64, grads64 = _step(exact, batch64, exact)
    loss32, grads32 = _step(eager, batch, eager)
    loss, grads = _step(model, batch, torch.compile(model, backend="ort"))
    assert_engine_ran(2)

    assert abs(loss.double() - loss64) <= 4 * abs(loss32.double() - loss64) + 1e-5 * abs(loss64), (
        loss.item(), loss32.item(), loss64.item())
    assert grads.keys() == grads64.keys()
    # Per parameter, the error relative to that gradient's size (floored at 1e-3 of the largest, so
    # that a gradient that is zero in exact arithmetic, a bias before a normalisation, compares as noise).
    scale = max(g.norm().item() for g in grads64.values())

    def error(found, name):
        return (found[name].double() - grads64[name]).norm().item() / max(grads64[name].norm().item(), 1e-3 * scale)

    for param in grads64:
        ours, eagers = error(grads, param), error(grads32, param)
        assert ours <= 4 * eagers + 1e-5, f"{name}: gradient of {param}: error {ours:.2e} against eager's {eagers:.2e}"
