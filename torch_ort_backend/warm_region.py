"""Warm regions: a new process compiles a region from the on-disk cache without AOTAutograd.

With ORTMODULE_CACHE_DIR (model_cache.py) a region's graphs are read from disk instead of being
exported again, but the first call of a new process still spent almost all of its backend time in
AOTAutograd (building its state, capturing the joint graph, partitioning; at the first backward,
compiling the backward graph), only to reach the ATen graphs whose exports were already on disk.

So, beside the exports, the cache keeps one record per region: ``<cache_dir>/tob-<key>.region.json``,
keyed by TorchDynamo's graph (before AOTAutograd), and holding, as JSON, everything the lean per-call
path (lean_call.py) reads of AOTAutograd's metadata: the number of arguments and lifted parameters,
the cache keys of the forward and backward exports, the training plan (``lean_call.TrainingPlan``:
outputs, saved tensors, non-differentiable outputs, gradients taken, their strides, inputs detached,
the deterministic-algorithms and donation flags) and the backward's stashed and donated inputs. On a
hit, the region's callable is built from the two cached models and that record; AOTAutograd is never
called, nor the backward compile at the first backward. TorchDynamo still traces and guards.

Which regions. Only those the lean path can run with nothing AOTAutograd would do differently: no
input mutation, no output aliasing an input or an intermediate, no tensor subclass, no effect token,
no functionalized random state, no size saved for the backward, plain tangents (lean_call.py's
checks), one forward and one backward graph (or one inference graph), every input a dense CPU tensor
of static shape not sharing storage with another, every ATen node on the engine's list for model
files, no PythonOp. The key (``region_key``) covers TorchDynamo's graph (its code, the metadata of
every argument: dtype, shape, stride, offset, requires_grad, leaf or not; the bytes of its tensor
constants), every backend option but the log level and the directory, grad mode, autocast state,
deterministic algorithms, functorch's configuration, the cache format and the versions of torch,
onnx and torch_ort_backend. Whether AOTAutograd would make an inference or a training region
follows from grad mode and the arguments' requires_grad, so both are in the key and the record's
kind is checked against them. Anything else (dynamic shapes, graph breaks are separate regions and
keyed on their own, the embedding case's two graphs, a profiler or compiled autograd at call time)
takes AOTAutograd's path: compiled as a cold cache would, or, for a warm region asked to run under
the profiler or compiled autograd, compiled at that call.

The record is untrusted input: it is checked for types and ranges and against the models it names
(their inputs and outputs); the models are read through the cache's own checks (owner, onnx checker,
key, checksum) and run by sessions that keep ATen nodes to the engine's allow-list for model files
(``allow_unsafe_aten_ops`` off, since there is no graph of this process to check them against), and
the view replays the exports record may only call aten view operators that list allows. A bad
record draws a CacheWarning and a cold compile. docs/security.md ("The on-disk cache").
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any, Callable

import torch

from .lean_call import LeanRegion, TrainingPlan, _lean_inference, _lean_training, _plain_meta, plan_from_meta
from .memory_optimizer.step_memory import GraphMemory
from .model_cache import FORMAT as _CACHE_FORMAT
from . import model_cache
from .model_cache import KeyHash, ModelCache, _aten_nodes, _cacheable_target, _describe, cache_for, option_repr

logger = logging.getLogger("torch_ort_backend")

FORMAT = 1
_SUFFIX = ".region.json"
# Options that cannot change what a region compiles to; every other option is in the key.
_NOT_IN_KEY = ("log_level", "cache_dir")
_FIELDS = {"format", "key", "kind", "arity", "params", "graphs", "plan", "saved", "donated"}
_PLAN_INTS = ("n_out", "n_fw", "n_no_vc")
_PLAN_LISTS = ("non_diff", "unsafe_view", "surviving", "detach")
_PLAN_BOOLS = ("check_deterministic", "donated", "inputs_require_grad")
_FORMATS = ("contiguous_format", "channels_last", "channels_last_3d", "preserve_format")
_HEX64 = re.compile(r"[0-9a-f]{64}")


# ---- when a region may be warm, and its key ----

def why_not(gm: torch.fx.GraphModule, example_inputs: list, opts: Any) -> str | None:
    """Why this region never takes the warm path (None: it may), from what the compile sees."""
    from torch._functorch import config as functorch_config
    from torch._functorch._aot_autograd.runtime_wrappers import _should_disable_saved_tensors_hooks
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    from .fallback import FallbackPolicy

    if not opts.cache_dir or not opts.lean_call:
        return "no cache directory or the lean call off"
    if opts.fallback_policy & (FallbackPolicy.FALLBACK_FORCE_TORCH_FORWARD | FallbackPolicy.FALLBACK_FORCE_TORCH_BACKWARD):
        return "a forced torch fallback"
    if opts.save_onnx or opts.print_input_density or opts.print_memory_stats:
        return "models to save or a runtime inspector"
    if functorch_config.debug_assert or _should_disable_saved_tensors_hooks():
        return "functorch's debug asserts or inlined saved-tensor hooks"
    import torch._dynamo.compiled_autograd as compiled_autograd

    if compiled_autograd.compiled_autograd_enabled:
        return "compiled autograd"
    storages = set()
    for x in example_inputs:
        if not isinstance(x, torch.Tensor) or is_traceable_wrapper_subclass(x):
            return "an argument that is not a plain tensor"
        if x.layout != torch.strided or x.device.type != "cpu" or x.is_quantized:
            return "an argument that is not a dense CPU tensor"
        if not all(isinstance(d, int) for d in (*x.shape, *x.stride(), x.storage_offset())):
            return "dynamic shapes"
        ref = StorageWeakRef(x.untyped_storage())
        if ref in storages:
            return "arguments sharing storage"
        storages.add(ref)
    return None


def _lifted(gm: torch.fx.GraphModule) -> list:
    """The parameters and buffers aot_module_simplified lifts into the graph's arguments (none when
    TorchDynamo inlines modules, its default); the backend's _lean_region takes the same."""
    return [*dict(gm.named_parameters(remove_duplicate=False)).values(),
            *dict(gm.named_buffers(remove_duplicate=False)).values()]


