"""ORTTrainer against eager PyTorch: every step's loss and the weights after it equal an eager loop
applying the same update rule (orttrainer_harness.EagerReference), while torch's autograd never runs
on the model (its .grad stay None: the engine computed the gradients and the update)."""

import numpy as np
import onnx
import pytest
import torch

from orttrainer_harness import LM_DESC, EagerReference, batches, lm_loss, make_model, sgd_rule
from torch_ort_backend import ORTTrainer, ORTTrainerOptions, optim
from torch_ort_backend.optim import lr_scheduler


def _trainer(model, config=None, **options):
    return ORTTrainer(model, LM_DESC, config or optim.SGDConfig(lr=0.3), loss_fn=lm_loss,
                      options=ORTTrainerOptions(options))


def _assert_engine_trained(model, trainer):
    assert all(p.grad is None for p in model.parameters()), "torch's autograd ran on the model"
    assert trainer._onnx_model is not None
    ops = {n.op_type for n in trainer._onnx_model.graph.node}
    assert ops & {"SGDOptimizer", "AdamOptimizer", "LambOptimizer"}


def _assert_params_close(model, reference, rtol=1e-5, atol=1e-6):
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), reference.params[name].detach(), rtol=rtol, atol=atol, msg=name)


def test_sgd_matches_eager_and_new_sizes_reuse_the_graph():
    model = make_model()
    reference = EagerReference(model, [n for n, _ in model.named_parameters()])
    trainer = _trainer(model)
    for ids, labels in batches(8):
        loss, logits = trainer.train_step(ids, labels)
        expected = reference.step(ids, labels, 0.3, sgd_rule)
        torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
        assert logits.shape == (*ids.shape, 32)
    _assert_params_close(model, reference)
    _assert_engine_trained(model, trainer)
    assert len(trainer._graphs.train_steps) == 1  # four shapes, one export
    assert trainer._train_step_info.step == 8 and trainer._train_step_info.optimization_step == 8


def test_keyword_inputs_and_a_single_output_come_back_bare():
    model = make_model()
    desc = {"inputs": LM_DESC["inputs"], "outputs": [("loss", [], True)]}

    class LossOnly(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, ids, labels):
            return lm_loss(self.inner(ids), labels)

    trainer = ORTTrainer(LossOnly(model), desc, optim.SGDConfig(lr=0.1))
    ids, labels = batches(1)[0]
    loss = trainer.train_step(labels=labels, ids=ids)
    assert isinstance(loss, torch.Tensor) and loss.dim() == 0
    torch.testing.assert_close(loss, lm_loss(make_model()(ids), labels), rtol=1e-5, atol=1e-6)


def test_gradient_accumulation_sums_before_one_update():
    model = make_model()
    reference = EagerReference(model, [n for n, _ in model.named_parameters()], accumulation=3)
    trainer = _trainer(model, batch={"gradient_accumulation_steps": 3})
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for k, (ids, labels) in enumerate(batches(9)):
        loss, _ = trainer.train_step(ids, labels)
        torch.testing.assert_close(loss, reference.step(ids, labels, 0.3, sgd_rule), rtol=1e-5, atol=1e-6)
        if k == 1:  # mid-accumulation: nothing updated yet
            assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    _assert_params_close(model, reference)
    assert trainer._train_step_info.optimization_step == 3


def test_frozen_weights_never_change():
    model = make_model()
    frozen = model.embed.weight.detach().clone()
    trainable = [n for n, _ in model.named_parameters() if n != "embed.weight"]
    reference = EagerReference(model, trainable)
    trainer = _trainer(model, utils={"frozen_weights": ["embed.weight"]})
    for ids, labels in batches(4):
        trainer.train_step(ids, labels)
        reference.step(ids, labels, 0.3, sgd_rule)
    assert torch.equal(model.embed.weight, frozen)
    _assert_params_close(model, reference)


