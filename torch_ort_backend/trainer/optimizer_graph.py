"""The optimizer half of the training graph: gradient accumulation, the global gradient norm and one
optimizer node per weight (com.microsoft SGDOptimizer / AdamOptimizer / LambOptimizer, the
onnxruntime-training ops), appended to the joint forward + gradient graph.

Everything that persists between steps is a graph input bound as engine state, and each value that
a step changes is declared as a state update (state input -> the output holding its new value), so
the engine writes it back into the bound tensor, in place where the kernel allows:

| state input | update output | what |
| --- | --- | --- |
| `<w>` | `<w>_new` | weight (the model's own parameter tensor) |
| `Moment_1_<w>`, `Moment_2_<w>` | `..._new` | Adam / Lamb moments |
| `Update_Count_<w>` | `..._new` | Adam step count (int64 [1]) |
| `Step` | `Step_new` | Lamb's shared step count (int64 [1]) |
| `<w>_grad_accumulator` | `..._new` | the gradient sum over gradient_accumulation_steps calls |
| `<buffer>` | `<buffer>_updated` | buffers the model updates (batch-norm running statistics) |

Two graphs serve accumulation: the "accumulate" step adds the gradients to the accumulators and
updates nothing else; the "update" step adds its own gradients to the accumulated ones, updates the
weights and zeroes the accumulators.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .._engine import MS_DOMAIN
from .training_graph import ExportedModel
from .zero import ZeroPartition

LEARNING_RATE = "Learning_Rate"


@dataclass
class TrainingModel:
    model: onnx.ModelProto
    state_updates: dict[str, str] = field(default_factory=dict)  # state input -> update output
    state_inputs: list[str] = field(default_factory=list)  # inputs bound as state (not fed per step)
    optimizer_state: dict[str, dict[str, str]] = field(default_factory=dict)  # weight -> {Moment_1: input, ...}
    shared_state: dict[str, str] = field(default_factory=dict)  # e.g. {"step": "Step"}
    accumulators: dict[str, str] = field(default_factory=dict)  # weight -> accumulator input
    # The whole gradients the update reads (averaged over the ranks, accumulated): under ZeRO the
    # optimizer nodes see only this rank's pieces, so checks that must agree on every rank (mixed
    # precision's overflow test) read these.
    gradients: list[str] = field(default_factory=list)


class _Builder:
    def __init__(self, exported: ExportedModel) -> None:
        self.model = copy.deepcopy(exported.model)
        self.graph = self.model.graph
        self.types = {v.name: v.type for v in list(self.graph.input) + list(self.graph.output)}
        self.out = TrainingModel(self.model)

    def add_input(self, name: str, like: str | None = None, elem: int | None = None, shape=None) -> str:
        if like is not None:
            vi = helper.make_value_info(name, copy.deepcopy(self.types[like]))
        else:
            vi = helper.make_tensor_value_info(name, elem, shape)
        self.graph.input.append(vi)
        self.types[name] = vi.type
        return name

    def add_state(self, name: str, like: str | None = None, elem: int | None = None, shape=None) -> str:
        self.add_input(name, like, elem, shape)
        self.out.state_inputs.append(name)
        return name

    def node(self, op: str, inputs: list[str], outputs: list[str], domain: str = MS_DOMAIN, **attrs) -> None:
        self.graph.node.append(helper.make_node(op, inputs, outputs, name=f"{op}_{outputs[0]}", domain=domain,
                                                **attrs))

    def update(self, state: str, new_value: str) -> None:
        """Declares `new_value` (a graph output typed like `state`) as the state's value after the step."""
        self.graph.output.append(helper.make_value_info(new_value, copy.deepcopy(self.types[state])))
        self.out.state_updates[state] = new_value

    def const(self, name: str, value: np.ndarray) -> str:
        self.graph.initializer.append(numpy_helper.from_array(value, name))
        return name

    def const_once(self, name: str, value: np.ndarray) -> str:
        if name not in self.types:
            self.const(name, value)
            self.types[name] = None
        return name

    def declare(self, name: str, like: str) -> None:
        """Types `name` like the graph output `like` (outputs of ATen nodes are typed by declaration)."""
        self.graph.value_info.append(helper.make_value_info(name, copy.deepcopy(self.types[like])))

    def drop_outputs(self, names: set[str]) -> None:
        keep = [o for o in self.graph.output if o.name not in names]
        del self.graph.output[:]
        self.graph.output.extend(keep)

    def finish(self) -> TrainingModel:
        if not any(o.domain == MS_DOMAIN for o in self.model.opset_import):
            self.model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
        return self.out


