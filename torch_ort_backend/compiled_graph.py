"""One AOTAutograd graph (forward, backward or inference) compiled for the engine: export to ONNX,
create (or reuse) an engine session, and run it with torch tensors in and out without copies."""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any

import numpy as np
import torch

from .compile_state import COMPILE_STATE, CompileState
from .compile_state import CompileStats as CompileStats  # backend.compile_stats()' type
from .compile_state import live_graphs as live_graphs  # for tests and tools
from .errors import (
    BadInitializationError,
    FallbackError,
    UnsupportedDataError,
    UnsupportedDeviceError,
    UnsupportedOnnxModelError,
    UnsupportedTorchModelError,
)
from .exporter import ExportedGraph, export_fx_graph
from .exporter.context import TORCH_TO_ONNX
from .fallback import FallbackManager, FallbackPolicy
from .memory_optimizer.step_memory import _RUN_ORDER, GraphMemory
from .model_cache import cache_for, graph_key
from .options import BackendOptions
from .runtime_inspector import inspector_for

logger = logging.getLogger("torch_ort_backend")


STATS = COMPILE_STATE.stats

# The run path's tensor exchange (docs/performance.md, "Per-call overhead"): torch's C-level
# DLPack export and import, without Tensor.__dlpack__'s Python-level checks (the engine checks
# device, dtype and shape itself, and a failure reruns the checked path).
_to_dlpack = torch.utils.dlpack.to_dlpack
_from_dlpack = getattr(torch._C, "_from_dlpack", torch.utils.dlpack.from_dlpack)
# Where an output of the fast path comes from (CompiledGraph._fast_output_plan).
_ENGINE, _INPUT, _SAME_AS, _CONSTANT, _VIEW = range(5)
_DEBUG = logging.DEBUG
_debug_enabled = logger.isEnabledFor
# logging's per-logger cache of isEnabledFor's answers, cleared in place whenever a level changes
# (setLevel, logging.disable): a cached False skips the call (0.03 us a run), anything else asks
_debug_cached = getattr(logger, "_cache", {}).get
_next_run_order = _RUN_ORDER.__next__  # GraphMemory.order (step_memory.py)
# Session.run_torch (csrc/python/torch_run.h): torch tensors straight into the engine and back, no
# capsules; absent from an engine built without torch, whose fast path exchanges DLPack capsules.
_RUN_TORCH = False


def _replay_views(views: list, args: list, outs: list, hidden: list) -> None:
    """Fills outs[i] for each (i, ("view", (where, k), ops, copy)) of `views`: the torch view ops
    replayed on the base (argument k, output k, or hidden session output k). Replayed views share
    their base's version counter, as in eager, so an in-place edit of a returned tensor the backward
    needs raises instead of corrupting gradients."""
    for i, (_, (where, k), ops, copy) in views:
        t = args[k] if where == "input" else outs[k] if where == "output" else hidden[k]
        for op, op_args, op_kwargs in ops:
            t = op(t, *op_args, **op_kwargs)
        outs[i] = t.clone() if copy else t


def _load_engine():
    """The compiled engine module; BadInitializationError when it cannot be loaded (a broken or
    partial install, a libtorch that does not match the one it was built against) or when a TOB_*
    engine switch in the environment is set to a value it does not accept."""
    try:
        from ._engine import C
    except (ImportError, OSError, AttributeError) as e:
        raise BadInitializationError(f"the engine (torch_ort_backend._C) could not be loaded: {e}") from e
    if not hasattr(C, "Session"):
        raise BadInitializationError("the engine module torch_ort_backend._C has no Session: a partial build")
    try:
        C.check_env_switches()
    except ValueError as e:  # a TOB_* switch set to a value it does not accept
        raise BadInitializationError(str(e)) from e
    global _RUN_TORCH
    _RUN_TORCH = hasattr(C.Session, "run_torch")
    return C


def _check_inputs(gm: torch.fx.GraphModule) -> None:
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        mv = node.meta.get("val")
        if isinstance(mv, torch.Tensor):
            if mv.device.type != "cpu":
                raise UnsupportedDeviceError(
                    f"input '{node.name}' is on {mv.device}; this build runs graphs on the CPU only")
            if mv.dtype not in TORCH_TO_ONNX:
                raise UnsupportedDataError(f"input '{node.name}' has dtype {mv.dtype}, which the engine does not carry")
            if mv.layout != torch.strided or mv.is_quantized:
                raise UnsupportedDataError(f"input '{node.name}' has layout {mv.layout}; dense tensors only")


