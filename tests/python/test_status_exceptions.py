"""Every engine status code reaches its Python exception class from every binding file of _C.

csrc/python/status_exceptions.cc holds the one mapping; module.cc (sessions, graphs) and
optim_bindings.cc (FusedAdam and the multi-tensor ops) both raise through it. The test hooks
`_raise_status_from_*_binding` fail the way their file's bindings fail; the real entry points
below them show the same classes arriving from actual failures.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper

from torch_ort_backend._engine import C as _C
from torch_ort_backend.session import InferenceSession

# tob::StatusCode (csrc/core/status.h) -> the class and the builtin it must also be.
EXPECTED = {
    1: (_C.InvalidArgumentError, ValueError),
    2: (_C.InvalidModelError, ValueError),
    3: (_C.NotImplementedOpError, NotImplementedError),
    4: (_C.OutOfMemoryError, MemoryError),
    5: (_C.KernelError, RuntimeError),
    6: (_C.OpNotAllowedError, PermissionError),
}
ENTRY_POINTS = ["_raise_status_from_session_binding", "_raise_status_from_optim_binding"]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_each_status_code_reaches_its_class(entry, code):
    cls, builtin = EXPECTED[code]
    with pytest.raises(cls, match="culprit node 'n1'") as info:
        getattr(_C, entry)(code, "culprit node 'n1'")
    assert type(info.value) is cls
    assert isinstance(info.value, _C.EngineError) and isinstance(info.value, builtin)


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_internal_errors_are_engine_errors(entry):
    with pytest.raises(_C.EngineError, match="invariant") as info:
        getattr(_C, entry)(-1, "invariant")
    assert type(info.value) is _C.EngineError


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_messages_that_are_not_utf8_still_raise(entry):
    # Model bytes quoted in a message must not turn the error into a decoding failure.
    with pytest.raises(_C.InvalidModelError, match="attribute '\ufffd'"):
        getattr(_C, entry)(2, b"attribute '\xff'")


def test_session_binding_real_failure_is_not_implemented_op_error():
    node = helper.make_node("NoSuchOp", ["x"], ["y"], name="mystery", domain="custom.domain")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("custom.domain", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    with pytest.raises(_C.NotImplementedOpError, match="NoSuchOp"):
        InferenceSession(model)


def test_optim_binding_real_failure_is_invalid_argument_error():
    p = np.ones(4, np.float32)
    with pytest.raises(_C.InvalidArgumentError):
        # Four parameters but no gradients: the lists must have one length.
        _C.multi_tensor_adam(1, [p.ctypes.data], [], [], [], [4], 1e-3, 0.9, 0.999, 1e-8, 0.0, 1, True, 0)
