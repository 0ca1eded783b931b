#!/usr/bin/env python3
"""Runs the onnx package's whole backend test suite on our engine (and/or onnxruntime) and reports.

  python tools/run_node_tests.py 'test_add'                  # cases whose name matches the regex
  python tools/run_node_tests.py --summary                   # the WHOLE suite: counts and failures
  python tools/run_node_tests.py --summary --backend both    # ours beside onnxruntime, by op
  python tools/run_node_tests.py --write-baseline            # refresh tests/python/conformance_baseline.txt

The runner is onnx's own `onnx.backend.test.BackendTest` (torch_ort_backend/testing/backend_suite.py):
all its CPU cases (node tests and the simple / light-model / pytorch model tests; CUDA cases left
out), each compared by the runner itself with the case's rtol/atol. A failure and an error are both
"fail"; "skip" is only a case the backend declines by raising unittest.SkipTest (onnxruntime's
backend does for opsets it does not know; ours never does). The pass count of our backend may not
fall below the committed baseline (tests/python/test_conformance_baseline.py).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from torch_ort_backend.testing import backend_suite  # noqa: E402
from torch_ort_backend.testing.backend_suite import FAIL, PASS, SKIP  # noqa: E402


def op_of_case(name: str, models: dict) -> str:
    """The op a case tests: a node test's op (an _expanded case: the op of its unexpanded twin),
    else the case's category of model test."""
    base = name
    for suffix in ("_expanded_ver18", "_expanded"):
        if base.endswith(suffix) and base[: -len(suffix)] in models:
            base = base[: -len(suffix)]
            break
    model = models.get(base)
    if model is None:
        return "(model test)"
    ops = [n.op_type for n in model.graph.node if n.op_type != "Constant"] or [n.op_type for n in model.graph.node]
    return ops[-1] if ops else "(empty graph)"


def run_one(backend_name: str, pattern: str, verbose: bool) -> dict:
    module = backend_suite.backend_module(backend_name)

    def show(r: backend_suite.CaseResult) -> None:
        if r.outcome == FAIL or verbose:
            print(f"{r.outcome.upper()} {backend_name} {r.name}" + (f": {r.message}" if r.message else ""), flush=True)

    results, seconds = backend_suite.timed_run(module, pattern, show)
    c = backend_suite.counts(results)
    print(f"{backend_name}: {len(results)} cases (CPU): {c[PASS]} passed, {c[FAIL]} failed or errored, "
          f"{c[SKIP]} skipped by the backend ({seconds:.0f}s)", flush=True)
    return results


def by_op_table(ours: dict, theirs: dict | None) -> None:
    from torch_ort_backend.testing.conformance import all_tests

    models = {t.name: t.model for t in all_tests("node")}
    rows = collections.defaultdict(lambda: [0, 0, 0, 0])  # cases, ours pass, ort pass, ort-only pass
    for name, r in ours.items():
        row = rows[op_of_case(name, models)]
        row[0] += 1
        row[1] += r.outcome == PASS
        if theirs is not None and name in theirs:
            row[2] += theirs[name].outcome == PASS
            row[3] += theirs[name].outcome == PASS and r.outcome != PASS
    failing = {op: v for op, v in rows.items() if v[1] < v[0]}
    print("\nops with failing cases (ours), most first:")
    header = f"{'op':32} {'cases':>5} {'ours':>5}" + (f" {'ort':>5} {'ort only':>8}" if theirs is not None else "")
    print(header)
    for op, (n, p, o, oo) in sorted(failing.items(), key=lambda kv: (kv[1][1] - kv[1][0], kv[0])):
        print(f"{op:32} {n:5} {p:5}" + (f" {o:5} {oo:8}" if theirs is not None else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pattern", nargs="?", default="", help="regex on case names (without the _cpu suffix)")
    ap.add_argument("--summary", action="store_true", help="print only failures and counts")
    ap.add_argument("--backend", choices=["ours", "onnxruntime", "both"], default="ours")
    ap.add_argument("--by-op", action="store_true", help="group the failing cases by the op they test")
    ap.add_argument("--write-baseline", action="store_true",
                    help="write our passing cases to tests/python/conformance_baseline.txt (whole suite only)")
    args = ap.parse_args()
    if args.write_baseline and (args.pattern or args.backend == "onnxruntime"):
        ap.error("--write-baseline needs our backend on the whole suite (no pattern)")

    ours = run_one("ours", args.pattern, not args.summary) if args.backend != "onnxruntime" else None
    theirs = run_one("onnxruntime", args.pattern, not args.summary) if args.backend != "ours" else None
    if args.by_op or args.backend == "both":
        by_op_table(ours if ours is not None else theirs, theirs if ours is not None else None)
    if ours is not None:
        baseline = backend_suite.read_baseline()
        passed = {n for n, r in ours.items() if r.outcome == PASS}
        lost = sorted(n for n in baseline - passed if n in ours)
        print(f"\nbaseline: {len(baseline)} cases; now passing {len(passed & baseline)} of them, "
              f"{len(passed - baseline)} new" + (f"; LOST: {', '.join(lost)}" if lost else ""))
        if args.write_baseline:
            print(f"baseline written: {backend_suite.write_baseline(ours)} passing cases")
        return 1 if lost else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
