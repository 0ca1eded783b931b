"""Convolution models through the engine (issue 15, convolution): the MNIST CNN of the benchmark, a
ResNet basic block (conv-BN-ReLU, residual sum) and a ConvNeXt block (depthwise 7x7, LayerNorm over
channels, pointwise MLP with GELU) through torch.compile(backend="ort"): outputs, every gradient and
the updated parameters against eager over training steps, with the engine running the convolutions
(Conv in the exported graph, no eager fallback; the backward's convolution_backward as chosen per
shape by default and as the engine's ConvGrad everywhere with prefer_torch_kernels empty). And an ONNX ResNet-style graph through
our InferenceSession, where the optimizer fuses Conv + (residual Sum) + Relu into FusedConv, against
a float64 numpy evaluation of the same graph."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_ort_backend as tob
from torch_ort_backend import _C
from torch_ort_backend.compile_state import live_graphs
from torch_ort_backend.testing import models as cm
from compile_harness import check_training_matches_eager
from ortmodule_helpers import assert_engine_ran

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


@pytest.fixture(autouse=True)
def no_silent_fallback(monkeypatch):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")


def engine_op_types() -> set[str]:
    return {n.op_type for g in live_graphs() if g.exported is not None for n in g.exported.model.graph.node}


# By default the backward's convolution_backward runs torch's (oneDNN) kernel as an ATen node where
# it is the faster one for the shape, else the engine's ConvGrad (ops_training._torch_conv_grad_wins);
# with prefer_torch_kernels empty the engine's ConvGrad runs every one.
NATIVE_GRAD = {"prefer_torch_kernels": []}


def assert_engine_ran_convs(native_grad: bool) -> None:
    assert_engine_ran(2)
    ops = engine_op_types()
    assert "Conv" in ops, sorted(ops)
    aten_ops = tob.compile_stats().aten_fallback_ops
    assert not [op for op in aten_ops if "conv" in op and op != "aten.convolution_backward.default"], aten_ops
    if native_grad:
        assert "ConvGrad" in ops and "aten.convolution_backward.default" not in aten_ops, (sorted(ops), aten_ops)


class ResNetBlock(nn.Module):
    """torchvision's BasicBlock with a strided 1x1 projection shortcut, written out."""

    def __init__(self, cin: int = 8, cout: int = 16, stride: int = 2) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        self.head = nn.Linear(cout, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)) + self.down(x))
        return self.head(y.mean((2, 3)))


class ConvNeXtBlock(nn.Module):
    """ConvNeXt's block: depthwise 7x7, LayerNorm over channels (channels last), Linear 4x, GELU,
    Linear, layer scale, residual; a 2x2 stride-2 stem in front."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, dim, 2, 2)
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.pw1 = nn.Linear(dim, 4 * dim)
        self.pw2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 0.5))
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pw2(F.gelu(self.pw1(self.norm(y)))) * self.gamma
        x = x + y.permute(0, 3, 1, 2)
        return self.head(x.mean((2, 3)))


def image_batch(channels: int, size: int, batch: int = 4):
    def make(step: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(100 + step)
        x = torch.rand(batch, channels, size, size, generator=gen) * 2 - 1
        x = x + 0.1 * torch.sign(x)  # non-zero
        return {"x": x, "target": torch.randint(0, 10, (batch,), generator=gen)}
    return make


def with_loss(make_net):
    def make() -> nn.Module:
        torch.manual_seed(0)
        return cm.WithLoss(make_net(), F.cross_entropy)
    return make


@pytest.mark.parametrize("native_grad", [False, True])
def test_mnist_cnn_trains_like_eager(native_grad):
    check_training_matches_eager(lambda: cm.make_cnn(channels=8, hidden=32), cm.cnn_batch, steps=3,
                                 options=NATIVE_GRAD if native_grad else None)
    assert_engine_ran_convs(native_grad)


@pytest.mark.parametrize("native_grad", [False, True])
def test_resnet_block_trains_like_eager(native_grad):
    # Odd spatial size 15 with stride 2 and batch 4.
    check_training_matches_eager(with_loss(ResNetBlock), image_batch(8, 15), steps=3,
                                 options=NATIVE_GRAD if native_grad else None)
    assert_engine_ran_convs(native_grad)


@pytest.mark.parametrize("native_grad", [False, True])
def test_convnext_block_trains_like_eager(native_grad):
    check_training_matches_eager(with_loss(ConvNeXtBlock), image_batch(3, 22), steps=3,
                                 options=NATIVE_GRAD if native_grad else None)
    assert_engine_ran_convs(native_grad)
    # The depthwise 7x7 is a grouped Conv in the engine, not a fallback.
    assert any(n.op_type == "Conv" and any(a.name == "group" and a.i == 16 for a in n.attribute)
               for g in live_graphs() if g.exported is not None for n in g.exported.model.graph.node)


# ---- ONNX inference: Conv + Sum + Relu fused, against float64 numpy ----

def conv2d_f64(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int, pad: int) -> np.ndarray:
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    y = np.zeros((n, m, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            y += np.einsum("nchw,mc->nmhw", patch, w[:, :, i, j])
    return y + (b.reshape(1, m, 1, 1) if b is not None else 0)


def test_onnx_resnet_style_graph_fuses_and_matches_float64(rng, tmp_path):
    cin, cmid, size = 6, 12, 13
    w1 = rng.uniform(-0.4, 0.4, (cmid, cin, 3, 3)).astype(np.float32)
    b1 = rng.uniform(-0.5, 0.5, cmid).astype(np.float32)
    w2 = rng.uniform(-0.3, 0.3, (cmid, cmid, 3, 3)).astype(np.float32)
    b2 = rng.uniform(-0.5, 0.5, cmid).astype(np.float32)
    wp = rng.uniform(-0.5, 0.5, (cmid, cin, 1, 1)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["a1"]),
        helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "wp"], ["p"], strides=[2, 2]),
        helper.make_node("Sum", ["c2", "p"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    inits = [numpy_helper.from_array(a, name) for a, name in
             [(w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (wp, "wp")]]
    graph = helper.make_graph(nodes, "resnet_style",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, cin, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, cmid, 7, 7])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.uniform(-1, 1, (3, cin, size, size)).astype(np.float32)

    so = tob.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    sess = tob.InferenceSession(model.SerializeToString(), so)
    (y,) = sess.run(None, {"x": torch.from_numpy(x)})
    y = np.asarray(y)

    a1 = np.maximum(conv2d_f64(x.astype(np.float64), w1.astype(np.float64), b1.astype(np.float64), 2, 1), 0)
    c2 = conv2d_f64(a1, w2.astype(np.float64), b2.astype(np.float64), 1, 1)
    p = conv2d_f64(x.astype(np.float64), wp.astype(np.float64), None, 2, 0)
    expected = np.maximum(c2 + p, 0)
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
    if _C.sgemm_available() and os.environ.get("TOB_CONV_PACKED") is None:
        # The 3x3 weights packed once for the transposed tiles; the strided 1x1 keeps the per-call
        # GEMM and packs nothing (docs/architecture.md, "Convolution (CPU)"; TOB_CONV_PACKED=0/1
        # change what is packed).
        stats = sess.last_run_stats()
        assert stats["prepacked_constants"] == 2, stats
        assert stats["prepacked_bytes"] >= (w1.size + w2.size) * 4, stats

    optimized = onnx.load(so.optimized_model_filepath)
    ops = [n.op_type for n in optimized.graph.node]
    assert ops.count("FusedConv") == 2, ops
    assert "Relu" not in ops and "Sum" not in ops, ops
