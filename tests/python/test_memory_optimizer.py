"""The memory optimizer's controls, errors, report and random-number replay.

Controls: memory_opt_level (ORTMODULE_MEMORY_OPT_LEVEL) 0/1/2, memory_opt_config
(ORTMODULE_MEMORY_OPT_CONFIG: a JSON file of "<plan>:<strategy>:<count>" plans, or as an option the
list itself). Every bad value is a ValueError naming the option or variable and the culprit. The
report lists plans in exactly the syntax the config takes: a line copied from it turns the plan on.
"""

from __future__ import annotations

import gc

from torch_ort_backend.compiled_graph import live_graphs
import functools
import json
import logging
import re

import pytest
import torch
from torch import nn

from torch_ort_backend.testing.models import causal_lm_batch, make_gpt2, make_mlp, mlp_batch
from memory_optimizer_harness import assert_identical, graph_memory, reset_warning, train
from ortmodule_helpers import assert_engine_ran, fresh_state
from torch_ort_backend import ORTModule
from torch_ort_backend.memory_optimizer import PlanConfig, parse_plan
from torch_ort_backend.memory_optimizer.rng_replay import REPLAYING, SAVING
from torch_ort_backend.options import resolve

small_gpt2 = functools.partial(make_gpt2, layers=3, dropout=0.1)


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    # memory_stats() reports every live graph that has run: graphs an earlier test still holds must
    # not count here, so their run counters are cleared (they report again only if they run again).
    gc.collect()
    for g in live_graphs():
        if getattr(g, "memory", None) is not None:
            g.memory.runs = 0
    yield from fresh_state(monkeypatch)


# ---- options and variables --------------------------------------------------------------------

@pytest.mark.parametrize("level", [0, 1, 2])
def test_level_is_read_from_the_option_and_the_variable(level):
    assert resolve({"memory_opt_level": level}).memory_opt_level == level
    assert resolve({}, environ={"ORTMODULE_MEMORY_OPT_LEVEL": str(level)}).memory_opt_level == level
    assert resolve({"memory_opt_level": 0}, environ={"ORTMODULE_MEMORY_OPT_LEVEL": "2"}).memory_opt_level == 2


@pytest.mark.parametrize("bad", [3, -1, "high", 1.5, True])
def test_a_bad_level_names_the_option(bad):
    with pytest.raises(ValueError, match=r"option 'memory_opt_level' must be"):
        resolve({"memory_opt_level": bad})


def test_a_bad_level_variable_names_the_variable():
    with pytest.raises(ValueError, match="ORTMODULE_MEMORY_OPT_LEVEL must be in \\[0, 2\\], got 7"):
        resolve({}, environ={"ORTMODULE_MEMORY_OPT_LEVEL": "7"})


def test_config_file_and_list(tmp_path):
    path = tmp_path / "plans.json"
    path.write_text(json.dumps(["TransformerLayer:1:2", "LayerNormalization+:1:-1", "Dropout+:0:-1"]))
    want = (PlanConfig("TransformerLayer", 1, 2), PlanConfig("LayerNormalization+", 1, -1),
            PlanConfig("Dropout+", 0, -1))
    assert resolve({}, environ={"ORTMODULE_MEMORY_OPT_CONFIG": str(path)}).memory_opt_config == want
    assert resolve({"memory_opt_config": str(path)}).memory_opt_config == want
    assert resolve({"memory_opt_config": [str(p) for p in want]}).memory_opt_config == want
    assert resolve({"memory_opt_config": ""}).memory_opt_config == ()


