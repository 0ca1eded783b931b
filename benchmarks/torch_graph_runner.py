"""Runs an ONNX graph op by op with torch.nn.functional: the torch eager baseline for models that
exist only as ONNX (the light ResNet-50).

Only the ops the benchmark models use are here. Nodes whose inputs are all initializers run once
at construction (ONNX Runtime and our engine fold them too), so a call times the same compute
graph that the engines run.

    runner = TorchGraphRunner(onnx.load(path))
    with torch.inference_mode():
        outputs = runner({"input": tensor})
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import helper, numpy_helper

OpFn = Callable[[list, dict], torch.Tensor]
_OPS: dict[str, OpFn] = {}


def _op(name: str):
    def register(fn: OpFn) -> OpFn:
        _OPS[name] = fn
        return fn

    return register


class UnsupportedOpError(NotImplementedError):
    pass


class TorchGraphRunner:
    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.input_names = [i.name for i in graph.input]
        self.output_names = [o.name for o in graph.output]
        consts = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in graph.initializer}
        self.input_names = [n for n in self.input_names if n not in consts]
        missing = sorted({n.op_type for n in graph.node} - _OPS.keys())
        if missing:
            raise UnsupportedOpError(f"torch_graph_runner has no implementation of: {', '.join(missing)}")
        self.steps: list[tuple[OpFn, list[str], list[str], dict]] = []
        with torch.inference_mode():
            for node in graph.node:
                attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
                attrs["_opset"] = self.opset
                fn = _OPS[node.op_type]
                if all(i == "" or i in consts for i in node.input):
                    consts[node.output[0]] = fn([consts.get(i) for i in node.input], attrs)
                else:
                    self.steps.append((fn, list(node.input), list(node.output), attrs))
        self.consts = consts

    def __call__(self, feeds: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        values = dict(self.consts)
        values.update(feeds)
        for fn, inputs, outputs, attrs in self.steps:
            values[outputs[0]] = fn([values[i] if i else None for i in inputs], attrs)
        return [values[n] for n in self.output_names]


def _pads_2d(attrs: dict, spatial: int) -> tuple[list[int] | None, tuple[int, ...]]:
    """(F.pad list or None, symmetric padding) from ONNX pads [b1, b2, ..., e1, e2, ...]."""
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise UnsupportedOpError("auto_pad is not supported by torch_graph_runner")
    pads = list(attrs.get("pads", [0] * 2 * spatial))
    begin, end = pads[:spatial], pads[spatial:]
    if begin == end:
        return None, tuple(begin)
    explicit = []
    for b, e in zip(reversed(begin), reversed(end)):
        explicit += [b, e]
    return explicit, (0,) * spatial


@_op("Conv")
def _conv(x, a):
    inp, w = x[0], x[1]
    bias = x[2] if len(x) > 2 else None
    spatial = w.dim() - 2
    explicit, padding = _pads_2d(a, spatial)
    if explicit:
        inp = F.pad(inp, explicit)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[spatial]
    return conv(inp, w, bias, tuple(a.get("strides", [1] * spatial)), padding,
                tuple(a.get("dilations", [1] * spatial)), a.get("group", 1))


@_op("BatchNormalization")
def _batch_norm(x, a):
    return F.batch_norm(x[0], x[3], x[4], x[1], x[2], False, 0.0, a.get("epsilon", 1e-5))


@_op("Relu")
def _relu(x, a):
    return F.relu(x[0])


@_op("Sum")
def _sum(x, a):
    out = x[0]
    for t in x[1:]:
        out = out + t
    return out


@_op("Add")
def _add(x, a):
    return x[0] + x[1]


@_op("Mul")
def _mul(x, a):
    return x[0] * x[1]


@_op("Erf")
def _erf(x, a):
    return torch.erf(x[0])


@_op("MatMul")
def _matmul(x, a):
    return torch.matmul(x[0], x[1])


@_op("Transpose")
def _transpose(x, a):
    perm = a.get("perm") or list(reversed(range(x[0].dim())))
    return x[0].permute(*perm)


@_op("LayerNormalization")
def _layer_norm(x, a):
    axis = a.get("axis", -1) % x[0].dim()
    shape = x[0].shape[axis:]
    return F.layer_norm(x[0], shape, x[1], x[2] if len(x) > 2 else None, a.get("epsilon", 1e-5))


def _pool(x, a, torch_pool, pad_value: float):
    spatial = x[0].dim() - 2
    explicit, padding = _pads_2d(a, spatial)
    inp = F.pad(x[0], explicit, value=pad_value) if explicit else x[0]
    kernel = tuple(a["kernel_shape"])
    strides = tuple(a.get("strides", [1] * spatial))
    return torch_pool(inp, kernel, strides, padding, bool(a.get("ceil_mode", 0)))


@_op("MaxPool")
def _max_pool(x, a):
    if a.get("dilations") and any(d != 1 for d in a["dilations"]):
        raise UnsupportedOpError("MaxPool dilations")
    return _pool(x, a, lambda i, k, s, p, c: F.max_pool2d(i, k, s, p, ceil_mode=c), float("-inf"))


@_op("AveragePool")
def _avg_pool(x, a):
    include = bool(a.get("count_include_pad", 0))
    explicit, _ = _pads_2d(a, x[0].dim() - 2)
    if explicit and not include:
        raise UnsupportedOpError("asymmetric AveragePool pads with count_include_pad=0")
    return _pool(x, a, lambda i, k, s, p, c: F.avg_pool2d(i, k, s, p, c, include), 0.0)


@_op("Reshape")
def _reshape(x, a):
    shape = [int(d) for d in x[1].tolist()]
    if not a.get("allowzero", 0):
        shape = [x[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x[0].reshape(shape)


@_op("Gemm")
def _gemm(x, a):
    m, n = x[0], x[1]
    if a.get("transA", 0):
        m = m.t()
    if a.get("transB", 0):
        n = n.t()
    alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
    if len(x) > 2 and x[2] is not None:
        return torch.addmm(x[2], m, n, beta=beta, alpha=alpha)
    return torch.mm(m, n) * alpha if alpha != 1.0 else torch.mm(m, n)


@_op("Softmax")
def _softmax(x, a):
    t = x[0]
    if a["_opset"] >= 13:
        return F.softmax(t, dim=a.get("axis", -1))
    # Before opset 13 Softmax flattens to 2-D at `axis` (default 1).
    axis = a.get("axis", 1) % t.dim()
    rows = int(np.prod(t.shape[:axis], dtype=np.int64))
    return F.softmax(t.reshape(rows, -1), dim=1).reshape(t.shape)


@_op("ConstantOfShape")
def _constant_of_shape(x, a):
    value = a.get("value")
    fill = numpy_helper.to_array(value) if value is not None else np.zeros(1, dtype=np.float32)
    shape = [int(d) for d in x[0].tolist()]
    return torch.full(shape, fill.reshape(-1)[0].item(), dtype=torch.from_numpy(fill).dtype)
