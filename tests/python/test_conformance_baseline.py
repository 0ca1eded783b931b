"""The whole onnx backend test suite (CPU cases, through onnx's own BackendTest runner) may not
lose a case that the committed baseline (conformance_baseline.txt beside this file) says passes.

The baseline only grows: `python tools/run_node_tests.py --write-baseline` rewrites it after a
change makes more cases pass (docs/conformance.md has the counts and the reasons for the rest).
"""

import os

import torch_ort_backend.onnx_backend as engine_backend
from torch_ort_backend.testing import backend_suite


def test_no_baseline_case_stops_passing():
    baseline = backend_suite.read_baseline()
    assert os.path.exists(backend_suite.BASELINE_PATH), "conformance_baseline.txt is missing"
    # Guards the file itself: an emptied baseline would make this test vacuous.
    assert len(baseline) > 1000, f"the baseline names only {len(baseline)} cases"
    results = backend_suite.run_suite(engine_backend)
    unknown = sorted(baseline - results.keys())
    assert not unknown, f"baseline cases the suite no longer has: {unknown[:20]}"
    lost = sorted(n for n in baseline if results[n].outcome != backend_suite.PASS)
    assert not lost, "cases that passed and now fail:\n" + "\n".join(
        f"  {n}: {results[n].message}" for n in lost)
    passed = backend_suite.counts(results)[backend_suite.PASS]
    assert passed >= len(baseline), f"{passed} cases pass, the baseline has {len(baseline)}"
