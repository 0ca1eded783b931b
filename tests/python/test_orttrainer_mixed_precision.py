"""ORTTrainer mixed precision (issue 20): the forward and backward under autocast in float16 (the
reference's type) or bfloat16 with float32 master weights, the loss scaled inside the graph and the
gradients unscaled by the optimizer; an overflow (an inf gradient) skips the whole update and halves
the scale, as onnxruntime-training did; cast propagation from ORTTrainerOptions.

Reference: eager torch.autocast with torch.amp.GradScaler and torch.optim.AdamW. GradScaler's rule
is DynamicLossScaler's (halve on overflow, double after `growth_interval` finite steps in a row), so
the two runs see the same scales and skip the same steps.
"""

import copy

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F

from orttrainer_harness import LM_DESC, batches, lm_loss, make_model
from torch_ort_backend import ORTTrainer, ORTTrainerOptions, SessionOptions, amp, optim
from torch_ort_backend.trainer import PropagateCastOpsStrategy

LOW = {"float16": torch.float16, "bfloat16": torch.bfloat16}
ONNX_LOW = {"float16": onnx.TensorProto.FLOAT16, "bfloat16": onnx.TensorProto.BFLOAT16}
# One rounding of each type (half an ulp, relative): 2^-11 for float16, 2^-8 for bfloat16. The
# engine's kernels and torch's round the same ops' results to the low type but accumulate in a
# different order, so a value differs by a few roundings per low-precision op it went through.
# The loss passes through about 8 of them (embedding output cast, LayerNorm -> Linear, Gelu,
# Linear, their casts); the tolerances allow 8 roundings per step, compounding over STEPS steps of
# training.
UNIT = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
STEPS = 6


def _trainer(model, dtype, scaler, config=None, **options):
    opts = {"mixed_precision": {"enabled": True, "dtype": dtype, "loss_scaler": scaler}, **options}
    return ORTTrainer(model, LM_DESC, config or optim.AdamConfig(lr=1e-2), loss_fn=lm_loss,
                      options=ORTTrainerOptions(opts))


def _eager_amp(model, data, dtype, scale, window, sgd=False):
    """Eager autocast training: scaled backward, unscale, then AdamW (no decay) after clipping to 1.0
    (the trainer's Adam default), or plain SGD at lr 0.1; GradScaler skips and rescales."""
    model = copy.deepcopy(model)
    if sgd:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=scale, growth_interval=window)
    losses, scales = [], []
    for ids, labels in data:
        opt.zero_grad()
        with torch.autocast("cpu", dtype=dtype):
            loss = lm_loss(model(ids), labels)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        if not sgd:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        losses.append(loss.detach().float())
        scales.append(scaler.get_scale())
    return model, losses, scales


def _assert_engine_trained_in(model, trainer, dtype):
    assert all(p.grad is None for p in model.parameters()), "torch's autograd ran on the model"
    graph = trainer._onnx_model.graph
    assert {n.op_type for n in graph.node} & {"SGDOptimizer", "AdamOptimizer", "LambOptimizer"}
    casts_to_low = [n for n in graph.node if n.op_type == "Cast"
                    and onnx.helper.get_attribute_value(n.attribute[0]) == ONNX_LOW[dtype]]
    assert casts_to_low, "the training graph computes nothing in the low-precision type"
    assert all(p.dtype == torch.float32 for p in model.parameters()), "the master weights must stay float32"


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_autocast_training_matches_eager_amp(dtype, optimizer):
    model = make_model()
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    data = batches(STEPS)
    sgd = optimizer == "sgd"
    reference, losses, scales = _eager_amp(model, data, LOW[dtype], scale=1024.0, window=2, sgd=sgd)
    scaler = amp.DynamicLossScaler(loss_scale=1024.0, up_scale_window=2)
    config = optim.SGDConfig(lr=0.1) if sgd else optim.AdamConfig(lr=1e-2)
    trainer = _trainer(model, dtype, scaler, config)
    for k, ((ids, labels), want, want_scale) in enumerate(zip(data, losses, scales)):
        loss, logits = trainer.train_step(ids, labels)
        torch.testing.assert_close(loss.float(), want, rtol=8 * UNIT[dtype] * (k + 1), atol=0.0, msg=f"step {k}")
        assert trainer._train_step_info.all_finite
        assert scaler.loss_scale == want_scale
    assert scaler.loss_scale == 1024.0 * 2 ** (STEPS // 2)  # doubled every 2 finite steps
    if sgd:
        # SGD's weights moved by lr times the gradients: the two runs' total moves agree norm-wise
        # within the roundings their gradients went through (8 per step, over STEPS steps).
        for name, p in model.named_parameters():
            ours, theirs = p.detach() - initial[name], reference.get_parameter(name).detach() - initial[name]
            assert float((ours - theirs).norm()) <= 8 * UNIT[dtype] * STEPS * float(theirs.norm()), name
    _assert_engine_trained_in(model, trainer, dtype)
    assert trainer._train_step_info.optimization_step == STEPS


def _state(trainer):
    sd = trainer.state_dict()
    return {group: copy.deepcopy(sd[group]) for group in ("model", "optimizer")}


def _assert_same_state(a, b):
    def walk(x, y, path):
        if isinstance(x, dict):
            assert set(x) == set(y), path
            for k in x:
                walk(x[k], y[k], f"{path}.{k}")
        else:
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=path)
    walk(a, b, "state")