@dataclass(frozen=True)
class DataParallel:
    """Data-parallel training over torch.distributed: gradients are averaged over `world_size` ranks
    by torch's all-reduce (an ATen node calling tob::all_reduce_mean), every step or, with
    `post_accumulation`, once per update over the accumulated sums."""

    world_size: int
    group_name: str
    post_accumulation: bool = False


def _all_reduce_mean(b: _Builder, grads: dict[str, str], dp: DataParallel, tag: str) -> dict[str, str]:
    """Every gradient averaged over the ranks by one ATen node calling tob::all_reduce_mean
    (trainer/distributed.py: one bucket, one torch.distributed all_reduce)."""
    group = b.const(f"allreduce_group_{tag}", np.frombuffer(dp.group_name.encode(), dtype=np.uint8).copy())
    out = {w: f"{g}_{tag}_mean" for w, g in grads.items()}
    b.node("ATen", list(grads.values()) + [group], list(out.values()), operator="tob::all_reduce_mean",
           overload_name="", tensor_list_lengths=[len(grads)])
    for w, mean in out.items():
        b.declare(mean, like=w)
    return out


def build_training_model(exported: ExportedModel, config, *, accumulate_only: bool, accumulation: bool,
                         grad_norm_clip: bool, data_parallel: DataParallel | None = None,
                         zero: ZeroPartition | None = None) -> TrainingModel:
    """`config` is an optim.SGDConfig / AdamConfig / LambConfig; `accumulation` says whether the
    gradients are summed over several steps (then `accumulate_only` picks the accumulate step);
    `data_parallel` averages the gradients over the ranks of torch.distributed; `zero` (ZeRO stage
    1, with data_parallel) updates only this rank's pieces of the weights and all-gathers them."""
    b = _Builder(exported)
    grads = dict(exported.gradients)  # weight -> gradient value
    b.drop_outputs(set(grads.values()))  # consumed inside the graph: the engine hands none back
    dp = data_parallel
    if dp is not None and grads and not (accumulation and dp.post_accumulation):
        grads = _all_reduce_mean(b, grads, dp, "step")
    for name in list(exported.params) + list(exported.buffers) + list(exported.constants):
        b.out.state_inputs.append(name)
    for buffer, updated in exported.buffer_updates.items():
        b.out.state_updates[buffer] = updated
    if accumulation:
        for w, g in list(grads.items()):
            acc = b.add_state(f"{w}_grad_accumulator", like=w)
            b.out.accumulators[w] = acc
            if accumulate_only:
                b.node("InPlaceAccumulator", [acc, g], [f"{acc}_new"])
                b.update(acc, f"{acc}_new")
            else:
                b.node("Add", [acc, g], [f"{w}_grad_total"], domain="")
                grads[w] = f"{w}_grad_total"
        if accumulate_only:
            return b.finish()
        if dp is not None and grads and dp.post_accumulation:
            grads = _all_reduce_mean(b, grads, dp, "update")
    lr = b.add_input(LEARNING_RATE, elem=TensorProto.FLOAT, shape=[1])
    b.out.gradients = list(grads.values())
    norm = None
    if grad_norm_clip and config.name in ("AdamOptimizer", "LambOptimizer") and grads:
        norm = "global_gradient_norm"
        b.node("ReduceAllL2", list(grads.values()), [norm])
    signals: dict[str, str] = {}
    if zero is not None:
        _add_zero_update(b, config, grads, lr, norm, signals, zero, data_parallel)
    elif config.name == "SGDOptimizer":
        for w, g in grads.items():
            b.node("SGDOptimizer", [lr, w, g], [f"{w}_new"])
            b.update(w, f"{w}_new")
            signals[w] = f"{w}_new"
    elif config.name == "AdamOptimizer":
        for w, g in grads.items():
            _add_adam(b, config, w, w, g, lr, norm, like=w)
            b.update(w, f"{w}_new")
            signals[w] = f"{w}_new"
    elif config.name == "LambOptimizer":
        _add_lamb(b, config, grads, lr, norm, signals)
    else:
        raise ValueError(f"unknown optimizer {config.name!r}; expected SGDOptimizer, AdamOptimizer or LambOptimizer")
    if accumulation:
        for w, acc in b.out.accumulators.items():
            # ZeroGradient's second input orders the reset after the weight's update.
            b.node("ZeroGradient", [acc, signals[w]], [f"{acc}_new"])
            b.update(acc, f"{acc}_new")
    return b.finish()


