"""Element types: ONNX TensorProto codes (the engine's own codes), numpy and torch equivalents."""

from __future__ import annotations

import ml_dtypes  # onnx's own dependency: numpy has no bfloat16, float8, int4, ...
import numpy as np
from onnx import TensorProto

BFLOAT16 = TensorProto.BFLOAT16

# The one-byte float8 types: stored as in numpy (ml_dtypes), one byte per element.
FLOAT8 = {
    TensorProto.FLOAT8E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    TensorProto.FLOAT8E4M3FNUZ: np.dtype(ml_dtypes.float8_e4m3fnuz),
    TensorProto.FLOAT8E5M2: np.dtype(ml_dtypes.float8_e5m2),
    TensorProto.FLOAT8E5M2FNUZ: np.dtype(ml_dtypes.float8_e5m2fnuz),
    TensorProto.FLOAT8E8M0: np.dtype(ml_dtypes.float8_e8m0fnu),
}
# The packed sub-byte types and their width: the engine stores them packed (onnx's layout, the
# first element in the low bits); numpy (ml_dtypes) holds one element per byte.
PACKED_BITS = {
    TensorProto.UINT4: 4,
    TensorProto.INT4: 4,
    TensorProto.FLOAT4E2M1: 4,
    TensorProto.UINT2: 2,
    TensorProto.INT2: 2,
}
PACKED = {
    TensorProto.UINT4: np.dtype(ml_dtypes.uint4),
    TensorProto.INT4: np.dtype(ml_dtypes.int4),
    TensorProto.FLOAT4E2M1: np.dtype(ml_dtypes.float4_e2m1fn),
    TensorProto.UINT2: np.dtype(ml_dtypes.uint2),
    TensorProto.INT2: np.dtype(ml_dtypes.int2),
}
LOW_PRECISION_TO_NUMPY = {**FLOAT8, **PACKED}

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
    TensorProto.FLOAT8E4M3FN: "tensor(float8e4m3fn)",
    TensorProto.FLOAT8E4M3FNUZ: "tensor(float8e4m3fnuz)",
    TensorProto.FLOAT8E5M2: "tensor(float8e5m2)",
    TensorProto.FLOAT8E5M2FNUZ: "tensor(float8e5m2fnuz)",
    TensorProto.UINT4: "tensor(uint4)",
    TensorProto.INT4: "tensor(int4)",
    TensorProto.FLOAT4E2M1: "tensor(float4e2m1)",
    TensorProto.FLOAT8E8M0: "tensor(float8e8m0)",
    TensorProto.UINT2: "tensor(uint2)",
    TensorProto.INT2: "tensor(int2)",
    27: "tensor(float6e2m3)",  # onnx 1.23's float6 types: not engine types (no node test uses them)
    28: "tensor(float6e3m2)",
}

STRING = TensorProto.STRING
# Strings are numpy object arrays of str (bytes accepted in feeds); not in ONNX_TO_NUMPY, which
# lists the types whose bytes numpy views without a copy.
SUPPORTED = set(ONNX_TO_NUMPY) | {BFLOAT16, STRING} | set(LOW_PRECISION_TO_NUMPY)


def onnx_type_name(code: int) -> str:
    return ONNX_TYPE_NAMES.get(code, f"tensor(<{code}>)")


def value_type_name(code: int, kind: int = 0, optional: bool = False) -> str:
    """onnxruntime's name of a value type: 'tensor(float)', 'seq(tensor(float))',
    'optional(tensor(int64))', 'optional(seq(tensor(string)))'."""
    name = onnx_type_name(code)
    if kind == 1:
        name = f"seq({name})"
    return f"optional({name})" if optional else name
