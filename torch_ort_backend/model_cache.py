"""The on-disk cache of exported graphs (ORTMODULE_CACHE_DIR / the ``cache_dir`` option).

A new process that compiles the same model reaches the same ATen graphs (TorchDynamo and AOTAutograd
still trace; Inductor's own caches are not involved); with a warm cache each graph's ONNX export is
read from disk instead of being redone. The entry is one file, ``<cache_dir>/tob-<key>.onnx``:

- the key is a SHA-256 over the cache format, the versions of torch, onnx and torch_ort_backend, the
  options that shape the export, the stage, and the graph itself (its generated code, which names
  every op and constant argument, the metadata of every input, and the bytes of every tensor
  constant). A graph that calls anything but torch operators and operator-module arithmetic (a
  PythonOp's Function, a Python callable) names process-local objects, so it is never cached;
- the ExportedGraph's bookkeeping (input/output kinds) travels as JSON in the model's
  ``metadata_props``, never as pickle: nothing in the file is executed or imported;
- writes go to a temporary file in the same directory, then ``os.replace``: a reader sees the old
  entry, the new one or none, never half of one, so processes can share the directory.

Reading an entry goes through the checks every model file gets (``onnx_loader.parse_model``: the
onnx checker), then through ours: the recorded key must equal the key computed here, a SHA-256 of
the graph recorded inside must match (truncation, bit rot), and every ATen node must call an operator
that this process's own graph calls. Only then is it run as our own export (with
``allow_unsafe_aten_ops``); anything else is a warning and a fresh export. The directory and the file
must belong to this user and not be writable by others. docs/security.md ("The on-disk cache")
says what a local attacker could still do.

Beside the exports, warm_region.py keeps one record per region (``tob-<key>.region.json``), with
which a new process builds the region from these exports without AOTAutograd; it reads the
exports through ``load(None, key)``: the checks above but the ATen one, which the sessions'
allow-list for model files replaces.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import stat
import tempfile
import warnings
from collections import Counter
from typing import Any, Iterable

import torch

logger = logging.getLogger("torch_ort_backend")

FORMAT = 1
_KEY_PROP = "torch_ort_backend.cache_key"
_META_PROP = "torch_ort_backend.exported_graph"
_GRAPH_SHA_PROP = "torch_ort_backend.graph_sha256"
# Options that change what the exporter produces; the rest (logging, saving, printing, fallback,
# threads, the engine's optimisation level) act after the export and stay out of the key.
_EXPORT_OPTIONS = ("opset", "prefer_torch_kernels", "disable_custom_autograd_support",
                   "skipped_autograd_functions", "allow_autograd_checkpoint", "aten_sdpa_fallback")
_SYM_FUNCTIONS = {torch.sym_int, torch.sym_float, torch.sym_max, torch.sym_min, torch.sym_not, torch.sym_ite}

# hits, misses, stored, rejected, uncacheable; regions' records (warm_region.py): region_hits,
# region_misses, region_stored, region_uncacheable
STATS: Counter = Counter()


class CacheWarning(UserWarning):
    """A cache entry was ignored (corrupt, foreign, or failing a check) or could not be written."""


def _cacheable_target(target: Any) -> bool:
    if isinstance(target, torch._ops.OpOverload):
        return True
    return target in _SYM_FUNCTIONS or getattr(target, "__module__", None) in ("_operator", "math")


def _operator_names(gm: torch.fx.GraphModule) -> set[tuple[str, str]]:
    """(operator, overload) of every torch operator the graph calls, as ATen nodes name them."""
    names = set()
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            schema = node.target._schema
            names.add((schema.name.removeprefix("aten::"), schema.overload_name))
    return names


def option_repr(value: Any) -> str:
    """An option's value as the key reads it: sets sorted (their repr's order follows string
    hashing, which differs between processes)."""
    if isinstance(value, (set, frozenset)):
        return "{" + ",".join(sorted(option_repr(v) for v in value)) + "}"
    return repr(value)


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"T({value.dtype},{tuple(value.shape)},{value.stride()},{value.requires_grad},{value.layout})"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_describe(v) for v in value) + "]"
    return repr(value)


class KeyHash:
    """A SHA-256 over length-prefixed parts, so that no two different sequences of parts hash alike;
    the key of a graph entry (graph_key) and of a region's record (warm_region.region_key)."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def feed(self, *parts: Any) -> None:
        for p in parts:
            data = p if isinstance(p, bytes) else str(p).encode()
            self._h.update(len(data).to_bytes(8, "little"))
            self._h.update(data)

    def feed_constants(self, gm: torch.fx.GraphModule, lifted: frozenset = frozenset()) -> bool:
        """Each tensor the graph reads through get_attr, by name, metadata and bytes (ids in
        `lifted`: by name and metadata only, they are arguments, not constants). False when one is
        not a tensor: such a graph is not cached."""
        for node in gm.graph.nodes:
            if node.op != "get_attr":
                continue
            value = gm
            for part in node.target.split("."):
                value = getattr(value, part)
            if not isinstance(value, torch.Tensor):
                return False
            if id(value) in lifted:
                self.feed(node.target, _describe(value))
                continue
            data = value.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()
            self.feed(node.target, _describe(value), data)
        return True

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def graph_key(gm: torch.fx.GraphModule, stage: str, opts: Any, unaliased_outputs: Iterable[int]) -> str | None:
    """The entry's key, or None when the graph names process-local objects and cannot be cached."""
    import onnx

    from . import __version__

    h = KeyHash()
    h.feed(FORMAT, torch.__version__, onnx.__version__, __version__, stage, sorted(unaliased_outputs))
    h.feed(*(f"{name}={option_repr(getattr(opts, name))}" for name in _EXPORT_OPTIONS))
    for node in gm.graph.nodes:
        if node.op == "call_function" and not _cacheable_target(node.target):
            return None
        if node.op == "call_module":
            return None
        if node.op == "placeholder":
            h.feed(node.name, _describe(node.meta.get("val")))
    h.feed(gm.code)
    return h.hexdigest() if h.feed_constants(gm) else None


