"""ORTModule: onnxruntime-training's drop-in wrapper, running the wrapped module through the "ort"
torch.compile backend.

Transparency comes from sharing, not copying: the ORTModule holds the wrapped module's own
``_parameters``, ``_buffers`` and ``_modules`` dictionaries. So everything nn.Module derives from
them (parameters(), named_buffers(), state_dict keys, a parent module's recursion, optimizers)
sees exactly the wrapped module's names, and a checkpoint moves between an ORTModule and the plain
module without renaming. What nn.Module keeps on the top module itself (train/eval, device and
dtype moves, state-dict hooks) is delegated to the wrapped module; other attributes are forwarded
to it.

As onnxruntime-training documented (its PRs 6777 and 8798, and the API reference): `forward`
carries the wrapped forward's signature (inspect.signature, which HuggingFace reads to pick batch
keys), `.module` is the wrapped module, and the wrapped module's own methods are bound to the
ORTModule, so that `self(...)` inside them runs through the engine; a method of the wrapped module
that the ORTModule cannot honour draws one warning naming it.

Each call: the inputs are checked (input_checks), then the wrapped module runs under
torch.compile with the backend bound to this ORTModule's options. TorchDynamo guards every value
the graph depends on (non-tensor arguments, requires_grad, dtypes, the training flag), so a change
re-compiles instead of reusing a stale graph. In eval mode a call runs the inference graph (no
autograd record), as onnxruntime-training did, unless an input tensor requires grad.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import types
import warnings
from typing import Any, Callable, Iterator, Mapping

import torch
from torch import nn

from ..backend import ort_backend
from ..errors import FallbackError, UnsupportedDataError, UnsupportedTorchModelError
from ..fallback import FallbackManager
from ..log_config import configure_logging, log_level_requested
from ..options import SPEC, BackendOptions, resolve
from .debug_options import DebugOptions
from .input_checks import check_inputs, check_module

logger = logging.getLogger("torch_ort_backend")

# One backend callable per distinct set of options, so that ORTModules of one class with the same
# options share TorchDynamo's cache entries instead of each adding its own (dynamo caps the
# entries per code object and runs eager past the cap).
_BACKENDS: dict[tuple, Callable] = {}
_BACKENDS_LOCK = threading.Lock()


def _backend_for(options: Mapping[str, Any]) -> Callable:
    key = tuple(sorted((name, repr(value)) for name, value in options.items()))
    with _BACKENDS_LOCK:
        backend = _BACKENDS.get(key)
        if backend is None:
            backend = functools.partial(ort_backend, options=dict(options))
            _BACKENDS[key] = backend
    return backend


_KNOWN_VARIABLES = {env for env, _ in SPEC.values() if env}
_WARNED_VARIABLES: set[str] = set()


def _warn_about_unused_variables() -> None:
    """onnxruntime-training had many more ORTMODULE_* switches (docs/ortmodule.md); one that is set
    but means nothing here is said once, so a user does not believe it took effect."""
    for name in sorted(os.environ):
        if name.startswith("ORTMODULE_") and name not in _KNOWN_VARIABLES and name not in _WARNED_VARIABLES:
            _WARNED_VARIABLES.add(name)
            warnings.warn(f"{name} is an onnxruntime-training variable torch_ort_backend does not use "
                          f"(see docs/ortmodule.md); it has no effect", UserWarning, stacklevel=3)


def _merge_options(debug_options: DebugOptions, options: Mapping[str, Any] | None, explicit: bool) -> dict:
    merged = debug_options.backend_options() if explicit else {}
    if options is None:
        return merged
    if not isinstance(options, Mapping):
        raise ValueError(f"ORTModule: options must be a dict of backend options, got {type(options).__name__}")
    overlap = sorted(set(merged) & set(options))
    if overlap:
        raise ValueError(f"ORTModule: {', '.join(overlap)} given both in DebugOptions and in options; "
                         f"set each in one place")
    merged.update(options)
    return merged


class ORTModule(nn.Module):
    """Trains and evaluates `module` through the "ort" backend.

    Args:
        module: the nn.Module to run. torch.nn.DataParallel is not supported
            (UnsupportedTorchModelError, which the default fallback policy turns into running the
            module in eager PyTorch with one FallbackWarning).
        debug_options: a DebugOptions (log level, saved ONNX models).
        options: other options of the "ort" backend (torch_ort_backend.options.SPEC), e.g.
            ``{"intra_op_threads": 4, "enable_profiling": True}``; an extension of
            onnxruntime-training's signature.

    The ORTMODULE_* environment variables override both, as in onnxruntime-training. Invalid
    options or variables raise ValueError here, naming what they accept.
    """

    def __init__(self, module: nn.Module, debug_options: DebugOptions | None = None, *,
                 options: Mapping[str, Any] | None = None) -> None:
        if not isinstance(module, nn.Module):
            raise TypeError(f"ORTModule wraps a torch.nn.Module, got {type(module).__name__}")
        if debug_options is not None and not isinstance(debug_options, DebugOptions):
            raise ValueError(f"ORTModule: debug_options must be a DebugOptions, got {type(debug_options).__name__}")
        explicit = debug_options is not None
        debug_options = debug_options or DebugOptions()
        backend_options = _merge_options(debug_options, options, explicit)
        resolved: BackendOptions = resolve(backend_options)
        _warn_about_unused_variables()
        if log_level_requested(backend_options):
            configure_logging(resolved.log_level)
        super().__init__()
        own = self.__dict__
        own["_original_module"] = module
        own["_debug_options"] = debug_options
        own["_backend_options"] = backend_options
        own["_fallback"] = FallbackManager(resolved.fallback_policy, resolved.fallback_retry,
                                           f"ORTModule({type(module).__name__})")
        own["_retry"] = resolved.fallback_retry
        own["_eager"] = False
        own["_compiled"] = None
        # The shared dictionaries (see the module docstring).
        own["_parameters"] = module._parameters
        own["_buffers"] = module._buffers
        own["_modules"] = module._modules
        own["_non_persistent_buffers_set"] = module._non_persistent_buffers_set
        own["training"] = module.training
        own["_bound_names"] = ()
        try:
            check_module(module)
        except UnsupportedTorchModelError as e:
            if not self._fallback.should_fall_back(e):
                raise
            own["_eager"] = True
        self._bind_user_methods(warn=not own["_eager"])
        logger.info("ORTModule(%s): opset %d, fallback policy %s, log level %s%s", type(module).__name__,
                    resolved.opset, resolved.fallback_policy.name or int(resolved.fallback_policy),
                    resolved.log_level,
                    f", saving ONNX models as {resolved.onnx_prefix}_* in {resolved.save_path or '.'}"
                    if resolved.save_onnx else "")

    # ---- the call ----
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Runs the wrapped module's forward through the "ort" backend. Each instance's `forward`
        has the wrapped forward's signature (inspect.signature), as in onnxruntime-training."""
        return self._run(args, kwargs)

    def _run(self, args: tuple, kwargs: dict) -> Any:
        module = self._original_module
        # Inside an outer compiled region (an ORTModule within an ORTModule or torch.compile) the
        # outer graph takes this module in whole.
        if self._eager or torch.compiler.is_compiling():
            return module(*args, **kwargs)
        try:
            input_requires_grad = check_inputs(module.forward, args, kwargs)
        except UnsupportedDataError as e:
            return self._fall_back(e, args, kwargs)
        compiled = self._compiled_module()
        try:
            if self.training or not torch.is_grad_enabled() or input_requires_grad:
                return compiled(*args, **kwargs)
            with torch.no_grad():
                return compiled(*args, **kwargs)
        except torch._dynamo.exc.BackendCompilerFailed as e:
            inner = getattr(e, "inner_exception", None)
            if isinstance(inner, FallbackError):
                # Ours, raised because the policy said so: the user sees our class, not dynamo's wrapper.
                raise inner
            raise

    def _fall_back(self, error: FallbackError, args: tuple, kwargs: dict) -> Any:
        if not self._fallback.should_fall_back(error):
            raise error
        if not self._retry:
            self.__dict__["_eager"] = True
        return self._original_module(*args, **kwargs)

    def _compiled_module(self) -> Callable:
        compiled = self.__dict__["_compiled"]
        if compiled is None:
            compiled = torch.compile(self._original_module, backend=_backend_for(self._backend_options))
            self.__dict__["_compiled"] = compiled
        return compiled

    # ---- the wrapped module's methods ----
    def _bind_user_methods(self, warn: bool) -> None:
        """Binds `forward` (with the wrapped forward's signature) and the wrapped module's own methods
        to this ORTModule (see _user_methods); with `warn`, one UserWarning lists what cannot be
        honoured."""
        own = self.__dict__
        original = own["_original_module"]

        @functools.wraps(original.forward)
        def forward(*args: Any, **kwargs: Any) -> Any:
            return ORTModule._run(self, args, kwargs)

        own["forward"] = forward
        methods, collisions = _user_methods(original)
        for name, function in methods.items():
            own[name] = types.MethodType(function, self)
        own["_bound_names"] = ("forward", *methods)
        if warn and collisions:
            warnings.warn(f"ORTModule({type(original).__name__}): {'; '.join(collisions)}", UserWarning, stacklevel=3)

    # ---- what ORTModule adds ----
    @property
    def module(self) -> nn.Module:
        """The wrapped torch.nn.Module (onnxruntime-training's `ORTModule.module`; HuggingFace
        Trainer unwraps models through it). Calling it runs eager PyTorch."""
        return self._original_module

    @property
    def original_module(self) -> nn.Module:
        """The wrapped module (its forward runs in eager PyTorch when called directly)."""
        return self._original_module

    @property
    def debug_options(self) -> DebugOptions:
        return self._debug_options

    @property
    def runs_eager(self) -> bool:
        """True once the fallback policy sent this module to eager PyTorch for good."""
        return self._eager

    # ---- nn.Module state kept on the top module: delegated ----
    def train(self, mode: bool = True) -> "ORTModule":
        if not isinstance(mode, bool):
            raise ValueError(f"training mode is expected to be boolean, got {mode!r}")
        self.__dict__["training"] = mode
        self._original_module.train(mode)
        return self

    def eval(self) -> "ORTModule":
        self._original_module.eval()
        self.__dict__["training"] = self._original_module.training
        return self

    # Device and dtype moves call the wrapped module's own (possibly overridden) method and return
    # the ORTModule, so `model = model.to(device)` keeps the wrapper.
    def to(self, *args: Any, **kwargs: Any) -> "ORTModule":
        self._original_module.to(*args, **kwargs)
        return self

    def cuda(self, device: Any = None) -> "ORTModule":
        self._original_module.cuda(device)
        return self

    def cpu(self) -> "ORTModule":
        self._original_module.cpu()
        return self

    def type(self, dst_type: Any) -> "ORTModule":
        self._original_module.type(dst_type)
        return self

    def float(self) -> "ORTModule":
        self._original_module.float()
        return self

    def double(self) -> "ORTModule":
        self._original_module.double()
        return self

    def half(self) -> "ORTModule":
        self._original_module.half()
        return self

    def bfloat16(self) -> "ORTModule":
        self._original_module.bfloat16()
        return self

    def _apply(self, fn: Callable, recurse: bool = True) -> "ORTModule":
        self._original_module._apply(fn, recurse)
        return self

    def apply(self, fn: Callable[[nn.Module], None]) -> "ORTModule":
        self._original_module.apply(fn)
        return self

    def state_dict(self, *args: Any, **kwargs: Any) -> dict:
        return self._original_module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False):
        return self._original_module.load_state_dict(state_dict, strict=strict, assign=assign)

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        self._original_module._save_to_state_dict(destination, prefix, keep_vars)

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        self._original_module._load_from_state_dict(*args, **kwargs)

    def named_modules(self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True
                      ) -> Iterator[tuple[str, nn.Module]]:
        # The wrapped module stands where the ORTModule is, so names and types match the plain model.
        return self._original_module.named_modules(memo, prefix, remove_duplicate)

    # ---- attributes: forwarded ----
    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            original = self.__dict__.get("_original_module")
            if original is None or (name.startswith("__") and name.endswith("__")):
                raise
            return getattr(original, name)

    def __setattr__(self, name: str, value: Any) -> None:
        own = self.__dict__
        original = own.get("_original_module")
        if original is None or name in own:
            super().__setattr__(name, value)
        else:
            # The wrapped module registers parameters, buffers and submodules in the shared
            # dictionaries, and its forward reads plain attributes from itself.
            setattr(original, name, value)

    def __delattr__(self, name: str) -> None:
        own = self.__dict__
        original = own.get("_original_module")
        if original is None or name in own:
            super().__delattr__(name)
        else:
            delattr(original, name)

    def __getitem__(self, key: Any) -> Any:
        # Special methods are looked up on the type, so indexing (nn.Sequential, nn.ModuleList)
        # needs its own forwarding.
        original = self._original_module
        if not hasattr(type(original), "__getitem__"):
            raise TypeError(f"the module wrapped by this ORTModule ({type(original).__name__}) is not subscriptable")
        return original[key]

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(self._original_module)))

    def __repr__(self) -> str:
        inner = repr(self._original_module).replace("\n", "\n  ")
        return f"ORTModule(\n  {inner}\n)"

    # ---- pickling: the compiled callable and the bound methods are rebuilt ----
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_compiled"] = None
        for name in state.pop("_bound_names", ()):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self.__dict__["_compiled"] = None
        self._bind_user_methods(warn=False)