class _Regression(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(8, 16)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.head(torch.nn.functional.gelu(self.fc(x)))


REGRESSION_DESC = {"inputs": [("x", ["batch", 8]), ("y", ["batch", 4])],
                   "outputs": [("loss", [], True), ("prediction", ["batch", 4])]}


def _regression_batch(seed, poison=False):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)
    if poison:
        # 1e30 is inf in float16; in bfloat16 (float32's range) the squared error of outputs near
        # 1e30 is inf in the float32 loss. Either way the gradients are inf or NaN.
        x[2, 3] = 1e30
    return x, y


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("config", [optim.SGDConfig(lr=0.1), optim.AdamConfig(lr=1e-2), optim.LambConfig(lr=1e-2)],
                         ids=["sgd", "adam", "lamb"])
def test_an_inf_gradient_skips_the_update_and_halves_the_scale(dtype, config):
    model = _Regression()
    scaler = amp.DynamicLossScaler(loss_scale=1024.0, up_scale_window=3)
    trainer = ORTTrainer(model, REGRESSION_DESC, copy.deepcopy(config), loss_fn=torch.nn.functional.mse_loss,
                         options=ORTTrainerOptions({"mixed_precision": {"enabled": True, "dtype": dtype,
                                                                        "loss_scaler": scaler}}))
    info = trainer._train_step_info
    trainer.train_step(*_regression_batch(1))
    assert info.all_finite and info.optimization_step == 1 and scaler.loss_scale == 1024.0
    before = _state(trainer)
    trainer.train_step(*_regression_batch(2, poison=True))  # the injected overflow: nothing changes
    assert not info.all_finite
    assert scaler.loss_scale == 512.0
    assert info.step == 2 and info.optimization_step == 1
    _assert_same_state(before, _state(trainer))
    trainer.train_step(*_regression_batch(3))  # finite again: the update happens, the window restarted
    assert info.all_finite and info.optimization_step == 2 and scaler.loss_scale == 512.0
    after = trainer.state_dict()
    changed = [n for n, w in after["model"]["full_precision"].items()
               if not np.array_equal(w, before["model"]["full_precision"][n])]
    assert sorted(changed) == sorted(n for n, _ in model.named_parameters())
    if config.name == "AdamOptimizer":  # the 1-based index of the next update: 2 before the skip, 3 now
        assert all(int(s["Update_Count"][0]) == 3 for s in after["optimizer"].values())
    _assert_engine_trained_in(model, trainer, dtype)


def test_an_overflow_matches_eager_amp_skipping_the_same_step():
    """Start at a scale that overflows float16, then follow GradScaler step for step: both skip the
    first updates, halve, and then train the same way."""
    model = make_model()
    data = batches(STEPS)
    start = 2.0**22  # overflows in the float16 backward; a few halvings later it fits
    reference, losses, scales = _eager_amp(model, data, torch.float16, scale=start, window=100)
    assert scales[0] < start, "the reference run did not overflow: the test would prove nothing"
    scaler = amp.DynamicLossScaler(loss_scale=start, up_scale_window=100, max_loss_scale=start)
    trainer = _trainer(model, "float16", scaler)
    for k, ((ids, labels), want_scale) in enumerate(zip(data, scales)):
        trainer.train_step(ids, labels)
        assert scaler.loss_scale == want_scale, f"step {k}"
    skipped = sum(1 for a, b in zip([start] + scales, scales) if b < a)
    assert trainer._train_step_info.optimization_step == STEPS - skipped


