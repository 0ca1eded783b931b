"""The per-call path of a region "ort" compiled, shorter than AOTAutograd's runtime wrappers.

What AOTAutograd (torch 2.13, ``torch/_functorch/_aot_autograd/runtime_wrappers.py``) runs around
our compiled graphs on every call, beyond TorchDynamo's own guards and frame:

- (TorchDynamo itself wraps whatever a backend returns in ``torch._dynamo.disable``, its callback
  off while the region runs: that layer stays, for Inductor as for us);
- ``aot_module_simplified``'s ``forward``: parameters and buffers lifted into the graph's
  arguments (none when TorchDynamo inlines modules, its default);
- the dedupe and synthetic-base wrappers where the compile needed them (duplicated or aliased
  inputs; otherwise they are not installed);
- ``RuntimeWrapper`` (generated code): the profiler's prologue, the first-call custom-op aliasing
  check, grad mode (an inference graph runs with grad off; a training region with grad on, view
  replay on, and the inputs it never differentiates detached), autocast off when the graph was
  traced under autocast, the output count check, input mutations written back, output aliases
  regenerated from their bases, dynamic dims marked on outputs, a grad-mode change replayed;
- training: ``CompiledFunction`` (an autograd.Function). Its forward runs the forward graph,
  saves the activations (views detached) with ``ctx.save_for_backward``, wraps aliased outputs,
  re-views ``_unsafe_view`` outputs and marks the outputs that need no gradient. Its backward
  checks functorch's interpreter stack and the deterministic-algorithms flag, picks the gradients
  of the differentiable outputs and coerces each to the stride it was traced with (a tensor
  subclass to its traced type), compiles the backward graph on first use, clears ``ctx``'s saved
  tensors (so the graph owns them), refuses ``retain_graph`` when activations are donated, runs the
  backward graph (under compiled autograd's context where one is active, behind an autograd.Function
  whose backward refuses double backward when grad mode is on).

What "ort"'s graphs need of that: the graph's arguments, grad and autocast mode, and for training
the autograd.Function with its saved tensors, non-differentiable outputs, tangent strides and the
retain_graph and double-backward errors. The rest only ever does something for graphs that
mutate inputs, return aliases of inputs or of intermediates, have duplicated or aliased
arguments, tensor subclasses, effect tokens, functionalized random state, dynamic output dims,
symbolic sizes or opaque objects saved for the backward, inlined saved-tensor hooks, or when
functorch's debug asserts are on.

So when AOTAutograd's metadata of a region (``ViewAndMutationMeta``) shows none of those, the
region's callable is ``LeanRegion``'s: the same steps for what remains, straight-line, with the
engine graph's run inlined (``CompiledGraph.lean_run``: ``run_list``'s common case as one closure). One step differs: autograd does not
materialise zeros for the outputs that got no gradient (a language model's logits when the caller
backpropagates the loss); the backward runs a variant of its graph without those tangents
(zero_tangents.py), with the gradients eager computes. Everything else, and the first call
(AOTAutograd's first-call checks; for training, until the backward graph has been compiled), goes
through AOTAutograd's wrappers as before. A warm region (warm_region.py: built from the on-disk
cache without AOTAutograd) takes the lean path from its first call, with ``TrainingPlan`` read from
its record. ``ORTMODULE_LEAN_CALL=0`` (option ``lean_call``) turns it off, and warm regions with it. docs/performance.md ("Per-call overhead") has the figures; tests/python/test_lean_call.py
checks each behaviour against AOTAutograd's path and eager.
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from typing import Any, Callable

import torch

logger = logging.getLogger("torch_ort_backend")

_is_grad_enabled = torch.is_grad_enabled
_set_grad_enabled = torch._C._set_grad_enabled
_is_view_replay_enabled = torch._C._is_view_replay_enabled
_set_view_replay_enabled = torch._C._set_view_replay_enabled
_DisableAutocast = torch._C._DisableAutocast
_keep_graph = torch._C._autograd._get_current_graph_task_keep_graph
_peek_interpreter_stack = torch._C._functorch.peek_interpreter_stack
_deterministic = torch.are_deterministic_algorithms_enabled
_is_key_in_tls = torch._C._is_key_in_tls
_Tensor = torch.Tensor


def _plain_meta(meta: Any) -> str | None:
    """Why AOTAutograd's wrappers have work to do for this region (None: nothing, the lean path
    may run it). Shared by inference and training."""
    from torch._functorch import config as functorch_config

    if meta is None:
        return "no metadata"
    if meta.num_mutated_inp_runtime_indices or meta.num_mutated_graph_handled_indices_seen_by_autograd:
        return "input mutations"
    if meta.num_outputs_aliased or meta.num_intermediate_bases:
        return "outputs alias inputs or intermediates"
    if meta.tokens or meta.num_backward_tokens:
        return "effect tokens"
    if meta.is_rng_op_functionalized or meta.num_graphsafe_rng_states:
        return "functionalized random state"
    if meta.dynamic_outputs or meta.grad_enabled_mutation is not None:
        return "dynamic outputs or a grad-mode change"
    if any(not isinstance(m, int) and type(m).__name__ != "PlainTensorMeta" for m in meta.subclass_inp_meta):
        return "tensor subclass inputs"
    if any(not isinstance(m, int) and type(m).__name__ != "PlainTensorMeta" for m in meta.subclass_fw_graph_out_meta):
        return "tensor subclass outputs"
    if functorch_config.debug_assert:
        return "functorch's debug asserts"
    return None


_REGIONS: weakref.WeakSet = weakref.WeakSet()


def live_regions() -> list:
    """The regions compiled with a lean path and still alive, oldest first (tests, benchmarks)."""
    return sorted(_REGIONS, key=lambda r: r.serial)


class LeanRegion:
    """The callable TorchDynamo calls for one compiled region (see the module docstring). Holds
    AOTAutograd's own callable for the calls the lean path does not take."""

    def __init__(self, aot_fn: Callable, params: list, arity: int, graphs: list, inference: bool,
                 disable_amp: bool) -> None:
        self.aot_fn = aot_fn  # what AOTAutograd returned (its wrappers)
        self.params = params  # aot_module_simplified's lifted parameters and buffers
        self.arity = arity  # TorchDynamo's arguments per call
        self.graphs = graphs  # CompiledGraphs of this region, appended by the compilers
        self.inference = inference
        self.disable_amp = disable_amp
        self.serial = min((g.serial for g in graphs), default=0)
        self.lean_calls = 0  # calls that took the lean path (tests)
        self.declined: str | None = None  # why the lean path is not taken, once decided
        self._prechecked = False
        self._aot_ran = False  # AOTAutograd's path ran once (its first-call checks)
        self.call = self._make_call()
        _REGIONS.add(self)

    # ---- building the lean path ----
    def _graph(self, stage: str) -> Any:
        found = [g for g in self.graphs if g.stage == stage]
        return found[0] if len(found) == 1 else None

    def precheck(self) -> str | None:
        """Why the lean path can never run this region, as far as compile time tells (None: it may)."""
        stage = "inference" if self.inference else "forward"
        graph = self._graph(stage)
        if graph is None:
            return f"no single {stage} graph"
        why = _plain_meta(getattr(graph, "aot_meta", None))
        if why is None and not graph.lean_ready():
            why = "the graph is not on the engine's fast path"
        if why is None and graph.num_inputs != len(self.params) + self.arity:
            why = "AOTAutograd deduplicated the arguments"
        return why

    def _try_build(self) -> Callable | None:
        """The lean call once everything it needs exists; sets self.declined when it never will."""
        if not self._prechecked:  # once: a training region may wait calls long for its backward graph
            self.declined = self.precheck()
            self._prechecked = True
        if self.declined is not None:
            return None
        graph = self._graph("inference" if self.inference else "forward")
        if self.inference:
            return _lean_inference(graph, self.params, self.disable_amp, self)
        backward = self._graph("backward")
        if backward is None:
            return None  # compiled on the first backward: try again on the next call
        return _lean_training(graph, backward, self.params, self.disable_amp, self)

    def slow(self, args: tuple) -> Any:
        """AOTAutograd's path, always for the first call; from the second on, builds the lean path
        once it can (training: once the backward graph exists) and hands the call to it."""
        if self._aot_ran and self.declined is None and self.lean[0] is None:
            try:
                self.lean[0] = self._try_build()
            except Exception as e:  # a layout of torch's this code does not know: keep AOTAutograd's path
                self.declined = f"{type(e).__name__}: {e}"
            if self.declined is not None:
                logger.debug("lean call declined: %s", self.declined)
            if self.lean[0] is not None:
                return self.call(*args)  # the lean path, unless the profiler or compiled autograd is on
        self._aot_ran = True
        return self.aot_fn(*args)

    def _make_call(self) -> Callable:
        self.lean: list = [None]
        lean, slow = self.lean, self.slow
        # Under torch's profiler AOTAutograd's path runs, so that a profile shows its events as before.
        profiler = torch.autograd.profiler
        if self.inference:
            def call(*args):
                fn = lean[0]
                return fn(args) if fn is not None and not profiler._is_profiler_enabled else slow(args)
            return call
        import torch._dynamo.compiled_autograd as compiled_autograd

        def call_training(*args):
            fn = lean[0]
            # compiled autograd recognises AOTAutograd's own autograd.Function only
            if fn is not None and not compiled_autograd.compiled_autograd_enabled and not profiler._is_profiler_enabled:
                return fn(args)
            return slow(args)
        return call_training


