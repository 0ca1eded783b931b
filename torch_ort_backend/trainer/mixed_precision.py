"""Mixed precision in ORTTrainer (ORTTrainerOptions.mixed_precision, issue 20).

As onnxruntime-training's ORTTrainer: the weights stay float32 (the optimizer's master copy, the
model's own parameter tensors) while the forward and backward compute in a low-precision float type,
and the loss is scaled so that small gradients survive that type:

- The model runs under ``torch.autocast("cpu", dtype)`` when it is captured, so the training graph
  holds the same casts and low-precision ops as eager autocast (float16 by default, the reference's
  type; ``mixed_precision.dtype='bfloat16'`` picks this CPU's fast type).
- The differentiated loss is ``loss * loss_scale``, with ``loss_scale`` a graph input named by
  ``loss_scaler.input_name`` and fed every step; the reported loss is the unscaled one.
- The optimizer nodes unscale the gradients (AdamOptimizer / LambOptimizer take the scale as their
  ``loss_scale`` input; SGD's gradients are divided by it), and an all-finite check of the gradients
  (their global L2 norm is finite) is their ``update_signal``: after an overflow nothing is updated
  (weights, moments, step counts; gradient accumulators are still reset, the window is dropped).
  The check is the graph output ``all_gradients_finite``; the trainer sets
  ``train_step_info.all_finite`` from it, calls ``loss_scaler.update`` and counts the optimization
  step only when it was finite (trainer/trainer.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import onnx
import torch
from onnx import TensorProto, helper

from .._engine import MS_DOMAIN
from ..amp.loss_scaler import DynamicLossScaler, LossScaler
from .model_desc import IODesc, ModelDesc
from .optimizer_graph import TrainingModel
from .training_graph import ModelWithLoss

LOSS_SCALE_INPUT = "loss_scale"
ALL_FINITE_OUTPUT = "all_gradients_finite"
_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class MixedPrecision:
    dtype: torch.dtype
    loss_scaler: LossScaler


def configure(options: Any, desc: ModelDesc) -> MixedPrecision | None:
    """The trainer's mixed-precision settings (None when off). As the reference, an enabled trainer
    without a loss scaler gets a default DynamicLossScaler, set on the options, and the scaler's
    input_name is the graph input its scale feeds."""
    mp = options.mixed_precision
    cast_propagation_allow(options)  # refuses allow_layer_norm_mod_precision that could not take effect
    if not mp.enabled:
        return None
    if LOSS_SCALE_INPUT in desc.input_names:
        raise ValueError(f"model_desc names an input '{LOSS_SCALE_INPUT}', which mixed precision feeds the loss "
                         "scale to; rename that input")
    if mp.loss_scaler is None:
        mp.loss_scaler = DynamicLossScaler()
    mp.loss_scaler.input_name = LOSS_SCALE_INPUT
    return MixedPrecision(_DTYPES[mp.dtype], mp.loss_scaler)


def cast_propagation_allow(options: Any) -> list[str]:
    """The op types cast propagation may move into the low-precision type beyond its level's:
    propagate_cast_ops_config.allow, plus LayerNormalization with
    graph_transformer.allow_layer_norm_mod_precision (LayerNorm then computes in the low type, its
    statistics in float32, where autocast keeps it in float32)."""
    gt = options.graph_transformer
    casts = gt.propagate_cast_ops_config
    allow = list(casts.allow)
    if gt.allow_layer_norm_mod_precision:
        if not casts.strategy or casts.level < 0:
            raise ValueError("graph_transformer.allow_layer_norm_mod_precision=True moves LayerNormalization into the "
                             "low-precision type through cast propagation, which "
                             "graph_transformer.propagate_cast_ops_config turns off (strategy "
                             f"{casts.strategy!r}, level {casts.level}); use strategy FLOOD_FILL or INSERT_AND_REDUCE "
                             "with level >= 0")
        if "LayerNormalization" not in allow:
            allow.append("LayerNormalization")
    return allow


def low_precision_name(options: Any) -> str:
    """The low-precision type cast propagation moves casts to ('float16' unless mixed precision
    chose bfloat16)."""
    mp = options.mixed_precision
    return mp.dtype if mp.enabled else "float16"


class AutocastModelWithLoss(ModelWithLoss):
    """ModelWithLoss running the model under CPU autocast. Called with one input more than the
    description's (the loss scale, for the training export), it returns the scaled loss first and
    then the model's outputs (the unscaled loss among them, detached): the joint graph
    differentiates the scaled loss."""

    def __init__(self, model: torch.nn.Module, loss_fn: Callable | None, loss_index: int, dtype: torch.dtype,
                 input_names: Sequence[str] = ()) -> None:
        super().__init__(model, loss_fn, loss_index, input_names=input_names)
        self.dtype = dtype
        self._n_inputs = len(input_names)

    def forward(self, *inputs: Any) -> tuple:
        scale = None
        if len(inputs) == self._n_inputs + 1:
            *inputs, scale = inputs
        with torch.autocast(device_type="cpu", dtype=self.dtype):
            outs = super().forward(*inputs)
        if scale is None:
            return outs
        loss = outs[self.loss_index]
        return (loss.float() * scale, *(o.detach() if isinstance(o, torch.Tensor) else o for o in outs))


def scaled_loss_desc(desc: ModelDesc) -> ModelDesc:
    """The description AutocastModelWithLoss is exported with for training: the loss scale as a last
    scalar input, the scaled loss (the one differentiated) as a first output."""
    loss = desc.outputs[desc.loss_index]
    taken = set(desc.output_names) | set(desc.input_names)
    name = f"{loss.name}_scaled"
    while name in taken:
        name += "_"
    outputs = (IODesc(name, (), True),) + tuple(IODesc(o.name, o.shape, False) for o in desc.outputs)
    return ModelDesc(desc.inputs + (IODesc(LOSS_SCALE_INPUT, ()),), outputs)


def add_loss_scaling(tm: TrainingModel) -> None:
    """Edits the update graph: the optimizer nodes unscale their gradients by the loss-scale input and
    update only when every gradient is finite; ALL_FINITE_OUTPUT says whether they were."""
    graph = tm.model.graph
    optimizers = [n for n in graph.node if n.domain == MS_DOMAIN and n.op_type in _OPTIMIZER_OPS]
    # The whole gradients, not what the optimizer nodes read: under ZeRO those are this rank's pieces,
    # and ranks that judged overflow on different pieces would skip different updates. The whole
    # (all-reduced) gradients are the same on every rank, so every rank takes the same decision.
    grads = list(tm.gradients)
    check: list[onnx.NodeProto] = []
    if not grads:  # every weight frozen: nothing can overflow
        check.append(helper.make_node("Constant", [], [ALL_FINITE_OUTPUT], name="all_gradients_finite_const",
                                      value=helper.make_tensor("v", TensorProto.BOOL, [], [True])))
    else:
        norm = next((n.output[0] for n in graph.node if n.domain == MS_DOMAIN and n.op_type == "ReduceAllL2"), None)
        if norm is None:
            norm = "mixed_precision_gradient_norm"
            check.append(helper.make_node("ReduceAllL2", grads, [norm], name=norm, domain=MS_DOMAIN))
        # The norm (summed in float64) is finite exactly when no gradient is inf or NaN and their
        # norm is within float32's range.
        check += [helper.make_node("IsInf", [norm], ["gradient_norm_is_inf"], name="gradient_norm_is_inf"),
                  helper.make_node("IsNaN", [norm], ["gradient_norm_is_nan"], name="gradient_norm_is_nan"),
                  helper.make_node("Or", ["gradient_norm_is_inf", "gradient_norm_is_nan"], ["gradient_overflow"],
                                   name="gradient_overflow"),
                  helper.make_node("Not", ["gradient_overflow"], [ALL_FINITE_OUTPUT], name=ALL_FINITE_OUTPUT)]
    nodes = []
    first = optimizers[0] if optimizers else None
    for n in graph.node:
        if n is first:
            nodes += check
        if n.domain == MS_DOMAIN and n.op_type == "SGDOptimizer":
            nodes += _gated_sgd(n)
            continue
        if n.domain == MS_DOMAIN and n.op_type == "AdamOptimizer":
            inputs = list(n.input) + [""] * (10 - len(n.input))
            inputs[7], inputs[9] = LOSS_SCALE_INPUT, ALL_FINITE_OUTPUT
            del n.input[:]
            n.input.extend(inputs)
        elif n.domain == MS_DOMAIN and n.op_type == "LambOptimizer":
            n.input[0], n.input[1] = ALL_FINITE_OUTPUT, LOSS_SCALE_INPUT
        nodes.append(n)
    if first is None:
        nodes += check
    del graph.node[:]
    graph.node.extend(nodes)
    graph.output.append(helper.make_tensor_value_info(ALL_FINITE_OUTPUT, TensorProto.BOOL, []))


_OPTIMIZER_OPS = ("SGDOptimizer", "AdamOptimizer", "LambOptimizer")  # as trainer/optimizer_graph.py builds them


def _gated_sgd(n: onnx.NodeProto) -> list[onnx.NodeProto]:
    """SGDOptimizer on the unscaled gradient; the weight keeps its value when a gradient overflowed."""
    weight, grad, new = n.input[1], n.input[2], n.output[0]
    unscaled, proposed = f"{grad}_unscaled", f"{new}_proposed"
    n.input[2] = unscaled
    n.output[0] = proposed
    return [helper.make_node("Div", [grad, LOSS_SCALE_INPUT], [unscaled], name=unscaled), n,
            helper.make_node("Where", [ALL_FINITE_OUTPUT, proposed, weight], [new], name=new)]