def _add_adam(b: _Builder, config, w: str, value: str, grad: str, lr: str, norm: str | None, like: str | None,
              shape: list[int] | None = None) -> str:
    """One AdamOptimizer node updating `value` (the weight `w`, or this rank's piece of it under ZeRO)
    with its own moments and step count; returns the updated value's name."""
    hp = config.hyper_parameters_for(w)
    elem = None if like is not None else TensorProto.FLOAT
    m1 = b.add_state(f"Moment_1_{w}", like=like, elem=elem, shape=shape)
    m2 = b.add_state(f"Moment_2_{w}", like=like, elem=elem, shape=shape)
    t = b.add_state(f"Update_Count_{w}", elem=TensorProto.INT64, shape=[1])
    b.out.optimizer_state[w] = {"Moment_1": m1, "Moment_2": m2, "Update_Count": t}
    new = f"{w}_new" if value == w else f"{value}_new"
    outs = [f"{t}_new", f"{m1}_new", f"{m2}_new", new]
    b.node("AdamOptimizer", [lr, t, value, grad, m1, m2, "", "", norm or ""], outs,
           alpha=float(hp["alpha"]), beta=float(hp["beta"]), epsilon=float(hp["epsilon"]),
           do_bias_correction=int(bool(hp["do_bias_correction"])), weight_decay_mode=int(hp["weight_decay_mode"]),
           max_norm_clip=1.0, **{"lambda": float(hp["lambda_coef"])})
    for state, new_state in zip((t, m1, m2), outs):
        b.update(state, new_state)
    return new


def _flat_slice(b: _Builder, value: str, start: int, end: int, out: str) -> str:
    b.node("Reshape", [value, b.const_once("zero_flat_shape", np.array([-1], dtype=np.int64))], [f"{out}_flat"],
           domain="")
    b.node("Slice", [f"{out}_flat", b.const(f"{out}_start", np.array([start], dtype=np.int64)),
                     b.const(f"{out}_end", np.array([end], dtype=np.int64))], [out], domain="")
    return out


