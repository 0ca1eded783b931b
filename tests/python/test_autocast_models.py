"""Mixed-precision training through "ort": GPT-2, BERT and LLaMA from small configs, their forward
under torch.autocast("cpu", torch.bfloat16), compiled with backend="ort" and run in eager PyTorch,
each compared with the same model computed in float64.

Tolerance, from the dtype: bfloat16 keeps 8 significant bits (unit roundoff 2^-8 = 3.9e-3), so eager
autocast is itself about 1e-2 away from the exact loss and gradients, and two correct bfloat16
implementations that sum in another order (a GEMM's float32 accumulation, which ops a kernel
fuses) differ from each other by as much. Comparing "ort" with eager elementwise at float32
tolerances would fail for no fault; at bfloat16's worst case it would pass almost anything. So both
are measured against float64: for the loss and every parameter's gradient, the norm-wise relative
error of "ort" must be at most twice eager autocast's own error on the same quantity, plus one unit
roundoff of bfloat16 (for quantities eager happens to get almost exactly). A backend that computed
something in a lower precision than eager, or wrongly, fails; one as accurate as eager passes. A
gradient that is zero in exact arithmetic (BERT's key biases) has no relative error: both backends
return rounding noise there, whose ratio says nothing, so its norm must be within one unit roundoff
of its layer's weight gradient norm instead.

Each test also asserts that the engine ran the forward and the backward graphs (no fallback to
eager), that autocast sent no op to the ATen fallback that the float32 graphs do not send there too,
and that bfloat16 GEMMs and the casts, norms, softmax and activations around them reached the
engine's own kernels.
"""

from __future__ import annotations

import copy
import functools

import onnx
import pytest
import torch

from torch_ort_backend import compile_stats
from torch_ort_backend.compiled_graph import live_graphs
from torch_ort_backend.testing import models as cm
from torch_ort_backend.testing.models import extract_loss
from compile_harness import _reset_dynamo

UNIT_ROUNDOFF = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}
ONNX_TYPE = {torch.bfloat16: onnx.TensorProto.BFLOAT16, torch.float16: onnx.TensorProto.FLOAT16}


@pytest.fixture(autouse=True)
def no_silent_fallback(monkeypatch):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")


def _loss_and_grads(model: torch.nn.Module, batch: dict, autocast: torch.dtype | None,
                    call=None) -> dict[str, torch.Tensor]:
    """Loss and every parameter's gradient of one forward + backward (`call`: the compiled model),
    under autocast to that dtype unless None."""
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", autocast or torch.bfloat16, enabled=autocast is not None):
        loss = extract_loss((model if call is None else call)(**batch))
    loss.backward()
    out = {"loss": loss.detach().double()}
    for name, p in model.named_parameters():
        if p.grad is not None:
            out[name] = p.grad.detach().double()
    return out


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def _engine_nodes() -> list[tuple[str, set[int]]]:
    """(op type, element types of its inputs and outputs) of every node the engine was given."""
    nodes = []
    for graph in live_graphs():
        # The exporter declares few intermediate types; onnx infers those of the standard ops.
        model = onnx.shape_inference.infer_shapes(graph.exported.model)
        types = {vi.name: vi.type.tensor_type.elem_type
                 for vi in [*model.graph.input, *model.graph.value_info, *model.graph.output]}
        types.update({t.name: t.data_type for t in model.graph.initializer})
        for node in model.graph.node:
            nodes.append((node.op_type, {types[v] for v in [*node.input, *node.output] if v in types}))
    return nodes


def _float32_fallbacks(make_model, batch: dict) -> set[str]:
    """The ATen fallbacks of the same model compiled without autocast (ops with data-dependent
    shapes, such as the loss's selection of labelled tokens, that no dtype changes)."""
    _reset_dynamo()
    model = make_model()
    extract_loss(torch.compile(model, backend="ort")(**batch)).backward()
    return set(compile_stats().aten_fallback_ops)


