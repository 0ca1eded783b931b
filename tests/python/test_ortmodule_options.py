"""DebugOptions, LogLevel and the ORTMODULE_* variables as ORTModule users know them: validation,
precedence over DebugOptions, saved models, what each log level shows, profiling, and the errors
a user can act on (DataParallel, custom input classes) under each fallback policy."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import warnings

import onnx
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_ort_backend as tob
from ortmodule_helpers import ATOL, RTOL, assert_engine_ran, fresh_state
from torch_ort_backend import (
    DebugOptions,
    FallbackWarning,
    LogLevel,
    ORTModule,
    UnsupportedDataError,
    UnsupportedTorchModelError,
    compile_stats,
)
from torch_ort_backend.compiled_graph import live_graphs
from torch_ort_backend.errors import ORTModuleIOError, ORTModuleTorchModelException
from torch_ort_backend.options import MAX_OPSET, MIN_OPSET

LOGGER = "torch_ort_backend"


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    yield from fresh_state(monkeypatch, strict=False)


@pytest.fixture
def strict(monkeypatch):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(6, 6)
        self.norm = nn.LayerNorm(6)
        self.out = nn.Linear(6, 2)

    def forward(self, x, target=None, extra=None):
        pred = self.out(self.norm(torch.sigmoid(self.lin(x))))
        return pred if target is None else F.mse_loss(pred, target)


def data(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(4, 6, generator=gen) + 0.1, torch.rand(4, 2, generator=gen) - 0.5


def train_step(model: nn.Module, seed: int = 0) -> torch.Tensor:
    x, target = data(seed)
    loss = model(x, target)
    loss.backward()
    return loss


# --- DebugOptions and LogLevel ---------------------------------------------------------------------

def test_log_levels_are_onnxruntime_trainings_in_order_of_detail():
    """LogLevel has VERBOSE, INFO, WARNING, ERROR and FATAL, most detailed first."""
    assert [m.name for m in sorted(LogLevel)] == ["VERBOSE", "INFO", "WARNING", "ERROR", "FATAL"]


def test_debug_options_defaults_and_onnxruntime_training_views():
    """Defaults are WARNING / no saving; .save_onnx_models and .logging expose the same values under
    onnxruntime-training's names, the path defaulting to the working directory."""
    options = DebugOptions()
    assert (options.log_level, options.save_onnx, options.onnx_prefix, options.save_path) == (
        LogLevel.WARNING, False, "", "")
    assert options.logging.log_level is LogLevel.WARNING
    assert not options.save_onnx_models.save and options.save_onnx_models.path == os.getcwd()
    custom = DebugOptions(LogLevel.INFO, True, "bert", "/tmp/x")
    assert (custom.save_onnx_models.name_prefix, custom.save_onnx_models.path) == ("bert", "/tmp/x")
    assert custom == DebugOptions(log_level=LogLevel.INFO, save_onnx=True, onnx_prefix="bert", save_path="/tmp/x")
    assert "LogLevel.INFO" in repr(custom)


@pytest.mark.parametrize("kwargs, message", [
    ({"log_level": "INFO"}, r"log_level must be one of LogLevel.VERBOSE, .*LogLevel.FATAL, got 'INFO'"),
    ({"log_level": 20}, r"log_level must be one of LogLevel.VERBOSE"),
    ({"save_onnx": 1}, r"save_onnx must be a bool, got 1"),
    ({"onnx_prefix": 3}, r"onnx_prefix must be a str"),
    ({"save_onnx": True}, r"save_onnx=True needs onnx_prefix"),
    ({"save_onnx": True, "onnx_prefix": "a/b"}, r"onnx_prefix is a file-name prefix, not a path"),
    ({"save_path": 5}, r"save_path must be a str or os.PathLike directory"),
], ids=["level-str", "level-int", "save-int", "prefix-int", "no-prefix", "prefix-path", "path-int"])
def test_debug_options_reject_wrong_types_naming_the_argument(kwargs, message):
    """A wrong type or a save_onnx without a prefix raises ValueError naming the argument and what
    it accepts."""
    with pytest.raises(ValueError, match=message):
        DebugOptions(**kwargs)


def test_debug_options_save_path_must_not_be_a_file(tmp_path):
    """save_path names a directory; an existing file there is refused."""
    file = tmp_path / "file.txt"
    file.write_text("x")
    with pytest.raises(ValueError, match="save_path must be a directory"):
        DebugOptions(save_path=str(file))


