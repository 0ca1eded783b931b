"""MaxPool and GlobalMaxPool against eager PyTorch on inputs with NaNs: torch propagates a NaN in a
window to the output (its index is the last NaN's in scan order), so must every max pool path of
the engine (the eight-wide interior blocks, the per-column border, strides 1-3, dilations,
ceil_mode, Indices, the whole-plane reduction). Also through torch.compile(backend="ort"), with
the engine running the pool."""

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper

import torch_ort_backend as tob
from ortmodule_helpers import fresh_state
from torch_ort_backend import compiled_graph
from torch_ort_backend.backend import compile_stats, ort_backend


def _with_nans(shape, every, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen)
    x[torch.rand(*shape, generator=gen) < 1.0 / every] = float("nan")
    return x


def _session(op, shape, out_shape, n_out=1, **attrs):
    outs = ["y", "i"][:n_out]
    node = helper.make_node(op, ["x"], outs, **attrs)
    graph = helper.make_graph(
        [node],
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT if o == "y" else TensorProto.INT64, out_shape) for o in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return tob.InferenceSession(model)


# (input shape, kernel, stride, padding, dilation, ceil_mode)
CASES = [
    ((1, 3, 12, 112), 3, 2, 1, 1, False),  # ResNet's stem pool: interior blocks and the border
    ((2, 2, 9, 41), 3, 1, 1, 1, True),
    ((1, 2, 8, 37), (2, 4), (1, 2), (1, 2), (1, 2), True),
    ((1, 2, 7, 29), (2, 5), (1, 3), (0, 2), 1, True),  # stride 3: per column
    ((2, 8, 6, 6), 6, 1, 0, 1, False),  # a whole-plane window
]


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
@pytest.mark.parametrize("with_indices", [False, True])
def test_max_pool_propagates_nan_as_torch(case, with_indices):
    shape, kernel, stride, padding, dilation, ceil_mode = case
    x = _with_nans(shape, every=60 if kernel == shape[-1] else 17, seed=sum(shape))
    want, want_idx = F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode=ceil_mode, return_indices=True)
    assert torch.isnan(want).any() and not torch.isnan(want).all()

    def pair(v):
        return list(v) if isinstance(v, tuple) else [v, v]

    pads = pair(padding)
    sess = _session(
        "MaxPool",
        list(shape),
        list(want.shape),
        n_out=2 if with_indices else 1,
        kernel_shape=pair(kernel),
        strides=pair(stride),
        pads=pads + pads,
        dilations=pair(dilation),
        ceil_mode=int(ceil_mode),
    )
    got = sess.run(None, {"x": x.numpy()})
    np.testing.assert_array_equal(got[0], want.numpy())  # NaN where torch has NaN, else equal
    if with_indices:
        # ONNX's indices count from the tensor's start, torch's from the plane's.
        planes = torch.arange(shape[0] * shape[1]).reshape(shape[0], shape[1], 1, 1) * shape[2] * shape[3]
        np.testing.assert_array_equal(got[1], (want_idx + planes).numpy())


@pytest.mark.parametrize("shape", [(1, 6, 7, 7), (2, 3, 5, 9)])
def test_global_max_pool_propagates_nan(shape):
    x = _with_nans(shape, every=40, seed=5)
    want = torch.amax(x, dim=(2, 3), keepdim=True)
    assert torch.isnan(want).any() and not torch.isnan(want).all()
    got = _session("GlobalMaxPool", list(shape), list(want.shape)).run(None, {"x": x.numpy()})[0]
    np.testing.assert_array_equal(got, want.numpy())


@pytest.fixture
def strict(monkeypatch):
    yield from fresh_state(monkeypatch)


def test_compiled_max_pool_propagates_nan(strict):
    def fn(x):
        return F.max_pool2d(x, 3, stride=2, padding=1) * 2

    x = _with_nans((2, 4, 14, 30), every=19, seed=11)
    earlier = {g.serial for g in compiled_graph.live_graphs()}
    got = torch.compile(fn, backend=ort_backend)(x)
    want = fn(x)
    assert torch.isnan(want).any()
    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    stats = compile_stats()
    assert stats.runs >= 1 and stats.fallbacks == 0 and not stats.aten_fallback_ops, stats
    ops = {
        n.op_type
        for g in compiled_graph.live_graphs()
        if g.exported is not None and g.serial not in earlier
        for n in g.exported.model.graph.node
    }
    assert "MaxPool" in ops, ops
