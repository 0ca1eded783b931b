"""The compiled forms of ORTTrainer's steps: for each input signature that the exported graph cannot
cover (dtypes, and sizes torch fixed), one export with its engine sessions, all bound to the same
state tensors (trainer/trainer_state.py).

Training uses one session per step kind: "update" (forward, loss, gradients, optimizer) and, with
gradient accumulation, "accumulate" (forward, loss, gradients summed into the accumulators).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass

import onnx
import torch
from onnx import numpy_helper

from ..memory_optimizer.joint_recompute import RecomputeFlags
from ..compute_optimizer import label_sparsity_enabled
from ..compile_state import COMPILE_STATE
from ..options import SPEC, BackendOptions, resolve
from ..session import InferenceSession, SessionOptions
from . import mixed_precision as _mixed_precision
from .distributed import data_parallel
from .model_desc import ModelDesc
from .optimizer_graph import LEARNING_RATE, TrainingModel, build_training_model
from .trainer_state import TrainerState
from .training_graph import ExportedModel, ModelWithLoss, export_model

logger = logging.getLogger("torch_ort_backend")
# Which ops run torch's kernel, as the "ort" backend's default (options.py: chosen per shape).
_PREFER_TORCH_KERNELS = BackendOptions().prefer_torch_kernels
_LABEL_SWITCHES = ("enable_compute_optimizer", "enable_sparse_optimizer", "enable_label_sparse_optimizer")


def _switches(options: tuple[str, ...]) -> BackendOptions:
    """The backend options resolved from just these options' ORTMODULE_* variables; the other
    variables are ORTModule's and not read here."""
    import os

    names = {SPEC[k][0] for k in options}
    return resolve({}, environ={k: v for k, v in os.environ.items() if k in names})


def _select_valid_labels() -> bool:
    """The compute optimizer's label case, on by default as for ORTModule, and turned off by the same
    variables (ORTMODULE_ENABLE_COMPUTE_OPTIMIZER, _SPARSE_OPTIMIZER, _LABEL_SPARSE_OPTIMIZER = 0)."""
    return label_sparsity_enabled(_switches(_LABEL_SWITCHES))


def _fuse_attention() -> bool:
    """Eager attention fused into scaled_dot_product_attention (attention_fusion.py), on by default as
    for ORTModule; ORTMODULE_USE_EFFICIENT_ATTENTION=0 or ORTMODULE_ATEN_SDPA_FALLBACK=0 turn it off."""
    opts = _switches(("use_efficient_attention", "aten_sdpa_fallback"))
    return opts.use_efficient_attention and opts.aten_sdpa_fallback


class EmbeddingCaseWarning(UserWarning):
    """ORTMODULE_ENABLE_EMBEDDING_SPARSE_OPTIMIZER is set, but ORTTrainer does not apply the embedding case."""


_EMBEDDING_WARNED: list[bool] = []


def _warn_embedding_case() -> None:
    """The embedding case (compute_optimizer/embedding_sparsity.py) rewrites TorchDynamo's graph and
    picks, per call, between that graph and the dense one after a check of the batch; ORTTrainer's step
    is one torch.export graph run by one engine session over engine-held weights, so it would need a
    second training session over the same state and the check before each step. Not built: said once."""
    import os
    import warnings

    env = SPEC["enable_embedding_sparse_optimizer"][0]
    if _EMBEDDING_WARNED or env not in os.environ:
        return
    if not resolve({}, environ={env: os.environ[env]}).enable_embedding_sparse_optimizer:
        return
    _EMBEDDING_WARNED.append(True)
    warnings.warn(f"{env}=1 has no effect on ORTTrainer: the compute optimizer's embedding case runs under "
                  f"torch.compile(backend='ort') and ORTModule only (docs/orttrainer.md, 'Padded labels'); "
                  f"ORTTrainer computes every token", EmbeddingCaseWarning, stacklevel=3)


@dataclass
class TrainingSessions:
    update: TrainingModel
    accumulate: TrainingModel | None
    update_session: InferenceSession
    accumulate_session: InferenceSession | None