def _add_zero_update(b: _Builder, config, grads: dict[str, str], lr: str, norm: str | None, signals: dict,
                     zero: ZeroPartition, dp: DataParallel | None) -> None:
    """ZeRO stage 1 (trainer/zero.py): the optimizer updates this rank's pieces only, their moments
    holding just those pieces; one ATen node (tob::zero_all_gather) then gathers every rank's
    updated chunk, and each weight's new value is sliced out of the gathered sequence."""
    if dp is None:
        raise ValueError("ZeRO needs data parallelism: distributed.world_size > 1")
    updated: list[str] = []
    for w, piece in sorted(zero.pieces.items(), key=lambda item: zero.offsets[item[0]]):
        value = w if piece.whole else _flat_slice(b, w, piece.start, piece.end, f"{w}_zero_piece")
        g = grads.get(w)
        if g is None:  # no gradient reaches this weight: its piece goes out unchanged
            new = value
        else:
            if not piece.whole:
                g = _flat_slice(b, g, piece.start, piece.end, f"{w}_grad_zero_piece")
            if config.name == "SGDOptimizer":
                new = f"{value}_new"
                b.node("SGDOptimizer", [lr, value, g], [new])
            else:
                new = _add_adam(b, config, w, value, g, lr, norm, like=w if piece.whole else None,
                                shape=None if piece.whole else [piece.size])
        flat = f"{w}_zero_updated_flat"
        b.node("Reshape", [new, b.const_once("zero_flat_shape", np.array([-1], dtype=np.int64))], [flat], domain="")
        updated.append(flat)
    padding = zero.chunk - zero.local_size
    if padding or not updated:
        updated.append(b.const("zero_padding", np.zeros(padding, dtype=np.float32)))
    local = "zero_local_chunk"
    b.node("Concat", updated, [local], domain="", axis=0)
    group = b.const("zero_group", np.frombuffer(dp.group_name.encode(), dtype=np.uint8).copy())
    gathered = "zero_gathered"
    b.node("ATen", [local, group], [gathered], operator="tob::zero_all_gather", overload_name="")
    b.graph.value_info.append(helper.make_tensor_value_info(gathered, TensorProto.FLOAT,
                                                            [zero.chunk * zero.world_size]))
    for w, offset in zero.offsets.items():
        if w not in grads:  # no rank has a gradient for it: unchanged everywhere
            continue
        _flat_slice(b, gathered, offset, offset + zero.numel(w), f"{w}_zero_gathered")
        new = f"{w}_zero_new"
        b.node("Reshape", [f"{w}_zero_gathered", b.const(f"{w}_zero_shape", np.array(zero.shapes[w], dtype=np.int64))],
               [new], domain="")
        b.update(w, new)
        signals[w] = new


def _add_lamb(b: _Builder, config, grads: dict[str, str], lr: str, norm: str | None, signals: dict) -> None:
    """LambOptimizer nodes (variadic over weights, per-weight alpha/beta/lambda/epsilon lists), one per
    distinct (ratio_min, ratio_max, do_bias_correction), which the op holds once; one shared step count."""
    step = b.add_state("Step", elem=TensorProto.INT64, shape=[1])
    b.out.shared_state["step"] = step
    groups: dict[tuple, list[str]] = {}
    for w in grads:
        hp = config.hyper_parameters_for(w)
        key = (float(hp["ratio_min"]), float(hp["ratio_max"]), bool(hp["do_bias_correction"]))
        groups.setdefault(key, []).append(w)
    for k, ((ratio_min, ratio_max, bias_correction), weights) in enumerate(groups.items()):
        hps = [config.hyper_parameters_for(w) for w in weights]
        inputs = ["", "", norm or "", lr, step]
        outputs = ["Step_new" if k == 0 else ""]
        for w in weights:
            m1 = b.add_state(f"Moment_1_{w}", like=w)
            m2 = b.add_state(f"Moment_2_{w}", like=w)
            b.out.optimizer_state[w] = {"Moment_1": m1, "Moment_2": m2}
            inputs += [w, grads[w], m1, m2, ""]
            outputs += [f"{w}_new", "", f"{m1}_new", f"{m2}_new", ""]
        b.node("LambOptimizer", inputs, outputs,
               alpha=[float(h["alpha"]) for h in hps], beta=[float(h["beta"]) for h in hps],
               epsilon=[float(h["epsilon"]) for h in hps], max_norm_clip=[1.0] * len(weights),
               ratio_min=ratio_min, ratio_max=ratio_max, do_bias_correction=int(bias_correction),
               **{"lambda": [float(h["lambda_coef"]) for h in hps]})
        if k == 0:
            b.update(step, "Step_new")
        for w in weights:
            m = b.out.optimizer_state[w]
            for state in (w, m["Moment_1"], m["Moment_2"]):
                b.update(state, f"{state}_new")
            signals[w] = f"{w}_new"
