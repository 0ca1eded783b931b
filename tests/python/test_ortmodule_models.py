"""ORTModule trains the models of torch_ort_backend/testing/models.py like eager PyTorch: at every one of 3 SGD steps
the outputs, every parameter's gradient (rtol 1e-4, atol 1e-5) and the updated parameters match;
the same models in eval mode give eager's outputs through an inference graph. FALLBACK_DISABLE
makes any export or engine failure an error, so a silent fallback cannot pass."""

from __future__ import annotations

import copy

import pytest
import torch

from torch_ort_backend.testing import models as cm
from compile_harness import _call, _compare_outputs
from ortmodule_helpers import ATOL, RTOL, assert_engine_ran, fresh_state, train_beside_eager
from torch_ort_backend import ORTModule

TRAINED = ["mlp", "cnn", "transformer_lm", "gpt2", "bert_mlm", "bert_classifier", "llama"]
HUGGINGFACE = {"gpt2", "bert_mlm", "bert_classifier", "llama"}


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    yield from fresh_state(monkeypatch)


def _builders(name: str):
    if name in HUGGINGFACE:
        pytest.importorskip("transformers")
    return cm.MODELS[name].builders()


@pytest.mark.parametrize("name", TRAINED)
def test_training_gradients_match_eager(name):
    """3 SGD steps of ORTModule(model) beside the eager model: outputs, all gradients and the
    updated parameters agree; the engine ran both graphs of every step."""
    make_model, make_batch = _builders(name)
    train_beside_eager(make_model, make_batch, steps=3)
    assert_engine_ran(6)


@pytest.mark.parametrize("name", ["mlp", "transformer_lm", "gpt2"])
def test_eval_outputs_match_eager(name):
    """model.eval() then two calls: the inference graph gives eager's outputs."""
    make_model, make_batch = _builders(name)
    eager = make_model().eval()
    wrapped = ORTModule(copy.deepcopy(eager)).eval()
    with torch.no_grad():
        for call in range(2):
            batch = make_batch(call)
            _compare_outputs(_call(eager, batch), _call(wrapped, batch), f"eval call {call}", RTOL, ATOL)
    assert_engine_ran(2)


def test_dynamic_sequence_length_trains_without_recompiling_every_step():
    """The transformer LM with a new sequence length every step still matches eager; after the
    second length the graph is reused (dynamo's automatic dynamic shapes) instead of re-exported."""
    from torch_ort_backend import compile_stats

    make_model, _ = _builders("transformer_lm")
    train_beside_eager(make_model, lambda step: cm.transformer_lm_batch(step, seq=8 + 4 * step), steps=4)
    assert_engine_ran(8)  # forward and backward of each of the 4 steps ran on the engine
    # One forward/backward pair for the first length, one (dynamic) for the second, none after.
    assert 2 <= compile_stats().exports <= 4, compile_stats()
