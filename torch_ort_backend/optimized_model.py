"""Writes the engine's optimised graph back out as an ONNX model, so a user can open exactly what
ran in an ONNX viewer. Each node carries the provider it was assigned as metadata_props."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from . import dtypes
from ._engine import MS_DOMAIN


def _array(t) -> tuple[np.ndarray, int]:
    """(values, ONNX type code) of an engine tensor, or of a DLPack capsule of one (tensor attributes
    come back as capsules, which carry no dtype attribute of their own); string tensors come back
    as numpy arrays of str (attributes) or engine tensors of dtype STRING (initializers)."""
    if isinstance(t, np.ndarray):
        return t, dtypes.STRING
    if getattr(t, "dtype", None) == dtypes.STRING:
        return t.strings(), dtypes.STRING
    import torch

    tt = torch.from_dlpack(t)
    if tt.dtype == torch.bfloat16:
        return tt.view(torch.int16).numpy().view(np.uint16), dtypes.BFLOAT16
    arr = tt.numpy()
    return arr, helper.np_dtype_to_tensor_dtype(arr.dtype)


def _tensor_proto(name: str, t) -> onnx.TensorProto:
    arr, code = _array(t)
    if code == dtypes.BFLOAT16:
        proto = onnx.TensorProto(name=name, data_type=code, dims=list(arr.shape))
        proto.raw_data = arr.tobytes()
        return proto
    if code == dtypes.STRING:
        return helper.make_tensor(name, code, list(arr.shape), [s.encode("utf-8", "surrogateescape") for s in arr.flat])
    return numpy_helper.from_array(arr, name)


def _attribute(name: str, kind: int, value) -> onnx.AttributeProto:
    if kind == onnx.AttributeProto.GRAPH:
        return helper.make_attribute(name, _graph(value, value["name"]))
    if kind == onnx.AttributeProto.GRAPHS:
        return helper.make_attribute(name, [_graph(g, g["name"]) for g in value])
    if kind == onnx.AttributeProto.TENSOR:
        return helper.make_attribute(name, _tensor_proto("", value))
    if kind == onnx.AttributeProto.FLOATS:
        return helper.make_attribute(name, [float(v) for v in value], attr_type=onnx.AttributeProto.FLOATS)
    if kind == onnx.AttributeProto.INTS:
        return helper.make_attribute(name, [int(v) for v in value], attr_type=onnx.AttributeProto.INTS)
    if kind == onnx.AttributeProto.STRINGS:
        return helper.make_attribute(name, list(value), attr_type=onnx.AttributeProto.STRINGS)
    if kind == onnx.AttributeProto.TYPE_PROTO:
        return helper.make_attribute(name, _type_proto(*value), attr_type=onnx.AttributeProto.TYPE_PROTO)
    return helper.make_attribute(name, value)


def _type_proto(code: int, dims, kind: int = 0, optional: bool = False) -> onnx.TypeProto:
    """A value's type: a tensor, or (kind 1) a sequence of tensors, either one optional."""
    t = helper.make_tensor_type_proto(code, dims)
    if kind == 1:
        t = helper.make_sequence_type_proto(t)
    return helper.make_optional_type_proto(t) if optional else t


def _value_info(name: str, code: int, dims, kind: int = 0, optional: bool = False) -> onnx.ValueInfoProto:
    if code == 0:  # a subgraph's value whose type nothing knows: declared without one, as onnx allows
        return onnx.ValueInfoProto(name=name)
    return helper.make_value_info(name, _type_proto(code, dims, kind, optional))


def _graph(graph: dict, name: str) -> onnx.GraphProto:
    """A graph of the engine (the main graph or a subgraph, as _C's optimized_graph describes it)."""
    nodes = []
    for n in graph["nodes"]:
        node = helper.make_node(n["op_type"], n["inputs"], n["outputs"], name=n["name"], domain=n["domain"])
        node.attribute.extend(_attribute(*a) for a in n["attributes"])
        entry = node.metadata_props.add()
        entry.key, entry.value = "provider", n["provider"]
        nodes.append(node)
    # Outputs re-pointed by passes are renamed back with an Identity.
    outputs = []
    # (code, dims, kind, optional) by value name: kind 1 is a sequence (docs/architecture.md).
    inputs_typed = [(name, code, dims, *kind) for (name, code, dims), kind in zip(graph["inputs"], graph["input_kinds"])]
    types = {v[0]: v[1:] for v in graph["values"]}
    types.update({v[0]: v[1:] for v in inputs_typed})
    for external, internal in graph["outputs"]:
        if external != internal:
            nodes.append(helper.make_node("Identity", [internal], [external], name=f"{external}_rename"))
        outputs.append(_value_info(external, *types.get(internal, (0, None))))
    inputs = [_value_info(*v) for v in inputs_typed]
    inits = [_tensor_proto(name, t) for name, t in graph["initializers"]]
    value_info = [
        _value_info(*v) for v in graph["values"] if v[1] != 0 and v[0] not in {o.name for o in outputs}
    ]
    return helper.make_graph(nodes, name, inputs, outputs, inits, value_info=value_info)


def _uses_domain(g: onnx.GraphProto, domain: str) -> bool:
    for n in g.node:
        if n.domain == domain:
            return True
        for a in n.attribute:
            if any(_uses_domain(sub, domain) for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)):
                return True
    return False


def optimized_model_proto(graph: dict, source: onnx.ModelProto) -> onnx.ModelProto:
    g = _graph(graph, f"{source.graph.name}_optimized")
    opsets = [helper.make_opsetid(d, v) for d, v in graph["opsets"].items()]
    if MS_DOMAIN not in graph["opsets"] and _uses_domain(g, MS_DOMAIN):
        opsets.append(helper.make_opsetid(MS_DOMAIN, 1))
    model = helper.make_model(g, opset_imports=opsets, producer_name="torch_ort_backend")
    model.ir_version = source.ir_version
    return model