def region_key(gm: torch.fx.GraphModule, example_inputs: list, opts: Any) -> str | None:
    """The region's key (the module docstring), or None when its graph names Python objects of this
    process (a PythonOp's Function, a callable), so that no key can stand for it."""
    import dataclasses

    import onnx
    from torch._functorch import config as functorch_config

    from . import __version__

    h = KeyHash()
    feed = h.feed
    feed("region", FORMAT, _CACHE_FORMAT, torch.__version__, onnx.__version__, __version__)
    feed(*(f"{f.name}={option_repr(getattr(opts, f.name))}" for f in dataclasses.fields(opts)
           if f.name not in _NOT_IN_KEY))
    feed(torch.is_grad_enabled(), torch.are_deterministic_algorithms_enabled(),
         torch.is_deterministic_algorithms_warn_only_enabled())
    for device in ("cpu", "cuda"):
        feed(device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
    feed(torch.is_autocast_cache_enabled())
    config = functorch_config.get_config_copy()
    feed(*(f"{k}={config[k]!r}" for k in sorted(config) if isinstance(config[k], (bool, int, float, str, type(None)))))
    for x in example_inputs:
        feed(_describe(x), x.storage_offset(), x.is_leaf, x.device, isinstance(x, torch.nn.Parameter))
    lifted = {id(t) for t in _lifted(gm)}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            return None
        if node.op == "call_function" and not (_cacheable_target(node.target) or _torch_function(node.target)):
            return None
    feed(gm.code)
    # A lifted tensor is an argument of the graph AOTAutograd compiles, not a constant.
    return h.hexdigest() if h.feed_constants(gm, frozenset(lifted)) else None


def _torch_function(target: Any) -> bool:
    """A function of torch itself or a Python builtin (TorchDynamo's graphs call torch.nn.functional,
    torch._C._nn, builtins.getattr ...), never a user's: the generated code names it, and its
    meaning is fixed by the torch version in the key. Autograd Functions and custom ops are not."""
    module = getattr(target, "__module__", None) or ""
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name.startswith(("aten::", "prims::"))
    if module == "builtins":
        return True
    return (module == "torch" or module.startswith("torch.")) and not module.startswith(
        ("torch.autograd.function", "torch._library", "torch._higher_order_ops", "torch.utils.checkpoint"))


# ---- the record, written after a cold compile ----

def _safe_models(*graphs: Any) -> str | None:
    """Why a warm session could not run these exports (None: every ATen node is on the engine's list
    for model files, and nothing is computed in Python but aten view replays)."""
    from ._engine import C

    for g in graphs:
        ex = g.exported
        if any(k != "tensor" for k in ex.input_kinds):
            return f"{g.name} takes sizes or scalars"
        for op, overload in _aten_nodes(ex.model.graph):
            why = C.aten_op_refusal(op, overload)
            if why:
                return f"{g.name} calls {op}.{overload or 'default'} ({why})"
        try:
            _check_output_kinds(ex.output_kinds, len(ex.input_names))
        except ValueError as e:
            return f"{g.name}: {e}"
    return None


def _coercion_json(c: Any) -> Any:
    if c is None:
        return None
    if c[0] == "format":
        return ["format", str(c[1]).removeprefix("torch.")]
    return ["strides", [int(v) for v in c[1]], [int(v) for v in c[2]]]


def make_record(key: str, graphs: list, arity: int, n_params: int, inference: bool) -> tuple[dict | None, str]:
    """The record of a compiled region, or None and why it is not recorded."""
    stages = [g.stage for g in graphs]
    want = ["inference"] if inference else ["forward", "backward"]
    if sorted(stages) != sorted(want):
        return None, f"graphs {stages}"
    by = {g.stage: g for g in graphs}
    main = by[want[0]]
    if any(g.eager or g.session is None or g.cache_key is None for g in graphs):
        return None, "a graph without a cached export or a session"
    why = _plain_meta(main.aot_meta)
    if why is None and main.num_inputs != n_params + arity:
        why = "AOTAutograd deduplicated the arguments"
    why = why or _safe_models(*graphs)
    if why:
        return None, why
    record = {"format": FORMAT, "key": key, "kind": "inference" if inference else "training", "arity": arity,
              "params": n_params, "graphs": {g.stage: g.cache_key for g in graphs}, "saved": [], "donated": []}
    if inference:
        record["plan"] = {"n_out": int(main.aot_meta.num_outputs)}
        return record, ""
    plan, why = plan_from_meta(by["forward"], by["backward"])
    if plan is None:
        return None, why
    body = {name: int(getattr(plan, name)) for name in _PLAN_INTS}
    body.update({name: [int(i) for i in getattr(plan, name)] for name in _PLAN_LISTS})
    body.update({name: bool(getattr(plan, name)) for name in _PLAN_BOOLS})
    body["coercions"] = [_coercion_json(c) for c in plan.coercions]
    record["plan"] = body
    memory = by["backward"].memory
    record["saved"], record["donated"] = list(memory.saved_inputs), list(memory.donated_inputs)
    return record, ""


class Recorder:
    """Writes a cold region's record once its graphs exist (training: at the backward's compile)."""

    def __init__(self, cache: ModelCache, key: str, arity: int, n_params: int, inference: bool) -> None:
        self.cache, self.key, self.arity, self.n_params, self.inference = cache, key, arity, n_params, inference
        self.done = False

    def graph_compiled(self, graphs: list, stage: str) -> None:
        if self.done or stage not in ("backward", "inference"):
            return
        self.done = True
        try:
            record, why = make_record(self.key, graphs, self.arity, self.n_params, self.inference)
        except Exception as e:  # the record is an optimisation: never a reason for a compile to fail
            record, why = None, f"{type(e).__name__}: {e}"
        if record is None:
            model_cache.STATS["region_uncacheable"] += 1
            logger.info("not caching the region of %s without AOTAutograd: %s", graphs[0].name if graphs else "?", why)
            return
        if self.cache.write_atomic(_path(self.cache, self.key), json.dumps(record, sort_keys=True).encode()):
            model_cache.STATS["region_stored"] += 1


def _path(cache: ModelCache, key: str) -> str:
    return os.path.join(cache.directory, f"tob-{key}{_SUFFIX}")


# ---- the record, read in a new process ----

def _ints(value: Any, name: str, lo: int, hi: int, increasing: bool = True) -> list[int]:
    if not isinstance(value, list) or not all(type(v) is int and lo <= v < hi for v in value):
        raise ValueError(f"{name} must be a list of integers in [{lo}, {hi})")
    if increasing and any(a >= b for a, b in zip(value, value[1:])):
        raise ValueError(f"{name} must be increasing")
    return value


def _int(value: Any, name: str, lo: int, hi: int) -> int:
    if type(value) is not int or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], not {value!r}")
    return value