def test_gradient_accumulation_with_loss_scaling():
    """The accumulate steps sum scaled gradients; the update unscales the sum once (SGD: the result
    equals eager accumulation of the unscaled gradients)."""
    model = make_model()
    data = batches(4)
    trainer = _trainer(model, "bfloat16", amp.DynamicLossScaler(loss_scale=256.0), optim.SGDConfig(lr=0.1),
                       batch={"gradient_accumulation_steps": 2})
    reference = copy.deepcopy(model)
    sums = {n: torch.zeros_like(p) for n, p in reference.named_parameters()}
    for k, (ids, labels) in enumerate(data):
        trainer.train_step(ids, labels)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = lm_loss(reference(ids), labels)
        reference.zero_grad()
        (loss * 256.0).backward()
        for n, p in reference.named_parameters():
            sums[n] += p.grad
        if k % 2 == 1:
            with torch.no_grad():
                for n, p in reference.named_parameters():
                    p -= 0.1 * sums[n] / 256.0
                    sums[n].zero_()
    assert trainer._train_step_info.optimization_step == 2
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=0.0, atol=0.1 * 2 * 16 * UNIT["bfloat16"], msg=name)


def test_default_loss_scaler_and_input_name():
    opts = ORTTrainerOptions({"mixed_precision": {"enabled": True}})
    trainer = ORTTrainer(make_model(), LM_DESC, optim.SGDConfig(lr=0.1), loss_fn=lm_loss, options=opts)
    scaler = opts.mixed_precision.loss_scaler
    assert isinstance(scaler, amp.DynamicLossScaler) and scaler.loss_scale == 65536.0
    assert scaler.input_name == "loss_scale"
    ids, labels = batches(1)[0]
    trainer.train_step(ids, labels)
    assert "loss_scale" in {i.name for i in trainer._onnx_model.graph.input}


def test_a_user_input_named_like_the_loss_scale_is_refused():
    desc = {"inputs": [("loss_scale", ["batch", "seq"]), ("labels", ["batch", "seq"])], "outputs": LM_DESC["outputs"]}
    with pytest.raises(ValueError, match="names an input 'loss_scale'"):
        ORTTrainer(make_model(), desc, optim.SGDConfig(), loss_fn=lm_loss,
                   options=ORTTrainerOptions({"mixed_precision": {"enabled": True}}))


def _trained_with_casts(tmp_path, level, strategy=PropagateCastOpsStrategy.FLOOD_FILL):
    path = str(tmp_path / f"optimized_{level}_{int(strategy)}.onnx")
    model = make_model()
    trainer = _trainer(model, "float16", amp.DynamicLossScaler(loss_scale=1024.0), optim.SGDConfig(lr=0.1),
                       graph_transformer={"propagate_cast_ops_config": {"strategy": strategy, "level": level}},
                       debug={"graph_save_paths": {"model_with_training_graph_after_optimization_path": path}})
    losses = [trainer.train_step(ids, labels)[0] for ids, labels in batches(3)]
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}, onnx.load(path).graph


def _cast_to_low_after(graph, op_type):
    """Whether a Cast to float16 reads an output of an `op_type` node (that op computed in float32)."""
    producers = {o: n for n in graph.node for o in n.output}
    return any(n.op_type == "Cast" and n.attribute[0].i == onnx.TensorProto.FLOAT16
               and n.input[0] in producers and producers[n.input[0]].op_type == op_type for n in graph.node)


def test_cast_propagation_from_trainer_options(tmp_path):
    off_losses, off_params, off_graph = _trained_with_casts(tmp_path, -1)
    # The default (FLOOD_FILL, level 1) and strategy NONE only move or remove Casts where no value
    # changes: training is bit-identical to the pass turned off.
    for level, strategy in ((1, PropagateCastOpsStrategy.FLOOD_FILL), (1, PropagateCastOpsStrategy.NONE)):
        losses, params, _ = _trained_with_casts(tmp_path, level, strategy)
        assert all(torch.equal(a, b) for a, b in zip(losses, off_losses)), (level, strategy)
        assert all(torch.equal(params[n], off_params[n]) for n in off_params), (level, strategy)
    # Level 2 moves the float16 Cast after the LayerNormalization above it (LayerNormalization and the
    # embedding's Gather then compute in float16): losses within float16's rounding (8 per step).
    on_losses, _, on_graph = _trained_with_casts(tmp_path, 2)
    assert _cast_to_low_after(off_graph, "LayerNormalization")
    assert not _cast_to_low_after(on_graph, "LayerNormalization")
    for k, (a, b) in enumerate(zip(on_losses, off_losses)):
        torch.testing.assert_close(a.float(), b.float(), rtol=8 * UNIT["float16"] * (k + 1), atol=0.0)


