"""Hand-built ONNX models with com.microsoft ATen nodes, encoded by the exporter's own encoder
(encode_aten_call): the ATen node tests and the untrusted-model tests build their models here."""

from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

import torch_ort_backend as tob
from torch_ort_backend.exporter.aten_encoding import encode_aten_call

_ONNX_DTYPE = {
    torch.float32: TensorProto.FLOAT, torch.float64: TensorProto.DOUBLE, torch.float16: TensorProto.FLOAT16,
    torch.bfloat16: TensorProto.BFLOAT16, torch.int64: TensorProto.INT64, torch.int32: TensorProto.INT32,
    torch.int8: TensorProto.INT8, torch.uint8: TensorProto.UINT8, torch.bool: TensorProto.BOOL,
}


class G:
    """A graph value in the FX sense: opaque to the encoder, a graph input here."""

    def __init__(self, name: str):
        self.name = name


class ModelBuilder:
    """The test's adapter from AtenCall to ONNX nodes (what the exporter does for real)."""

    def __init__(self):
        self.nodes, self.inits, self.inputs, self.value_info = [], [], [], []
        self.feeds: dict[str, torch.Tensor] = {}
        self._n = 0

    def fresh(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self._n}"

    def input(self, name: str, t: torch.Tensor, symbolic: bool = False) -> G:
        dims = [f"{name}_d{i}" for i in range(t.dim())] if symbolic else list(t.shape)
        self.inputs.append(helper.make_tensor_value_info(name, _ONNX_DTYPE[t.dtype], dims))
        self.feeds[name] = t
        return G(name)

    def const(self, arr: np.ndarray) -> str:
        name = self.fresh("c")
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def aten(self, op, args=(), kwargs=None, outputs=1, declare=None, name=None) -> list[str]:
        """Adds an ATen node for op(*args, **kwargs); declare: (dtype, shape) per output to put in
        value_info (None: undeclared). Returns the output names ("" where outputs[i] is None)."""
        call = encode_aten_call(op, tuple(args), kwargs or {})
        names = []
        for item in call.inputs:
            if item[0] == "value":
                names.append(item[1].name)
            elif item[0] == "none":
                names.append("")
            elif item[0] == "const":
                names.append(self.const(item[1]))
            else:  # int_list: static ints and 0-d int64 graph values, concatenated
                pieces = []
                for v in item[1]:
                    if isinstance(v, G):
                        p = self.fresh("piece")
                        self.nodes.append(helper.make_node("Reshape", [v.name, self.const(np.array([1]))], [p]))
                        pieces.append(p)
                    else:
                        pieces.append(self.const(np.array([v], dtype=np.int64)))
                cat = self.fresh("ints")
                self.nodes.append(helper.make_node("Concat", pieces, [cat], axis=0))
                names.append(cat)
        outs = outputs if isinstance(outputs, list) else [self.fresh("out") for _ in range(outputs)]
        outs = [o or "" for o in outs]
        self.nodes.append(helper.make_node("ATen", names, outs, domain="com.microsoft",
                                           name=name or self.fresh(str(op)), **call.attributes))
        for o, d in zip(outs, declare or []):
            if o and d is not None:
                self.value_info.append(helper.make_tensor_value_info(o, _ONNX_DTYPE[d[0]], d[1]))
        return outs

    def node(self, op_type, inputs, n_out=1, **attrs) -> list[str]:
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, **attrs))
        return outs

    def model(self, outputs: dict[str, torch.Tensor]) -> onnx.ModelProto:
        """outputs: name -> a tensor like the expected one; declared with its dtype and rank, with
        symbolic dims (as the exporter declares them)."""
        outs = [helper.make_tensor_value_info(n, _ONNX_DTYPE[t.dtype], [f"{n}_d{i}" for i in range(t.dim())])
                for n, t in outputs.items()]
        graph = helper.make_graph(self.nodes, "aten_test", self.inputs, outs, self.inits, value_info=self.value_info)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                      helper.make_opsetid("com.microsoft", 1)])

    def session(self, outputs: dict[str, torch.Tensor], allow_unsafe: bool = False) -> tob.InferenceSession:
        options = tob.SessionOptions()
        options.allow_unsafe_aten_ops = allow_unsafe
        return tob.InferenceSession(self.model(outputs), options)

    def run(self, outputs: dict[str, torch.Tensor], allow_unsafe: bool = False) -> list[torch.Tensor]:
        return self.session(outputs, allow_unsafe).run(list(outputs), self.feeds)


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + 1000 * len(shape))
    t = torch.rand(*shape, generator=g, dtype=torch.float64) * 1.9 + 0.1
    sign = torch.where(torch.rand(*shape, generator=g) < 0.5, -1.0, 1.0).double()
    return (t * sign).to(dtype)
