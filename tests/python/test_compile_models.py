"""torch.compile(model, backend=BACKEND) against eager PyTorch on real models: training (outputs,
every gradient, the parameters after each optimizer step) and inference (eval, no_grad).

BACKEND is the one switch: "aot_eager" (TorchDynamo + AOTAutograd, eager kernels) until the "ort"
backend is ready, then "ort". Nothing else in this file changes when it flips.
"""

from __future__ import annotations

import functools

import pytest
import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from torch_ort_backend.testing import models as cm
from compile_harness import check_inference_matches_eager, check_training_matches_eager

BACKEND = "ort"
OPTIONS: dict | None = None
STEPS = 3
# Every model here is captured whole by TorchDynamo (no graph break): the backend sees all of it.
FULLGRAPH = True


@pytest.fixture(autouse=True)
def no_silent_fallback(monkeypatch):
    """A backend that falls back to eager on an export or run failure would make these tests
    compare eager with eager: make it raise instead (see DESIGN.md, fallback policy)."""
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")


def train(spec_or_model, make_batch=None, **kwargs):
    if isinstance(spec_or_model, cm.ModelSpec):
        make_model, make_batch = spec_or_model.builders()
    else:
        make_model = spec_or_model
    check_training_matches_eager(make_model, make_batch, backend=BACKEND, steps=STEPS, options=OPTIONS,
                                 fullgraph=FULLGRAPH, **kwargs)


def infer(spec: cm.ModelSpec, **kwargs):
    make_model, make_batch = spec.builders()
    check_inference_matches_eager(make_model, make_batch, backend=BACKEND, options=OPTIONS, fullgraph=FULLGRAPH,
                                  **kwargs)


# --- training --------------------------------------------------------------------------------

def test_mlp_training():
    """Linear, ReLU, GELU and cross-entropy: loss, logits and all six weight/bias gradients over 3 SGD steps."""
    train(cm.MODELS["mlp"])


def test_mlp_training_adamw():
    """The same MLP under AdamW: the optimizer's state follows the compiled gradients for 3 steps."""
    train(cm.MODELS["mlp"], optimizer="adamw")


def test_cnn_training():
    """MNIST CNN: conv2d, max_pool2d, flatten, log_softmax and nll_loss, including the conv weight gradients."""
    train(cm.MODELS["cnn"])


def test_transformer_lm_training():
    """The tutorial transformer LM: embedding, positional-encoding buffer, causal additive mask,
    nn.TransformerEncoder (multi-head attention, layer norm, feed-forward) and the linear decoder."""
    train(cm.MODELS["transformer_lm"])


def test_transformer_lm_training_dynamic_sequence_length():
    """dynamic=True with a different sequence length every step (12, 16, 20, 24): the graph is
    compiled with a symbolic sequence dimension and must stay correct at each length."""
    make_model, _ = cm.MODELS["transformer_lm"].builders()
    train(make_model, lambda step: cm.transformer_lm_batch(step, seq=12 + 4 * step), dynamic=True)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_gpt2_training(attn):
    """GPT-2 LM head with a right-padded attention mask and -100 labels on padding, tied
    embedding / lm_head weights, with the eager or the SDPA attention implementation."""
    train(functools.partial(cm.make_gpt2, attn), cm.causal_lm_batch)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_bert_mlm_training(attn):
    """BERT masked LM: token types, padding mask, labels on ~30% of tokens, the MLM head's
    transform and its decoder tied to the word embeddings."""
    train(functools.partial(cm.make_bert_mlm, attn), cm.bert_mlm_batch)


def test_bert_classifier_training():
    """BERT sequence classification: the pooler (tanh on [CLS]) and the classifier's cross-entropy."""
    train(cm.MODELS["bert_classifier"])


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_llama_training(attn):
    """LLaMA causal LM: RMSNorm, rotary position embeddings, grouped-query attention (4 query
    heads sharing 2 key/value heads), SwiGLU MLP, padded attention mask."""
    train(functools.partial(cm.make_llama, attn), cm.causal_lm_batch)


# --- inference -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer_lm", "gpt2_sdpa", "bert_mlm", "llama"])
def test_inference(name):
    """eval() + no_grad(): every output tensor of two calls on different batches matches eager."""
    infer(cm.MODELS[name])


# --- the harness itself: it must catch what it is there to catch -------------------------------

def _scaled(gm, factor):
    def run(*args):
        outs = gm(*args)
        return type(outs)(o * factor if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in outs)
    return run


def test_harness_catches_a_wrong_forward():
    """A backend whose forward outputs are 0.1% off fails the check at the forward of step 0."""
    with pytest.raises(AssertionError, match=r"step 0 forward: output\.loss"):
        check_training_matches_eager(*cm.MODELS["mlp"].builders(), backend=lambda gm, _: _scaled(gm, 1.001))


def test_harness_catches_a_wrong_gradient_and_names_the_parameter():
    """A backend with an exact forward and a backward 0.1% off fails on a gradient and names it."""
    bad_backward = aot_autograd(fw_compiler=lambda gm, _: gm,
                                bw_compiler=lambda gm, _: make_boxed_func(_scaled(gm, 1.001)))
    with pytest.raises(AssertionError, match=r"step 0: gradient of parameter model\.\d\.(weight|bias)"):
        check_training_matches_eager(*cm.MODELS["mlp"].builders(), backend=bad_backward)


def test_harness_fails_when_nothing_was_compiled():
    """A model that TorchDynamo cannot capture (every call breaks the graph) would run in eager;
    the harness refuses to call that a match."""

    class Opaque(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        @torch.compiler.disable
        def forward(self, x):
            return {"loss": self.linear(x).sum()}

    with pytest.raises(AssertionError, match="compiled no graph"):
        check_training_matches_eager(Opaque, lambda step: {"x": torch.ones(2, 4)}, backend="aot_eager")