def test_session_options_cast_propagation_fields():
    so = SessionOptions()
    assert so.propagate_cast_ops_level == -1  # off unless asked for
    so.propagate_cast_ops_strategy = 1
    so.propagate_cast_ops_level = 2
    so.propagate_cast_ops_allow = ("Add", "Relu")
    so.propagate_cast_ops_dtype = torch.bfloat16
    assert so.propagate_cast_ops_allow == ["Add", "Relu"] and so.propagate_cast_ops_dtype == "bfloat16"
    assert so._to_engine().propagate_cast_ops == (1, 2, ["Add", "Relu"], onnx.TensorProto.BFLOAT16)
    with pytest.raises(ValueError, match="propagate_cast_ops_strategy must be 0 \\(NONE\\)"):
        so.propagate_cast_ops_strategy = 3
    with pytest.raises(ValueError, match="propagate_cast_ops_level must be an int >= -1"):
        so.propagate_cast_ops_level = -2
    with pytest.raises(ValueError, match="propagate_cast_ops_allow must be a list of op types"):
        so.propagate_cast_ops_allow = "Add"
    with pytest.raises(ValueError, match="propagate_cast_ops_dtype must be 'float16' or 'bfloat16'"):
        so.propagate_cast_ops_dtype = torch.float32


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["gpt2", "bert", "llama"])
def test_transformers_train_like_eager_autocast(name, dtype):
    """GPT-2, BERT (masked LM) and LLaMA from small configs: ORTTrainer's mixed-precision SGD steps
    give eager autocast's losses within the low type's roundings (8 per step, as above)."""
    from torch_ort_backend.testing import models

    make, batch_of = {"gpt2": (models.make_gpt2, models.causal_lm_batch),
                      "bert": (models.make_bert_mlm, models.bert_mlm_batch),
                      "llama": (models.make_llama, models.causal_lm_batch)}[name]
    model = make()
    model.config.use_cache = False
    reference = copy.deepcopy(model)
    first = batch_of(0)
    with torch.no_grad():
        rank = model(**first)["logits"].dim()
    desc = {"inputs": [(n, list(t.shape)) for n, t in first.items()],
            "outputs": [("loss", [], True), ("logits", [f"d{i}" for i in range(rank)])]}
    trainer = ORTTrainer(model, desc, optim.SGDConfig(lr=0.1), options=ORTTrainerOptions(
        {"mixed_precision": {"enabled": True, "dtype": dtype, "loss_scaler": amp.DynamicLossScaler(loss_scale=256.0)}}))
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for k in range(3):
        batch = batch_of(k)
        loss = trainer.train_step(**batch)[0]
        opt.zero_grad()
        with torch.autocast("cpu", dtype=LOW[dtype]):
            want = reference(**batch)["loss"]
        want.backward()
        opt.step()
        torch.testing.assert_close(loss.float(), want.detach().float(), rtol=8 * UNIT[dtype] * (k + 1), atol=0.0,
                                   msg=f"step {k}")
        assert trainer._train_step_info.all_finite
    _assert_engine_trained_in(model, trainer, dtype)


def test_an_overflow_inside_an_accumulation_window_drops_the_window():
    """An inf gradient in the accumulate step reaches the sums: the update step skips and the sums
    are reset, so the next window starts clean (the reference's ZeroGradient after every update)."""
    model = _Regression()
    scaler = amp.DynamicLossScaler(loss_scale=1024.0)
    trainer = ORTTrainer(model, REGRESSION_DESC, optim.AdamConfig(lr=1e-2), loss_fn=torch.nn.functional.mse_loss,
                         options=ORTTrainerOptions({"mixed_precision": {"enabled": True, "loss_scaler": scaler},
                                                    "batch": {"gradient_accumulation_steps": 2}}))
    info = trainer._train_step_info
    before = _state(trainer)
    trainer.train_step(*_regression_batch(1, poison=True))  # accumulate: no update yet
    trainer.train_step(*_regression_batch(2))  # update: the sum holds the inf
    assert not info.all_finite and info.optimization_step == 0 and scaler.loss_scale == 512.0
    _assert_same_state(before, _state(trainer))
    sums = trainer.state_dict()["gradient_accumulation"]
    assert sums and set(sums) == {n for n, _ in model.named_parameters()}
    assert all(not np.any(np.asarray(v)) for v in sums.values()), "the dropped window's sums were not reset"
    trainer.train_step(*_regression_batch(3))
    trainer.train_step(*_regression_batch(4))
    assert info.all_finite and info.optimization_step == 1