def test_lr_scheduler_feeds_its_rate_each_step():
    total, warmup, base = 10, 0.3, 0.4
    model = make_model()
    reference = EagerReference(model, [n for n, _ in model.named_parameters()])
    trainer = _trainer(model, optim.SGDConfig(lr=base),
                       lr_scheduler=lr_scheduler.LinearWarmupLRScheduler(total_steps=total, warmup=warmup))
    warm = int(total * warmup)
    for step, (ids, labels) in enumerate(batches(6)):
        # LinearWarmupLRScheduler: step/warm during warmup, then (total - step) / (total - warm).
        factor = step / warm if step < warm else (total - step) / (total - warm)
        trainer.train_step(ids, labels)
        reference.step(ids, labels, base * factor, sgd_rule)
        assert trainer.options.lr_scheduler.get_last_lr()[0] == pytest.approx(base * factor)
    _assert_params_close(model, reference)


def test_eval_step_matches_the_model_in_eval_mode_and_changes_nothing():
    model = make_model()
    model.drop.p = 0.5  # dropout only in training
    trainer = _trainer(model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids, labels = batches(1)[0]
    loss, logits = trainer.eval_step(ids, labels)
    model.eval()
    with torch.no_grad():
        expected = model(ids)
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss, lm_loss(expected, labels), rtol=1e-5, atol=1e-6)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_bad_inputs_are_named_errors():
    trainer = _trainer(make_model())
    ids, labels = batches(1)[0]
    with pytest.raises(ValueError, match="missing inputs \\['labels'\\]"):
        trainer.train_step(ids)
    with pytest.raises(ValueError, match="unknown input 'label'"):
        trainer.train_step(ids, label=labels)
    with pytest.raises(ValueError, match="input 'ids' has rank 1"):
        trainer.train_step(ids.reshape(-1), labels)
    with pytest.raises(ValueError, match="dimension 'seq' is 6 in input 'ids' but 5 in input 'labels'"):
        trainer.train_step(ids, labels[:, :5])
    with pytest.raises(TypeError, match="input 'labels' must be a torch.Tensor"):
        trainer.train_step(ids, labels.numpy())
    assert trainer._train_step_info.step == 0


def test_constructor_errors_name_the_culprit():
    with pytest.raises(RuntimeError, match="frozen_weights names \\['nope'\\]"):
        _trainer(make_model(), utils={"frozen_weights": ["nope"]})
    with pytest.raises(NotImplementedError, match="Adasum"):
        _trainer(make_model(), distributed={"enable_adasum": True})
    with pytest.raises(TypeError, match="optim_config must be"):
        ORTTrainer(make_model(), LM_DESC, torch.optim.SGD(make_model().parameters(), lr=0.1))
    with pytest.raises(ValueError, match="exactly one output as the loss"):
        ORTTrainer(make_model(), {"inputs": LM_DESC["inputs"], "outputs": [("loss", [])]}, optim.SGDConfig())


def test_state_dict_formats():
    model = make_model()
    trainer = _trainer(model, optim.AdamConfig(lr=1e-2))
    for ids, labels in batches(2):
        trainer.train_step(ids, labels)
    sd = trainer.state_dict()
    assert set(sd) == {"model", "optimizer", "trainer_options", "train_step_info"}
    names = [n for n, _ in model.named_parameters()]
    assert set(sd["model"]["full_precision"]) == set(names)
    for n, p in model.named_parameters():
        np.testing.assert_array_equal(sd["model"]["full_precision"][n], p.detach().numpy())
        assert set(sd["optimizer"][n]) == {"Moment_1", "Moment_2", "Update_Count"}
    assert sd["trainer_options"]["optimizer_name"] == "AdamOptimizer"
    assert sd["train_step_info"] == {"optimization_step": 2, "step": 2}
    pt = trainer.state_dict(pytorch_format=True)
    assert set(pt) == set(names) and all(isinstance(v, torch.Tensor) for v in pt.values())


