"""The registered TorchDynamo backend "ort" (and "onnxrt" where torch no longer provides it).

Dynamo hands us an FX graph of torch-level ops; AOTAutograd (with our decomposition table) turns it
into an ATen forward graph and a backward graph (or one inference graph under no_grad / eval without
grads); each becomes a CompiledGraph: exported to ONNX and run by one engine session.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

import torch
from torch._dynamo.backends.common import aot_autograd

from .attention_fusion import fuse_eager_attention
from .autograd_function import install_capture
from .autograd_function.graph_rewrite import prepare_graph
from .compiled_graph import STATS, CompiledGraph, CompileStats
from .compute_optimizer import trace_optimized
from .decompositions import attention_kernels, decomposition_table
from .lean_call import LeanRegion
from .distributed import install_exit_guard, note_process_group
from .errors import FallbackError, UnsupportedTorchModelError
from .fallback import FallbackManager, FallbackPolicy
from .log_config import configure_logging, log_level_requested
from .memory_optimizer import partition_with_plans
from .options import BackendOptions, resolve
from .recompile_limit import install as install_recompile_limit_warning
from .recompile_limit import note_compiled_function
from . import warm_region


logger = logging.getLogger("torch_ort_backend")

# torch.autograd.Function.apply in a region compiled by "ort" becomes a PythonOp (docs/python_op.md).
install_capture()
# A process that trained with torch.distributed exits 0 (distributed.py: gloo's threads at exit).
install_exit_guard()
# A function dynamo stops compiling (its recompile limit) draws a FallbackWarning (recompile_limit.py).
install_recompile_limit_warning()


def compile_stats() -> CompileStats:
    """The backend's counters (graphs, exports, sessions created / reused, runs, fallbacks, ATen ops)."""
    return STATS


def _unaliased_outputs() -> frozenset:
    """The forward-graph outputs AOTAutograd will hand the user as non-views (its _unsafe_view
    outputs: user outputs that are views of an intermediate). AOTAutograd assumes nothing else aliases
    them, but a tensor saved for the backward may (detach(tanh) beside tanh.view(-1)); the exporter
    gives these outputs buffers of their own."""
    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    if meta is None:
        return frozenset()
    offset = meta.num_mutated_inp_runtime_indices
    return frozenset(offset + i for i in meta.unsafe_view_out_indices)


def _compiler(opts: BackendOptions, stage: str, graphs: list, recorder: Any = None) -> Callable:
    """The compiler of one stage; every graph it makes joins ``graphs`` (its region's, lean_call.py)
    with AOTAutograd's metadata of the region. ``recorder``: the warm cache's (warm_region.py), told
    when the region's last graph exists."""
    def compile_graph(gm: torch.fx.GraphModule, example_inputs: Any) -> CompiledGraph:
        graph = CompiledGraph(gm, stage, opts, _unaliased_outputs() if stage == "forward" else frozenset())
        graph.aot_meta = getattr(torch._guards.TracingContext.try_get(), "fw_metadata", None)
        graphs.append(graph)
        if recorder is not None:
            recorder.graph_compiled(graphs, stage)
        return graph

    return compile_graph


def _lean_region(compiled: Callable, gm: torch.fx.GraphModule, example_inputs: list, graphs: list,
                 opts: BackendOptions) -> Callable:
    """The region's callable: lean_call.py's where it may apply, else AOTAutograd's as it came."""
    stages = {g.stage for g in graphs}
    if (not opts.lean_call or not stages or stages - {"forward", "inference"} or len(stages) != 1
            or opts.fallback_policy & FallbackPolicy.FALLBACK_FORCE_TORCH_BACKWARD
            or any(isinstance(x, (list, tuple, dict)) for x in example_inputs)):
        return compiled
    params = [*dict(gm.named_parameters(remove_duplicate=False)).values(),
              *dict(gm.named_buffers(remove_duplicate=False)).values()]
    # TorchDynamo wraps the region's callable in torch._dynamo.disable itself: AOTAutograd's own
    # disable around its wrappers is a second one, not needed inside ours
    aot_fn = getattr(compiled, "_torchdynamo_orig_callable", compiled)
    region = LeanRegion(aot_fn, params, len(example_inputs), graphs, "inference" in stages,
                        torch._C._is_any_autocast_enabled())
    why = region.precheck()
    if why is not None:
        logger.debug("%s: AOTAutograd's runtime wrappers kept (%s)", graphs[0].name, why)
        return compiled
    return region.call


def _partitioner(opts: BackendOptions) -> Callable:
    """torch's min-cut partitioner with the memory optimizer's recompute plans
    (memory_optimizer/partition.py, docs/memory_optimizer.md), told never to save a view: a saved
    t(x) or transpose(x) would be a graph output, so the forward graph would copy it into a new
    buffer every step; recomputed in the backward graph it is a Transpose that the optimizer folds
    into the consuming Gemm's trans flag (MatMulTransposeFusion), for free. The forward then saves
    x itself."""
    def partition(joint_module: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any):
        return partition_with_plans(joint_module, joint_inputs, level=opts.memory_opt_level,
                                    plans=opts.memory_opt_config, **kwargs)

    return partition


