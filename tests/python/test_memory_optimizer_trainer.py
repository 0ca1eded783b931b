"""ORTTrainer's recompute flags (graph_transformer.attn_dropout_recompute, gelu_recompute,
transformer_layer_recompute, number_recompute_layers; memory_optimizer/joint_recompute.py) on GPT-2 and BERT (and LLaMA,
whose RMSNorm layers are found from their decomposed ops) from small configs with dropout 0.1: each
flag lowers the engine's peak over a training step, its plan is ON in the Memory Optimizer report, and the loss, the logits and every gradient
are those of the same graph without the flag, bit for bit (the same random stream: a recomputed
dropout output is rebuilt from the forward's mask, no random number is drawn again)."""

from __future__ import annotations

import logging
import re

import pytest
import torch

from torch_ort_backend import InferenceSession, ORTTrainer, ORTTrainerOptions, SessionOptions, optim
from torch_ort_backend._engine import RECOMPUTE_KEY
from torch_ort_backend.memory_optimizer.joint_recompute import RecomputeFlags
from torch_ort_backend.testing.models import bert_mlm_batch, causal_lm_batch, make_bert_mlm, make_gpt2, make_llama
from torch_ort_backend.trainer.model_desc import parse_model_desc
from torch_ort_backend.trainer.training_graph import ModelWithLoss, export_model

VOCAB, LAYERS = 128, 3
MODELS = {
    "gpt2": (lambda: make_gpt2(vocab=VOCAB, layers=LAYERS, dropout=0.1),
             lambda step: causal_lm_batch(step, batch=4, seq=32, vocab=VOCAB)),
    "bert": (lambda: make_bert_mlm(vocab=VOCAB, layers=LAYERS, dropout=0.1),
             lambda step: bert_mlm_batch(step, batch=4, seq=32, vocab=VOCAB)),
    "llama": (lambda: make_llama(vocab=VOCAB, layers=LAYERS, dropout=0.1),
              lambda step: causal_lm_batch(step, batch=4, seq=32, vocab=VOCAB)),
}
SEED = 1234


def _desc(batch: dict) -> dict:
    return {"inputs": [(name, ["batch", "seq"]) for name in batch],
            "outputs": [("loss", [], True), ("logits", ["batch", "seq", VOCAB])]}


def _model(name: str):
    model = MODELS[name][0]().train()
    model.config.use_cache = False
    return model


