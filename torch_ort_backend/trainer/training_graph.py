"""The model (with its loss) as ONNX: the joint forward + loss + gradient graph that a training step
runs, and the forward graph of eval_step.

torch.export captures the model once with the description's string dimensions as named dynamic
dimensions; the joint graph comes from the same decomposition that AOTAutograd runs for the "ort"
backend (our decomposition table), with `joint_loss_index` asking for the parameter gradients; the
exporter that serves torch.compile and ORTModule turns it into ONNX. Parameters, buffers and lifted
constants are graph inputs (the trainer binds them as engine state); every value is then renamed to
a stable name: parameters and buffers by their torch names, inputs and outputs by the description's
names, gradients as `<param>_grad`, buffer updates as `<buffer>_updated`.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import onnx
import torch
from torch import nn

from ..compute_optimizer.trainer_labels import SelectValidLabels
from ..decompositions import decomposition_table
from ..attention_fusion import fuse_eager_attention
from ..exporter import export_fx_graph
from ..exporter.errors import UnsupportedTorchModelError
from ..memory_optimizer.joint_recompute import RecomputeFlags, recompute_joint_graph
from .model_desc import ModelDesc

logger = logging.getLogger("torch_ort_backend")


class ModelWithLoss(nn.Module):
    """The model and loss_fn combined as onnxruntime-training combined them: the inputs are the
    model's inputs followed by the label; the outputs are the loss followed by the model's outputs.
    Without a loss_fn the model's own outputs are used. Model inputs whose description name is a
    parameter of the model's forward are passed by that name (the rest by position). Outputs other
    than the loss are detached: gradients flow from the loss only."""

    def __init__(self, model: nn.Module, loss_fn: Callable | None, loss_index: int,
                 input_names: Sequence[str] = ()) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.loss_index = loss_index
        model_inputs = list(input_names[:-1] if loss_fn is not None else input_names)
        try:
            params = inspect.signature(model.forward).parameters
        except (TypeError, ValueError):
            params = {}
        self._by_name = all(n in params for n in model_inputs) and bool(model_inputs)
        self._model_inputs = model_inputs

    def forward(self, *inputs: Any) -> tuple:
        model_args = inputs[:-1] if self.loss_fn is not None else inputs
        if self._by_name:
            preds = self.model(**dict(zip(self._model_inputs, model_args)))
        else:
            preds = self.model(*model_args)
        if self.loss_fn is not None:
            outs = [self.loss_fn(preds, inputs[-1]), *flatten_outputs(preds)]
        else:
            outs = flatten_outputs(preds)
        return tuple(o if i == self.loss_index or not isinstance(o, torch.Tensor) else o.detach()
                     for i, o in enumerate(outs))


def flatten_outputs(out: Any) -> list:
    """A model's output as a flat list: a tensor, (nested) tuples and lists, dicts and HuggingFace
    ModelOutputs (their non-None values in order)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() if v is not None for t in flatten_outputs(v)]
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in flatten_outputs(v)]
    raise UnsupportedTorchModelError(f"model output of type {type(out).__name__} is not a tensor, tuple, list or dict")


@dataclass
class ExportedModel:
    """One ONNX model of the trainer with the roles of its inputs and outputs."""

    model: onnx.ModelProto
    params: list[str]                       # torch parameter names that are graph inputs
    buffers: list[str]                      # buffers that are graph inputs
    constants: dict[str, torch.Tensor]      # lifted constants (graph inputs bound once)
    inputs: list[str]                       # the description's inputs that the graph reads
    outputs: list[str]                      # the description's outputs, in order
    gradients: dict[str, str] = field(default_factory=dict)        # param -> gradient output
    buffer_updates: dict[str, str] = field(default_factory=dict)   # buffer -> updated-value output
    dynamic_axes: dict[str, list[int]] = field(default_factory=dict)  # input -> axes that are symbolic
    aten_fallback_ops: dict = field(default_factory=dict)
    label_rewrites: int = 0  # cross-entropies computed over the valid labels only (compute optimizer)


