"""InferenceSession: run an ONNX model on the engine, numpy or torch tensors in and out."""

from __future__ import annotations

import enum
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, Collection, Iterable, Sequence

import numpy as np

from . import dtypes
from ._engine import C, InvalidArgumentError
from .onnx_loader import ModelLike, build_graph, parse_model

logger = logging.getLogger("torch_ort_backend")


class GraphOptimizationLevel(enum.IntEnum):
    """Same names and values as onnxruntime's GraphOptimizationLevel."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


class SessionOptions:
    """Options for one InferenceSession; every value is validated when it is set."""

    def __init__(self) -> None:
        # Session state: {state_input: update_output}. After each run, the tensor bound to the
        # graph input state_input (InferenceSession.bind_state) holds the graph output
        # update_output, in its own memory (docs/architecture.md, "State values").
        self.state_updates: dict[str, str] = {}
        self.intra_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.enable_profiling = False
        self.profile_file_prefix = "tob_profile"
        self.optimized_model_filepath = ""
        self.enable_mem_pattern = True
        # Free the run's memory arena after each run instead of keeping it for the next (memory
        # between runs goes back to the system; the next run pays its page faults).
        self.release_arena_after_run = False
        self.verify_each_pass = False
        # ATen nodes may call any torch operator (file readers, custom operators of any library),
        # not only the allow-list of pure tensor operators: only for a model trusted as code
        # (docs/security.md). Graphs compiled by this process's "ort" backend set it themselves.
        self.allow_unsafe_aten_ops = False
        # Cast propagation (the engine's PropagateCastOps pass, docs/architecture.md): off at level -1;
        # strategy 0 NONE, 1 INSERT_AND_REDUCE, 2 FLOOD_FILL (onnxruntime-training's values); allow: op
        # types moved at every level; the low-precision type the casts go to, 'float16' or 'bfloat16'.
        self.propagate_cast_ops_strategy = 2
        self.propagate_cast_ops_level = -1
        self.propagate_cast_ops_allow: list[str] = []
        self.propagate_cast_ops_dtype = "float16"

    def __setattr__(self, name: str, value: Any) -> None:
        validator = _VALIDATORS.get(name)
        if validator is None:
            raise AttributeError(
                f"SessionOptions has no option '{name}'; options are: {', '.join(sorted(_VALIDATORS))}"
            )
        object.__setattr__(self, name, validator(name, value))

    def _to_engine(self) -> "C.SessionOptions":
        o = C.SessionOptions()
        o.state_updates = list(self.state_updates.items())
        # 0: the engine runs on torch's intra-op pool at torch's current thread count (it follows
        # torch.set_num_threads), so the engine and torch never fight over cores.
        o.intra_op_threads = self.intra_op_num_threads
        o.optimization_level = int(self.graph_optimization_level)
        o.enable_profiling = self.enable_profiling
        o.profile_file_prefix = self.profile_file_prefix
        o.enable_memory_pattern = self.enable_mem_pattern
        o.release_arena_after_run = self.release_arena_after_run
        o.verify_each_pass = self.verify_each_pass
        o.allow_unsafe_aten_ops = self.allow_unsafe_aten_ops
        low = _ONNX_LOW_PRECISION[self.propagate_cast_ops_dtype]
        o.propagate_cast_ops = (int(self.propagate_cast_ops_strategy), self.propagate_cast_ops_level,
                                list(self.propagate_cast_ops_allow), low)
        return o


def _state_updates(name: str, v: Any) -> dict[str, str]:
    if not isinstance(v, dict):
        raise ValueError(
            f"SessionOptions.{name} must be a dict {{state_input: update_output}} of graph input and output "
            f"names, got {type(v).__name__}"
        )
    for state, update in v.items():
        if not isinstance(state, str) or not state or not isinstance(update, str) or not update:
            raise ValueError(
                f"SessionOptions.{name}: entry {state!r}: {update!r} must map a graph input name to a graph "
                "output name (non-empty strings)"
            )
    return dict(v)


def _non_negative_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"SessionOptions.{name} must be an int >= 0 (0 = torch's thread count), got {v!r}")
    return v


def _opt_level(name: str, v: Any) -> GraphOptimizationLevel:
    try:
        return GraphOptimizationLevel(v)
    except ValueError:
        allowed = ", ".join(f"{m.name}={m.value}" for m in GraphOptimizationLevel)
        raise ValueError(f"SessionOptions.{name} must be one of {allowed}; got {v!r}") from None


def _bool(name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"SessionOptions.{name} must be a bool, got {v!r}")
    return v


def _str(name: str, v: Any) -> str:
    if not isinstance(v, (str, os.PathLike)):
        raise ValueError(f"SessionOptions.{name} must be a string path, got {v!r}")
    return os.fspath(v)


def _cast_strategy(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or int(v) not in (0, 1, 2):
        raise ValueError(f"SessionOptions.{name} must be 0 (NONE), 1 (INSERT_AND_REDUCE) or 2 (FLOOD_FILL), got {v!r}")
    return int(v)


def _cast_level(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < -1:
        raise ValueError(f"SessionOptions.{name} must be an int >= -1 (-1: cast propagation off), got {v!r}")
    return v


def _op_types(name: str, v: Any) -> list[str]:
    if isinstance(v, str) or not isinstance(v, (list, tuple)) or not all(isinstance(o, str) and o for o in v):
        raise ValueError(f"SessionOptions.{name} must be a list of op types (non-empty strings), got {v!r}")
    return list(v)


_ONNX_LOW_PRECISION = {"float16": 10, "bfloat16": 16}  # TensorProto codes


def _low_precision(name: str, v: Any) -> str:
    """'float16' or 'bfloat16' (a torch dtype of either is accepted)."""
    text = str(v).removeprefix("torch.")
    if text not in _ONNX_LOW_PRECISION:
        raise ValueError(f"SessionOptions.{name} must be 'float16' or 'bfloat16' (or the torch dtype), got {v!r}")
    return text


_VALIDATORS = {
    "state_updates": _state_updates,
    "intra_op_num_threads": _non_negative_int,
    "graph_optimization_level": _opt_level,
    "enable_profiling": _bool,
    "profile_file_prefix": _str,
    "optimized_model_filepath": _str,
    "enable_mem_pattern": _bool,
    "release_arena_after_run": _bool,
    "verify_each_pass": _bool,
    "allow_unsafe_aten_ops": _bool,
    "propagate_cast_ops_strategy": _cast_strategy,
    "propagate_cast_ops_level": _cast_level,
    "propagate_cast_ops_allow": _op_types,
    "propagate_cast_ops_dtype": _low_precision,
}


@dataclass(frozen=True)
class NodeArg:
    """An input or output of the model, as onnxruntime describes it."""

    name: str
    type: str
    shape: list | None


def available_providers() -> list[str]:
    providers = [C.CPU_PROVIDER]
    if C.built_with_cuda:
        providers.insert(0, C.CUDA_PROVIDER)
    return providers


class InferenceSession:
    """Runs an ONNX model on the engine.

    ``model`` is a path, serialized bytes or an onnx.ModelProto. Feeds may be numpy arrays or
    torch tensors (passed without a copy); outputs are torch tensors when any feed is a torch
    tensor, numpy arrays otherwise, and share engine memory without a copy.
    """

    def __init__(
        self,
        model: ModelLike,
        sess_options: SessionOptions | None = None,
        providers: Sequence[str] | None = None,
        *,
        _exported_here: bool = False,
    ) -> None:
        # _exported_here: a ModelProto the backend's exporter made in this process, not checked
        # again by onnx's checker (onnx_loader.parse_model)
        if sess_options is not None and not isinstance(sess_options, SessionOptions):
            raise TypeError(f"sess_options must be a SessionOptions, got {type(sess_options).__name__}")
        self._options = sess_options or SessionOptions()
        proto = parse_model(model, check=not _exported_here)
        engine_options = self._options._to_engine()
        engine_options.providers = self._resolve_providers(providers)
        self._providers = list(engine_options.providers)
        self._session = C.Session(build_graph(proto), engine_options)
        for line in self._session.log():
            logger.debug("%s", line)
        self._inputs = [
            NodeArg(n, dtypes.value_type_name(t, kind, opt), s)
            for (n, t, s), (kind, opt) in zip(self._session.inputs(), self._session.input_kinds())
        ]
        self._outputs = [
            NodeArg(n, dtypes.value_type_name(t, kind, opt), s)
            for (n, t, s), (kind, opt) in zip(self._session.outputs(), self._session.output_kinds())
        ]
        # (kind, optional) of each input by name: sequences are fed as lists, optionals may be None.
        self._input_kinds = {a.name: k for a, k in zip(self._inputs, self._session.input_kinds())}
        self._opset_imports = {op.domain: op.version for op in proto.opset_import}
        self._state_is_torch: dict[str, bool] = {}
        # The compiled graph whose last run last_run_stats() describes (memory_stats(), step_memory.py)
        self._peaks_owner = None
        if self._options.optimized_model_filepath:
            self._save_optimized(proto)

    def _save_optimized(self, source) -> None:
        import onnx

        from .optimized_model import optimized_model_proto

        path = self._options.optimized_model_filepath
        onnx.save(optimized_model_proto(self._session.optimized_graph(), source), path)
        logger.info("saved the optimized model to %s", path)

    @staticmethod
    def _resolve_providers(providers: Sequence[str] | None) -> list[str]:
        if providers is None:
            return [C.CPU_PROVIDER]
        names = []
        for p in providers:
            name = p[0] if isinstance(p, tuple) else p
            if name not in available_providers():
                raise ValueError(
                    f"unknown or unavailable execution provider {name!r}; available: {available_providers()}"
                )
            names.append(name)
        return names

    # ---- introspection (onnxruntime-compatible names) ----
    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_providers(self) -> list[str]:
        return list(self._providers) + ([] if C.CPU_PROVIDER in self._providers else [C.CPU_PROVIDER])

    def get_session_options(self) -> SessionOptions:
        return self._options

    def partition_report(self) -> str:
        return self._session.partition_report()

    def applied_passes(self) -> list[str]:
        return self._session.applied_passes()

    def last_run_stats(self) -> dict:
        """Memory of the last run: peak bytes of intermediates, arena size, whether it was planned."""
        return self._session.last_run_stats()

    def end_profiling(self) -> str:
        """Writes the Chrome trace of the runs so far; returns its path ('' if profiling is off)."""
        return self._session.end_profiling()

    # ---- session state ----
    def bind_state(self, name: str, tensor: Any) -> None:
        """Binds graph input ``name`` to ``tensor`` for every later run, without a copy.

        Runs then take the input from the binding (feeding it is an error), and when
        ``SessionOptions.state_updates`` names an update for it, each run writes the new value into
        ``tensor``'s own memory. ``tensor`` is a contiguous CPU torch tensor or a writeable
        C-contiguous numpy array with the input's dtype and shape; binding again replaces it.
        """
        engine_value, is_torch = _to_engine_value(name, tensor, as_state=True)
        self._session.bind_state(name, engine_value)
        self._state_is_torch[name] = is_torch

    def get_state(self, name: str) -> Any:
        """The tensor bound to ``name`` (a torch tensor or numpy array sharing its memory)."""
        return _from_engine(self._session.state(name), self._state_is_torch.get(name, False))

    # ---- running ----
    def run(
        self,
        output_names: Iterable[str] | None,
        input_feed: dict,
        run_options: Any = None,
        *,
        as_torch: bool | None = None,
        donate: Collection[str] = (),
    ) -> list:
        """The outputs named (all of them for None) for ``input_feed`` ({input name: value}).

        Outputs share engine memory: torch tensors when ``as_torch`` is True, numpy arrays when it
        is False, and by default torch tensors when any feed or bound state is one. This is the one
        run path: the compiled graphs of the "ort" backend (compiled_graph.py) call it too.

        String tensors are numpy arrays of dtype object holding str (bytes are accepted in feeds;
        an output is a copy); torch has no string tensors, so a string output with torch outputs is
        an error naming it. A sequence input takes a list of arrays or tensors and a sequence output
        is a list; an optional input takes None for "no value", and an optional output without one
        is None.

        ``donate`` names feeds the caller hands over: they are taken out of ``input_feed``, and the
        engine drops its reference after the feed's last reader in the graph, so the memory goes
        then if nothing else holds the tensor (docs/memory_optimizer.md, "Donated inputs").
        """
        if not isinstance(input_feed, dict):
            raise TypeError(f"input_feed must be a dict of name -> tensor, got {type(input_feed).__name__}")
        names, values, any_torch = [], [], any(self._state_is_torch.values())
        for name, value in input_feed.items():
            kind, optional = self._input_kinds.get(name, (0, False))
            if value is None and optional:
                engine_value, is_torch = None, False
            elif kind == 1 and isinstance(value, (list, tuple)):
                converted = [_to_engine_value(f"{name}[{i}]", v) for i, v in enumerate(value)]
                engine_value = [c[0] for c in converted]
                is_torch = any(c[1] for c in converted)
            else:
                engine_value, is_torch = _to_engine_value(name, value)
            any_torch = any_torch or is_torch
            names.append(name)
            values.append(engine_value)
        value = engine_value = None  # the loop's last feed: a donated one must have no reference left here
        donated = []
        if donate:
            unknown = set(donate) - set(names)
            if unknown:
                raise InvalidArgumentError(f"donate names {sorted(unknown)}, which are not in input_feed")
            donated = [name in donate for name in names]
            for name in donate:
                del input_feed[name]
        if as_torch is None:
            as_torch = any_torch
        fetch = [] if output_names is None else list(output_names)
        results = self._session.run(names, values, fetch, donated)
        fetched_names = fetch or [o.name for o in self._outputs]
        return [_from_engine_value(n, r, as_torch) for n, r in zip(fetched_names, results)]


def _has_storage(t: Any) -> bool:
    """Whether a torch tensor has memory of its own to hand over (a FakeTensor's or a wrapper
    subclass's data pointer is null)."""
    try:
        return t.numel() == 0 or (t.untyped_storage().data_ptr() != 0 and t.data_ptr() != 0)
    except (RuntimeError, NotImplementedError):
        return False


def _to_engine_value(name: str, value: Any, as_state: bool = False):
    """(numpy array or DLPack capsule, came_from_torch).

    A state (``as_state``) is bound by memory: it is never copied, so a value that would need a
    copy (non-contiguous, read-only, a Python scalar) is refused instead.
    """
    kind = "state" if as_state else "input"
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "USO":
            if as_state:
                raise InvalidArgumentError(f"state '{name}': a string tensor cannot be bound as state")
            return _string_array(name, value), False
        if as_state and not (value.flags.c_contiguous and value.flags.writeable):
            raise InvalidArgumentError(
                f"state '{name}': the numpy array must be C-contiguous and writeable (runs update it in place)"
            )
        return _c_contiguous(value), False
    torch = _torch_if_loaded()
    if torch is not None and isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise InvalidArgumentError(
                f"{kind} '{name}' is on {value.device}; this session runs on the CPU (move it with .cpu())"
            )
        t = value.detach()
        if t._is_zerotensor():
            # torch's efficient zeros (autograd's zero gradients) have no memory; their value is zeros
            if as_state:
                raise InvalidArgumentError(f"state '{name}': a ZeroTensor has no memory to bind")
            t = torch.zeros(t.shape, dtype=t.dtype)
        elif not _has_storage(t):
            # a FakeTensor or a wrapper subclass (e.g. TwoTensor): no memory of its own to hand over
            raise InvalidArgumentError(
                f"{kind} '{name}': a {type(value).__name__} without memory of its own (a FakeTensor or a "
                "wrapper tensor subclass); the engine takes tensors with storage"
            )
        if not t.is_contiguous():
            if as_state:
                raise InvalidArgumentError(
                    f"state '{name}': the tensor must be contiguous (runs update it in place; "
                    "bind a contiguous tensor, e.g. the result of .contiguous())"
                )
            t = t.contiguous()
        if t.is_neg() or t.is_conj():
            # torch's lazy negation or conjugation: the memory holds the other values, which DLPack
            # would hand over as they are
            if as_state:
                raise InvalidArgumentError(
                    f"state '{name}': the tensor has its negative or conjugate bit set (runs update its memory in "
                    "place; bind a tensor without, e.g. the result of .resolve_neg())"
                )
            t = t.resolve_neg().resolve_conj()
        return t.__dlpack__(), True
    if isinstance(value, (int, float, bool, str, bytes, list, tuple, np.generic)):
        if as_state:
            raise InvalidArgumentError(
                f"state '{name}': expected a torch tensor or numpy array (runs update it in place), "
                f"got {type(value).__name__}"
            )
        return _c_contiguous(np.asarray(value)), False
    raise InvalidArgumentError(
        f"{kind} '{name}': expected a numpy array or torch tensor, got {type(value).__name__}"
    )


def _string_array(name: str, value: np.ndarray) -> np.ndarray:
    """A numpy array of str or bytes as the engine takes it (the engine copies the strings)."""
    if value.dtype.kind == "O":
        for i, item in enumerate(value.flat):
            if not isinstance(item, (str, bytes)):
                raise InvalidArgumentError(
                    f"input '{name}': element {i} of the object array is a {type(item).__name__}; a string "
                    "tensor is fed as a numpy array of str or bytes"
                )
    return value


def _c_contiguous(a: np.ndarray) -> np.ndarray:
    # np.ascontiguousarray would turn a 0-d array into shape (1,): only copy when needed.
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _torch_if_loaded():
    return sys.modules.get("torch")


def _from_engine_value(name: str, value, as_torch: bool):
    """A fetched value for the caller: a tensor, a list of them for a sequence, None for none."""
    if value is None:
        return None
    if isinstance(value, list):
        return [_from_engine_value(f"{name}[{i}]", t, as_torch) for i, t in enumerate(value)]
    if value.dtype == dtypes.STRING:
        if as_torch:
            raise InvalidArgumentError(
                f"output '{name}' is a string tensor, which torch cannot hold: run with as_torch=False to get "
                "it as a numpy array of str"
            )
        return value.strings()
    return _from_engine(value, as_torch)


def _from_engine(t: "C.EngineTensor", as_torch: bool):
    if as_torch:
        import torch

        if t.dtype in dtypes.PACKED:
            raise InvalidArgumentError(
                f"an output of type {dtypes.onnx_type_name(t.dtype)} has no torch equivalent the engine can "
                "hand over; run with as_torch=False for an ml_dtypes numpy array"
            )
        return torch.from_dlpack(t)  # float8 types travel as DLPack's float8 codes
    if t.dtype in dtypes.LOW_PRECISION_TO_NUMPY:
        # One element per byte (the float8 bytes themselves; packed types unpacked), viewed as ml_dtypes.
        return np.from_dlpack(t.unpacked_codes()).view(dtypes.LOW_PRECISION_TO_NUMPY[t.dtype])
    if t.dtype == dtypes.BFLOAT16:
        import ml_dtypes
        import torch

        return torch.from_dlpack(t).view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return np.from_dlpack(t)
