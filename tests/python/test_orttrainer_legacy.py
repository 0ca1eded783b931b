"""The legacy ORTTrainer (torch_ort_backend.capi.ort_trainer), the getting-started sample, old scripts
run through `python -m torch_ort_backend.compat`, and ORTTrainer given an onnx.ModelProto, each against
eager PyTorch."""

import copy
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from orttrainer_harness import EagerReference, batches, lm_loss, make_model
from torch_ort_backend import ORTTrainer, optim
from torch_ort_backend.capi.ort_trainer import IODescription, ModelDescription
from torch_ort_backend.capi.ort_trainer import ORTTrainer as LegacyTrainer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SAMPLE = os.path.join(ROOT, "examples", "getting_started")


def _legacy(model, name="SGDOptimizer", attributes=None, **kwargs):
    desc = ModelDescription([IODescription("ids", ["batch", "seq"], torch.int64),
                             IODescription("labels", ["batch", "seq"], torch.int64)],
                            [IODescription("loss", [], torch.float32),
                             IODescription("logits", ["batch", "seq", 32], torch.float32)])
    return LegacyTrainer(model, lm_loss, desc, name, attributes, IODescription("Learning_Rate", [1], torch.float32),
                         torch.device("cpu"), **kwargs)


def test_legacy_sgd_takes_the_learning_rate_as_its_last_input():
    model = make_model()
    reference = EagerReference(model, [n for n, _ in model.named_parameters()])
    trainer = _legacy(model)
    for k, (ids, labels) in enumerate(batches(5)):
        lr = 0.1 * (k + 1)
        loss, logits = trainer.train_step(ids, labels, torch.tensor([lr]))
        torch.testing.assert_close(loss, reference.step(ids, labels, lr, lambda n, w, g, r: w - r * g),
                                   rtol=1e-5, atol=1e-6)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), reference.params[name].detach(), rtol=1e-5, atol=1e-6, msg=name)
    assert trainer.global_step == 5
    assert all(p.grad is None for p in model.parameters())


def test_legacy_adam_with_map_optimizer_attributes_and_get_lr_this_step():
    model = make_model()
    reference = copy.deepcopy(model)
    decay = lambda name: 0.0 if name.endswith("bias") or "ln" in name else 0.02  # noqa: E731
    attributes = lambda name: {"alpha": 0.9, "beta": 0.999, "lambda": decay(name), "epsilon": 1e-8}  # noqa: E731
    schedule = lambda step: 1e-2 / (1 + step)  # noqa: E731
    trainer = _legacy(model, "AdamOptimizer", attributes, get_lr_this_step=schedule, enable_grad_norm_clip=False)
    opt = torch.optim.AdamW([{"params": [p], "weight_decay": decay(n), "lr": 0.0}
                             for n, p in reference.named_parameters()], betas=(0.9, 0.999), eps=1e-8)
    for step, (ids, labels) in enumerate(batches(4)):
        loss, _ = trainer.train_step(ids, labels)
        for group in opt.param_groups:
            group["lr"] = schedule(step)
        opt.zero_grad()
        expected = lm_loss(reference(ids), labels)
        expected.backward()
        opt.step()
        torch.testing.assert_close(loss, expected.detach(), rtol=1e-5, atol=1e-6)
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-4, atol=1e-6, msg=name)


def test_legacy_errors_name_the_culprit():
    with pytest.raises(ValueError, match="training_optimizer_name must be one of"):
        _legacy(make_model(), "AdagradOptimizer")
    trainer = _legacy(make_model())
    ids, labels = batches(1)[0]
    with pytest.raises(ValueError, match="needs the learning rate 'Learning_Rate'"):
        trainer.train_step(ids, labels)
    with pytest.raises(RuntimeWarning):
        trainer.save_as_onnx("never.onnx")


def test_getting_started_sample_matches_plain_torch():
    """train_ort.py's trainer and train.py's loop, a few batches each from the same weights (dropout
    and train.py's clipping off: the ORT sample's SGD does not clip), give the same losses."""
    sys.path.insert(0, SAMPLE)
    try:
        import data as sample_data
        import train
        import train_ort
    finally:
        sys.path.remove(SAMPLE)
    ntokens, train_data, _, _ = sample_data.load_data(max_words=2000, batch_size=train_ort.batch_size)
    steps, lr = 4, 0.5
    eager = train.build(ntokens, dropout=0.0)
    ours = train.build(ntokens, dropout=0.0)
    expected = train.train_epoch(eager, train_data, ntokens, lr, train_ort.bptt, 0.0, steps, 1)
    trainer = train_ort.make_trainer(ours, ntokens)
    # The sample's loose description (src declared float32) is completed from the tensors, with a warning.
    with pytest.warns(UserWarning, match="input 'src' is described as torch.float32\\[35, 20\\] but given as "
                                         "torch.int64\\[35, 20\\]"):
        got = train_ort.train_epoch(trainer, train_data, lr, steps, 1)
    np.testing.assert_allclose(got, expected, rtol=1e-4)
    assert trainer._trainer.options._internal_use.onnx_opset_version == 12
    for (name, p), (_, q) in zip(ours.named_parameters(), eager.named_parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-3, atol=1e-5, msg=name)