def test_checkpoint_resume_gives_bit_identical_losses(tmp_path):
    data = batches(10)
    config = lambda: optim.AdamConfig(lr=1e-2)  # noqa: E731
    straight = _trainer(make_model(), config(), batch={"gradient_accumulation_steps": 2})
    losses = [straight.train_step(*b)[0] for b in data]

    first = _trainer(make_model(), config(), batch={"gradient_accumulation_steps": 2})
    for b in data[:5]:  # stops mid-accumulation
        first.train_step(*b)
    path = str(tmp_path / "ck.ortcp")
    first.save_checkpoint(path, user_dict={"epoch": 3})
    with pytest.raises(FileExistsError):
        first.save_checkpoint(path)

    resumed = _trainer(make_model(seed=7), config(), batch={"gradient_accumulation_steps": 2})
    assert resumed.load_checkpoint(path) == {"epoch": 3}
    resumed_losses = [resumed.train_step(*b)[0] for b in data[5:]]
    for a, b in zip(losses[5:], resumed_losses):
        assert torch.equal(a, b)


def test_a_bad_checkpoint_is_a_named_error_and_changes_nothing(tmp_path):
    trainer = _trainer(make_model(), optim.AdamConfig(lr=1e-2))
    trainer.train_step(*batches(1)[0])
    before = {k: v.copy() for k, v in trainer.state_dict()["model"]["full_precision"].items()}
    good = str(tmp_path / "good.ortcp")
    trainer.save_checkpoint(good)
    truncated = tmp_path / "truncated.ortcp"
    truncated.write_bytes(open(good, "rb").read()[:200])
    foreign = tmp_path / "foreign.ortcp"
    torch.save({"weights": torch.zeros(3)}, foreign)
    from torch_ort_backend.trainer.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="not a readable ORTTrainer checkpoint"):
        trainer.load_checkpoint(str(truncated))
    with pytest.raises(CheckpointError, match="not an ORTTrainer checkpoint"):
        trainer.load_checkpoint(str(foreign))
    sd = trainer.state_dict()
    sd["model"]["full_precision"]["fc.weight"] = np.zeros((3, 3), np.float32)
    with pytest.raises(ValueError, match="fc.weight.*float32\\[3, 3\\].*float32\\[16, 16\\]"):
        trainer.load_state_dict(sd)
    after = trainer.state_dict()["model"]["full_precision"]
    for k in before:
        np.testing.assert_array_equal(after[k], before[k])


def test_save_as_onnx(tmp_path):
    trainer = _trainer(make_model(), optim.AdamConfig(lr=1e-2))
    with pytest.raises(RuntimeWarning):
        trainer.save_as_onnx(str(tmp_path / "early.onnx"))
    trainer.train_step(*batches(1)[0])
    path = str(tmp_path / "train.onnx")
    trainer.save_as_onnx(path)
    model = onnx.load(path)
    onnx.checker.check_model(model)
    assert "AdamOptimizer" in {n.op_type for n in model.graph.node}
    weights = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    np.testing.assert_array_equal(weights["fc.weight"], trainer._torch_model.fc.weight.detach().numpy())


def _torch_adamw_loop(model, data, groups, clip):
    """Eager reference: loss.backward, clip_grad_norm_(1.0), torch.optim.AdamW."""
    model = __import__("copy").deepcopy(model)
    opt = torch.optim.AdamW(groups(model), lr=1e-2, betas=(0.9, 0.999), eps=1e-8)
    losses = []
    for ids, labels in data:
        opt.zero_grad()
        loss = lm_loss(model(ids), labels)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.detach())
    return model, losses


@pytest.mark.parametrize("clip", [True, False])
def test_adam_matches_torch_adamw_with_and_without_clipping(clip):
    model = make_model()
    data = batches(6)
    reference, expected = _torch_adamw_loop(model, data, lambda m: [{"params": list(m.parameters()),
                                                                      "weight_decay": 0.01}], clip)
    trainer = _trainer(model, optim.AdamConfig(lr=1e-2, lambda_coef=0.01), utils={"grad_norm_clip": clip})
    for (ids, labels), want in zip(data, expected):
        torch.testing.assert_close(trainer.train_step(ids, labels)[0], want, rtol=1e-5, atol=1e-6)
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-4, atol=1e-6, msg=name)
    _assert_engine_trained(model, trainer)