def _check_view_op(op: Any, op_args: Any, op_kwargs: Any) -> None:
    from ._engine import C

    model_cache.check_view_step(op, op_args, op_kwargs)
    name, overload = op._schema.name.removeprefix("aten::"), op._schema.overload_name
    why = C.aten_op_refusal(name, overload)
    if why:
        raise ValueError(f"a view replay calls aten::{name} ({why})")


def _check_output_kinds(kinds: Any, n_inputs: int) -> None:
    """The output kinds of an export (exporter/graph_exporter.py's ExportedGraph) as a warm region
    may run them: engine tensors, inputs, repeats, numbers, and aten view replays."""
    hidden = 0
    for j, kind in enumerate(kinds):
        if kind == "tensor":
            continue
        if not isinstance(kind, tuple) or not kind:
            raise ValueError(f"output {j} is of kind {kind!r}")
        if kind[0] == "input" and len(kind) == 2:
            _int(kind[1], f"output {j}'s input", 0, n_inputs - 1)
        elif kind[0] == "same_as" and len(kind) == 2:
            _int(kind[1], f"output {j}'s repeat", 0, j - 1)
        elif kind[0] == "const" and len(kind) == 2 and isinstance(kind[1], (bool, int, float, type(None))):
            continue
        elif kind[0] == "view" and len(kind) == 4 and isinstance(kind[1], tuple) and len(kind[1]) == 2 \
                and isinstance(kind[2], tuple) and isinstance(kind[3], bool):
            where, k = kind[1]
            if where == "input":
                _int(k, f"output {j}'s view base", 0, n_inputs - 1)
            elif where == "output":
                _int(k, f"output {j}'s view base", 0, j - 1)
            elif where == "hidden":
                _int(k, f"output {j}'s view base", 0, 1 << 20)
                hidden = max(hidden, k + 1)
            else:
                raise ValueError(f"output {j} is a view of {where!r}")
            for step in kind[2]:
                if not isinstance(step, tuple) or len(step) != 3:
                    raise ValueError(f"output {j}'s view replay is malformed")
                _check_view_op(*step)
        else:
            raise ValueError(f"output {j} is of kind {kind!r}")