# What ORTModule does with the wrapped module's own definition of an nn.Module method: these call the
# wrapped module's version (delegation above, or repr for extra_repr); `forward` is the one it runs.
_HONOURED = frozenset({"forward", "train", "eval", "_apply", "apply", "to", "cuda", "cpu", "type", "float", "double",
                       "half", "bfloat16", "state_dict", "load_state_dict", "_save_to_state_dict",
                       "_load_from_state_dict", "named_modules", "extra_repr"})
_NN_MODULE_NAMES = frozenset(dir(nn.Module))
# Names ORTModule itself defines (beyond nn.Module's) or keeps in its instance dict.
_ORTMODULE_NAMES = frozenset(set(vars(ORTModule)) - _NN_MODULE_NAMES) | {
    "_original_module", "_debug_options", "_backend_options", "_fallback", "_retry", "_eager", "_compiled",
    "_bound_names"}


def _user_methods(module: nn.Module) -> tuple[dict[str, types.FunctionType], list[str]]:
    """The wrapped module's own methods to bind to the ORTModule, and what cannot be honoured.

    A method defined by the module's class (or a base or mixin other than nn.Module) and not by
    nn.Module is bound to the ORTModule, so `self(...)` and `self.forward(...)` inside it run through
    the engine and its attributes resolve through the ORTModule, as onnxruntime-training did. Not
    bound: methods that call zero-argument super() (super() needs an instance of their own class, so
    they stay with the wrapped module), dunders, and `forward` itself. Reported: the module's
    overrides of nn.Module methods the ORTModule does not delegate (its own nn.Module method runs),
    and attributes whose names the ORTModule itself uses (those return the ORTModule's)."""
    methods: dict[str, types.FunctionType] = {}
    seen: set[str] = set()
    collisions: list[str] = []
    for cls in type(module).__mro__:
        if cls in (nn.Module, object):
            continue
        for name, value in vars(cls).items():
            if name in seen or (name.startswith("__") and name.endswith("__")):
                continue
            seen.add(name)
            if name in _ORTMODULE_NAMES:
                collisions.append(f"its attribute '{name}' is hidden by ORTModule's own '{name}' "
                                  f"(reach it through .module.{name})")
            elif name in _NN_MODULE_NAMES:
                if name not in _HONOURED and callable(value):
                    collisions.append(f"its override of nn.Module.{name}() is not called through the ORTModule "
                                      f"(call .module.{name}() for it)")
            elif isinstance(value, types.FunctionType) and "__class__" not in value.__code__.co_freevars:
                methods[name] = value
    attributes = [*vars(module), *module._modules, *module._parameters, *module._buffers]
    for name in dict.fromkeys(attributes):
        if name in _ORTMODULE_NAMES and name not in seen:
            collisions.append(f"its attribute '{name}' is hidden by ORTModule's own '{name}' "
                              f"(reach it through .module.{name})")
    return methods, collisions