def _lean_inference(graph: Any, params: list, disable_amp: bool, region: LeanRegion,
                    n_out: int | None = None) -> Callable:
    """RuntimeWrapper's inference steps for a plain region: grad off around the graph (its outputs
    never require grad), autocast off if it was traced under autocast. ``n_out``: AOTAutograd's
    output count, read from the graph's metadata when not given (a warm region's record)."""
    if n_out is None:
        n_out = graph.aot_meta.num_outputs
    # graph.lean_run is read on every call: the graph remakes it when its path changes (a learnt
    # contiguous copy, the checked path, the eager fallback: CompiledGraph._make_lean_run)

    if params or disable_amp:
        def lean(args: tuple) -> list:
            region.lean_calls += 1
            full = [*params, *args] if params else list(args)
            grad = _is_grad_enabled()
            if grad:
                _set_grad_enabled(False)
            try:
                if disable_amp:
                    with _DisableAutocast():
                        outs = graph.lean_run(full)
                else:
                    outs = graph.lean_run(full)
            finally:
                if grad:
                    _set_grad_enabled(True)
            if len(outs) != n_out:
                raise AssertionError(f"expected {n_out} outputs, got {len(outs)}")
            return outs
        return lean

    def lean_plain(args: tuple) -> list:  # the common case: no lifted parameters, no autocast
        region.lean_calls += 1
        if _is_grad_enabled():
            _set_grad_enabled(False)
            try:
                outs = graph.lean_run(list(args))
            finally:
                _set_grad_enabled(True)
        else:
            outs = graph.lean_run(list(args))
        if len(outs) != n_out:
            raise AssertionError(f"expected {n_out} outputs, got {len(outs)}")
        return outs

    return lean_plain