def test_a_missing_config_file_names_the_path_and_the_variable(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(ValueError, match=f"ORTMODULE_MEMORY_OPT_CONFIG: the memory optimizer config file "
                                         f"'{re.escape(str(missing))}' does not exist"):
        resolve({}, environ={"ORTMODULE_MEMORY_OPT_CONFIG": str(missing)})
    with pytest.raises(ValueError, match="is not a file"):
        resolve({"memory_opt_config": str(tmp_path)})


@pytest.mark.parametrize("text, message", [
    ('["Gelu+:1:-1"', r"is not valid JSON"),
    ('{"Gelu+": 1}', r"expected a list of plans"),
    ('[3]', r"entry 0: a plan is a string"),
    ('["Gelu+"]', r"entry 0: plan 'Gelu\+' is not '<plan name>:<strategy>:<count>'"),
    ('["Gelu+:one:-1"]', r"the strategy must be an integer, got 'one'"),
    ('["Gelu+:3:-1"]', r"strategy must be 0 \(off\), 1 \(recompute\) or 2"),
    ('["Gelu+:1:0"]', r"count must be -1 \(every occurrence\) or a positive number, got 0"),
    ('["Gelu+:1:-2"]', r"count must be -1"),
    ('["Geluu+:1:-1"]', r"unknown plan name 'Geluu\+': 'Geluu' is not an op name"),
    ('["Softmax+Gleu+:1:-1"]', r"'Gleu' is not an op name"),
    ('["Gelu:1:-1"]', r"unknown plan name 'Gelu': a plan is 'TransformerLayer' or op names each followed by '\+'"),
    ('["Gelu+:2:-1"]', r"strategy 2 \(recompute with compromise\) exists for TransformerLayer only"),
    ('["Gelu+:1:-1", "Gelu+:1:2"]', r"plan 'Gelu\+' is listed twice"),
])
def test_a_bad_config_names_the_file_the_entry_and_the_fault(tmp_path, text, message):
    path = tmp_path / "plans.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as caught:
        resolve({}, environ={"ORTMODULE_MEMORY_OPT_CONFIG": str(path)})
    assert "ORTMODULE_MEMORY_OPT_CONFIG" in str(caught.value) and str(path) in str(caught.value)


def test_a_bad_config_option_names_the_option():
    with pytest.raises(ValueError,
                       match=r"option 'memory_opt_config', entry 1: plan 'Nope\+:1:-1': unknown plan name 'Nope\+'"):
        resolve({"memory_opt_config": ["Gelu+:1:-1", "Nope+:1:-1"]})
    with pytest.raises(ValueError, match="option 'memory_opt_config' must be the path of a JSON file"):
        resolve({"memory_opt_config": 3})


def test_ortmodule_raises_for_a_bad_variable_and_takes_a_good_one_without_a_no_effect_warning(monkeypatch, recwarn):
    monkeypatch.setenv("ORTMODULE_MEMORY_OPT_LEVEL", "9")
    with pytest.raises(ValueError, match="ORTMODULE_MEMORY_OPT_LEVEL"):
        ORTModule(nn.Linear(2, 2))
    monkeypatch.setenv("ORTMODULE_MEMORY_OPT_LEVEL", "1")
    ORTModule(nn.Linear(2, 2))
    assert not [w for w in recwarn if "ORTMODULE_MEMORY_OPT_LEVEL" in str(w.message)]


# ---- plans at work ----------------------------------------------------------------------------

def test_a_line_copied_from_the_report_turns_its_plan_on(tmp_path, monkeypatch):
    """The level-0 report (logged once at WARNING, as nothing is on) lists LayerNormalization+ in
    config syntax; that line in a config file turns exactly that plan on, the forward stashes less,
    and losses and gradients stay those of level 0."""
    reset_warning(monkeypatch)
    model = small_gpt2()
    off = train(model, causal_lm_batch, {})
    report = off.reports[0]
    assert report.startswith("Memory Optimizer: OFF")
    line = next(ln for ln in report.splitlines() if "LayerNormalization+:" in ln)
    plan = line.split()[1]
    assert plan == "LayerNormalization+:1:-1" and line.split()[2] == "OFF"
    config = tmp_path / "plans.json"
    config.write_text(json.dumps([plan]))
    monkeypatch.setenv("ORTMODULE_MEMORY_OPT_CONFIG", str(config))
    on = train(model, causal_lm_batch, {})
    head, *rows = on.reports[0].splitlines()
    assert head == "Memory Optimizer: ON (memory_opt_level 0; plans LayerNormalization+:1:-1)"
    row = next(r for r in rows if "LayerNormalization+:" in r).split()
    assert row[1:3] == ["LayerNormalization+:1:-1", "ON"]
    assert [r.split()[2] for r in rows if re.match(r"\s+- ", r) and "LayerNormalization+:" not in r] == \
        ["OFF"] * (sum(1 for r in rows if re.match(r"\s+- ", r)) - 1)
    assert on.replayed_dropouts == 0, "LayerNormalization+ recomputes no dropout"
    assert graph_memory(on, "backward")["saved_bytes"] < graph_memory(off, "backward")["saved_bytes"]
    assert_identical(off, on, "LayerNormalization+:1:-1")


def test_the_report_lists_shapes_dtypes_and_bytes_and_warns_once_when_off(monkeypatch, caplog):
    reset_warning(monkeypatch)
    model = small_gpt2()
    with caplog.at_level(logging.WARNING, logger="torch_ort_backend"):
        train(model, causal_lm_batch, {})
        train(model, causal_lm_batch, {})
    warned = [r for r in caplog.records
              if r.levelno == logging.WARNING and r.getMessage().startswith("Memory Optimizer")]
    assert len(warned) == 1, "with transformer layers, the OFF report is a warning once per process, then INFO"
    text = warned[0].getMessage()
    assert "ORTMODULE_MEMORY_OPT_LEVEL=1" in text and "ORTMODULE_MEMORY_OPT_CONFIG" in text
    layer = re.search(r"- TransformerLayer:1:-1\s+OFF\s+3\s+([\d,]+)\s+(\S+)", text)
    assert layer, text
    assert "layers: transformer.h.0 .. transformer.h.2 (GPT2Block)" in text
    # causal_lm_batch: 2 x 16 tokens, hidden 32, 2 heads: the stashed attention probabilities of a
    # layer are float32[2, 2, 16, 16], its LayerNorm outputs float32[2, 16, 32] (static shapes).
    assert "float32[2, 2, 16, 16] (2, 2, 16, 16)" in text and "float32[2, 16, 32] (2, 16, 32)" in text
    ln = re.search(r"- LayerNormalization\+:1:-1\s+OFF\s+(\d+)\s+([\d,]+)", text)
    # ln_1, ln_2 of 3 layers and ln_f: out [2,16,32] + mean, rstd [2,16,1] float32 each
    assert ln and int(ln.group(1)) == 7 and int(ln.group(2).replace(",", "")) == 7 * (2 * 16 * 32 + 2 * 2 * 16) * 4
    assert re.search(r"total saving of the plans on \(estimated from the plans\): 0 bytes", text)


def test_dynamic_shapes_show_symbolic_and_concrete_sizes():
    model = small_gpt2()
    torch._dynamo.reset()
    compiled = torch.compile(model.train(), backend="ort", dynamic=True, options={"memory_opt_level": 1})
    logger = logging.getLogger("torch_ort_backend")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        compiled(**causal_lm_batch(0, seq=12))["loss"].backward()
    finally:
        logger.removeHandler(handler)
    text = next(r.getMessage() for r in records if r.getMessage().startswith("Memory Optimizer"))
    # a LayerNorm output: float32[s_batch, s_seq, 32] at (2, 12, 32)
    assert re.search(r"float32\[s\d+, s\d+, 32\] \(2, 12, 32\)", text), text
    assert re.search(r"TransformerLayer:1:2\s+ON\s+2/3\s+[\d,]+\s+\S*s\d+", text), text
    assert_engine_ran()


def test_count_and_compromise_choose_what_is_recomputed(monkeypatch):
    """TransformerLayer:1:1 recomputes the first layer only; TransformerLayer:2:-1 recomputes every
    layer's cheap ops but keeps its matrix products: it stashes more than :1:-1 and less than none.
    All give level 0's numbers."""
    model = small_gpt2()
    runs = {cfg: train(model, causal_lm_batch, {"memory_opt_config": [cfg]} if cfg else {})
            for cfg in ("", "TransformerLayer:1:1", "TransformerLayer:1:-1", "TransformerLayer:2:-1")}
    saved = {cfg: graph_memory(r, "backward")["saved_bytes"] for cfg, r in runs.items()}
    assert saved["TransformerLayer:1:-1"] < saved["TransformerLayer:1:1"] < saved[""]
    assert saved["TransformerLayer:1:-1"] < saved["TransformerLayer:2:-1"] < saved[""]
    assert "TransformerLayer:1:1                     ON       1/3" in runs["TransformerLayer:1:1"].reports[0]
    for cfg, run in runs.items():
        assert_identical(runs[""], run, cfg or "no plans")


def test_a_model_without_attention_has_no_layer_plan(monkeypatch):
    """The MLP's Linear layers are indexed children of one Sequential, but hold no attention: level
    1 finds no transformer layer and changes nothing; the op plans are still listed."""
    reset_warning(monkeypatch)
    make_model = make_mlp
    off = train(make_model(), mlp_batch, {})
    level1 = train(make_model(), mlp_batch, {"memory_opt_level": 1})
    assert all("TransformerLayer" not in r for r in off.reports + level1.reports)
    assert level1.reports and level1.reports[0].startswith("Memory Optimizer: OFF")
    assert not off.warnings, "op plans alone do not make the default level noisy"
    assert_identical(off, level1, "MLP at level 1")


def test_a_configured_plan_the_graph_lacks_is_reported_not_applied():
    run = train(small_gpt2(), causal_lm_batch, {"memory_opt_config": ["Gelu+:1:-1"]})  # GPT-2's GELU is tanh-based
    assert "configured plans this graph does not have: Gelu+:1:-1" in run.reports[0]
    assert run.reports[0].startswith("Memory Optimizer: OFF")


# ---- the random-number replay -----------------------------------------------------------------

def test_dropout_replay_draws_the_forward_mask_and_leaves_the_generator_where_it_was():
    x = torch.randn(64, 33)
    torch.manual_seed(7)
    ref_out, ref_mask = torch.ops.aten.native_dropout(x, 0.3, True)
    after_ref = torch.get_rng_state()
    torch.manual_seed(7)
    state, out, mask = SAVING(x, 0.3, True)
    assert torch.equal(out, ref_out) and torch.equal(mask, ref_mask), "saving the state must not change the draw"
    assert torch.equal(torch.get_rng_state(), after_ref)
    torch.rand(5)  # the stream moves on
    moved = torch.get_rng_state()
    out2, mask2 = REPLAYING(state, x, 0.3, True)
    assert torch.equal(mask2, ref_mask) and torch.equal(out2, ref_out)
    assert torch.equal(torch.get_rng_state(), moved), "the replay restores the generator"
    assert 0 < int(mask.sum()) < mask.numel()


def test_parse_plan_round_trips_the_report_syntax():
    for text in ("TransformerLayer:2:3", "MatMul+Div+Where+Softmax+:1:-1", "Dropout+:0:1"):
        assert str(parse_plan(text)) == text
