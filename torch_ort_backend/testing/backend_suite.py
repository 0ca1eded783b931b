"""The onnx package's whole backend test suite, run the way a new user runs it, with an outcome per case.

`onnx.backend.test.BackendTest` builds one unittest case per test and device from every kind of
test the package ships (the generated node tests, plus the "simple", "real" (light models),
"pytorch-converted" and "pytorch-operator" model tests). `run_suite` takes its CPU cases (the
CUDA ones are left out), runs each through unittest with the runner's own comparison, and
reports pass / fail / skip per case. A failure and an error both count as "fail"; "skip" is only
what the backend itself declines by raising unittest.SkipTest (onnxruntime's backend does for
opsets it does not know; ours never does).

tools/run_node_tests.py prints the counts, and tests/python/test_conformance_baseline.py checks
that no case of the committed baseline (conformance_baseline.txt beside it) stops passing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import tempfile
import time
import unittest
import warnings
from types import ModuleType
from typing import Callable, Iterator

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclasses.dataclass(frozen=True)
class CaseResult:
    """One CPU case of the suite: its category (NodeModel, SimpleModel, ...) and outcome."""

    name: str  # without the runner's "_cpu" suffix
    category: str
    outcome: str  # PASS, FAIL or SKIP
    message: str = ""  # first line of the failure, error or skip reason


def backend_module(name: str) -> ModuleType:
    """The onnx.backend.base-style module of a backend: 'ours' or 'onnxruntime'."""
    if name == "ours":
        import torch_ort_backend.onnx_backend as ours

        return ours
    if name == "onnxruntime":
        import onnxruntime
        import onnxruntime.backend as ort_backend

        onnxruntime.set_default_logger_severity(3)  # errors only: its opset warnings drown the report
        return ort_backend
    raise ValueError(f"unknown backend {name!r}: expected 'ours' or 'onnxruntime'")


def _first_line(err: str) -> str:
    """The exception line of a unittest traceback string (its last non-empty line)."""
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    return lines[-1].strip()[:300] if lines else ""


@contextlib.contextmanager
def _private_onnx_home() -> Iterator[None]:
    """The light-model tests write inputs and outputs under $ONNX_HOME; keep them in a fresh
    directory so a run never reads data a previous run (or another onnx version) left."""
    old = os.environ.get("ONNX_HOME")
    with tempfile.TemporaryDirectory(prefix="tob_onnx_home_") as home:
        os.environ["ONNX_HOME"] = home
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("ONNX_HOME", None)
            else:
                os.environ["ONNX_HOME"] = old


def cpu_cases(backend: ModuleType) -> list[tuple[str, str, unittest.TestCase]]:
    """(name, category, unittest case) for every CPU case BackendTest generates, sorted by name."""
    import onnx.backend.test

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the node-test generators warn about deliberate overflows
        runner = onnx.backend.test.BackendTest(backend, __name__)
    cases = []
    for class_name, cls in runner.test_cases.items():
        category = class_name.removeprefix("OnnxBackend").removesuffix("Test")
        for attr in vars(cls):
            if attr.startswith("test_") and attr.endswith("_cpu"):
                cases.append((attr[: -len("_cpu")], category, cls(attr)))
    return sorted(cases, key=lambda c: c[0])


def run_suite(backend: ModuleType, pattern: str = "",
              on_result: Callable[[CaseResult], None] | None = None) -> dict[str, CaseResult]:
    """Runs every CPU case whose name matches `pattern` (a regex; empty: all) and returns the
    results by name. `on_result` is called after each case (progress output)."""
    regex = re.compile(pattern)
    results: dict[str, CaseResult] = {}
    with _private_onnx_home(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, category, case in cpu_cases(backend):
            if not regex.search(name):
                continue
            outcome = unittest.TestResult()
            # The runner prints (model preparation, retries); keep the report readable.
            with contextlib.redirect_stdout(io.StringIO()):
                case.run(outcome)
            if outcome.failures or outcome.errors:
                (_, err), *_ = outcome.failures + outcome.errors
                result = CaseResult(name, category, FAIL, _first_line(err))
            elif outcome.skipped:
                result = CaseResult(name, category, SKIP, str(outcome.skipped[0][1])[:300])
            else:
                result = CaseResult(name, category, PASS)
            results[name] = result
            if on_result is not None:
                on_result(result)
    return results


def counts(results: dict[str, CaseResult]) -> dict[str, int]:
    """Pass / fail / skip counts of a run."""
    c = {PASS: 0, FAIL: 0, SKIP: 0}
    for r in results.values():
        c[r.outcome] += 1
    return c


BASELINE_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "python", "conformance_baseline.txt")


def read_baseline(path: str = BASELINE_PATH) -> set[str]:
    """The names of the cases the committed baseline says pass on our backend (none when the
    file does not exist yet)."""
    if not os.path.exists(path):
        return set()
    with open(path, encoding="utf-8") as f:
        return {ln.strip() for ln in f if ln.strip() and not ln.startswith("#")}


def write_baseline(results: dict[str, CaseResult], path: str = BASELINE_PATH) -> int:
    """Writes the passing cases of `results` as the new baseline; returns their count. Cases whose
    expected values no correct engine reproduces (conformance.KNOWN_DIFFERENCES: random draws) are
    left out even when a run matches them by coincidence, so the baseline never holds a case that
    passes by chance."""
    from .conformance import KNOWN_DIFFERENCES

    passed = sorted(n for n, r in results.items() if r.outcome == PASS and n not in KNOWN_DIFFERENCES)
    import onnx

    with open(path, "w", encoding="utf-8") as f:
        f.write(
            f"# Cases of onnx {onnx.__version__}'s backend test suite (CPU) that pass on torch_ort_backend:\n"
            f"# {len(passed)} of {len(results)}. Written by `python tools/run_node_tests.py --write-baseline`;\n"
            "# tests/python/test_conformance_baseline.py fails when one of them stops passing.\n"
        )
        for name in passed:
            f.write(name + "\n")
    return len(passed)


def timed_run(backend: ModuleType, pattern: str = "", on_result=None) -> tuple[dict[str, CaseResult], float]:
    """run_suite and its wall time in seconds."""
    start = time.perf_counter()
    results = run_suite(backend, pattern, on_result)
    return results, time.perf_counter() - start