class CompiledStep:
    """One export (train or eval) of the model for the input signatures it covers."""

    def __init__(self, exported: ExportedModel, example: list[torch.Tensor], desc: ModelDesc) -> None:
        self.exported = exported
        self.dtypes = [t.dtype for t in example]
        self.static = []  # per input: {axis: size} of the axes the graph fixed
        for d, t in zip(desc.inputs, example):
            dyn = set(exported.dynamic_axes.get(d.name, []))
            self.static.append({a: t.shape[a] for a in range(t.dim()) if a not in dyn})
        self.training: TrainingSessions | None = None
        self.eval_session: InferenceSession | None = None
        # Mixed precision: whether the last update's gradients were all finite (it then happened).
        self.last_all_finite = True

    def covers(self, inputs: list[torch.Tensor]) -> bool:
        return all(t.dtype == dt and all(t.shape[a] == s for a, s in st.items())
                   for t, dt, st in zip(inputs, self.dtypes, self.static))

    def _feeds(self, names: list[str], inputs: list[torch.Tensor]) -> dict:
        used = set(self.exported.inputs)
        return {n: t for n, t in zip(names, inputs) if n in used}

    def run_train(self, inputs: list[torch.Tensor], lr: float, accumulate: bool, fetches: list[str],
                  input_names: list[str], loss_scale: float | None = None) -> list[torch.Tensor]:
        s = self.training
        feeds = self._feeds(input_names, inputs)
        scaled = _mixed_precision.LOSS_SCALE_INPUT in self.exported.inputs
        if scaled:
            feeds[_mixed_precision.LOSS_SCALE_INPUT] = torch.tensor(1.0 if loss_scale is None else loss_scale,
                                                                    dtype=torch.float32)
        if accumulate:
            return s.accumulate_session.run(fetches, feeds)
        feeds[LEARNING_RATE] = torch.tensor([lr], dtype=torch.float32)
        if not scaled:
            return s.update_session.run(fetches, feeds)
        *results, all_finite = s.update_session.run(fetches + [_mixed_precision.ALL_FINITE_OUTPUT], feeds)
        self.last_all_finite = bool(all_finite)
        return results

    def run_eval(self, inputs: list[torch.Tensor], fetches: list[str], input_names: list[str]) -> list[torch.Tensor]:
        return self.eval_session.run(fetches, self._feeds(input_names, inputs))

    def training_model_with_state(self, state: TrainerState) -> onnx.ModelProto:
        """The update graph with every state input turned into an initializer of its current value."""
        model = onnx.ModelProto()
        model.CopyFrom(self.training.update.model)
        bound = set(self.training.update.state_inputs)
        keep = [i for i in model.graph.input if i.name not in bound]
        for name in self.training.update.state_inputs:
            model.graph.initializer.append(numpy_helper.from_array(state.tensor(name).detach().numpy(), name))
        del model.graph.input[:]
        model.graph.input.extend(keep)
        return model