@dataclasses.dataclass
class TrainingPlan:
    """What the training call reads of AOTAutograd's metadata of a region, as plain data: taken
    from the metadata after a compile (``plan_from_meta``), or from a warm cache's record
    (warm_region.py), which skips AOTAutograd."""

    n_out: int  # the user's outputs (meta.num_outputs)
    n_fw: int  # forward outputs before the saved tensors (meta.num_forward)
    n_no_vc: int  # saved tensors without a version-counter check (the last ones)
    non_diff: list  # outputs marked non-differentiable
    unsafe_view: list  # outputs re-viewed with _unsafe_view
    surviving: list  # outputs whose gradient the backward graph takes, in order
    coercions: list  # per surviving output: ("strides", size, stride), ("format", memory_format) or None
    detach: list  # inputs detached before the forward (require grad, not leaves, get no gradient)
    check_deterministic: bool  # traced with deterministic algorithms off
    donated: bool  # the backward frees donated activations (retain_graph refused)
    inputs_require_grad: bool

    def tangent_metas(self) -> list:
        """AOTAutograd's PlainTensorMeta of each tangent (its process_runtime_tangent reads them)."""
        from torch._functorch._aot_autograd.schemas import MemoryFormatMeta, PlainTensorMeta

        metas = []
        for j, c in enumerate(self.coercions):
            fmt = (None if c is None else MemoryFormatMeta(memory_format=c[1]) if c[0] == "format"
                   else MemoryFormatMeta(size=list(c[1]), stride=list(c[2])))
            metas.append(PlainTensorMeta(j, memory_format=fmt))
        return metas