def export_model(wrapper: ModelWithLoss, desc: ModelDesc, example: Sequence[torch.Tensor], *, joint: bool,
                 opset: int, prefer_torch_kernels: frozenset | None = frozenset(),
                 recompute: RecomputeFlags | None = None, select_valid_labels: bool = False,
                 fuse_attention: bool = False) -> ExportedModel:
    """Exports `wrapper` (in its current train/eval mode) at the example inputs' ranks and dtypes;
    a joint graph gets the recompute plans of `recompute` (memory_optimizer/joint_recompute.py).
    `select_valid_labels`: cross-entropies over the valid labels' rows only
    (compute_optimizer/trainer_labels.py). `fuse_attention`: eager attention chains become
    scaled_dot_product_attention before the joint graph is made (attention_fusion.py)."""
    from torch.export.exported_program import _decompose_exported_program

    labels = SelectValidLabels() if select_valid_labels else contextlib.nullcontext()
    with warnings.catch_warnings():
        # torch.export's own use of a deprecated pytree check, repeated for every export: not the user's.
        warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\)", category=FutureWarning)
        with labels:
            ep = _torch_export(wrapper, desc, example)
        if fuse_attention:
            fuse_eager_attention(ep.graph_module)
        if joint:
            _unused_parameters_need_no_gradient(ep)
        ep = _decompose_exported_program(ep, cia_to_decomp={}, python_decomp_table=decomposition_table(),
                                         joint_loss_index=desc.loss_index if joint else None,
                                         decompose_custom_triton_ops=False)
    gm, sig = ep.graph_module, ep.graph_signature
    if joint and recompute is not None and recompute.any():
        recompute_joint_graph(gm, _forward_outputs(gm, sig), recompute)
    exported = export_fx_graph(gm, opset, prefer_torch_kernels)
    named = _name_roles(exported, sig, ep, desc, _canonical_names(wrapper))
    named.label_rewrites = getattr(labels, "rewrites", 0)
    return named


def _forward_outputs(gm: torch.fx.GraphModule, sig) -> list:
    """The joint graph's outputs that are not gradients: the loss, the model's outputs, buffer updates."""
    from torch.export.graph_signature import OutputKind

    output = next(iter(gm.graph.find_nodes(op="output")))
    gradients = (OutputKind.GRADIENT_TO_PARAMETER, OutputKind.GRADIENT_TO_USER_INPUT)
    return [v for v, spec in zip(output.args[0], sig.output_specs) if spec.kind not in gradients]