def _session_options(opts: BackendOptions, trusted: bool = True):
    from .session import GraphOptimizationLevel, SessionOptions

    so = SessionOptions()
    so.intra_op_num_threads = opts.intra_op_threads  # 0: torch's pool, following torch.set_num_threads
    so.graph_optimization_level = GraphOptimizationLevel(opts.optimization_level)
    so.enable_profiling = opts.enable_profiling
    # The graph is our exporter's, made in this process from the user's own code: its ATen nodes
    # may call any operator that code called (prims, custom ops). Models loaded from files never
    # take this path (docs/security.md). Nor do models a warm cache's region record names
    # (warm_region.py: no graph of this process to check them against): ``trusted`` False.
    so.allow_unsafe_aten_ops = trusted
    return so


def _save(opts: BackendOptions, model, name: str) -> str:
    import onnx

    directory = opts.save_path or os.getcwd()
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    onnx.save(model, path)
    return path


class CompiledGraph:
    """The callable AOTAutograd runs (boxed calling convention: one list of arguments)."""

    def __init__(self, gm: torch.fx.GraphModule, stage: str, opts: BackendOptions,
                 unaliased_outputs: frozenset = frozenset(), state: CompileState = COMPILE_STATE,
                 donated: tuple | None = None) -> None:
        # An instance attribute, so that the wrappers torch puts around the backward (functools.wraps
        # copies __dict__) keep the boxed calling convention.
        self._boxed_call = True
        self.gm = gm
        self.stage = stage
        self.opts = opts
        self.unaliased_outputs = unaliased_outputs
        self.state = state
        self.name, self.serial = state.register_graph(self, stage)
        self._stats = state.stats  # compile_stats(), counted on every run
        self.fallback = FallbackManager(opts.fallback_policy, opts.fallback_retry, f"the {stage} graph {self.name}")
        self.eager = False
        self._fast = False  # calls take _run_fast (set once the session exists)
        self.lean_run = self.run_list  # lean_call.py's run of this graph (_make_lean_run)
        self._contiguous_copies: tuple[int, ...] = ()  # arguments _run_fast makes contiguous
        self._declared_outputs = 0  # the session's outputs that are graph outputs (views' bases follow)
        self._donates = False
        self.aot_meta = None  # AOTAutograd's ViewAndMutationMeta of this region (lean_call.py), set by the backend
        self.cache_key: str | None = None  # the on-disk cache's key of this export, once it is there
        self.trusted = True  # exported in this process (or checked against its graph): allow_unsafe_aten_ops
        self.exported_here = False  # exported by this process now, not read from the on-disk cache
        self.session = None
        self.exported: ExportedGraph | None = None
        # memory_stats() and donation (memory_optimizer/step_memory.py); ``donated``: the inputs it may
        # free, where AOTAutograd is not compiling the graph (a variant, zero_tangents.py)
        self.memory = GraphMemory.for_graph(gm, stage, donated)
        self.inspector = None
        try:
            # AOTAutograd may call compilers with its fake-tensor mode active; the export reads real
            # constants and the session creation makes real tensors, so every dispatch mode is off.
            from torch.utils._python_dispatch import _disable_current_modes

            with _disable_current_modes():
                self._compile()
        except FallbackError as e:
            if not self.fallback.should_fall_back(e):
                raise
            self.state.stats.fallbacks += 1
            self.eager = True

    # ---- compile ----
    def _compile(self) -> None:
        _load_engine()
        _check_inputs(self.gm)
        cache = cache_for(self.opts)  # ORTMODULE_CACHE_DIR (model_cache.py)
        key = graph_key(self.gm, self.stage, self.opts, self.unaliased_outputs) if cache else None
        exported = cache.load(self.gm, key) if key else None
        if exported is not None:
            self.cache_key = key
        else:
            exported = self._export()
            self.exported_here = True
            if key and cache.store(key, exported):
                self.cache_key = key
        self._finish(exported)

    @classmethod
    def from_cache(cls, exported: ExportedGraph, stage: str, opts: BackendOptions, memory: GraphMemory,
                   state: CompileState = COMPILE_STATE) -> "CompiledGraph":
        """A graph of a warm region (warm_region.py): the cached export, without AOTAutograd's graph
        (``gm`` is None) and run by a session that keeps ATen nodes to the engine's pure-operator list,
        as for any model file. Raises what session creation raises."""
        self = cls.__new__(cls)
        self._boxed_call = True
        self.gm, self.stage, self.opts, self.unaliased_outputs, self.state = None, stage, opts, frozenset(), state
        self.name, self.serial = state.register_graph(self, stage)
        self._stats = state.stats
        self.fallback = FallbackManager(FallbackPolicy.FALLBACK_DISABLE, False, f"the {stage} graph {self.name}")
        self.eager, self._fast, self._donates = False, False, False
        self.lean_run = self.run_list
        self._contiguous_copies, self._declared_outputs = (), 0
        self.aot_meta, self.cache_key, self.trusted, self.exported_here = None, None, False, False
        self.session, self.exported, self.memory, self.inspector = None, None, memory, None
        self._finish(exported)
        return self

    def _finish(self, exported: ExportedGraph) -> None:
        """The session and the run path of an export (fresh or from the cache)."""
        self.state.stats.aten_fallback_ops.update(exported.aten_fallback_ops)
        self.exported = exported
        model = exported.model
        prefix = f"{self.opts.onnx_prefix}_{self.name}"
        if self.opts.save_onnx:
            logger.info("saved %s", _save(self.opts, model, f"{prefix}_exported.onnx"))
        # A graph that only hands inputs and constants back (a backward with nothing to compute)
        # needs no session.
        self.session = self._session_for(model) if exported.output_names else None
        self._input_names = exported.input_names
        self.memory.keep_returned_inputs(exported.output_kinds)  # donation (memory_optimizer/step_memory.py)
        if self.gm is not None:
            self.inspector = inspector_for(self.gm, self.name, self.stage, self.opts)  # runtime_inspector.py
        self._output_plan = self._fast_output_plan()
        self._plain_outputs = self._output_plan is not None and all(k == _ENGINE for k, _ in self._output_plan)
        self._fast = self._output_plan is not None
        # Session.run_torch where the engine has it (benchmarks/bench_call_overhead.py turns it off on
        # one runner's graphs to time the DLPack exchange beside it)
        self._torch_exchange = _RUN_TORCH
        # Session.torch_runner(): run_torch without donation as one C call (no pybind11 dispatch)
        engine = self.session._session if self.session is not None else None
        self._runner = engine.torch_runner() if _RUN_TORCH and hasattr(engine, "torch_runner") else None
        self._donates = bool(self.memory.donated_inputs)
        self._make_lean_run()
        self._report()

    def _fast_output_plan(self) -> list[tuple[int, Any]] | None:
        """How _run_fast builds the outputs, worked out once: (_ENGINE, i) the session's output i,
        (_INPUT, k) argument k, (_SAME_AS, j) output j again, (_CONSTANT, v) the value v, (_VIEW,
        kind) a torch view replayed on its base as _run_engine does it (the base an argument, an
        output, or one of the session's outputs after the declared ones). None where calls cannot
        take the fast path: an input that is not a tensor, feeds not in the session's own input
        order, a runtime inspector, or symint outputs."""
        ex = self.exported
        if self.session is None or self.inspector is not None or any(k != "tensor" for k in ex.input_kinds):
            return None
        if [i.name for i in self.session.get_inputs()] != list(self._input_names):
            return None
        plan: list[tuple[int, Any]] = []
        engine_outputs, views = 0, False
        for kind in ex.output_kinds:
            if kind == "tensor":
                plan.append((_ENGINE, engine_outputs))
                engine_outputs += 1
            elif kind == "symint":
                return None
            elif kind[0] == "view":
                plan.append((_VIEW, kind))
                views = True
            elif kind[0] == "input":
                plan.append((_INPUT, kind[1]))
            elif kind[0] == "same_as":
                plan.append((_SAME_AS, kind[1]))
            else:
                plan.append((_CONSTANT, kind[1]))
        session_outputs = len(self.session.get_outputs())
        # Views may read session outputs beyond the declared ones ("hidden" bases); nothing else may.
        fits = engine_outputs == session_outputs or (views and engine_outputs < session_outputs)
        self._declared_outputs = engine_outputs
        return plan if fits else None

    def _export(self) -> ExportedGraph:
        try:
            exported = export_fx_graph(self.gm, self.opts.opset, self.opts.prefer_torch_kernels,
                                       replay_views=True, unaliased_outputs=self.unaliased_outputs)
        except FallbackError:
            raise
        except Exception as e:  # a converter bug or an FX construct we do not know is a model we cannot export
            raise UnsupportedTorchModelError(f"exporting {self.name} failed: {type(e).__name__}: {e}") from e
        self.state.stats.exports += 1
        return exported

    def _session_for(self, model):
        """The engine session of this export: shared with earlier identical exports (same model, session
        options and engine switches) through the compile state, except when the optimized model is to be
        saved."""
        # the TOB_* engine switches too: the pass pipeline reads them when a session is created
        key = (hashlib.sha1(model.SerializeToString(deterministic=True)).hexdigest(), self.opts.optimization_level,
               self.opts.intra_op_threads, self.opts.enable_profiling, self._arena_policy(), self.trusted,
               _load_engine().env_switch_signature())
        return self.state.shared_session(key, lambda: self._create_session(model), reuse=not self.opts.save_onnx)

    def _arena_policy(self) -> tuple[bool, bool]:
        """(memory pattern: plan one arena per input signature; release it after each run).

        Level 0 and inference graphs plan an arena and keep the largest one between runs: steady
        runs allocate nothing and touch no new page. At memory_opt_level >= 1 a training graph runs
        without one: each intermediate is allocated when its step makes it and freed after its last
        reader, so the process holds what is live. An arena's pages stay resident from the first
        time any buffer touches them to the end of the run, whatever the buffers there still hold:
        GPT-2 at the issue's size spent 76 MiB of dead pages beside the forward's stash at its end,
        and 30 MiB more than the live values in the backward (docs/memory_optimizer.md)."""
        if self.stage in ("forward", "backward") and self.opts.memory_opt_level >= 1:
            return False, False
        return True, False

    def _create_session(self, model):
        from .session import InferenceSession

        so = _session_options(self.opts, self.trusted)
        so.enable_mem_pattern, so.release_arena_after_run = self._arena_policy()
        if self.opts.save_onnx:
            so.optimized_model_filepath = os.path.join(
                self.opts.save_path or os.getcwd(), f"{self.opts.onnx_prefix}_{self.name}_optimized.onnx")
        try:
            # an export of this process is not run through onnx's checker (onnx_loader.parse_model)
            return InferenceSession(model, so, _exported_here=self.exported_here)
        except Exception as e:
            raise UnsupportedOnnxModelError(f"the engine rejected {self.name}: {e}") from e

    def _report(self) -> None:
        ex = self.exported
        if not logger.isEnabledFor(logging.INFO):
            return
        total = ex.fx_nodes
        aten = sum(ex.aten_fallback_ops.values())
        share = 100.0 * (total - aten) / total if total else 100.0
        lines = [f"partition report for {self.name}: {total} ATen nodes, {share:.1f}% run natively, "
                 f"{aten} through the ATen fallback"]
        for op, n in ex.aten_fallback_ops.most_common():
            lines.append(f"  ATen fallback: {op} x{n}")
        logger.info("\n".join(lines))
        if self.session is not None and logger.isEnabledFor(logging.DEBUG):
            logger.debug("engine partition for %s:\n%s", self.name, self.session.partition_report())

    # ---- what the lean per-call path (lean_call.py) reads ----
    @property
    def num_inputs(self) -> int:
        if self.gm is None:
            return len(self.exported.input_names)
        return sum(1 for n in self.gm.graph.nodes if n.op == "placeholder")

    @property
    def num_outputs(self) -> int:
        return len(self.exported.output_kinds) if self.exported is not None else -1

    def lean_ready(self) -> bool:
        """Whether calls run on the engine's fast path (lean_call.py builds on it)."""
        return self._fast and not self.eager and self.session is not None

    def output_may_be_view(self, i: int) -> bool:
        """Output i may be a torch view: anything but an engine output (an input handed back)."""
        return self._output_plan is None or self._output_plan[i][0] != _ENGINE

    def inputs_to_detach(self, meta: Any) -> list[int]:
        """A backward graph's forward inputs that AOTAutograd detaches before the forward runs: those
        that require grad, are not leaves and get no gradient (its _compute_indices_of_inps_to_detach,
        for graphs without input mutations)."""
        output = next(n for n in reversed(self.gm.graph.nodes) if n.op == "output")
        grads = output.args[0]
        if len(grads) != len(meta.input_info):
            raise ValueError(f"{self.name} returns {len(grads)} gradients for {len(meta.input_info)} inputs")
        return [i for i, g in enumerate(grads)
                if g is None and meta.input_info[i].requires_grad and not meta.input_info[i].is_leaf]

    # ---- run ----
    def __call__(self, *call_args: Any) -> Any:
        # AOTAutograd calls forward graphs boxed (one list) and the dynamo-disabled backward unboxed.
        args = call_args[0] if len(call_args) == 1 and isinstance(call_args[0], list) else list(call_args)
        return self.run_list(args)

    def run_list(self, args: list) -> Any:
        """One run on the arguments in ``args`` (a list this call owns: donated inputs leave it)."""
        if self.eager:
            return self._run_eager(args)
        if self._fast:
            try:
                return self._run_fast(args)
            except Exception as e:
                return self._run_checked(args, e)
        return self._run_checked(args, None)

    def _run_checked(self, args: list, fast_error: Exception | None) -> Any:
        """The checked path (``_run_engine``), and the fallback policy around it. ``fast_error``: why
        the fast path (``_run_fast`` or ``lean_run``) refused this call, if it ran."""
        if fast_error is not None:
            # A bad input (another device, dtype or shape) or a failed run: the checked path
            # below raises the named error. Or a non-contiguous tensor, which the engine does not
            # take: the checked path runs it, and later calls copy that argument contiguous
            # before the fast path (an autocast step's transposed activations come back every
            # call). Only donated inputs already handed to the engine (taken out of args) rule
            # out a rerun.
            if any(a is None for a in args):
                raise UnsupportedOnnxModelError(f"running {self.name} failed: {fast_error}") from fast_error
            non_contiguous = {i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and not a.is_contiguous()}
        try:
            outs = self._run_engine(args)
            if fast_error is not None:
                if non_contiguous - set(self._contiguous_copies):
                    self._contiguous_copies = tuple(sorted(non_contiguous | set(self._contiguous_copies)))
                else:  # not a layout the copies mend: this graph keeps to the checked path
                    self._fast = False
                self._make_lean_run()
            return outs
        except FallbackError as e:
            if not self.fallback.should_fall_back(e):
                raise
            self.state.stats.fallbacks += 1
            self.eager = not self.opts.fallback_retry
            self._make_lean_run()
            return self._run_eager(args)

    def _make_lean_run(self) -> None:
        """``lean_run``: what lean_call.py's region calls run the graph with, ``run_list`` itself
        unless the graph is in the common case (the fast path through the session's runner, no
        donation, no saved inputs, no argument to copy contiguous, every output the engine's). Then
        a closure over what ``_run_fast`` would look up on every call: one Python frame instead of
        two, its objects bound once. Remade whenever run_list changes the graph's path (a learnt
        contiguous copy, the checked path for good, the eager fallback), so that both always take
        the same path and count the same (compile_stats().runs, ``memory.runs`` / ``order``)."""
        memory = self.memory
        if not (self._fast and not self.eager and self.session is not None and self._torch_exchange
                and self._runner is not None and not self._donates and not memory.saved_inputs
                and not self._contiguous_copies and self._plain_outputs):
            self.lean_run = self.run_list
            return
        runner, session, stats, name = self._runner, self.session, self._stats, self.name
        run_checked = self._run_checked
        next_order = _next_run_order

        def lean_run(args: list) -> list:
            if session._peaks_owner is not memory:  # memory_stats(): a shared session
                memory.claim(session)
            try:
                results = runner(args)
            except Exception as e:
                return run_checked(args, e)
            stats.runs += 1
            # GraphMemory.record's steps for a graph without saved inputs (as _run_fast)
            memory._source = session
            memory.runs += 1
            memory.order = next_order()
            if _debug_cached(_DEBUG, True) and _debug_enabled(_DEBUG):
                logger.debug("%s run: %s", name, session.last_run_stats())
            return results

        self.lean_run = lean_run

    def _run_eager(self, args: list) -> Any:
        if self.gm is None:  # never reached: a warm graph's FallbackManager falls back to nothing
            raise RuntimeError(f"{self.name} came from the on-disk cache and has no torch graph to run instead")
        return self.gm(*args)

    def _run_fast(self, args: list) -> list:
        """The common case, as little Python as possible: the argument list straight to the engine's
        ``run_torch`` (each tensor's memory borrowed in C++, no DLPack capsule; outputs back as torch
        tensors over engine memory, no copies). The arguments this graph was once fed non-contiguous
        (_contiguous_copies, learnt by run_list) are made contiguous first, as the checked path does
        with every such tensor."""
        if self._contiguous_copies:
            for i in self._contiguous_copies:
                a = args[i]
                if not a.is_contiguous():
                    args[i] = a.contiguous()
        session = self.session
        memory = self.memory
        if session._peaks_owner is not memory:  # memory_stats(): a shared session
            memory.claim(session)
        if self._torch_exchange:
            # Donated stashed activations leave args in the engine's call (set to None once it holds
            # them): the engine frees each after its last reader.
            if self._donates:
                results = session._session.run_torch(args, memory.take_donated(args[:]))
            elif self._runner is not None:
                results = self._runner(args)
            else:
                results = session._session.run_torch(args)
        else:  # an engine built without torch: DLPack capsules
            engine = session._session
            feeds = [_to_dlpack(a) for a in args]
            results = engine.run_positional(feeds, memory.take_donated(args)) if self._donates else \
                engine.run_positional(feeds)
            results = [_from_dlpack(r) for r in results]
        self._stats.runs += 1
        if memory.saved_inputs or memory._taken:
            memory.record(session, args)
        else:  # GraphMemory.record's steps for a graph without saved inputs, inline (0.1 us a call)
            memory._source = session
            memory.runs += 1
            memory.order = _next_run_order()
        if _debug_enabled(_DEBUG):
            logger.debug("%s run: %s", self.name, session.last_run_stats())
        if self._plain_outputs:
            return results
        outs: list[Any] = []
        views = []
        for source, i in self._output_plan:
            if source == _ENGINE:
                outs.append(results[i])
            elif source == _INPUT:
                outs.append(args[i])
            elif source == _SAME_AS:
                outs.append(outs[i])
            elif source == _VIEW:
                views.append((len(outs), i))
                outs.append(None)
            else:
                outs.append(i)
        if views:
            _replay_views(views, args, outs, results[self._declared_outputs:])
        return outs

    def _run_engine(self, args: list) -> list:
        ex = self.exported
        feeds = {}
        for name, a, kind in zip(self._input_names, args, ex.input_kinds):
            if kind == "tensor":
                if a.device.type != "cpu":
                    raise UnsupportedDeviceError(f"{self.name}: an input is on {a.device}; the CPU only")
                feeds[name] = a
            elif kind == "symint":
                feeds[name] = np.asarray(int(a), dtype=np.int64)
            else:
                feeds[name] = np.asarray(float(a), dtype=np.float64)
        a = None  # the loop's last input: no reference may stay here to a donated one
        if self.inspector is not None:
            self.inspector.before_run(args)
        if self.session is not None:
            self.memory.claim(self.session)  # memory_stats() (step_memory.py)
        donated = self.memory.take_donated(args) if self.session else []
        donate = [name for name, flag in zip(self._input_names, donated) if flag]
        try:
            results = self.session.run(None, feeds, as_torch=True, donate=donate) if self.session else []
        except Exception as e:
            if donate:  # not a FallbackError: the donated inputs are gone, no eager rerun could read them
                raise RuntimeError(f"running {self.name} failed after its stashed activations {donate} were donated "
                                   f"to the engine: {e}") from e
            raise UnsupportedOnnxModelError(f"running {self.name} failed: {e}") from e
        self.state.stats.runs += 1
        if self.session is not None:
            self.memory.record(self.session, args)
        if self.inspector is not None:
            self.inspector.after_run(self.session)
        if self.session is not None and logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s run: %s", self.name, self.session.last_run_stats())
        outs: list[Any] = []
        it = iter(results)
        views = []
        for kind in ex.output_kinds:
            if kind == "tensor":
                outs.append(next(it))
            elif kind == "symint":
                outs.append(int(next(it).item()))
            elif kind[0] == "input":
                outs.append(args[kind[1]])
            elif kind[0] == "same_as":
                outs.append(outs[kind[1]])
            elif kind[0] == "view":
                views.append((len(outs), kind))
                outs.append(None)
            else:
                outs.append(kind[1])
        if views:
            _replay_views(views, args, outs, list(it))
        return outs
