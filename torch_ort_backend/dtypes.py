"""Element types: ONNX TensorProto codes (the engine's own codes), numpy and torch equivalents."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

BFLOAT16 = TensorProto.BFLOAT16

ONNX_TO_NUMPY = {
    TensorProto.FLOAT: np.dtype(np.float32),
    TensorProto.DOUBLE: np.dtype(np.float64),
    TensorProto.FLOAT16: np.dtype(np.float16),
    TensorProto.INT8: np.dtype(np.int8),
    TensorProto.INT16: np.dtype(np.int16),
    TensorProto.INT32: np.dtype(np.int32),
    TensorProto.INT64: np.dtype(np.int64),
    TensorProto.UINT8: np.dtype(np.uint8),
    TensorProto.UINT16: np.dtype(np.uint16),
    TensorProto.UINT32: np.dtype(np.uint32),
    TensorProto.UINT64: np.dtype(np.uint64),
    TensorProto.BOOL: np.dtype(np.bool_),
}

ONNX_TYPE_NAMES = {
    TensorProto.FLOAT: "tensor(float)",
    TensorProto.DOUBLE: "tensor(double)",
    TensorProto.FLOAT16: "tensor(float16)",
    TensorProto.BFLOAT16: "tensor(bfloat16)",
    TensorProto.INT8: "tensor(int8)",
    TensorProto.INT16: "tensor(int16)",
    TensorProto.INT32: "tensor(int32)",
    TensorProto.INT64: "tensor(int64)",
    TensorProto.UINT8: "tensor(uint8)",
    TensorProto.UINT16: "tensor(uint16)",
    TensorProto.UINT32: "tensor(uint32)",
    TensorProto.UINT64: "tensor(uint64)",
    TensorProto.BOOL: "tensor(bool)",
    TensorProto.STRING: "tensor(string)",
}

STRING = TensorProto.STRING
# Strings are numpy object arrays of str (bytes accepted in feeds); not in ONNX_TO_NUMPY, which
# lists the types whose bytes numpy views without a copy.
SUPPORTED = set(ONNX_TO_NUMPY) | {BFLOAT16, STRING}


def onnx_type_name(code: int) -> str:
    return ONNX_TYPE_NAMES.get(code, f"tensor(<{code}>)")


def value_type_name(code: int, kind: int = 0, optional: bool = False) -> str:
    """onnxruntime's name of a value type: 'tensor(float)', 'seq(tensor(float))',
    'optional(tensor(int64))', 'optional(seq(tensor(string)))'."""
    name = onnx_type_name(code)
    if kind == 1:
        name = f"seq({name})"
    return f"optional({name})" if optional else name