def _tangent_coercions(meta: Any, surviving: list[int]) -> list | None:
    """Per surviving output, the (size, stride) its gradient was traced with, or the memory format;
    None when one is not a plain tensor (AOTAutograd's own coercion would have to run)."""
    out = []
    for j, _ in enumerate(surviving):
        m = meta.subclass_tangent_meta[j]
        fmt = getattr(m, "memory_format", None)
        if type(m).__name__ != "PlainTensorMeta":
            return None
        if fmt is None:
            out.append(None)  # nothing to coerce (process_runtime_tangent hands a plain tensor back)
        elif fmt.memory_format is not None:
            out.append(("format", fmt.memory_format))
        else:
            out.append(("strides", tuple(fmt.size), tuple(fmt.stride)))
    return out


def plan_from_meta(fw: Any, bw: Any) -> tuple[TrainingPlan | None, str | None]:
    """The TrainingPlan of a region from AOTAutograd's metadata (the forward graph's aot_meta), or
    None and why the lean path cannot run it."""
    from torch._functorch._aot_autograd.schemas import OutputType

    meta = fw.aot_meta
    if meta.num_symints_saved_for_bw or meta.num_opaque_objects_saved_for_bw:
        return None, "sizes or opaque objects saved for the backward"
    if meta.traced_tangents and len(meta.subclass_tangent_meta) != len(meta.traced_tangents):
        return None, "tangent metadata"
    n_fw = meta.num_forward  # == num_forward_returns: no mutated inputs, bases or random offsets here
    n_no_vc = meta.num_tensors_saved_with_no_vc_check or 0
    n_saved = fw.num_outputs - n_fw
    if n_saved < 0 or n_saved - n_no_vc < 0:
        return None, "forward outputs"
    surviving = [i for i, o in enumerate(meta.output_info)
                 if o.output_type in (OutputType.non_alias, OutputType.unsafe_view_alias,
                                      OutputType.custom_function_view)
                 and issubclass(o.raw_type, torch.Tensor) and o.requires_grad_for_backward]
    coercions = _tangent_coercions(meta, surviving)
    if coercions is None:
        return None, "a tangent that is not a plain tensor"
    plan = TrainingPlan(
        n_out=meta.num_outputs, n_fw=n_fw, n_no_vc=n_no_vc,
        non_diff=[i for i, o in enumerate(meta.output_info) if not o.requires_grad],
        unsafe_view=list(meta.unsafe_view_out_indices), surviving=surviving, coercions=coercions,
        detach=bw.inputs_to_detach(meta),
        check_deterministic=meta.deterministic is not None and not meta.deterministic,
        donated=bool(meta.bw_donated_idxs), inputs_require_grad=any(i.requires_grad for i in meta.input_info))
    return plan, None