def check_autocast_training(make_model, make_batch, native_ops: set[str], dtype: torch.dtype = torch.bfloat16) -> None:
    float32_fallbacks = _float32_fallbacks(make_model, make_batch(0))
    _reset_dynamo()
    torch.manual_seed(0)
    reference = make_model()
    eager, twin = copy.deepcopy(reference), copy.deepcopy(reference)
    reference.double()
    compiled = torch.compile(twin, backend="ort")
    for step in range(2):  # the second step runs the compiled graphs again, on a new batch
        batch = make_batch(step)
        exact = _loss_and_grads(reference, batch, autocast=None)
        ours = _loss_and_grads(twin, batch, autocast=dtype, call=compiled)
        theirs = _loss_and_grads(eager, batch, autocast=dtype)
        assert ours.keys() == exact.keys() == theirs.keys()
        largest = max(float(w.norm()) for w in exact.values())
        for name, want in exact.items():
            if float(want.norm()) <= 1e-12 * largest:
                # Zero in exact arithmetic (a key projection's bias: softmax ignores the constant q . b
                # it adds to a row's scores): its computed value is the rounding noise of summands of
                # its layer's gradient scale, so that scale, not its own zero norm, is the measure.
                weight = exact.get(name[: -len("bias")] + "weight") if name.endswith("bias") else None
                scale = float(weight.norm()) if weight is not None else largest
                err = float((ours[name] - want).norm())
                assert err <= UNIT_ROUNDOFF[dtype] * scale, (
                    f"step {step}, {name}: exactly 0 in float64, ort autocast {err:.2e} > u x {scale:.2e}")
                continue
            ours_err, eager_err = _relative_error(ours[name], want), _relative_error(theirs[name], want)
            assert ours_err <= 2 * eager_err + UNIT_ROUNDOFF[dtype], (
                f"step {step}, {name}: ort autocast is {ours_err:.2e} from float64 (norm-wise), eager autocast "
                f"{eager_err:.2e}")

    stats = compile_stats()
    assert stats.runs >= 4 and stats.fallbacks == 0, stats  # forward + backward graphs, twice
    extra = set(stats.aten_fallback_ops) - float32_fallbacks
    assert not extra, f"autocast sent {sorted(extra)} to the ATen fallback (float32: {sorted(float32_fallbacks)})"
    nodes = _engine_nodes()
    low_ops = {op for op, types in nodes if ONNX_TYPE[dtype] in types}
    assert {"MatMul", "Gemm"} & low_ops, f"no {dtype} GEMM reached the engine: {sorted(low_ops)}"
    assert "Cast" in low_ops
    missing = native_ops - {op for op, _ in nodes}
    assert not missing, f"expected native {sorted(missing)} in the engine graphs"


# The native kernels each model's graphs must use (besides Cast and bfloat16 MatMul/Gemm). The eager
# attention of all three is fused (attention_fusion.py); LLaMA's rotary embedding leaves Q and K in
# float32 beside a bfloat16 V, and the fusion writes out the casts autocast makes at the matmuls.
GPT2_OPS = {"LayerNormalization", "LayerNormalizationGrad", "FlashAttention", "FlashAttentionGrad", "Tanh", "TanhGrad"}
BERT_OPS = {"LayerNormalization", "LayerNormalizationGrad", "FlashAttention", "FlashAttentionGrad", "GeluGrad"}
LLAMA_OPS = {"FlashAttention", "FlashAttentionGrad", "Sigmoid"}  # SiLU's gradient is decomposed to Mul/Sub


def test_gpt2_autocast_training():
    check_autocast_training(functools.partial(cm.make_gpt2, "eager"), cm.causal_lm_batch, GPT2_OPS)


def test_bert_mlm_autocast_training():
    check_autocast_training(functools.partial(cm.make_bert_mlm, "eager"), cm.bert_mlm_batch, BERT_OPS)


def test_llama_autocast_training():
    check_autocast_training(functools.partial(cm.make_llama, "eager"), cm.causal_lm_batch, LLAMA_OPS)


def test_gpt2_float16_autocast_training():
    """CPU autocast to float16 (GEMMs through float32 on the CPU, the path CUDA's fp16 graphs share
    in the exporter): the same checks, with float16's unit roundoff."""
    check_autocast_training(functools.partial(cm.make_gpt2, "eager"), cm.causal_lm_batch, GPT2_OPS, torch.float16)