def test_ortmodule_rejects_a_non_debug_options_and_conflicting_options():
    """debug_options must be a DebugOptions; a setting given both in DebugOptions and options is
    refused; an unknown option lists the known ones; a non-module is a TypeError."""
    with pytest.raises(ValueError, match="debug_options must be a DebugOptions, got dict"):
        ORTModule(Small(), {"log_level": "INFO"})
    with pytest.raises(ValueError, match="log_level given both in DebugOptions and in options"):
        ORTModule(Small(), DebugOptions(), options={"log_level": "INFO"})
    with pytest.raises(ValueError, match="unknown option 'threads'.*intra_op_threads"):
        ORTModule(Small(), options={"threads": 2})
    with pytest.raises(TypeError, match="wraps a torch.nn.Module"):
        ORTModule(lambda x: x)


# --- environment variables -------------------------------------------------------------------------

def _last_serial() -> int:
    graphs = live_graphs()
    return graphs[-1].serial if graphs else 0


def _opsets_of_graphs_since(serial: int) -> set[int]:
    return {next(o.version for o in g.exported.model.opset_import if o.domain in ("", "ai.onnx"))
            for g in live_graphs() if g.exported is not None and g.serial > serial}


@pytest.mark.parametrize("how", ["environment", "options", "torch.compile"])
def test_opset_from_the_environment_or_the_equivalent_option(how, monkeypatch, strict):
    """ORTMODULE_ONNX_OPSET_VERSION, ORTModule's options={"opset": ...} and torch.compile's
    options={"opset": ...} choose the opset of the exported models."""
    model = Small()
    x, _ = data()
    start = _last_serial()
    if how == "environment":
        monkeypatch.setenv("ORTMODULE_ONNX_OPSET_VERSION", "17")
        ORTModule(model)(x)
    elif how == "options":
        ORTModule(model, options={"opset": 17})(x)
    else:
        from torch_ort_backend.backend import ort_backend

        torch.compile(model, backend=ort_backend, options={"opset": 17})(x)
    assert _opsets_of_graphs_since(start) == {17}
    assert_engine_ran()


@pytest.mark.parametrize("value", [str(MIN_OPSET - 1), str(MAX_OPSET + 1), "latest"])
def test_opset_outside_the_documented_range_is_an_error(value, monkeypatch):
    """An opset outside [MIN_OPSET, MAX_OPSET] (or not a number) fails ORTModule's construction,
    naming the variable and the range."""
    monkeypatch.setenv("ORTMODULE_ONNX_OPSET_VERSION", value)
    with pytest.raises(ValueError, match=rf"ORTMODULE_ONNX_OPSET_VERSION must be .*\[{MIN_OPSET}, {MAX_OPSET}\]"):
        ORTModule(Small())


def test_bad_fallback_policy_names_the_allowed_flags(monkeypatch):
    """An unknown flag in ORTMODULE_FALLBACK_POLICY fails construction and lists the flags."""
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_NEVER")
    with pytest.raises(ValueError, match="unknown flag 'FALLBACK_NEVER'.*FALLBACK_UNSUPPORTED_DATA"):
        ORTModule(Small())


def test_fallback_retry_tries_the_engine_again_after_a_fallback(monkeypatch):
    """With ORTMODULE_FALLBACK_RETRY=1 a call that fell back (unsupported input) does not send the
    module to eager for good: the next valid call runs on the engine. Without it, it stays eager."""
    class Opaque:
        pass

    x, _ = data()
    for retry, engine_after in (("1", True), ("0", False)):
        monkeypatch.setenv("ORTMODULE_FALLBACK_RETRY", retry)
        model = ORTModule(Small())
        with pytest.warns(FallbackWarning, match="FALLBACK_UNSUPPORTED_DATA"):
            model(x, extra=Opaque())
        runs = compile_stats().runs
        torch.testing.assert_close(model(x), model.original_module(x), rtol=RTOL, atol=ATOL)
        assert (compile_stats().runs > runs) == engine_after and model.runs_eager != engine_after