def test_legacy_trainer_use_mixed_precision_with_a_loss_scaler():
    from torch_ort_backend.capi.ort_trainer import IODescription, ModelDescription
    from torch_ort_backend.capi.ort_trainer import ORTTrainer as LegacyTrainer

    desc = ModelDescription([IODescription("ids", ["batch", "seq"], torch.int64),
                             IODescription("labels", ["batch", "seq"], torch.int64)],
                            [IODescription("loss", [], torch.float32),
                             IODescription("logits", ["batch", "seq", 32], torch.float32)])
    lr_desc = IODescription("Learning_Rate", [1], torch.float32)
    with pytest.raises(TypeError, match="loss_scaler must be a torch_ort_backend.amp.LossScaler"):
        LegacyTrainer(make_model(), lm_loss, desc, "SGDOptimizer", None, lr_desc, torch.device("cpu"),
                      use_mixed_precision=True, loss_scaler=1024.0)
    model = make_model()
    data = batches(4)
    _, losses, scales = _eager_amp(model, data, torch.float16, scale=1024.0, window=2, sgd=True)
    scaler = amp.DynamicLossScaler(loss_scale=1024.0, up_scale_window=2)
    trainer = LegacyTrainer(model, lm_loss, desc, "SGDOptimizer", None, lr_desc, torch.device("cpu"),
                            use_mixed_precision=True, loss_scaler=scaler)
    for k, ((ids, labels), want, want_scale) in enumerate(zip(data, losses, scales)):
        loss, _ = trainer.train_step(ids, labels, torch.tensor([0.1]))
        torch.testing.assert_close(loss.float(), want, rtol=8 * UNIT["float16"] * (k + 1), atol=0.0, msg=f"step {k}")
        assert scaler.loss_scale == want_scale
    assert scaler.input_name == "loss_scale"


class _LowPrecisionLayerNorm(torch.nn.Module):
    """The eager reference of allow_layer_norm_mod_precision: LayerNorm computed on the low type
    (input, weight and bias rounded to it, result in it) where autocast would compute it in float32."""

    def __init__(self, ln: torch.nn.LayerNorm, dtype: torch.dtype) -> None:
        super().__init__()
        self.ln, self.dtype = ln, dtype

    def forward(self, x):
        with torch.autocast("cpu", enabled=False):
            return F.layer_norm(x.to(self.dtype), self.ln.normalized_shape, self.ln.weight.to(self.dtype),
                                self.ln.bias.to(self.dtype), self.ln.eps)


def _layer_norm_types(graph):
    """(input type, output type) of each LayerNormalization of the optimised training graph."""
    types = {v.name: v.type.tensor_type.elem_type for v in [*graph.value_info, *graph.input, *graph.output]}
    return [(types.get(n.input[0]), types.get(n.output[0])) for n in graph.node if n.op_type == "LayerNormalization"]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_allow_layer_norm_mod_precision_computes_layer_norm_in_the_low_type(tmp_path, dtype):
    data = batches(3)
    graphs, losses = {}, {}
    for allowed in (False, True):
        path = str(tmp_path / f"optimized_{allowed}.onnx")
        trainer = _trainer(make_model(), dtype, amp.DynamicLossScaler(loss_scale=1024.0), optim.SGDConfig(lr=0.1),
                           graph_transformer={"allow_layer_norm_mod_precision": allowed},
                           debug={"graph_save_paths": {"model_with_training_graph_after_optimization_path": path}})
        losses[allowed] = [trainer.train_step(ids, labels)[0] for ids, labels in data]
        graphs[allowed] = onnx.load(path).graph
    low = ONNX_LOW[dtype]
    assert _layer_norm_types(graphs[False]) == [(onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT)]
    assert _layer_norm_types(graphs[True]) == [(low, low)]
    # Against eager autocast whose LayerNorm computes in the low type: 8 roundings per step, as above.
    reference = make_model()
    reference.ln = _LowPrecisionLayerNorm(reference.ln, LOW[dtype])
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for k, ((ids, labels), got) in enumerate(zip(data, losses[True])):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=LOW[dtype]):
            loss = lm_loss(reference(ids), labels)
        loss.backward()
        opt.step()
        torch.testing.assert_close(got.float(), loss.detach().float(), rtol=8 * UNIT[dtype] * (k + 1), atol=0.0)


def test_allow_layer_norm_mod_precision_needs_cast_propagation():
    with pytest.raises(ValueError, match="allow_layer_norm_mod_precision.*strategy.*level -1"):
        _trainer(make_model(), "bfloat16", None,
                 graph_transformer={"allow_layer_norm_mod_precision": True,
                                    "propagate_cast_ops_config": {"level": -1}})
