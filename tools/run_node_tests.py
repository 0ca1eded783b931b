#!/usr/bin/env python3
"""Runs the onnx package's backend node tests on our engine (or onnxruntime) and reports.

  python tools/run_node_tests.py 'test_add'            # tests whose name matches the regex
  python tools/run_node_tests.py --summary             # the WHOLE suite: pass / fail / skip counts
  python tools/run_node_tests.py --summary --backend onnxruntime

A test is "skip" when the backend does not claim the model's ops (for us: no registered kernel;
for onnxruntime: session creation raises NOT_IMPLEMENTED / invalid graph), "fail" when it runs
and gives a wrong answer or raises, "pass" otherwise. Comparison: each test's own rtol/atol (onnx's
defaults are rtol 1e-3, atol 1e-7).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def as_array(x):
    """Test data may be numpy arrays or TensorProto (for dtypes numpy lacks)."""
    return numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x


def compare(expected, actual, rtol: float, atol: float) -> str | None:
    if len(expected) != len(actual):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for i, (e, a) in enumerate(zip(expected, actual)):
        a = np.asarray(a)
        if e.dtype == object:
            return "non-tensor output"
        if a.shape != e.shape:
            return f"output {i}: shape {a.shape}, expected {e.shape}"
        if str(e.dtype) == "bfloat16":  # ml_dtypes: compare as float32, NaN equal to NaN
            a, e = a.astype(np.float32), e.astype(np.float32)
            if not np.array_equal(a, e, equal_nan=True):
                return f"output {i}: bfloat16 values differ"
        elif e.dtype.kind in "fc":
            try:
                np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol)
            except AssertionError as err:
                return f"output {i}: {str(err).strip().splitlines()[-1]}"
        elif not np.array_equal(a, e):
            return f"output {i}: values differ"
        elif a.dtype != e.dtype:
            return f"output {i}: dtype {a.dtype}, expected {e.dtype}"
    return None


class OurBackend:
    name = "torch_ort_backend"

    def __init__(self) -> None:
        from torch_ort_backend.testing import conformance

        self.conformance = conformance

    def claims(self, model) -> str | None:
        return self.conformance.unsupported_reason(model)

    def run(self, model, inputs):
        from torch_ort_backend.onnx_backend import EngineBackend

        return EngineBackend.prepare(model).run(inputs)


class OnnxRuntimeBackend:
    name = "onnxruntime"

    def __init__(self) -> None:
        import onnxruntime as ort

        self.ort = ort

    def claims(self, model) -> str | None:
        # onnx 1.23 stamps IR version 14 on some generated tests; onnxruntime 1.31 reads up to 13
        # and the IR bump changes nothing these node tests use, so give it a version it accepts.
        if model.ir_version > 10:
            model = onnx.ModelProto.FromString(model.SerializeToString())
            model.ir_version = 10
        try:
            self._session = self.ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own exception types
            return f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        return None

    def run(self, model, inputs):
        names = [i.name for i in self._session.get_inputs()]
        return self._session.run(None, dict(zip(names, inputs)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pattern", nargs="?", default=".*", help="regex on test names")
    ap.add_argument("--summary", action="store_true", help="print only counts (and failures)")
    ap.add_argument("--backend", choices=["ours", "onnxruntime"], default="ours")
    ap.add_argument("--show-skips", action="store_true")
    args = ap.parse_args()

    from torch_ort_backend.testing.conformance import KNOWN_DIFFERENCES, all_tests

    backend = OurBackend() if args.backend == "ours" else OnnxRuntimeBackend()
    regex = re.compile(args.pattern)
    counts = {"pass": 0, "fail": 0, "skip": 0}
    start = time.time()
    for case in all_tests("node"):
        if not regex.search(case.name):
            continue
        model = case.model
        reason = backend.claims(model)
        if reason is not None:
            counts["skip"] += 1
            if args.show_skips or not args.summary:
                print(f"SKIP {case.name}: {reason}")
            continue
        problem = None
        try:
            for inputs, expected in case.data_sets:
                inputs = [as_array(x) for x in inputs]
                expected = [as_array(x) for x in expected]
                problem = compare(expected, backend.run(model, inputs), case.rtol, case.atol)
                if problem:
                    break
        except Exception as e:  # report every failure, whatever raised it
            problem = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        if problem:
            counts["fail"] += 1
            known = KNOWN_DIFFERENCES.get(case.name) if args.backend == "ours" else None
            print(f"FAIL {case.name}: {problem}" + (f" [known: {known}]" if known else ""))
        else:
            counts["pass"] += 1
            if not args.summary:
                print(f"PASS {case.name}")
    total = sum(counts.values())
    print(
        f"{backend.name}: {total} node tests: {counts['pass']} passed, {counts['fail']} failed, "
        f"{counts['skip']} skipped ({time.time() - start:.1f}s)"
    )
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