def test_an_onnxruntime_training_variable_without_effect_is_reported_once(monkeypatch):
    """A set ORTMODULE_* variable that means nothing here (ORTMODULE_USE_TRITON) draws one
    UserWarning naming it; the known ones draw none."""
    from torch_ort_backend.ortmodule import module as ortmodule_module

    monkeypatch.setattr(ortmodule_module, "_WARNED_VARIABLES", set())
    monkeypatch.setenv("ORTMODULE_USE_TRITON", "1")
    monkeypatch.setenv("ORTMODULE_LOG_LEVEL", "WARNING")
    with pytest.warns(UserWarning, match="ORTMODULE_USE_TRITON .* has no effect") as caught:
        ORTModule(Small())
        ORTModule(Small())
    assert len([w for w in caught if "ORTMODULE_" in str(w.message)]) == 1


# --- saved models --------------------------------------------------------------------------------

def _saved(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.suffix == ".onnx")


def test_save_onnx_writes_forward_and_backward_models_exported_and_optimized(tmp_path, strict):
    """DebugOptions(save_onnx=True, onnx_prefix=..., save_path=...) writes, for every compiled
    graph, <prefix>_<stage>_<n>_exported.onnx and _optimized.onnx; the exported ones pass the ONNX
    checker."""
    model = ORTModule(Small(), DebugOptions(save_onnx=True, onnx_prefix="small", save_path=str(tmp_path)))
    train_step(model)
    names = _saved(tmp_path)
    stages = {name.split("_")[1] for name in names}
    assert stages == {"forward", "backward"}, names
    for stage in stages:
        assert any(n.startswith(f"small_{stage}_") and n.endswith("_exported.onnx") for n in names), names
        assert any(n.startswith(f"small_{stage}_") and n.endswith("_optimized.onnx") for n in names), names
    for name in names:
        loaded = onnx.load(str(tmp_path / name))
        assert len(loaded.graph.node) > 0
        if name.endswith("_exported.onnx"):
            onnx.checker.check_model(loaded)
    assert_engine_ran(2)


def test_save_path_environment_overrides_and_default_is_the_working_directory(tmp_path, monkeypatch, strict):
    """ORTMODULE_SAVE_ONNX_PATH wins over DebugOptions.save_path (and is created when missing);
    without either, models go to the working directory."""
    target = tmp_path / "from_env"
    monkeypatch.setenv("ORTMODULE_SAVE_ONNX_PATH", str(target))
    ignored = tmp_path / "ignored"
    options = DebugOptions(save_onnx=True, onnx_prefix="env", save_path=str(ignored))
    assert options.save_onnx_models.path == str(target)
    ORTModule(Small(), options)(data()[0])
    assert _saved(target) and not ignored.exists()

    monkeypatch.delenv("ORTMODULE_SAVE_ONNX_PATH")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    torch._dynamo.reset()
    ORTModule(Small(), DebugOptions(save_onnx=True, onnx_prefix="here"))(data()[0])
    assert any(name.startswith("here_") for name in _saved(cwd)), _saved(cwd)
    assert_engine_ran(2)


def test_save_path_environment_must_be_a_directory(tmp_path, monkeypatch):
    """ORTMODULE_SAVE_ONNX_PATH naming a file fails construction, naming the variable."""
    file = tmp_path / "f"
    file.write_text("x")
    monkeypatch.setenv("ORTMODULE_SAVE_ONNX_PATH", str(file))
    with pytest.raises(ValueError, match="ORTMODULE_SAVE_ONNX_PATH must be a directory"):
        ORTModule(Small())


# --- log levels ----------------------------------------------------------------------------------

def _messages(caplog) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


def test_info_shows_the_partition_report_but_not_verbose_details(caplog, strict):
    """LogLevel.INFO: the partition report of each graph, no pass list or per-run memory lines."""
    caplog.set_level(logging.NOTSET)
    model = ORTModule(Small(), DebugOptions(log_level=LogLevel.INFO))
    train_step(model)
    messages = _messages(caplog)
    assert any("partition report for forward_" in m for _, m in messages)
    assert any("partition report for backward_" in m for _, m in messages)
    assert not any(level < logging.INFO for level, _ in messages)
    assert_engine_ran(2)