def test_param_groups_override_hyper_parameters_per_weight():
    model = make_model()
    data = batches(4)
    decayed = {"fc.weight", "head.weight"}
    reference, _ = _torch_adamw_loop(model, data, lambda m: [
        {"params": [p for n, p in m.named_parameters() if n in decayed], "weight_decay": 0.5},
        {"params": [p for n, p in m.named_parameters() if n not in decayed], "weight_decay": 0.0}], clip=False)
    config = optim.AdamConfig(lr=1e-2, lambda_coef=0.0, param_groups=[{"params": sorted(decayed), "lambda_coef": 0.5}])
    trainer = _trainer(model, config, utils={"grad_norm_clip": False})
    for ids, labels in data:
        trainer.train_step(ids, labels)
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-4, atol=1e-6, msg=name)


class _Moments:
    """Float64 Adam-style moments per weight, for the reference rules below."""

    def __init__(self):
        self.m, self.v, self.t = {}, {}, {}

    def advance(self, name, g, alpha, beta):
        m = self.m.get(name, torch.zeros_like(g))
        v = self.v.get(name, torch.zeros_like(g))
        self.m[name], self.v[name] = alpha * m + (1 - alpha) * g, beta * v + (1 - beta) * g * g
        self.t[name] = self.t.get(name, 0) + 1
        return self.m[name], self.v[name], self.t[name]


def test_adam_after_weight_update_mode_is_transformers_adamw():
    moments, lam, eps = _Moments(), 0.05, 1e-8

    def rule(name, w, g, lr):
        # transformers' AdamW: w' = w - lr sqrt(bc2) / bc1 m / (sqrt(v) + eps); w = w' - lr lambda w'.
        m, v, t = moments.advance(name, g, 0.9, 0.999)
        w = w - lr * (1 - 0.999 ** t) ** 0.5 / (1 - 0.9 ** t) * m / (v.sqrt() + eps)
        return w - lr * lam * w

    model = make_model()
    reference = EagerReference(model, [n for n, _ in model.named_parameters()])
    config = optim.AdamConfig(lr=1e-2, lambda_coef=lam, weight_decay_mode=optim.AdamConfig.DecayMode.AFTER_WEIGHT_UPDATE)
    trainer = _trainer(model, config, utils={"grad_norm_clip": False})
    for ids, labels in batches(5):
        torch.testing.assert_close(trainer.train_step(ids, labels)[0], reference.step(ids, labels, 1e-2, rule),
                                   rtol=1e-5, atol=1e-6)
    _assert_params_close(model, reference, rtol=1e-4)


def test_lamb_matches_a_float64_reference_with_accumulation_and_clipping():
    moments, lam, eps = _Moments(), 0.01, 1e-6

    def rule(name, w, g, lr):
        # LAMB: d = lambda w + (m / bc1) / (sqrt(v / bc2) + eps); w -= lr * (||w|| / ||d||) d.
        m, v, t = moments.advance(name, g, 0.9, 0.999)
        d = lam * w + (m / (1 - 0.9 ** t)) / ((v / (1 - 0.999 ** t)).sqrt() + eps)
        wn, dn = w.norm(), d.norm()
        ratio = lr * (wn / dn) if wn > 0 and dn > 0 else lr
        return w - ratio * d

    model = make_model()
    reference = EagerReference(model, [n for n, _ in model.named_parameters()], accumulation=2, clip=1.0)
    trainer = _trainer(model, optim.LambConfig(lr=1e-2, lambda_coef=lam), batch={"gradient_accumulation_steps": 2})
    for ids, labels in batches(8):
        torch.testing.assert_close(trainer.train_step(ids, labels)[0], reference.step(ids, labels, 1e-2, rule),
                                   rtol=1e-5, atol=1e-6)
    _assert_params_close(model, reference, rtol=1e-4)
    assert trainer.state_dict()["optimizer"]["shared_optimizer_state"]["step"].tolist() == [5]