def _torch_export(wrapper: nn.Module, desc: ModelDesc, example: Sequence[torch.Tensor]):
    dims: dict[str, torch.export.Dim] = {}
    spec = []
    traced = []
    for d, t in zip(desc.inputs, example):
        axes = {}
        for axis, size in enumerate(d.shape):
            if isinstance(size, str) and axis < t.dim():
                if size not in dims:
                    dims[size] = torch.export.Dim(_identifier(size))
                axes[axis] = dims[size]
                if t.shape[axis] < 2:
                    # torch specialises sizes 0 and 1: trace at 2 (the graph is the same for every size).
                    t = torch.cat([t] * (2 // max(t.shape[axis], 1)), dim=axis) if t.shape[axis] else t
        spec.append(axes or None)
        traced.append(t)
    try:
        return torch.export.export(wrapper, tuple(traced), dynamic_shapes=(tuple(spec),), strict=False)
    except torch._dynamo.exc.UserError as named_failed:  # the model fixes a size the description names
        logger.warning("ORTTrainer: the model fixes the size of a dimension that model_desc names as dynamic "
                       "(%s); exporting with sizes torch can keep dynamic, a new size of the others re-exports",
                       str(named_failed).splitlines()[0])
        auto = tuple(None if s is None else {a: torch.export.Dim.AUTO for a in s} for s in spec)
        spec_used = (auto,)
    except Exception as failed:  # noqa: BLE001 - e.g. a branch on a tensor's value
        spec_used, named_failed = (tuple(spec),), failed
    try:
        return torch.export.export(wrapper, tuple(traced), dynamic_shapes=spec_used, strict=False)
    except Exception:  # noqa: BLE001
        pass
    # As onnxruntime-training's tracer did: follow the example's values through data-dependent
    # branches (torch's draft_export), and say which decisions were fixed that way.
    ep = torch.export.draft_export(wrapper, tuple(traced), dynamic_shapes=spec_used, strict=False)
    report = getattr(ep, "_report", None)
    issues = [str(f).splitlines()[0] for f in getattr(report, "failures", [])][:3]
    logger.warning("ORTTrainer: torch.export could not capture the model as written (%s); captured it following the "
                   "example inputs through value-dependent decisions instead (%s): inputs that would take another "
                   "branch give the example's branch", str(named_failed).splitlines()[0][:200],
                   "; ".join(issues) or "see torch.export.draft_export")
    return ep


def model_name(wrapper_name: str) -> str:
    """A parameter's or buffer's name in the user's model (the wrapper holds it as `model.<name>`)."""
    return wrapper_name[len("model."):] if wrapper_name.startswith("model.") else wrapper_name


def _identifier(name: str) -> str:
    ident = re.sub(r"\W", "_", name)
    return ident if ident and not ident[0].isdigit() else f"d_{ident}"


def _unused_parameters_need_no_gradient(ep) -> None:
    """A tied parameter (GPT-2's lm_head.weight is transformer.wte.weight) is one placeholder per name,
    and torch.export routes every use to one of them; the joint graph would then ask for a gradient of
    the unused one and fail. Unused parameters are marked as not requiring grad."""
    from torch.export.graph_signature import InputKind

    params = {s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.PARAMETER}
    for node in ep.graph_module.graph.nodes:
        if node.op == "placeholder" and node.name in params and not node.users:
            node.meta["val"] = node.meta["val"].detach()


def _canonical_names(wrapper: nn.Module) -> dict[str, str]:
    """Every name of a parameter or buffer -> the name model.named_parameters() / named_buffers()
    give it (the first of a tied tensor's names), without the wrapper's `model.` prefix."""
    canonical: dict[str, str] = {}
    for named in (wrapper.named_parameters, wrapper.named_buffers):
        first: dict[int, str] = {}
        for name, t in named(remove_duplicate=False):
            canonical[model_name(name)] = model_name(first.setdefault(id(t), name))
    return canonical


def _name_roles(exported, sig, ep, desc: ModelDesc, canonical: dict[str, str]) -> ExportedModel:
    from torch.export.graph_signature import InputKind, OutputKind

    model = exported.model
    rename: dict[str, str] = {}
    params, buffers, user_inputs, dynamic_axes = [], [], [], {}
    duplicates: list[tuple[str, str]] = []  # (onnx input, canonical name) of a tied tensor's other names
    constants: dict[str, torch.Tensor] = {}
    used_inputs = {i.name for i in model.graph.input}
    user_iter = iter(desc.inputs)
    for spec, onnx_name, kind in zip(sig.input_specs, exported.input_names, exported.input_kinds):
        if spec.kind == InputKind.USER_INPUT:
            name = next(user_iter).name
            user_inputs.append(name)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            name = canonical.get(model_name(spec.target), model_name(spec.target))
            role = params if spec.kind == InputKind.PARAMETER else buffers
            if name in role:  # a tied tensor's second name: one graph input reads it
                duplicates.append((onnx_name, name))
                continue
            role.append(name)
        elif spec.kind in (InputKind.CONSTANT_TENSOR,):
            name = f"const.{spec.target}"
            constants[name] = ep.constants[spec.target]
        else:
            raise UnsupportedTorchModelError(f"ORTTrainer: graph input kind {spec.kind} ('{spec.target}') is not supported")
        if kind != "tensor":
            raise UnsupportedTorchModelError(f"ORTTrainer: graph input '{name}' is a {kind}, expected a tensor")
        if onnx_name in used_inputs:
            rename[onnx_name] = name

    n_model_outputs = sum(1 for o in sig.output_specs if o.kind in (OutputKind.LOSS_OUTPUT, OutputKind.USER_OUTPUT))
    if n_model_outputs != len(desc.outputs):
        raise ValueError(f"model_desc lists {len(desc.outputs)} outputs {desc.output_names}, but the model (with its "
                         f"loss) returns {n_model_outputs}")
    outputs, gradients, buffer_updates = [], {}, {}
    names_iter = iter(exported.output_names)
    desc_out = iter(desc.outputs)
    for spec, kind in zip(sig.output_specs, exported.output_kinds):
        if spec.kind in (OutputKind.LOSS_OUTPUT, OutputKind.USER_OUTPUT):
            name = next(desc_out).name
            outputs.append(name)
        elif spec.kind == OutputKind.GRADIENT_TO_PARAMETER:
            target = canonical.get(model_name(spec.target), model_name(spec.target))
            name = f"{target}_grad"
            gradients[target] = name
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            target = canonical.get(model_name(spec.target), model_name(spec.target))
            name = f"{target}_updated"
            buffer_updates[target] = name
        else:
            raise UnsupportedTorchModelError(f"ORTTrainer: graph output kind {spec.kind} is not supported")
        if kind in ("tensor", "symint"):
            rename[next(names_iter)] = name
        elif spec.kind == OutputKind.GRADIENT_TO_PARAMETER and kind == ("const", None):
            del gradients[canonical.get(model_name(spec.target), model_name(spec.target))]  # the loss does not depend on this parameter: nothing to update
        else:
            raise UnsupportedTorchModelError(
                f"ORTTrainer: output '{name}' is not computed by the graph ({kind}); every output must be a tensor "
                "that the model computes")
    _merge_tied_inputs(model.graph, duplicates, rename)
    _rename_values(model.graph, rename)
    for inp in model.graph.input:
        axes = [a for a, d in enumerate(inp.type.tensor_type.shape.dim) if d.HasField("dim_param")]
        if axes:
            dynamic_axes[inp.name] = axes
    return ExportedModel(model, params, buffers, constants, user_inputs, outputs, gradients, buffer_updates,
                         dynamic_axes, dict(exported.aten_fallback_ops))


def _merge_tied_inputs(graph: onnx.GraphProto, duplicates: list[tuple[str, str]], rename: dict[str, str]) -> None:
    """Readers of a tied tensor's other names read the one input of its canonical name."""
    if not duplicates:
        return
    kept = {new: old for old, new in rename.items()}
    alias = {dup: kept[name] for dup, name in duplicates}
    for node in graph.node:
        node.input[:] = [alias.get(n, n) for n in node.input]
    survivors = [i for i in graph.input if i.name not in alias]
    del graph.input[:]
    graph.input.extend(survivors)


def _rename_values(graph: onnx.GraphProto, mapping: dict[str, str]) -> None:
    """Renames graph inputs/outputs (and every reference to them); names already taken by other values
    are moved out of the way first."""
    if not mapping:
        return
    taken = {n for node in graph.node for n in list(node.input) + list(node.output)}
    taken |= {i.name for i in graph.input} | {o.name for o in graph.output} | {t.name for t in graph.initializer}
    clashes = {new for old, new in mapping.items() if new in taken and new not in mapping}
    full = dict(mapping)
    for c in clashes:
        k = 0
        while f"{c}__{k}" in taken:
            k += 1
        full[c] = f"{c}__{k}"

    def ren(n: str) -> str:
        return full.get(n, n)

    for node in graph.node:
        node.input[:] = [ren(n) for n in node.input]
        node.output[:] = [ren(n) for n in node.output]
    for coll in (graph.input, graph.output, graph.value_info):
        for v in coll:
            v.name = ren(v.name)
    for t in graph.initializer:
        t.name = ren(t.name)