def test_verbose_shows_passes_execution_plan_and_run_memory(caplog, monkeypatch, strict):
    """LogLevel.VERBOSE adds the engine's applied passes, its execution plan and each run's memory
    statistics (last_run_stats)."""
    from torch_ort_backend.compile_state import COMPILE_STATE

    # Sessions are logged when created; an earlier test's identical graph would be reused silently.
    COMPILE_STATE.clear_sessions()
    caplog.set_level(logging.NOTSET)
    model = ORTModule(Small(), DebugOptions(log_level=LogLevel.VERBOSE))
    train_step(model)
    text = "\n".join(m for _, m in _messages(caplog))
    assert "partition report for forward_" in text
    assert "pass " in text and "execution plan:" in text
    assert "forward_" in text and "run: {" in text and "peak_bytes" in text
    assert_engine_ran(2)


def test_warning_default_logs_nothing_on_success(caplog, strict):
    """The default level (WARNING) keeps a successful run quiet."""
    caplog.set_level(logging.NOTSET)
    logging.getLogger(LOGGER).setLevel(logging.WARNING)
    train_step(ORTModule(Small()))
    assert _messages(caplog) == []
    assert_engine_ran(2)  # a success, not a silent eager run


@pytest.mark.parametrize("debug_level, env_level, shown", [
    (LogLevel.WARNING, "INFO", True),
    (LogLevel.VERBOSE, "ERROR", False),
])
def test_environment_log_level_overrides_debug_options(debug_level, env_level, shown, caplog, monkeypatch, strict):
    """ORTMODULE_LOG_LEVEL wins over DebugOptions.log_level, both ways."""
    caplog.set_level(logging.NOTSET)
    monkeypatch.setenv("ORTMODULE_LOG_LEVEL", env_level)
    train_step(ORTModule(Small(), DebugOptions(log_level=debug_level)))
    assert any("partition report" in m for _, m in _messages(caplog)) == shown
    assert_engine_ran(2)


def test_torch_compile_log_level_option_configures_the_logger(caplog, strict):
    """torch.compile(..., options={"log_level": "INFO"}) is the option equivalent of the variable."""
    from torch_ort_backend.backend import ort_backend

    caplog.set_level(logging.NOTSET)
    torch.compile(Small(), backend=ort_backend, options={"log_level": "INFO"})(data()[0])
    assert logging.getLogger(LOGGER).level == logging.INFO
    assert any("partition report" in m for _, m in _messages(caplog))
    assert_engine_ran(1)


_SCRIPT = textwrap.dedent("""
    import torch
    from torch_ort_backend import ORTModule
    torch.manual_seed(0)
    model = ORTModule(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sigmoid()))
    with torch.no_grad():
        model(torch.rand(2, 4) + 0.1)
""")


@pytest.mark.parametrize("level, printed", [("INFO", True), ("VERBOSE", True), ("WARNING", False)])
def test_requested_level_prints_in_a_script_without_logging_configured(level, printed):
    """A script that never configured logging: ORTMODULE_LOG_LEVEL=INFO or VERBOSE prints the
    partition report on stderr; the default prints nothing of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORTMODULE_")}
    env.update(ORTMODULE_LOG_LEVEL=level, ORTMODULE_FALLBACK_POLICY="FALLBACK_DISABLE",
               PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(tob.__file__)),
                                                        env.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert ("partition report for inference_0" in result.stderr) == printed, result.stderr
    assert ("execution plan:" in result.stderr) == (level == "VERBOSE"), result.stderr


# --- profiling -----------------------------------------------------------------------------------

def test_profiling_writes_per_node_times_and_summarises_them_at_verbose(tmp_path, caplog, strict):
    """options={"enable_profiling": True}: end_profiling() writes one Chrome trace per graph with
    every node's time, and at VERBOSE logs the time per op type."""
    caplog.set_level(logging.NOTSET)
    model = ORTModule(Small(), DebugOptions(log_level=LogLevel.VERBOSE), options={"enable_profiling": True})
    for seed in range(2):
        model.zero_grad()
        train_step(model, seed)
    paths = tob.end_profiling(str(tmp_path))
    names = sorted(os.path.basename(p) for p in paths)
    assert any(n.startswith("tob_forward_") for n in names) and any(n.startswith("tob_backward_") for n in names)
    import json

    events = json.load(open(paths[0]))
    assert any(e["cat"] == "Node" and e["dur"] >= 0 and e["args"]["op_type"] for e in events)
    assert any("profile of forward_" in m and "ms in nodes" in m for _, m in _messages(caplog))


# --- errors a user can act on --------------------------------------------------------------------