def _eager_backward(gm: torch.fx.GraphModule, example_inputs: Any):
    from torch._functorch.aot_autograd import make_boxed_func

    return make_boxed_func(gm.forward)


def ort_backend(gm: torch.fx.GraphModule, example_inputs: list, options: Mapping[str, Any] | None = None,
                mode: str | None = None) -> Callable:
    """torch.compile(model, backend="ort", options={...}); options are listed in
    torch_ort_backend.options.SPEC, each with its ORTMODULE_* variable."""
    opts = resolve(options)
    note_process_group()
    if log_level_requested(options):
        configure_logging(opts.log_level)
    note_compiled_function()
    if opts.fallback_policy & FallbackPolicy.FALLBACK_FORCE_TORCH_FORWARD:
        return gm.forward
    recorder = None
    if opts.cache_dir and warm_region.why_not(gm, example_inputs, opts) is None:
        # the on-disk cache's record of this region: built from it without AOTAutograd, or written
        # after this cold compile (warm_region.py)
        key = warm_region.region_key(gm, example_inputs, opts)
        if key is not None:
            warm = warm_region.load(gm, example_inputs, opts, key, _compile_later(gm, example_inputs, opts))
            if warm is not None:
                return warm
            params = warm_region._lifted(gm)
            inference = not (torch.is_grad_enabled() and any(x.requires_grad for x in [*params, *example_inputs]))
            recorder = warm_region.Recorder(warm_region.cache_for(opts), key, len(example_inputs), len(params),
                                            inference)
    return _compile_region(gm, example_inputs, opts, recorder)


def _compile_later(gm: torch.fx.GraphModule, example_inputs: list, opts: BackendOptions) -> Callable:
    """The cold compile of a warm region, for the calls its lean path does not take (the profiler,
    compiled autograd): AOTAutograd on TorchDynamo's graph and fake arguments, in a tracing context
    of their fake mode, as TorchDynamo would have called it."""
    def compile_now() -> Callable:
        fake_mode = torch._guards.detect_fake_mode(example_inputs)
        with torch._guards.tracing(torch._guards.TracingContext(fake_mode)):
            return _compile_region(gm, example_inputs, opts, None)

    return compile_now


def _compile_region(gm: torch.fx.GraphModule, example_inputs: list, opts: BackendOptions,
                    recorder: Any) -> Callable:
    """AOTAutograd and our compilers on TorchDynamo's graph: the region's callable."""
    policy = opts.fallback_policy
    graphs: list = []  # this region's compiled graphs (lean_call.py)
    bw = (_eager_backward if policy & FallbackPolicy.FALLBACK_FORCE_TORCH_BACKWARD
          else _compiler(opts, "backward", graphs, recorder))
    aot = aot_autograd(
        fw_compiler=_compiler(opts, "forward", graphs),
        bw_compiler=bw,
        inference_compiler=_compiler(opts, "inference", graphs, recorder),
        decompositions=decomposition_table(),
        partition_fn=_partitioner(opts),
        keep_inference_input_mutations=False,
    )
    try:
        gm = prepare_graph(gm, opts)
    except UnsupportedTorchModelError as err:
        if FallbackManager(policy, opts.fallback_retry, "a dynamo graph").should_fall_back(err):
            STATS.fallbacks += 1
            return gm.forward
        raise
    if opts.use_efficient_attention and opts.aten_sdpa_fallback:
        # eager attention chains become one scaled_dot_product_attention (attention_fusion.py), which
        # the exporter maps to the engine's FlashAttention; with ORTMODULE_ATEN_SDPA_FALLBACK=0 the user
        # asked for attention decomposed, so nothing is fused
        fuse_eager_attention(gm)
    try:
        with attention_kernels(opts.aten_sdpa_fallback):
            # the compute optimizer rewrites dynamo's graph first (compute_optimizer/, on by default)
            compiled = trace_optimized(aot, gm, example_inputs, opts)
    except FallbackError:
        raise
    except Exception as e:
        if "TensorifyScalarRestartAnalysis" in type(e).__name__ or "Restart" in type(e).__name__:
            raise
        if isinstance(e, torch._dynamo.exc.exceptions_allowed_to_be_fallback):
            raise
        err = UnsupportedTorchModelError(f"AOTAutograd could not trace the graph: {type(e).__name__}: {e}")
        if FallbackManager(policy, opts.fallback_retry, "a dynamo graph").should_fall_back(err):
            STATS.fallbacks += 1
            return gm.forward
        raise err from e
    return _lean_region(compiled, gm, example_inputs, graphs, opts)


def onnxrt_backend(gm: torch.fx.GraphModule, example_inputs: list, options: Mapping[str, Any] | None = None,
                   mode: str | None = None) -> Callable:
    """The name torch's removed ONNX Runtime backend had; old scripts and HuggingFace Trainer
    (torch_compile_backend="onnxrt") reach our backend through it."""
    return ort_backend(gm, example_inputs, options=options, mode=mode)