def _check_graph(ex: Any, stage: str) -> None:
    if any(k != "tensor" for k in ex.input_kinds):
        raise ValueError(f"the {stage} export takes sizes or scalars")
    if len(ex.input_kinds) != len(ex.input_names):
        raise ValueError(f"the {stage} export's inputs are inconsistent")
    _check_output_kinds(ex.output_kinds, len(ex.input_names))
    engine = sum(1 for k in ex.output_kinds if k == "tensor")
    hidden = max((k[1][1] + 1 for k in ex.output_kinds if isinstance(k, tuple) and k[0] == "view"
                  and k[1][0] == "hidden"), default=0)
    if engine + hidden != len(ex.output_names) or len(ex.model.graph.output) != len(ex.output_names):
        raise ValueError(f"the {stage} export has {len(ex.model.graph.output)} outputs for {engine} results "
                         f"and {hidden} view bases")
    names = [i.name for i in ex.model.graph.input]
    initializers = {i.name for i in ex.model.graph.initializer}
    if [n for n in names if n not in initializers] != list(ex.input_names):
        raise ValueError(f"the {stage} export's input names do not match its model")


def _plan(body: Any, fw: Any, bw: Any) -> TrainingPlan:
    if not isinstance(body, dict) or set(body) != {*_PLAN_INTS, *_PLAN_LISTS, *_PLAN_BOOLS, "coercions"}:
        raise ValueError("the training plan has the wrong fields")
    n_fw_outputs = len(fw.exported.output_kinds)
    n_inputs = len(fw.exported.input_names)
    n_fw = _int(body["n_fw"], "n_fw", 0, n_fw_outputs)
    n_out = _int(body["n_out"], "n_out", 0, n_fw)
    n_saved = n_fw_outputs - n_fw
    n_no_vc = _int(body["n_no_vc"], "n_no_vc", 0, n_saved)
    for name in _PLAN_BOOLS:
        if type(body[name]) is not bool:
            raise ValueError(f"{name} must be a boolean")
    non_diff = _ints(body["non_diff"], "non_diff", 0, n_out)
    unsafe_view = _ints(body["unsafe_view"], "unsafe_view", 0, n_out)
    surviving = _ints(body["surviving"], "surviving", 0, n_out)
    detach = _ints(body["detach"], "detach", 0, n_inputs)
    if set(surviving) & set(non_diff):
        raise ValueError("an output both takes a gradient and is non-differentiable")
    if len(bw.exported.input_names) != n_saved + len(surviving):
        raise ValueError(f"the backward takes {len(bw.exported.input_names)} inputs, not {n_saved} saved tensors "
                         f"and {len(surviving)} gradients")
    if len(bw.exported.output_kinds) != n_inputs:
        raise ValueError(f"the backward returns {len(bw.exported.output_kinds)} gradients for {n_inputs} inputs")
    coercions = body["coercions"]
    if not isinstance(coercions, list) or len(coercions) != len(surviving):
        raise ValueError("one coercion per gradient taken")
    parsed = []
    for c in coercions:
        if c is None:
            parsed.append(None)
        elif isinstance(c, list) and len(c) == 2 and c[0] == "format" and c[1] in _FORMATS:
            parsed.append(("format", getattr(torch, c[1])))
        elif isinstance(c, list) and len(c) == 3 and c[0] == "strides":
            size = _ints(c[1], "a gradient's size", 0, 1 << 62, increasing=False)
            stride = _ints(c[2], "a gradient's stride", 0, 1 << 62, increasing=False)
            if len(size) != len(stride):
                raise ValueError("a gradient's size and stride differ in rank")
            parsed.append(("strides", tuple(size), tuple(stride)))
        else:
            raise ValueError(f"a coercion {c!r}")
    return TrainingPlan(n_out=n_out, n_fw=n_fw, n_no_vc=n_no_vc, non_diff=non_diff, unsafe_view=unsafe_view,
                        surviving=surviving, coercions=parsed, detach=detach,
                        check_deterministic=body["check_deterministic"], donated=body["donated"],
                        inputs_require_grad=body["inputs_require_grad"])