def test_data_parallel_falls_back_to_eager_with_one_warning_by_default():
    """ORTModule(nn.DataParallel(m)) raises UnsupportedTorchModelError internally; the default policy
    runs the module in eager PyTorch with one FallbackWarning naming the cause, for every call."""
    inner = Small()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = ORTModule(nn.DataParallel(inner))
        x, target = data()
        for _ in range(3):
            out = model(x)
    ours = [w for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(ours) == 1 and "DataParallel" in str(ours[0].message)
    assert "FALLBACK_UNSUPPORTED_TORCH_MODEL" in str(ours[0].message)
    assert model.runs_eager and compile_stats().runs == 0
    torch.testing.assert_close(out, inner(x))


def test_data_parallel_raises_under_fallback_disable(strict):
    """With FALLBACK_DISABLE, DataParallel is refused at construction with the unsupported-model
    error (onnxruntime-training's ORTModuleTorchModelException) saying what to do instead."""
    with pytest.raises(UnsupportedTorchModelError, match="DataParallel.*ORTModule\\(model.module\\)") as info:
        ORTModule(nn.DataParallel(Small()))
    assert isinstance(info.value, ORTModuleTorchModelException)


class Opaque:
    """A user class the graph cannot carry."""


def test_custom_class_input_raises_unsupported_data_naming_the_argument(strict):
    """A custom object among the inputs raises UnsupportedDataError (ORTModuleIOError) naming the
    argument and the path to the object inside it, and what is accepted."""
    model = ORTModule(Small())
    x, _ = data()
    with pytest.raises(UnsupportedDataError, match=r"argument 'extra\['cfg'\]\[1\]' is a Opaque.*accepts tensors") \
            as info:
        model(x, extra={"cfg": [1, Opaque()]})
    assert isinstance(info.value, ORTModuleIOError)
    with pytest.raises(UnsupportedDataError, match=r"argument 'target' is a Opaque"):
        model(x, Opaque())


def test_custom_class_input_falls_back_with_one_warning_by_default():
    """Under the default policy the same call runs in eager PyTorch (one FallbackWarning naming
    the argument) and gives eager's answer."""
    inner = Small()
    model = ORTModule(inner)
    x, _ = data()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = model(x, extra=Opaque())
        model(x, extra=Opaque())
    ours = [w for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(ours) == 1 and "argument 'extra' is a Opaque" in str(ours[0].message)
    torch.testing.assert_close(out, inner(x))


def test_engine_failure_under_fallback_disable_reaches_the_user_as_our_error(strict):
    """A graph the backend cannot take (a complex input) raises our error class itself, not dynamo's
    BackendCompilerFailed wrapper, from the call under FALLBACK_DISABLE."""
    class Magnitude(nn.Module):
        def forward(self, z):
            return (z * 2).abs()

    with pytest.raises(UnsupportedDataError, match="complex"):
        ORTModule(Magnitude())(torch.randn(3, dtype=torch.complex64))


def test_docs_list_as_effective_exactly_the_variables_that_are_parsed(monkeypatch):
    """docs/ortmodule.md's first variable table holds exactly the variables options.py parses; every
    variable of its no-effect table draws the no-effect warning when set."""
    import re

    from torch_ort_backend.options import SPEC
    from torch_ort_backend.ortmodule import module as ortmodule_module

    doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "ortmodule.md")).read()
    effective_table, rest = doc.split("| variable | option | here |", 1)[1].split("| variables (no effect) | instead |", 1)
    no_effect_table = rest.split("\n\n", 1)[0]
    effective = set(re.findall(r"`(ORTMODULE_[A-Z_]+)`", effective_table))
    no_effect = set(re.findall(r"`(ORTMODULE_[A-Z_]+)`", no_effect_table))
    assert effective == {env for env, _ in SPEC.values() if env}
    assert {"ORTMODULE_MEMORY_OPT_LEVEL", "ORTMODULE_MEMORY_OPT_CONFIG"} <= effective and not effective & no_effect
    monkeypatch.setattr(ortmodule_module, "_WARNED_VARIABLES", set())
    for name in no_effect:
        monkeypatch.setenv(name, "1")
    with pytest.warns(UserWarning) as caught:
        ORTModule(Small())
    warned = {name for name in no_effect if any(name in str(w.message) and "no effect" in str(w.message) for w in caught)}
    assert warned == no_effect, no_effect - warned
