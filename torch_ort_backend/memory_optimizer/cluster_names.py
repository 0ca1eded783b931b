"""The op names of recompute plans: an ATen op of the joint graph -> the name the report prints.

Ops the exporter turns into one ONNX op print as that op (native_layer_norm -> LayerNormalization,
native_dropout -> Dropout, addmm -> Gemm), so onnxruntime-training users recognise their plans;
any other ATen op prints as its name in CamelCase (_scaled_dot_product_flash_attention_for_cpu ->
ScaledDotProductFlashAttentionForCpu). Views and detach are free and left out of names.
"""

from __future__ import annotations

import functools
import operator

import torch

aten = torch.ops.aten

ONNX_NAMES = {
    aten.native_layer_norm: "LayerNormalization",
    aten._softmax: "Softmax",
    aten._log_softmax: "LogSoftmax",
    aten.gelu: "Gelu",
    aten.native_dropout: "Dropout",
    aten.mm: "MatMul",
    aten.bmm: "MatMul",
    aten.addmm: "Gemm",
    aten.add: "Add",
    aten.sub: "Sub",
    aten.rsub: "Sub",
    aten.mul: "Mul",
    aten.div: "Div",
    aten.pow: "Pow",
    aten.neg: "Neg",
    aten.exp: "Exp",
    aten.log: "Log",
    aten.sqrt: "Sqrt",
    aten.tanh: "Tanh",
    aten.sigmoid: "Sigmoid",
    aten.relu: "Relu",
    aten.where: "Where",
    aten.mean: "ReduceMean",
    aten.sum: "ReduceSum",
    aten.amax: "ReduceMax",
    aten.cat: "Concat",
    aten._to_copy: "Cast",
    aten.embedding: "Gather",
    aten.index_select: "Gather",
    aten.convolution: "Conv",
}

# Compute-bound ops: recomputing them costs real time (level 2 / strategy 1 of a layer), while the
# others are memory-bound elementwise or reduction work.
COMPUTE_HEAVY = {
    aten.mm, aten.bmm, aten.addmm, aten.baddbmm, aten.convolution,
    aten._scaled_dot_product_flash_attention_for_cpu, aten._scaled_dot_product_efficient_attention,
    aten._scaled_dot_product_flash_attention, aten._scaled_dot_product_cudnn_attention,
    aten._scaled_dot_product_attention_math, aten.scaled_dot_product_attention,
}

ATTENTION_OPS = {
    aten._softmax, aten._scaled_dot_product_flash_attention_for_cpu, aten._scaled_dot_product_efficient_attention,
    aten._scaled_dot_product_flash_attention, aten._scaled_dot_product_cudnn_attention,
    aten._scaled_dot_product_attention_math, aten.scaled_dot_product_attention,
}


# Ops that hand back their input's memory though torch does not tag them as views.
_ALIASING = (aten.detach, aten.alias, aten._unsafe_view)


def camel_case(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def packet(target) -> object | None:
    return getattr(target, "overloadpacket", None)


def op_name(target) -> str:
    """The name a node's op has in plan names."""
    p = packet(target)
    if p in ONNX_NAMES:
        return ONNX_NAMES[p]
    return camel_case(getattr(p, "__name__", str(target)))


def is_free(node: torch.fx.Node) -> bool:
    """Views, detach and getitem: no computation and no memory of their own."""
    if node.target is operator.getitem:
        return True
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and (target.is_view or packet(target) in _ALIASING)


@functools.cache
def _known_names() -> frozenset:
    names = set(ONNX_NAMES.values())
    for attr in dir(torch.ops.aten):
        if not attr.startswith("__"):
            names.add(camel_case(attr))
    return frozenset(names)


def is_known_op_name(name: str) -> bool:
    return name in _known_names()