class MaskedEncoder(torch.nn.Module):
    """nn.TransformerEncoder given only a causal mask: torch compares the mask's values with a causal
    one (a data-dependent branch that torch.export refuses; the trainer follows the example's branch)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(32, 16)
        layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0)
        self.encoder = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = torch.nn.Linear(16, 32)

    def forward(self, ids):
        n = ids.size(0)
        mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        return self.head(self.encoder(self.embed(ids), mask))


def test_a_value_dependent_branch_is_followed_with_a_warning(caplog):
    model = MaskedEncoder()
    reference = EagerReference(model, [n for n, _ in model.named_parameters()])
    trainer = _trainer(model)
    with caplog.at_level("WARNING", logger="torch_ort_backend"):
        for ids, labels in batches(3, shapes=((6, 2), (6, 2), (4, 3))):
            torch.testing.assert_close(trainer.train_step(ids, labels)[0],
                                       reference.step(ids, labels, 0.3, sgd_rule), rtol=1e-5, atol=1e-6)
    assert "value-dependent decisions" in caplog.text
    _assert_params_close(model, reference, rtol=1e-4)


def test_debug_options_take_effect(tmp_path):
    """graph_save_paths write each stage's model; check_model_export compares the exported graph with
    the model before the first step and leaves the state as it was; extra_postprocess edits the
    exported model (here: it scales the loss by 2, which the returned loss shows)."""
    paths = {k: str(tmp_path / f"{k}.onnx") for k in ("model_after_graph_transforms_path",
                                                         "model_with_gradient_graph_path",
                                                         "model_with_training_graph_path",
                                                         "model_with_training_graph_after_optimization_path")}
    model = make_model()
    reference = EagerReference(model, [n for n, _ in model.named_parameters()])
    trainer = _trainer(model, debug={"check_model_export": True, "graph_save_paths": paths})
    ids, labels = batches(1)[0]
    torch.testing.assert_close(trainer.train_step(ids, labels)[0], reference.step(ids, labels, 0.3, sgd_rule),
                               rtol=1e-5, atol=1e-6)
    _assert_params_close(model, reference)  # the check did not change the weights
    for path in paths.values():
        onnx.checker.check_model(onnx.load(path))

    def double_loss(m):
        (loss_out,) = [o for o in m.graph.node if "loss" in o.output]
        loss_out.output[0] = "loss_half"
        two = onnx.numpy_helper.from_array(np.array(2.0, np.float32), "two")
        m.graph.initializer.append(two)
        m.graph.node.append(onnx.helper.make_node("Mul", ["loss_half", "two"], ["loss"]))

    doubled = _trainer(make_model(), _internal_use={"extra_postprocess": double_loss})
    torch.testing.assert_close(doubled.train_step(ids, labels)[0], 2 * lm_loss(make_model()(ids), labels),
                               rtol=1e-5, atol=1e-6)


def test_settings_that_cannot_apply_are_refused_with_the_reason():
    with pytest.raises(NotImplementedError, match="contrib ops"):
        _trainer(make_model(), _internal_use={"enable_onnx_contrib_ops": False})
    with pytest.raises(NotImplementedError, match="execution providers"):
        _trainer(make_model(), provider_options={"CPUExecutionProvider": {"x": 1}})


def test_tied_weights_train_as_one_parameter():
    """GPT-2 style: the output projection is the embedding matrix. torch.export gives the tensor one
    input per name; the trainer reads it once, under model.named_parameters()'s name."""
    model = make_model()
    model.head.weight = model.embed.weight
    reference = EagerReference(model, [n for n, _ in model.named_parameters()])
    assert "head.weight" not in reference.trainable
    trainer = _trainer(model, optim.AdamConfig(lr=1e-2))
    moments = _Moments()

    def adamw(name, w, g, lr):
        m, v, t = moments.advance(name, g, 0.9, 0.999)
        return w - lr * (m / (1 - 0.9 ** t)) / ((v / (1 - 0.999 ** t)).sqrt() + 1e-8)

    reference.clip = 1.0
    for ids, labels in batches(4):
        torch.testing.assert_close(trainer.train_step(ids, labels)[0], reference.step(ids, labels, 1e-2, adamw),
                                   rtol=1e-5, atol=1e-6)
    _assert_params_close(model, reference, rtol=1e-4)
    assert model.head.weight is model.embed.weight
    assert set(trainer.state_dict()["optimizer"]) == {n for n, _ in model.named_parameters()}