def _encode(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return {"float": repr(value)} if not math.isfinite(value) else value
    if isinstance(value, (list, tuple)):
        return {"tuple" if isinstance(value, tuple) else "list": [_encode(v) for v in value]}
    if isinstance(value, dict):
        return {"dict": [[_encode(k), _encode(v)] for k, v in value.items()]}
    if isinstance(value, torch._ops.OpOverload):
        return {"op": [value._schema.name, value._overloadname]}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    raise TypeError(f"{type(value).__name__} cannot be cached")


def _decode(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    (tag, body), = value.items()
    if tag == "float":
        return float(body)
    if tag == "list":
        return [_decode(v) for v in body]
    if tag == "tuple":
        return tuple(_decode(v) for v in body)
    if tag == "dict":
        return {_decode(k): _decode(v) for k, v in body}
    if tag == "op":
        namespace, name = body[0].split("::", 1)
        # Attribute lookups on torch.ops only: an operator that is not registered is an error, and
        # no module is imported.
        packet = getattr(getattr(torch.ops, namespace), name)
        return getattr(packet, body[1] or "default")
    if tag == "dtype":
        dtype = getattr(torch, body)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"{body} is not a dtype")
        return dtype
    if tag == "memory_format":
        fmt = getattr(torch, body)
        if not isinstance(fmt, torch.memory_format):
            raise ValueError(f"{body} is not a memory format")
        return fmt
    if tag == "device":
        return torch.device(body)
    raise ValueError(f"unknown tag {tag!r}")


def _aten_nodes(graph) -> Iterable[tuple[str, str]]:
    import onnx

    for node in graph.node:
        if node.op_type == "ATen":
            attrs = {a.name: a for a in node.attribute}
            yield (attrs["operator"].s.decode("utf-8", "replace") if "operator" in attrs else "",
                   attrs["overload_name"].s.decode("utf-8", "replace") if "overload_name" in attrs else "")
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _aten_nodes(a.g)
            for g in a.graphs:
                yield from _aten_nodes(g)


def check_view_step(op: Any, op_args: Any, op_kwargs: Any,
                    allowed: set[tuple[str, str]] | None = None) -> None:
    """A view replay an entry's metadata asks for (an output kind ("view", base, steps, copy)):
    an aten view operator (not mutable, its result an alias of its input) with numbers, dtypes and
    memory formats for arguments, and, with `allowed`, one of the operators the graph itself calls.
    ValueError naming it otherwise: an entry may only make the process call what its graph calls."""
    if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
        raise ValueError(f"a view replay calls {op!r}, not an aten operator")
    schema = op._schema
    name = schema.name.removeprefix("aten::")
    if schema.is_mutable or not schema.returns or schema.returns[0].alias_info is None:
        raise ValueError(f"a view replay calls aten::{name}, which is not a view operator")
    if allowed is not None and (name, schema.overload_name) not in allowed:
        raise ValueError(f"a view replay calls aten::{name}.{schema.overload_name or 'default'}, "
                         "which this graph does not call")
    plain = (bool, int, float, type(None), torch.dtype, torch.memory_format)

    def ok(v: Any) -> bool:
        return isinstance(v, plain) or (isinstance(v, (list, tuple)) and all(isinstance(x, plain) for x in v))

    if not isinstance(op_args, tuple) or not isinstance(op_kwargs, dict) or not all(map(ok, op_args)) \
            or not all(isinstance(k, str) and ok(v) for k, v in op_kwargs.items()):
        raise ValueError(f"a view replay of aten::{name} has arguments other than numbers")


def _check_view_replays(kinds: Any, allowed: set[tuple[str, str]]) -> None:
    """Every view replay among an entry's output kinds (check_view_step, against the graph's own
    operators)."""
    if not isinstance(kinds, list):
        raise ValueError("its output kinds are not a list")
    for j, kind in enumerate(kinds):
        if not (isinstance(kind, tuple) and kind and kind[0] == "view"):
            continue
        if len(kind) != 4 or not isinstance(kind[2], tuple):
            raise ValueError(f"output {j}'s view replay is malformed")
        for step in kind[2]:
            if not isinstance(step, tuple) or len(step) != 3:
                raise ValueError(f"output {j}'s view replay is malformed")
            check_view_step(*step, allowed=allowed)


def _graph_sha(model) -> str:
    return hashlib.sha256(model.graph.SerializeToString(deterministic=True)).hexdigest()


class ModelCache:
    def __init__(self, directory: str) -> None:
        self.directory = directory

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, f"tob-{key}.onnx")

    def _owned_by_us(self, path: str) -> str:
        """'' when `path` belongs to this user and nobody else may write it; otherwise why not."""
        st = os.stat(path)
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            return f"{path} belongs to another user (uid {st.st_uid})"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{path} is writable by other users (mode {stat.filemode(st.st_mode)})"
        return ""

    def untrusted(self, path: str) -> str:
        """'' when the directory and `path` are this user's alone; otherwise why not."""
        return self._owned_by_us(self.directory) or self._owned_by_us(path)

    def _warn(self, message: str, then: str = "exporting again") -> None:
        STATS["rejected"] += 1
        warnings.warn(f"ORTMODULE_CACHE_DIR: {message}; {then}", CacheWarning, stacklevel=4)

    def write_atomic(self, path: str, data: bytes) -> bool:
        """``data`` into ``path`` through a private temporary file and ``os.replace``: readers see a
        whole entry or none. False (with a CacheWarning) when it could not be written."""
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tob-", suffix=".tmp", dir=self.directory)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)  # atomic: readers see a whole entry or none
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as e:
            warnings.warn(f"ORTMODULE_CACHE_DIR: could not write {path}: {e}", CacheWarning, stacklevel=5)
            return False
        return True

    def load(self, gm: torch.fx.GraphModule | None, key: str):
        """The cached ExportedGraph for `key`, or None (a miss, or an entry ignored with a warning).
        ``gm`` None (a warm region's graph, warm_region.py): no graph of this process to check the
        ATen nodes against; the caller runs the model as any model file instead."""
        from .exporter import ExportedGraph
        from .onnx_loader import parse_model

        path = self._path(key)
        if not os.path.exists(path):
            STATS["misses"] += 1
            return None
        why = self.untrusted(path)
        if why:
            self._warn(f"ignoring {path}: {why}")
            return None
        try:
            model = parse_model(path)
            props = {p.key: p.value for p in model.metadata_props}
            if props.get(_KEY_PROP) != key:
                raise ValueError(f"it was written for another graph (key {props.get(_KEY_PROP)!r})")
            if props.get(_GRAPH_SHA_PROP) != _graph_sha(model):
                raise ValueError("its graph does not match the checksum recorded with it")
            if gm is not None:
                allowed = _operator_names(gm)
                foreign = sorted({op for op in _aten_nodes(model.graph) if op not in allowed})
                if foreign:
                    raise ValueError(f"it calls torch operators this graph does not: {foreign[:5]}")
            meta = _decode(json.loads(props[_META_PROP]))
            fields = {f.name for f in dataclasses.fields(ExportedGraph)} - {"model"}
            if set(meta) != fields:
                raise ValueError(f"its metadata has fields {sorted(meta)}, expected {sorted(fields)}")
            if gm is not None:  # a warm region checks its replays itself (warm_region._check_graph)
                _check_view_replays(meta["output_kinds"], allowed)
            meta["aten_fallback_ops"] = Counter(meta["aten_fallback_ops"])
        except Exception as e:  # corrupt, foreign or tampered: never fatal, never trusted
            self._warn(f"ignoring {path}: {type(e).__name__}: {e}")
            return None
        del model.metadata_props[:]
        STATS["hits"] += 1
        logger.info("loaded the exported graph from %s", path)
        return ExportedGraph(model=model, **meta)

    def store(self, key: str, exported: Any) -> bool:
        """Writes the entry of `key`; whether it is there now."""
        try:
            meta = {f.name: getattr(exported, f.name) for f in dataclasses.fields(exported) if f.name != "model"}
            meta["aten_fallback_ops"] = dict(meta["aten_fallback_ops"])
            encoded = json.dumps(_encode(meta))
        except TypeError as e:
            STATS["uncacheable"] += 1
            logger.info("not caching a graph: %s", e)
            return False
        model = type(exported.model)()
        model.CopyFrom(exported.model)
        del model.metadata_props[:]
        for k, v in ((_KEY_PROP, key), (_GRAPH_SHA_PROP, _graph_sha(model)), (_META_PROP, encoded)):
            entry = model.metadata_props.add()
            entry.key, entry.value = k, v
        if not self.write_atomic(self._path(key), model.SerializeToString(deterministic=True)):
            return False
        STATS["stored"] += 1
        return True


def cache_for(opts: Any) -> ModelCache | None:
    return ModelCache(opts.cache_dir) if getattr(opts, "cache_dir", "") else None

