"""An ONNX model as a torch.nn.Module, so that ORTTrainer trains an onnx.ModelProto through the same
path as a PyTorch model (torch.export, AOTAutograd's gradients, our exporter): no second gradient
builder. Float initializers become the module's parameters (trainable, by their ONNX names), the
others buffers; each node runs as the torch function of its op below.

A model file can only compute: every op is a pure tensor function from this table (no ATen
passthrough, no PythonOp, no subgraphs); anything else is a NotImplementedError naming the op.
onnx2torch was considered and not used: it imports torchvision at load time (for one op) and has had
no release since 2024.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper
from torch import nn

from .._engine import MS_DOMAIN
from ..exporter.context import ONNX_TO_TORCH


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _axes(x: torch.Tensor, axes: Any) -> list[int]:
    return [int(a) + (x.dim() if int(a) < 0 else 0) for a in (axes.tolist() if hasattr(axes, "tolist") else axes)]


def _reduce(fn: Callable) -> Callable:
    def run(a, x, axes=None):
        axes = a.get("axes", axes)
        keep = bool(a.get("keepdims", 1))
        if axes is None or (hasattr(axes, "size") and np.size(axes) == 0):
            if a.get("noop_with_empty_axes", 0):
                return x
            axes = list(range(x.dim()))
        return fn(x, dim=_axes(x, axes), keepdim=keep)
    return run


def _softmax(fn: Callable) -> Callable:
    def run(a, x, opset):
        axis = a.get("axis", -1 if opset >= 13 else 1)
        if opset >= 13:
            return fn(x, dim=axis)
        flat = x.reshape(int(np.prod(x.shape[:axis])), -1)
        return fn(flat, dim=1).reshape(x.shape)
    return run


def _gemm(a, x, w, c=None):
    x = x.t() if a.get("transA", 0) else x
    w = w.t() if a.get("transB", 0) else w
    y = a.get("alpha", 1.0) * (x @ w)
    return y if c is None else y + a.get("beta", 1.0) * c


def _layer_norm(a, x, scale, bias=None):
    axis = a.get("axis", -1)
    axis = axis + x.dim() if axis < 0 else axis
    return F.layer_norm(x, x.shape[axis:], scale, bias, a.get("epsilon", 1e-5))


def _slice(a, x, starts, ends, axes=None, steps=None):
    axes = list(range(len(starts))) if axes is None else _axes(x, axes)
    steps = [1] * len(axes) if steps is None else steps.tolist()
    index = [slice(None)] * x.dim()
    for ax, s, e, st in zip(axes, starts.tolist(), ends.tolist(), steps):
        if st != 1:
            raise NotImplementedError("ONNX Slice with a step other than 1 is not supported for training")
        index[ax] = slice(s, min(e, x.shape[ax]) if e >= 0 else e)
    return x[tuple(index)]


def _reshape(a, x, shape):
    dims = [x.shape[i] if d == 0 and not a.get("allowzero", 0) else d for i, d in enumerate(shape.tolist())]
    return x.reshape(dims)


def _conv(a, x, w, b=None):
    nd = w.dim() - 2
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise NotImplementedError("ONNX Conv with auto_pad is not supported for training; give explicit pads")
    pads = a.get("pads", [0] * 2 * nd)
    if pads[:nd] != pads[nd:]:
        raise NotImplementedError(f"ONNX Conv with asymmetric pads {pads} is not supported for training")
    conv = (F.conv1d, F.conv2d, F.conv3d)[nd - 1]
    return conv(x, w, b, a.get("strides", 1), pads[:nd], a.get("dilations", 1), a.get("group", 1))


def _cross_entropy(a, scores, labels, weight=None):
    ignore = a.get("ignore_index", -100)
    return F.cross_entropy(scores, labels, weight, ignore_index=ignore, reduction=a.get("reduction", b"mean").decode()
                           if isinstance(a.get("reduction", b"mean"), bytes) else a.get("reduction", "mean"))


def _nll(a, x, target, weight=None):
    red = a.get("reduction", b"mean")
    red = red.decode() if isinstance(red, bytes) else red
    return F.nll_loss(x, target, weight, ignore_index=a.get("ignore_index", -100), reduction=red)


_UNARY = {
    "Relu": torch.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh, "Exp": torch.exp, "Log": torch.log,
    "Sqrt": torch.sqrt, "Neg": torch.neg, "Abs": torch.abs, "Erf": torch.erf, "Reciprocal": torch.reciprocal,
    "Identity": lambda x: x, "Floor": torch.floor, "Ceil": torch.ceil, "Softplus": F.softplus,
    "Not": torch.logical_not, "Sin": torch.sin, "Cos": torch.cos,
}
_BINARY = {
    "Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div, "Pow": torch.pow,
    "MatMul": torch.matmul, "Equal": torch.eq, "Less": torch.lt, "Greater": torch.gt,
    "LessOrEqual": torch.le, "GreaterOrEqual": torch.ge, "And": torch.logical_and, "Or": torch.logical_or,
    "Max": torch.maximum, "Min": torch.minimum,
}
# op -> f(attributes, *inputs); "opset" marks the ops that need the model's opset.
_OPS: dict[str, Callable] = {
    "Gemm": _gemm,
    "LayerNormalization": _layer_norm,
    "Softmax": _softmax(torch.softmax),
    "LogSoftmax": _softmax(torch.log_softmax),
    "FastGelu": lambda a, x, bias=None: F.gelu(x if bias is None else x + bias, approximate="tanh"),
    "Gelu": lambda a, x: F.gelu(x, approximate="tanh" if a.get("approximate", b"none") in (b"tanh", "tanh") else "none"),
    "LeakyRelu": lambda a, x: F.leaky_relu(x, a.get("alpha", 0.01)),
    "Transpose": lambda a, x: x.permute(a["perm"]) if "perm" in a else x.permute(*reversed(range(x.dim()))),
    "Reshape": _reshape,
    "Flatten": lambda a, x: x.reshape(int(np.prod(x.shape[:a.get("axis", 1)])), -1),
    "Squeeze": lambda a, x, axes=None: x.squeeze(_axes(x, a.get("axes", axes))) if (a.get("axes") is not None
                                                                                   or axes is not None) else x.squeeze(),
    "Unsqueeze": lambda a, x, axes=None: _unsqueeze(x, a.get("axes", axes)),
    "Concat": lambda a, *xs: torch.cat(xs, dim=a["axis"]),
    "Gather": lambda a, x, i: torch.index_select(x, a.get("axis", 0), i.reshape(-1)).reshape(
        x.shape[:a.get("axis", 0) % x.dim()] + i.shape + x.shape[a.get("axis", 0) % x.dim() + 1:]),
    "Slice": _slice,
    "Cast": lambda a, x: x.to(ONNX_TO_TORCH[a["to"]]),
    "ReduceMean": _reduce(torch.mean),
    "ReduceSum": _reduce(torch.sum),
    "ReduceMax": _reduce(lambda x, dim, keepdim: torch.amax(x, dim=dim, keepdim=keepdim)),
    "Where": lambda a, c, x, y: torch.where(c, x, y),
    "Expand": lambda a, x, shape: x * torch.ones(shape.tolist(), dtype=x.dtype),
    "Shape": lambda a, x: torch.tensor(x.shape[a.get("start", 0):a.get("end", None)], dtype=torch.int64),
    "Dropout": lambda a, x, ratio=None, training=None: x,
    "Clip": lambda a, x, lo=None, hi=None: torch.clamp(x, lo, hi),
    "Conv": _conv,
    "MaxPool": lambda a, x: F.max_pool2d(x, a["kernel_shape"], a.get("strides", a["kernel_shape"]),
                                         a.get("pads", [0, 0, 0, 0])[:2]),
    "GlobalAveragePool": lambda a, x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True),
    "SoftmaxCrossEntropyLoss": _cross_entropy,
    "NegativeLogLikelihoodLoss": _nll,
}


# Inputs that are sizes, axes or indices of the op, not data: integer initializers and Constant
# values stay numpy arrays for these (torch.export then sees Python ints, not traced tensors).
_STATIC_INPUTS = {"Reshape": {1}, "Slice": {1, 2, 3, 4}, "Squeeze": {1}, "Unsqueeze": {1}, "Expand": {1},
                  "ReduceMean": {1}, "ReduceSum": {1}, "ReduceMax": {1}}

# com.microsoft ops with the same meaning as the entry of that name (what our exporter emits below
# opset 17 / 20).
_CONTRIB = {(MS_DOMAIN, "LayerNormalization"), (MS_DOMAIN, "Gelu"), (MS_DOMAIN, "FastGelu")}


def _unsqueeze(x: torch.Tensor, axes: Any) -> torch.Tensor:
    axes = axes.tolist() if hasattr(axes, "tolist") else list(axes)
    out_rank = x.dim() + len(axes)
    for a in sorted(int(v) + (out_rank if int(v) < 0 else 0) for v in axes):
        x = x.unsqueeze(a)
    return x


class OnnxModule(nn.Module):
    """Runs an ONNX graph with torch ops; forward takes the graph's (non-initializer) inputs in order
    and returns its outputs (a tensor for one output, else a tuple)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        super().__init__()
        graph = model.graph
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        for node in graph.node:
            if node.domain not in ("", "ai.onnx") and (node.domain, node.op_type) not in _CONTRIB:
                raise NotImplementedError(f"ORTTrainer cannot train an ONNX model with node '{node.name}' of domain "
                                          f"'{node.domain}' (op {node.op_type}): only ai.onnx ops and "
                                          f"{sorted(op for _, op in _CONTRIB)} of com.microsoft are trained")
            if node.op_type not in _OPS and node.op_type not in _UNARY and node.op_type not in _BINARY \
                    and node.op_type != "Constant":
                raise NotImplementedError(f"ORTTrainer cannot train an ONNX model with op {node.op_type} "
                                          f"(node '{node.name}'); supported: {sorted({*_OPS, *_UNARY, *_BINARY})}")
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
                raise NotImplementedError(f"node '{node.name}' ({node.op_type}) holds a subgraph: not trainable here")
        # Float initializers are parameters: "fc.weight" becomes parameter "weight" of a child module
        # "fc", so named_parameters() (and ORTTrainer's state_dict, frozen_weights and param_groups) use
        # the ONNX names; a name that cannot be a module path gets "onnx_initializer_<k>". Other
        # initializers (shapes, axes, indices) are constants, kept as numpy arrays.
        self._names: dict[str, str] = {}
        self._constants: dict[str, np.ndarray] = {}
        for k, init in enumerate(graph.initializer):
            value = numpy_helper.to_array(init).copy()
            if np.issubdtype(value.dtype, np.floating):
                self._names[init.name] = self._register(init.name, torch.from_numpy(value), f"onnx_initializer_{k}")
            else:
                self._constants[init.name] = value
        initialized = {i.name for i in graph.initializer}
        self.input_names = [i.name for i in graph.input if i.name not in initialized]
        self.output_names = [o.name for o in graph.output]
        self.nodes = [(n.op_type, list(n.input), list(n.output), _attrs(n), n.name) for n in graph.node]

    def _register(self, name: str, value: torch.Tensor, fallback: str) -> str:
        parts = name.split(".")
        owner: nn.Module = self
        if all(p.isidentifier() for p in parts):
            for p in parts[:-1]:
                child = owner._modules.get(p)
                if child is None:
                    if hasattr(owner, p):
                        break
                    child = nn.Module()
                    owner.add_module(p, child)
                owner = child
            else:
                if not hasattr(owner, parts[-1]):
                    owner.register_parameter(parts[-1], nn.Parameter(value))
                    return name
        self.register_parameter(fallback, nn.Parameter(value))
        return fallback

    def _tensor(self, path: str) -> torch.Tensor:
        owner: Any = self
        for p in path.split("."):
            owner = getattr(owner, p)
        return owner

    def forward(self, *inputs: torch.Tensor) -> Any:
        if len(inputs) != len(self.input_names):
            raise ValueError(f"the ONNX model takes {len(self.input_names)} inputs {self.input_names}, "
                             f"got {len(inputs)}")
        env: dict[str, Any] = {name: self._tensor(path) for name, path in self._names.items()}
        env.update(self._constants)
        env.update(zip(self.input_names, inputs))
        env[""] = None
        for op, ins, outs, a, name in self.nodes:
            static = _STATIC_INPUTS.get(op, ())
            args = [v if k in static or not isinstance(v, np.ndarray) else torch.from_numpy(v)
                    for k, v in enumerate(env[i] for i in ins)]
            while args and args[-1] is None:
                args.pop()
            if op == "Constant":
                result = numpy_helper.to_array(a["value"]).copy()
                if np.issubdtype(result.dtype, np.floating):
                    result = torch.from_numpy(result)
            elif op in _UNARY:
                result = _UNARY[op](*args)
            elif op in _BINARY:
                result = _BINARY[op](*args)
            elif op in ("Softmax", "LogSoftmax"):
                result = _OPS[op](a, *args, self.opset)
            else:
                result = _OPS[op](a, *args)
            results = result if isinstance(result, tuple) else (result,)
            for o, r in zip(outs, results):
                env[o] = r
        out = tuple(env[o] for o in self.output_names)
        return out[0] if len(out) == 1 else out


def module_from_onnx(model: onnx.ModelProto) -> OnnxModule:
    onnx.checker.check_model(model)
    return OnnxModule(model)