class WarmRegion(LeanRegion):
    """A region built from a record: the lean path from its first call. AOTAutograd's path (for a
    call under the profiler or compiled autograd) is compiled when such a call first comes."""

    def __init__(self, cold: Callable, params: list, arity: int, graphs: list, inference: bool,
                 disable_amp: bool) -> None:
        self._cold_compile, self._cold = cold, None
        super().__init__(self._aot_call, params, arity, graphs, inference, disable_amp)
        self._prechecked, self._aot_ran = True, True
        self.warm = True

    def _aot_call(self, *args: Any) -> Any:
        if self._cold is None:
            logger.info("compiling AOTAutograd's path of a warm region for a call the lean path does not take")
            self._cold = self._cold_compile()
        return self._cold(*args)


def load(gm: torch.fx.GraphModule, example_inputs: list, opts: Any, key: str,
         cold: Callable) -> Callable | None:
    """The warm region's callable for ``key``, or None: no record (a miss), or one ignored with a
    CacheWarning (the caller compiles cold)."""
    from .compiled_graph import CompiledGraph

    cache = cache_for(opts)
    path = _path(cache, key)
    if not os.path.exists(path):
        model_cache.STATS["region_misses"] += 1
        return None
    why = cache.untrusted(path)
    if why:
        cache._warn(f"ignoring {path}: {why}", "compiling the region again")
        return None
    params = _lifted(gm)
    inference = not (torch.is_grad_enabled() and any(x.requires_grad for x in [*params, *example_inputs]))
    try:
        with open(path, "rb") as f:
            record = json.loads(f.read(1 << 24).decode("utf-8"))
        if not isinstance(record, dict) or set(record) != _FIELDS:
            raise ValueError("its fields are not a region record's")
        if record["format"] != FORMAT or record["key"] != key:
            raise ValueError(f"it was written for another region or format (key {record['key']!r})")
        if record["kind"] != ("inference" if inference else "training"):
            raise ValueError(f"it records a {record['kind']} region; this one is not")
        _int(record["arity"], "arity", len(example_inputs), len(example_inputs))
        _int(record["params"], "params", len(params), len(params))
        stages = ("inference",) if inference else ("forward", "backward")
        graphs = record["graphs"]
        if not isinstance(graphs, dict) or set(graphs) != set(stages) \
                or not all(isinstance(v, str) and _HEX64.fullmatch(v) for v in graphs.values()):
            raise ValueError("its graph keys are malformed")
        exported = {}
        for stage in stages:
            ex = cache.load(None, graphs[stage])
            if ex is None:
                raise ValueError(f"its {stage} export {graphs[stage]} is missing or was ignored")
            _check_graph(ex, stage)
            exported[stage] = ex
        main = exported[stages[0]]
        if len(main.input_names) != len(params) + len(example_inputs):
            raise ValueError(f"its {stages[0]} export takes {len(main.input_names)} inputs, not "
                             f"{len(params) + len(example_inputs)}")
        saved, donated = [], []
        if not inference:
            bw_names = exported["backward"].input_names
            saved = _ints(record["saved"], "saved", 0, len(bw_names))
            donated = _ints(record["donated"], "donated", 0, len(bw_names))
            expected = [i for i, n in enumerate(bw_names) if not n.startswith(("primals", "tangents"))]
            if saved != expected or not set(donated) <= set(saved):
                raise ValueError("its stashed or donated backward inputs do not match the backward export")
        elif record["saved"] or record["donated"]:
            raise ValueError("an inference record with backward inputs")
        disable_amp = torch._C._is_any_autocast_enabled()
        if inference:
            body = record["plan"]
            if not isinstance(body, dict) or set(body) != {"n_out"}:
                raise ValueError("the inference plan has the wrong fields")
            n_out = _int(body["n_out"], "n_out", 0, len(main.output_kinds))
            if n_out != len(main.output_kinds):
                raise ValueError("the inference export's outputs do not match the record")
            graph = CompiledGraph.from_cache(main, "inference", opts, GraphMemory("inference"))
            region = WarmRegion(cold, params, len(example_inputs), [graph], True, disable_amp)
            region.lean[0] = _lean_inference(graph, params, disable_amp, region, n_out)
        else:
            fw = CompiledGraph.from_cache(exported["forward"], "forward", opts, GraphMemory("forward"))
            bw = CompiledGraph.from_cache(exported["backward"], "backward", opts,
                                          GraphMemory("backward", tuple(saved), tuple(donated)))
            plan = _plan(record["plan"], fw, bw)
            if donated and not plan.donated:
                raise ValueError("donated backward inputs without the donation flag")
            region = WarmRegion(cold, params, len(example_inputs), [fw, bw], False, disable_amp)
            region.lean[0] = _lean_training(fw, bw, params, disable_amp, region, plan)
            if region.lean[0] is None:
                raise ValueError(f"the lean path declines it: {region.declined}")
    except Exception as e:  # corrupt, foreign or tampered: never fatal, never trusted
        cache._warn(f"ignoring {path}: {type(e).__name__}: {e}", "compiling the region again")
        return None
    model_cache.STATS["region_hits"] += 1
    logger.info("compiled a region from %s without AOTAutograd", path)
    return region.call