def _lean_training(fw: Any, bw: Any, params: list, disable_amp: bool, region: LeanRegion,
                   plan: TrainingPlan | None = None) -> Callable | None:
    """RuntimeWrapper's training steps and CompiledFunction's forward and backward for a plain
    region (the module docstring), as one autograd.Function. ``plan``: AOTAutograd's metadata as
    data, read from the forward graph's when not given."""
    from torch._functorch._aot_autograd.runtime_wrappers import (
        AOTDispatchAutograd,
        _should_disable_saved_tensors_hooks,
    )

    if _should_disable_saved_tensors_hooks():
        region.declined = "saved-tensor hooks inlined in the graphs"
        return None
    if plan is None:
        plan, why = plan_from_meta(fw, bw)
        if plan is None:
            region.declined = why
            return None
    n_out, n_fw, n_no_vc = plan.n_out, plan.n_fw, plan.n_no_vc
    n_vc = fw.num_outputs - n_fw - n_no_vc
    # Saved tensors that may be views (inputs returned as they came); engine outputs never are.
    view_candidates = [i for i in range(n_fw, fw.num_outputs) if fw.output_may_be_view(i)]
    non_diff, unsafe_view, surviving, coercions = plan.non_diff, plan.unsafe_view, plan.surviving, plan.coercions
    process_tangent = AOTDispatchAutograd.process_runtime_tangent
    tangent_metas = plan.tangent_metas()
    detach = plan.detach
    check_deterministic, donated, inputs_require_grad = plan.check_deterministic, plan.donated, plan.inputs_require_grad
    bw_run = bw.run_list
    _unsafe_view = torch.ops.aten._unsafe_view
    n_tangents, n_inputs = len(surviving), fw.num_inputs
    # Outputs that get no gradient come as None, not as zeros autograd allocates: a variant of the
    # backward graph without them runs instead (zero_tangents.py). Only where the backward graph is
    # an FX graph of this process (not a warm region's cached export) and its inputs are the saved
    # tensors followed by one tangent per surviving output.
    specialise = bw.gm is not None and bw.num_inputs == fw.num_outputs - n_fw + n_tangents
    variants = _BackwardVariants(bw, fw.num_outputs - n_fw, region) if specialise else None

    def run_backward(all_args: list, missing: tuple = ()) -> tuple:
        run = variants.run_for(missing) if missing else bw_run
        if disable_amp:
            with _DisableAutocast():
                return tuple(run(all_args))
        return tuple(run(all_args))

    class LeanFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            if disable_amp:
                with _DisableAutocast():
                    outs = fw.lean_run(list(args))
            else:
                outs = fw.lean_run(list(args))
            # a graph that fell back to eager (fallback policy) may return views anywhere
            for i in view_candidates if not fw.eager else range(n_fw, len(outs)):
                if isinstance(outs[i], _Tensor) and outs[i]._is_view():
                    outs[i] = outs[i].detach()
            ctx.save_for_backward(*outs[n_fw:n_fw + n_vc])
            ctx._tensors_no_vc_check = outs[n_fw + n_vc:]
            returns = outs[:n_out]
            for i in unsafe_view:
                returns[i] = _unsafe_view(returns[i], returns[i].shape)
            if non_diff:
                ctx.mark_non_differentiable(*[returns[i] for i in non_diff if isinstance(returns[i], _Tensor)])
            ctx._materialize_non_diff_grads = False
            if specialise:
                ctx.set_materialize_grads(False)
            return tuple(returns)

        @staticmethod
        def backward(ctx, *grads):
            if _peek_interpreter_stack() is not None:
                raise RuntimeError("It looks like you're trying to call a compiled backward function within "
                                   "vmap/grad/vjp, which isn't supported. Try wrapping vmap inside torch.compile, "
                                   "or skip compiling the backward function.")
            if check_deterministic and _deterministic():
                raise RuntimeError("This compiled backward function is being run with "
                                   "torch.use_deterministic_algorithms(True), but it was previously generated "
                                   "during the forward function while torch.use_deterministic_algorithms(False) "
                                   "was set.")
            tangents = [grads[i] for i in surviving]
            missing = ()
            for j, t in enumerate(tangents):
                if t is None:
                    missing += (j,)
                    continue
                c = coercions[j]
                if c is not None and type(t) is _Tensor:
                    if c[0] == "strides":
                        if t.shape == c[1] and t.stride() == c[2]:
                            continue
                    elif t.is_contiguous(memory_format=c[1]):
                        continue
                tangents[j] = process_tangent(t, tangent_metas[j], j)[0]
            if missing:
                if len(missing) == n_tangents:  # no output got a gradient: nor does any input, as in eager
                    return (None,) * n_inputs
                tangents = [t for t in tangents if t is not None]
            all_args = [*ctx.saved_tensors, *ctx._tensors_no_vc_check, *tangents]
            del tangents

            def impl(double_ctx: Any = None) -> tuple:
                ctx.maybe_clear_saved_tensors()
                if donated and _keep_graph():
                    from torch._functorch import config as functorch_config

                    if functorch_config.donated_buffer:
                        raise RuntimeError(
                            "This backward function was compiled with non-empty donated buffers which requires "
                            "create_graph=False and retain_graph=False. Please keep backward(create_graph=False, "
                            "retain_graph=False) across all backward() function calls, or set "
                            "torch._functorch.config.donated_buffer=False to disable donated buffer.")
                args = all_args[:]
                all_args.clear()
                return run_backward(args, missing)

            if _is_key_in_tls("context"):
                cc = torch._C._get_obj_in_tls("context")
                if cc is not None:
                    import functools

                    impl = functools.partial(cc.run, impl)
            grad_on = _is_grad_enabled() and (
                inputs_require_grad or any(isinstance(t, _Tensor) and t.requires_grad for t in all_args))
            if grad_on:
                return _no_double_backward(impl, all_args)
            return impl()

    def lean(args: tuple) -> list:
        region.lean_calls += 1
        full = [*params, *args] if params else list(args)
        for i in detach:
            if isinstance(full[i], _Tensor):
                full[i] = full[i].detach()
        replay = _is_view_replay_enabled()
        grad = _is_grad_enabled()
        try:
            if not replay:
                _set_view_replay_enabled(True)
            if not grad:
                _set_grad_enabled(True)
            outs = LeanFunction.apply(*full)
        finally:
            if not grad:
                _set_grad_enabled(False)
            if not replay:
                _set_view_replay_enabled(False)
        return list(outs)

    region.function = LeanFunction  # tests
    return lean