class _Report(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append((record.levelno, record.getMessage()))

    def reports(self) -> list[str]:
        return [m for _, m in self.messages if m.startswith("Memory Optimizer")]

    def warnings(self) -> list[str]:
        return [m for level, m in self.messages if level >= logging.WARNING]


def _export(name: str, flags: RecomputeFlags | None):
    """The joint graph of model `name` with `flags`, and the Memory Optimizer report it logged."""
    model = _model(name)
    batch = MODELS[name][1](0)
    desc = parse_model_desc(_desc(batch))
    wrapper = ModelWithLoss(model, None, desc.loss_index, input_names=desc.input_names)
    logger = logging.getLogger("torch_ort_backend")
    handler, level = _Report(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        exported = export_model(wrapper, desc, list(batch.values()), joint=True, opset=18, recompute=flags)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return model, exported, desc, handler


def _run(name: str, model, exported, step: int) -> tuple[dict, int]:
    """One engine run of model `name`'s joint graph at batch `step`, the random stream seeded with
    SEED: every output by name, and the run's peak (intermediates, kernel allocations and outputs
    made so far)."""
    batch = MODELS[name][1]
    feeds = {n: p.detach() for n, p in model.named_parameters() if n in exported.params}
    feeds.update({n: b for n, b in model.named_buffers() if n in exported.buffers})
    feeds.update(exported.constants)
    feeds.update({n: t for n, t in batch(step).items() if n in exported.inputs})
    options = SessionOptions()
    options.allow_unsafe_aten_ops = True  # the model's dropouts run as ATen nodes
    session = InferenceSession(exported.model, options)
    torch.manual_seed(SEED)
    outputs = session.run(None, feeds)
    stats = session.last_run_stats()
    return dict(zip([o.name for o in exported.model.graph.output], outputs)), int(stats["peak_live_bytes"])


def _assert_identical(reference: dict, other: dict, what: str) -> None:
    assert reference.keys() == other.keys()
    for key, expected in reference.items():
        assert torch.equal(other[key], expected), f"{what}: output '{key}' differs from the graph without recompute"


def _recomputed_nodes(exported) -> int:
    return sum(1 for n in exported.model.graph.node
               if any(p.key == RECOMPUTE_KEY and p.value == "1" for p in n.metadata_props))


def _on_rows(report: str) -> list[str]:
    return [line.split()[1] for line in report.splitlines() if line.startswith("  - ") and " ON " in line]


@pytest.fixture(scope="module")
def baselines():
    """Per model: the graph without flags, its outputs at two batches and its peak."""
    found = {}
    for name in MODELS:
        model, exported, desc, handler = _export(name, None)
        assert _recomputed_nodes(exported) == 0 and not handler.reports()
        runs = [_run(name, model, exported, step) for step in range(2)]
        found[name] = ([r[0] for r in runs], runs[0][1])
    return found


FLAG_CASES = [
    ("gpt2", RecomputeFlags(attn_dropout=True), ["Dropout+:1:-1"]),
    ("bert", RecomputeFlags(attn_dropout=True), ["Dropout+:1:-1"]),
    ("gpt2", RecomputeFlags(gelu=True), None),  # the tanh GELU of NewGELUActivation, in elementwise ops
    ("bert", RecomputeFlags(gelu=True), ["Gelu+:1:-1"]),
    ("gpt2", RecomputeFlags(transformer_layers=True), [f"TransformerLayer:1:{LAYERS - 1}"]),
    ("bert", RecomputeFlags(transformer_layers=True), [f"TransformerLayer:1:{LAYERS - 1}"]),
    # RMSNorm: x * rsqrt(mean(x^2) + eps) in elementwise ops, a layer starting at its square
    ("llama", RecomputeFlags(transformer_layers=True), [f"TransformerLayer:1:{LAYERS - 1}"]),
]


@pytest.mark.parametrize("name, flags, plans", FLAG_CASES, ids=[f"{c[0]}-{c[1]}" for c in FLAG_CASES])
def test_each_flag_lowers_the_peak_and_changes_no_number(baselines, name, flags, plans):
    reference, reference_peak = baselines[name]
    model, exported, desc, handler = _export(name, flags)
    assert _recomputed_nodes(exported) > 0, "no node of the exported graph is marked as a recompute copy"
    [report] = handler.reports()
    rows = _on_rows(report)
    if plans is None:  # the GELU module's ops: one plan, named by them
        assert len(rows) == 1 and "Tanh+" in rows[0] and rows[0].endswith(":1:-1"), report
    else:
        assert rows == plans, report
    runs = [_run(name, model, exported, step) for step in range(2)]
    for step, (outputs, _) in enumerate(runs):
        _assert_identical(reference[step], outputs, f"{name} {flags} step {step}")
    assert runs[0][1] < reference_peak, (runs[0][1], reference_peak)


def test_both_flags_together(baselines):
    reference, reference_peak = baselines["bert"]
    model, exported, desc, handler = _export("bert", RecomputeFlags(attn_dropout=True, gelu=True))
    [report] = handler.reports()
    # A gelu per layer, and one in the masked-LM head's transform.
    assert re.search(rf"Gelu\+:1:-1 +ON +{LAYERS + 1}/{LAYERS + 1} ", report), report
    assert re.search(rf"Dropout\+:1:-1 +ON +{LAYERS}/{LAYERS} ", report), report
    outputs, peak = _run("bert", model, exported, 0)
    _assert_identical(reference[0], outputs, "bert, both flags")
    single = {flag: _run("bert", *_export("bert", RecomputeFlags(**{flag: True}))[:2], 0)[1]
              for flag in ("attn_dropout", "gelu")}
    assert peak < min(single.values()), (peak, single)


def test_number_of_layers_recomputed_and_its_clipping(baselines):
    peaks, reports = {}, {}
    for count in (1, 10):
        model, exported, desc, handler = _export("gpt2", RecomputeFlags(transformer_layers=True, number_layers=count))
        [reports[count]] = handler.reports()
        outputs, peaks[count] = _run("gpt2", model, exported, 0)
        _assert_identical(baselines["gpt2"][0][0], outputs, f"gpt2, {count} layers")
    assert _on_rows(reports[1]) == ["TransformerLayer:1:1"], reports[1]
    assert _on_rows(reports[10]) == [f"TransformerLayer:1:{LAYERS - 1}"], reports[10]
    assert any("number_recompute_layers=10" in w and f"recomputing {LAYERS - 1}" in w for w in handler.warnings())
    assert peaks[10] < peaks[1] < baselines["gpt2"][1], peaks


def test_number_of_layers_without_layer_recompute_is_a_named_error():
    from orttrainer_harness import LM_DESC, lm_loss, make_model

    with pytest.raises(ValueError, match="number_recompute_layers=2 takes effect only with "
                                         "graph_transformer.transformer_layer_recompute=True"):
        ORTTrainer(make_model(), LM_DESC, optim.SGDConfig(lr=0.1), loss_fn=lm_loss,
                   options=ORTTrainerOptions({"graph_transformer": {"number_recompute_layers": 2}}))


def test_a_flag_the_model_has_no_plan_for_warns_and_changes_nothing():
    from orttrainer_harness import LM_DESC, lm_loss, make_model

    trainer = ORTTrainer(make_model(), LM_DESC, optim.SGDConfig(lr=0.1), loss_fn=lm_loss,
                         options=ORTTrainerOptions({"graph_transformer": {"attn_dropout_recompute": True,
                                                                          "transformer_layer_recompute": True}}))
    logger = logging.getLogger("torch_ort_backend")
    handler = _Report()
    logger.addHandler(handler)
    try:
        trainer.train_step(torch.randint(0, 32, (4, 6)), torch.randint(0, 32, (4, 6)))
    finally:
        logger.removeHandler(handler)
    warnings = handler.warnings()
    assert any("transformer_layer_recompute is on, but the model has no transformer layers" in w for w in warnings)
    assert any("attn_dropout_recompute is on, but the model has no dropout of an attention" in w for w in warnings)
    assert _recomputed_nodes(trainer._graphs.first().exported) == 0


def _trainer_run(flags: dict, steps: int = 2):
    model = _model("gpt2")
    batch = MODELS["gpt2"][1](0)
    trainer = ORTTrainer(model, _desc(batch), optim.SGDConfig(lr=0.05),
                         options=ORTTrainerOptions({"graph_transformer": flags}))
    torch.manual_seed(SEED)
    losses = [trainer.train_step(**MODELS["gpt2"][1](step))[0] for step in range(steps)]
    assert all(p.grad is None for p in model.parameters()), "torch's autograd ran on the model"
    peak = trainer._graphs.first().training.update_session.last_run_stats()["peak_live_bytes"]
    return losses, trainer.state_dict(pytorch_format=True), peak


def test_orttrainer_trains_gpt2_with_every_flag_like_without():
    losses, weights, peak = _trainer_run({})
    flagged_losses, flagged_weights, flagged_peak = _trainer_run(
        {"attn_dropout_recompute": True, "gelu_recompute": True, "transformer_layer_recompute": True})
    for a, b in zip(losses, flagged_losses):
        assert torch.equal(a, b)
    for name, w in weights.items():
        assert torch.equal(flagged_weights[name], w), name
    assert flagged_peak < peak, (flagged_peak, peak)