class StepGraphs:
    """Finds (or compiles) the CompiledStep for a call's inputs."""

    def __init__(self, wrapper: ModelWithLoss, desc: ModelDesc, config, options, state: TrainerState,
                 mixed_precision: _mixed_precision.MixedPrecision | None = None) -> None:
        self.wrapper = wrapper
        self.mixed_precision = mixed_precision
        self.desc = desc
        self.config = config
        self.options = options
        self.state = state
        self.recompute = _recompute_flags(options)  # checked now: a bad combination fails the constructor
        self.train_steps: list[CompiledStep] = []
        self.eval_steps: list[CompiledStep] = []

    def first(self) -> CompiledStep | None:
        return self.train_steps[0] if self.train_steps else None

    def for_inputs(self, inputs: list[torch.Tensor], train: bool) -> CompiledStep:
        steps = self.train_steps if train else self.eval_steps
        for step in steps:
            if step.covers(inputs):
                return step
        if steps:
            logger.warning("ORTTrainer: inputs of a new signature (%s) that the exported graph does not cover: "
                           "exporting again", [list(t.shape) for t in inputs])
        step = self._compile(inputs, train)
        steps.append(step)
        return step

    @contextmanager
    def _export_mode(self, train: bool):
        """The wrapper in train/eval mode with frozen weights not requiring grad; restored after."""
        model = self.wrapper.model
        was_training = model.training
        changed = []
        for name, p in model.named_parameters():
            if name in self.state.frozen and p.requires_grad:
                p.requires_grad_(False)
                changed.append(p)
        self.wrapper.train(train)
        try:
            yield
        finally:
            self.wrapper.train(was_training)
            for p in changed:
                p.requires_grad_(True)

    def _compile(self, inputs: list[torch.Tensor], train: bool) -> CompiledStep:
        opts = self.options
        opset = opts._internal_use.onnx_opset_version
        desc, example = self.desc, inputs
        if train and self.mixed_precision is not None:
            # The loss scale as one more input; the scaled loss is the one differentiated.
            desc, example = _mixed_precision.scaled_loss_desc(self.desc), [*inputs, torch.tensor(1.0)]
        _warn_embedding_case()
        with self._export_mode(train):
            exported = export_model(self.wrapper, desc, example, joint=train, opset=opset,
                                    prefer_torch_kernels=_PREFER_TORCH_KERNELS, recompute=self.recompute,
                                    select_valid_labels=_select_valid_labels(), fuse_attention=_fuse_attention())
            COMPILE_STATE.stats.label_sparse_rewrites += exported.label_rewrites
            if train and opts.debug.graph_save_paths.model_after_graph_transforms_path:
                forward = export_model(self.wrapper, self.desc, inputs, joint=False, opset=opset)
                _save(opts.debug.graph_save_paths.model_after_graph_transforms_path, forward.model)
        post = opts._internal_use.extra_postprocess
        if post is not None:
            # onnxruntime-training's hook: the user's function edits the exported model (in place or
            # by returning a new one) before the optimizer is added.
            replaced = post(exported.model)
            if replaced is not None:
                if not isinstance(replaced, onnx.ModelProto):
                    raise TypeError(f"_internal_use.extra_postprocess must return an onnx.ModelProto or None, got "
                                    f"{type(replaced).__name__}")
                exported.model = replaced
        if exported.aten_fallback_ops:
            logger.info("ORTTrainer: ops run through torch's kernels (ATen nodes): %s", exported.aten_fallback_ops)
        self.state.add_constants(exported.constants)
        step = CompiledStep(exported, inputs, self.desc)
        paths = opts.debug.graph_save_paths
        if train:
            accumulation = opts.batch.gradient_accumulation_steps > 1
            clip = bool(opts.utils.grad_norm_clip)
            dp = data_parallel(opts)
            update = build_training_model(exported, self.config, accumulate_only=False, accumulation=accumulation,
                                          grad_norm_clip=clip, data_parallel=dp, zero=self.state.zero)
            if self.mixed_precision is not None:
                _mixed_precision.add_loss_scaling(update)
            _save(paths.model_with_gradient_graph_path, exported.model)
            _save(paths.model_with_training_graph_path, update.model)
            accumulate = None
            if accumulation:
                accumulate = build_training_model(exported, self.config, accumulate_only=True, accumulation=True,
                                                  grad_norm_clip=clip, data_parallel=dp)
            step.training = TrainingSessions(
                update, accumulate, self._session(update, paths.model_with_training_graph_after_optimization_path),
                self._session(accumulate) if accumulate is not None else None)
            if opts.debug.check_model_export:
                self._check_export(step, inputs)
        else:
            eval_model = TrainingModel(exported.model, {}, exported.params + exported.buffers + list(exported.constants))
            step.eval_session = self._session(eval_model)
        return step

    def _check_export(self, step: CompiledStep, inputs: list[torch.Tensor]) -> None:
        """debug.check_model_export: the exported graph's outputs (one run of the accumulate-only
        graph, or of a copy of the state for the update graph) against the model in torch, before the
        first step changes anything."""
        snapshot = {n: t.clone() for n, t in self.state.tensors.items()}
        try:
            with torch.no_grad(), self._export_mode(True):
                expected = self.wrapper(*inputs)  # may update buffers (batch norm): restored below
            got = step.run_train(inputs, 0.0, step.training.accumulate is not None, self.desc.output_names,
                                 self.desc.input_names)
        finally:
            with torch.no_grad():
                for n, t in snapshot.items():
                    self.state.tensors[n].copy_(t)
        for name, a, b in zip(self.desc.output_names, got, expected):
            if not torch.allclose(a, b.to(a.dtype), rtol=1e-2, atol=1e-6):
                raise RuntimeError(f"debug.check_model_export: output '{name}' of the exported model differs from "
                                   f"the PyTorch model's (max abs diff {float((a - b).abs().max()):.3g}); a model with "
                                   "random ops (dropout) differs by design: turn the check off for it")

    def _session(self, tm: TrainingModel, optimized_path: str = "") -> InferenceSession:
        so = SessionOptions()
        # Our exporter's graph, made in this process: its ATen nodes may call any operator the
        # model's code called (a loaded ModelProto reaches here only through OnnxModule's table).
        so.allow_unsafe_aten_ops = True
        user = self.options.session_options
        if user is not None:
            so.intra_op_num_threads = user.intra_op_num_threads
            so.graph_optimization_level = user.graph_optimization_level
            so.enable_profiling = user.enable_profiling
        casts = self.options.graph_transformer.propagate_cast_ops_config
        so.propagate_cast_ops_strategy = int(casts.strategy or 0)  # None: the reference's NONE
        so.propagate_cast_ops_level = casts.level
        so.propagate_cast_ops_allow = _mixed_precision.cast_propagation_allow(self.options)
        so.propagate_cast_ops_dtype = _mixed_precision.low_precision_name(self.options)
        if optimized_path:
            so.optimized_model_filepath = optimized_path
        so.state_updates = dict(tm.state_updates)
        sess = InferenceSession(tm.model, so)
        for name in tm.state_inputs:
            sess.bind_state(name, self.state.tensor(name))
        return sess


def _recompute_flags(opts) -> RecomputeFlags:
    """graph_transformer's recompute settings (docs/memory_optimizer.md, "ORTTrainer")."""
    gt = opts.graph_transformer
    if gt.number_recompute_layers and not gt.transformer_layer_recompute:
        raise ValueError(f"graph_transformer.number_recompute_layers={gt.number_recompute_layers} takes effect only "
                         "with graph_transformer.transformer_layer_recompute=True")
    return RecomputeFlags(attn_dropout=gt.attn_dropout_recompute, gelu=gt.gelu_recompute,
                          transformer_layers=gt.transformer_layer_recompute, number_layers=gt.number_recompute_layers)


def _save(path: str, model: onnx.ModelProto) -> None:
    if path:
        onnx.save(model, path)
        logger.info("ORTTrainer: saved %s", path)

