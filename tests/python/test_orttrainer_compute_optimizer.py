"""The compute optimizer's label case in ORTTrainer (compute_optimizer/trainer_labels.py): a
cross-entropy whose labels hold the ignore index runs over the valid rows only, with the losses and
weights of eager training on the same batches (padding at the end, in the middle, none at all), and
the variables that turn it off for ORTModule turn it off here."""

import copy

import onnx
import pytest
import torch
import torch.nn.functional as F

from orttrainer_harness import LM_DESC, VOCAB, make_model
from torch_ort_backend import ORTTrainer, ORTTrainerOptions, compile_stats, optim

LR = 0.1
IGNORE = -100


def _loss(logits, labels):
    return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=IGNORE)


def _smoothed_loss(logits, labels):
    return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=IGNORE, label_smoothing=0.1)


def _batches(padding: str, steps: int = 3):
    g = torch.Generator().manual_seed(5)
    out = []
    for _ in range(steps):
        ids = torch.randint(1, VOCAB, (4, 8), generator=g)
        labels = torch.randint(0, VOCAB, (4, 8), generator=g)
        if padding == "end":
            labels[:, 5:] = IGNORE
            labels[0, 2:] = IGNORE
        elif padding == "middle":
            labels[:, 2:4] = IGNORE
            labels[3, 6] = IGNORE
        out.append((ids, labels))
    return out


def _train(loss_fn, data):
    model = make_model()
    eager = copy.deepcopy(model)
    trainer = ORTTrainer(model, LM_DESC, optim.SGDConfig(lr=LR), loss_fn=loss_fn,
                         options=ORTTrainerOptions({"utils": {"grad_norm_clip": False}}))
    opt = torch.optim.SGD(eager.parameters(), lr=LR)
    for ids, labels in data:
        got = float(trainer.train_step(ids, labels)[0])
        opt.zero_grad()
        want = loss_fn(eager(ids), labels)
        want.backward()
        opt.step()
        assert got == pytest.approx(float(want.detach()), rel=1e-5)
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-6, msg=name)
    return trainer


def _selects_rows(trainer) -> bool:
    graph = trainer._onnx_model.graph
    ops = {n.op_type for n in graph.node}
    aten = {onnx.helper.get_attribute_value(a).decode() for n in graph.node if n.op_type == "ATen"
            for a in n.attribute if a.name == "operator"}
    return "NonZero" in ops or "aten::nonzero" in aten or "nonzero" in aten


@pytest.mark.parametrize("padding", ["end", "middle", "none"])
def test_trainer_loss_over_valid_labels_matches_eager(padding):
    before = compile_stats().label_sparse_rewrites
    trainer = _train(_loss, _batches(padding))
    assert compile_stats().label_sparse_rewrites > before, "the label case did not rewrite the trainer's loss"
    assert _selects_rows(trainer)


@pytest.mark.parametrize("variable", ["ORTMODULE_ENABLE_COMPUTE_OPTIMIZER", "ORTMODULE_ENABLE_SPARSE_OPTIMIZER",
                                      "ORTMODULE_ENABLE_LABEL_SPARSE_OPTIMIZER"])
def test_trainer_label_case_turned_off_by_the_variables(monkeypatch, variable):
    monkeypatch.setenv(variable, "0")
    before = compile_stats().label_sparse_rewrites
    trainer = _train(_loss, _batches("end", steps=1))
    assert compile_stats().label_sparse_rewrites == before
    assert not _selects_rows(trainer)


def test_trainer_label_smoothing_is_not_rewritten():
    # Smoothing spreads mass over every class of every counted row: still correct unrewritten; the
    # pass leaves it alone rather than reason about it.
    before = compile_stats().label_sparse_rewrites
    trainer = _train(_smoothed_loss, _batches("end", steps=1))
    assert compile_stats().label_sparse_rewrites == before
    assert not _selects_rows(trainer)


def test_trainer_rejects_a_bad_switch_value(monkeypatch):
    monkeypatch.setenv("ORTMODULE_ENABLE_LABEL_SPARSE_OPTIMIZER", "maybe")
    model = make_model()
    trainer = ORTTrainer(model, LM_DESC, optim.SGDConfig(lr=LR), loss_fn=_loss)
    ids, labels = _batches("end", steps=1)[0]
    with pytest.raises(ValueError, match="ORTMODULE_ENABLE_LABEL_SPARSE_OPTIMIZER"):
        trainer.train_step(ids, labels)


def test_the_embedding_case_is_not_applied_and_says_so(monkeypatch):
    """ORTTrainer's step is one exported graph over engine-held weights: the embedding case (a second
    graph chosen per call) does not apply there, and setting its variable draws one warning."""
    from torch_ort_backend.trainer import compiled_step

    monkeypatch.setattr(compiled_step, "_EMBEDDING_WARNED", [])
    monkeypatch.setenv("ORTMODULE_ENABLE_EMBEDDING_SPARSE_OPTIMIZER", "1")
    with pytest.warns(compiled_step.EmbeddingCaseWarning, match="ORTMODULE_ENABLE_EMBEDDING_SPARSE_OPTIMIZER=1 "
                                                               "has no effect on ORTTrainer"):
        _train(_loss, _batches("end", steps=1))