def test_compat_runs_an_onnxruntime_training_script_unchanged(tmp_path):
    script = tmp_path / "old_script.py"
    script.write_text(textwrap.dedent("""
        import sys, torch
        sys.path.insert(0, %r)
        from onnxruntime.capi.ort_trainer import ORTTrainer, IODescription, ModelDescription
        from onnxruntime.training import optim, ORTTrainerOptions, amp
        import onnxruntime.training.optim.lr_scheduler as lr_scheduler
        import onnxruntime
        from orttrainer_harness import batches, lm_loss, make_model
        assert optim.__name__ == "torch_ort_backend.optim" and amp.__name__ == "torch_ort_backend.amp"
        assert lr_scheduler.__name__ == "torch_ort_backend.optim.lr_scheduler"
        assert "site-packages" in onnxruntime.__file__  # the installed inference package, untouched
        desc = ModelDescription([IODescription("ids", ["b", "s"]), IODescription("labels", ["b", "s"])],
                                [IODescription("loss", []), IODescription("logits", ["b", "s", 32])])
        trainer = ORTTrainer(make_model(), lm_loss, desc, "SGDOptimizer", None,
                             IODescription("Learning_Rate", [1], torch.float32), torch.device("cpu"))
        for ids, labels in batches(2):
            loss, _ = trainer.train_step(ids, labels, torch.tensor([0.1]))
        print("LOSS", float(loss), sys.argv[1:])
    """) % os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-m", "torch_ort_backend.compat", str(script), "--flag", "x"],
                         capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "LOSS" in out.stdout and "['--flag', 'x']" in out.stdout
    # Without the runner, the names are onnxruntime's (or absent): nothing was installed for good.
    plain = subprocess.run([sys.executable, "-c", "import onnxruntime.training"], capture_output=True, text=True)
    assert plain.returncode != 0


def _mlp_loss_model(w1, b1, w2, b2) -> onnx.ModelProto:
    """x -> relu(x W1 + b1) W2 + b2 -> mean squared error against y, written with onnx.helper."""
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h0"]), helper.make_node("Add", ["h0", "B1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h2"]), helper.make_node("MatMul", ["h2", "W2"], ["o0"]),
             helper.make_node("Add", ["o0", "B2"], ["pred"]), helper.make_node("Sub", ["pred", "y"], ["d"]),
             helper.make_node("Mul", ["d", "d"], ["d2"]),
             helper.make_node("ReduceMean", ["d2"], ["loss"], keepdims=0)]
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "W1"), (b1, "B1"), (w2, "W2"), (b2, "B2"))]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6]),
                                             helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
                               helper.make_tensor_value_info("pred", TensorProto.FLOAT, ["n", 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_onnx_model_with_a_loss_output_trains_like_its_torch_twin():
    rng = np.random.default_rng(3)
    w1, b1 = rng.normal(size=(6, 8)).astype(np.float32), rng.normal(size=8).astype(np.float32)
    w2, b2 = rng.normal(size=(8, 3)).astype(np.float32), rng.normal(size=3).astype(np.float32)
    params = [torch.tensor(a, requires_grad=True) for a in (w1, b1, w2, b2)]
    desc = {"inputs": [("x", ["n", 6]), ("y", ["n", 3])], "outputs": [("loss", [], True), ("pred", ["n", 3])]}
    trainer = ORTTrainer(_mlp_loss_model(w1, b1, w2, b2), desc, optim.SGDConfig(lr=0.05),
                         options={"utils": {"frozen_weights": ["B2"]}})
    for n in (5, 4, 7):
        x, y = torch.tensor(rng.normal(size=(n, 6)), dtype=torch.float32), torch.tensor(rng.normal(size=(n, 3)),
                                                                                         dtype=torch.float32)
        loss, pred = trainer.train_step(x, y)
        want_pred = torch.relu(x @ params[0] + params[1]) @ params[2] + params[3]
        want = ((want_pred - y) ** 2).mean()
        want.backward()
        with torch.no_grad():
            for p in params[:3]:  # B2 is frozen
                p -= 0.05 * p.grad
                p.grad = None
        torch.testing.assert_close(loss, want.detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(pred, want_pred.detach(), rtol=1e-5, atol=1e-6)
    state = trainer.state_dict(pytorch_format=True)
    assert set(state) == {"W1", "B1", "W2", "B2"}
    for name, p in zip(("W1", "B1", "W2", "B2"), params):
        torch.testing.assert_close(state[name], p.detach(), rtol=1e-5, atol=1e-6, msg=name)


def test_an_onnx_model_with_an_aten_node_is_refused():
    model = helper.make_model(helper.make_graph(
        [helper.make_node("ATen", ["x"], ["loss"], domain="com.microsoft", operator="from_file")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(NotImplementedError, match="domain 'com.microsoft' \\(op ATen\\)"):
        ORTTrainer(model, {"inputs": [("x", [2])], "outputs": [("loss", [], True)]}, optim.SGDConfig())