class _BackwardVariants:
    """A training region's backward graphs for tangents that came as None (zero_tangents.py): one
    per distinct set of missing tangents, compiled on first use and kept for the region's life."""

    def __init__(self, bw: Any, n_saved: int, region: LeanRegion) -> None:
        self.bw, self.n_saved = bw, n_saved
        self.graphs: dict = {}  # missing tangent positions -> CompiledGraph, or None: none could be built
        region.backward_variants = self.graphs  # tests

    def run_for(self, missing: tuple) -> Callable:
        """The run (boxed arguments: the saved tensors, then the tangents that came) for ``missing``."""
        graph = self.graphs.get(missing, False)
        if graph is False:
            graph = self.graphs[missing] = self._build(missing)
        if graph is None:
            return lambda args: self._with_zeros(missing, args)
        return graph.run_list

    def _build(self, missing: tuple) -> Any:
        from .compiled_graph import CompiledGraph
        from .zero_tangents import without_tangents

        bw = self.bw
        try:
            gm = without_tangents(bw.gm, [self.n_saved + j for j in missing])
            graph = CompiledGraph(gm, "backward", bw.opts, donated=bw.memory.donated_inputs)
        except Exception as e:  # the full graph with zeros, as AOTAutograd runs it, is never wrong
            logger.warning("%s: no variant for outputs without a gradient (tangents %s): %s: %s; their "
                           "gradients are zeros", bw.name, list(missing), type(e).__name__, e)
            return None
        graph.memory.variant_of = bw.memory
        logger.info("%s: tangents %s came as None (outputs without a gradient): %s runs without them",
                    bw.name, list(missing), graph.name)
        return graph

    def _with_zeros(self, missing: tuple, args: list) -> list:
        """The full backward graph, the missing tangents zeros (what autograd would have made)."""
        placeholders = [n for n in self.bw.gm.graph.nodes if n.op == "placeholder"]
        for j in missing:  # in increasing order: each insert lands where the graph expects it
            val = placeholders[self.n_saved + j].meta["val"]
            args.insert(self.n_saved + j, torch.zeros(val.shape, dtype=val.dtype, device=val.device))
        return self.bw.run_list(args)


def _no_double_backward(impl: Callable, all_args: list) -> Any:
    """The backward run behind an autograd.Function whose own backward refuses, as AOTAutograd's
    CompiledFunctionBackward (create_graph=True gives gradients that cannot be differentiated)."""

    class LeanFunctionBackward(torch.autograd.Function):
        @staticmethod
        def forward(double_ctx, *unused):
            return impl(double_ctx)

        @staticmethod
        def backward(ctx, *args):
            raise RuntimeError("torch.compile with aot_autograd does not currently support double backward")

    if not any(t.requires_grad for t in all_args if isinstance(t, _Tensor)):
        all_args = [torch.empty(0, requires_grad=True), *all_args]
    return LeanFunctionBackward.apply(*all_args)
