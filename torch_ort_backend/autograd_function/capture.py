"""Capture of ``SomeFunction.apply(...)`` while TorchDynamo traces a region compiled by "ort".

TorchDynamo inlines a torch.autograd.Function (traces its forward and backward into the graph) and
breaks the graph when it cannot (numpy, .item(), data-dependent Python). For a region whose backend
is "ort" (torch.compile or ORTModule), we instead write one opaque ``tob::python_op`` call into the
graph: AOTAutograd keeps it (and its ``tob::python_op_grad`` backward) as one op each, the exporter
emits PythonOp / PythonOpGrad, and the Function's own forward and backward run at run time. Regions
compiled by any other backend are untouched.

The hook is TorchDynamo's AutogradFunctionVariable.call_method (where every ``.apply`` of a
Function lands); a call this module cannot carry (a tensor subclass argument, an object created
inside the region, outputs that are not tensors) goes to TorchDynamo's own handling, with a log line.

Arguments: tensors become the op's inputs; None, bools, ints, floats, strings, dtypes, devices and
tuples or lists of them are constants written into the node (TorchDynamo guards them, so another
value compiles again); SymInts are specialized the same way; any other object that comes from
outside the region (a module, a function, a config object) is passed by reference, guarded on its
identity and kept alive.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any

import torch

from . import custom_ops
from .probe import probe
from .registry import encode_constants, qualified_name, register_function

logger = logging.getLogger("torch_ort_backend")

CHECKPOINT_FUNCTION = "torch.utils.checkpoint.CheckpointFunction"
_PLAIN = (type(None), bool, int, float, str, torch.dtype, torch.device)

_state = {"enabled": True, "original": None}


def set_enabled(enabled: bool) -> None:
    _state["enabled"] = bool(enabled)


def is_enabled() -> bool:
    return _state["enabled"]


# ---- which regions are ours ----
def _unwrap_backend(compiler_fn: Any) -> tuple[Any, Any]:
    """The backend function under TorchDynamo's and torch.compile's wrappers, and the options it
    will be called with."""
    options = None
    fn = compiler_fn
    for _ in range(16):
        if isinstance(fn, functools.partial):
            options = fn.keywords.get("options", options)
            fn = fn.func
        elif hasattr(fn, "_torchdynamo_orig_backend"):
            fn = fn._torchdynamo_orig_backend
        elif type(fn).__name__ == "_TorchCompileWrapper":
            options = getattr(fn, "kwargs", {}).get("options", options)
            fn = fn.compiler_fn
        else:
            break
    return fn, options


def backend_options(compiler_fn: Any):
    """The resolved options when `compiler_fn` is the "ort" backend, else None."""
    from ..backend import onnxrt_backend, ort_backend
    from ..options import resolve

    fn, options = _unwrap_backend(compiler_fn)
    if fn is not ort_backend and fn is not onnxrt_backend:
        return None
    try:
        return resolve(options)
    except ValueError:
        return None  # the backend itself reports invalid options


def captures(opts, fn_cls: type) -> bool:
    """Whether `fn_cls` becomes a PythonOp under these options (and the process-wide switch)."""
    if not _state["enabled"] or opts.disable_custom_autograd_support:
        return False
    return qualified_name(fn_cls) not in opts.skipped_autograd_functions


# ---- one call ----
class _NotCapturable(Exception):
    pass


@dataclass
class _Call:
    convention: str = ""
    tensors: list = field(default_factory=list)  # TensorVariables
    fakes: list = field(default_factory=list)
    requires_grad: list = field(default_factory=list)
    constants: list = field(default_factory=list)


def _is_plain(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_is_plain(v) for v in value)
    return isinstance(value, _PLAIN)


def _object_of(vt: Any) -> Any:
    from torch._dynamo.variables.functions import UserFunctionVariable
    from torch._dynamo.variables.nn_module import NNModuleVariable
    from torch._dynamo.variables.user_defined import UserDefinedClassVariable, UserDefinedObjectVariable

    if isinstance(vt, UserFunctionVariable):
        return vt.get_function()
    if isinstance(vt, (NNModuleVariable, UserDefinedObjectVariable, UserDefinedClassVariable)):
        return vt.value
    raise _NotCapturable(f"an argument of kind {type(vt).__name__} cannot be passed to a PythonOp")


def _by_reference(vt: Any, value: Any) -> Any:
    from torch._dynamo.guards import GuardBuilder, install_guard

    if vt.source is None:
        raise _NotCapturable(f"the {type(value).__name__} argument is created inside the compiled region; "
                             f"only objects from outside it can be passed by reference")
    install_guard(vt.source.make_guard(GuardBuilder.ID_MATCH))
    return value


def _classify(tx: Any, args: list) -> _Call:
    from torch._dynamo.variables.tensor import SymNodeVariable, TensorVariable

    call = _Call()
    grad = torch.is_grad_enabled()
    for vt in args:
        vt = vt.realize()
        if vt.is_tensor():
            if type(vt) is not TensorVariable:
                raise _NotCapturable(f"tensor argument of kind {type(vt).__name__} (a tensor subclass?)")
            fake = vt.as_proxy().node.meta.get("example_value")
            if not isinstance(fake, torch.Tensor):
                raise _NotCapturable("a tensor argument has no example value")
            call.convention += "d"
            call.tensors.append(vt)
            call.fakes.append(fake)
            call.requires_grad.append(bool(grad and vt.requires_grad))
            continue
        call.convention += "c"
        if isinstance(vt, SymNodeVariable):
            call.constants.append(vt.evaluate_expr(tx.output))
        elif vt.is_python_constant():
            value = vt.as_python_constant()
            call.constants.append(value if _is_plain(value) else _by_reference(vt, value))
        else:
            call.constants.append(_by_reference(vt, _object_of(vt)))
    return call


def capture_apply(var: Any, tx: Any, args: list, kwargs: dict) -> Any:
    """The VariableTracker of ``var.fn_cls.apply(*args, **kwargs)`` as a python_op call, or None to
    let TorchDynamo handle the call."""
    opts = backend_options(tx.output.compiler_fn)
    fn_cls = var.fn_cls
    if opts is None or not captures(opts, fn_cls):
        return None
    if kwargs:
        args = var._resolve_kwargs(args, kwargs)
        if args is None:
            return None
    name = qualified_name(fn_cls)
    try:
        call = _classify(tx, list(args))
        name = register_function(fn_cls)
        constant_args = encode_constants(call.constants)
        with tx.fake_mode:
            result = probe(fn_cls, name, call.convention, constant_args, call.constants, call.fakes,
                           call.requires_grad)
    except Exception as e:  # noqa: BLE001 - anything we cannot carry is TorchDynamo's to handle
        logger.warning("autograd.Function %s is traced by TorchDynamo, not run as a PythonOp: %s", name, e)
        return None
    return _emit(tx, name, call, constant_args, result)


def _emit(tx: Any, name: str, call: _Call, constant_args: str, result: Any) -> Any:
    from torch._dynamo.variables.builder import wrap_fx_proxy
    from torch._dynamo.variables.lists import TupleVariable

    proxy = tx.output.create_proxy(
        "call_function", custom_ops.python_op(),
        (name, call.convention, constant_args, [t.as_proxy() for t in call.tensors],
         [int(r) for r in call.requires_grad], list(result.non_differentiable),
         [i for _, i in result.inplace]), {})
    out = wrap_fx_proxy(tx, proxy)
    items = list(out.items[1:])
    for j, i in result.inplace:
        # mark_dirty: the op is functional; the input takes the new value as eager's in-place write did.
        call.tensors[i].call_method(tx, "copy_", [items[j]], {})
        items[j] = call.tensors[i]
    return items[0] if result.single else TupleVariable(items)


# ---- the hook ----
def install() -> None:
    """Routes Function.apply through capture_apply while TorchDynamo traces (idempotent)."""
    if _state["original"] is not None:
        return
    try:
        from torch._dynamo.variables.misc import AutogradFunctionVariable
    except ImportError as e:  # a torch without TorchDynamo: Functions run as torch runs them
        logger.warning("PythonOp support is off: TorchDynamo's AutogradFunctionVariable is unavailable (%s)", e)
        return
    original = AutogradFunctionVariable.call_method
    _state["original"] = original

    def call_method(self, tx, name, args, kwargs):
        if name == "apply":
            captured = capture_apply(self, tx, list(args), dict(kwargs))
            if captured is not None:
                return captured
        return original(self, tx, name, args, kwargs)

    call_method.__wrapped__ = original
    AutogradFunctionVariable.call_method = call_method
