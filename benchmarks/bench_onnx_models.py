"""Side-by-side latency of three models on our engine, onnxruntime (CPU EP) and torch eager.

    PYTHONPATH=. python benchmarks/bench_onnx_models.py [--quick] [--json PATH] [--models mlp,...]

Every backend runs at torch.get_num_threads() intra-op threads (--threads changes it for all).
Each backend is warmed up, then timed in interleaved rounds (ours, onnxruntime, torch, ours, ...)
so that load from other processes hits all three alike; the reported time is the median of all
timed runs, with the run count chosen to fill about --seconds per backend.

Ratios are ours / other: > 1 means our engine is slower, < 1 means it is faster. Outputs are
compared with torch eager (max abs diff). "peak MB" is the engine's peak intermediate memory of
the last run (InferenceSession.last_run_stats()["peak_bytes"]).

A backend that fails (a missing op, a wrong shape) is reported in its cell and below the table;
the other backends and models still run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_models  # noqa: E402

BACKENDS = ("ours", "onnxruntime", "torch")


@dataclass
class BackendResult:
    ms: float | None = None
    runs: int = 0
    load_s: float | None = None
    max_abs_diff_vs_torch: float | None = None
    error: str | None = None


@dataclass
class ModelResult:
    model: str
    description: str
    backends: dict[str, BackendResult] = field(default_factory=dict)
    peak_bytes: int | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    def ratio(self, other: str) -> float | None:
        ours, them = self.backends.get("ours"), self.backends.get(other)
        if ours is None or them is None or ours.ms is None or them.ms is None:
            return None
        return ours.ms / them.ms


def _describe(exc: BaseException) -> str:
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first_line}"[:300]


def _make_ours(bm: onnx_models.BenchModel, threads: int):
    import torch_ort_backend as tob

    opts = tob.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = tob.InferenceSession(bm.model, opts)
    feeds = dict(bm.feeds)
    return (lambda: sess.run(None, feeds)), sess


def _make_onnxruntime(bm: onnx_models.BenchModel, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    sess = ort.InferenceSession(bm.model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feeds = {k: v.numpy() for k, v in bm.feeds.items()}
    return (lambda: sess.run(None, feeds)), sess


def _make_torch(bm: onnx_models.BenchModel, threads: int):
    feeds = dict(bm.feeds)

    def run():
        with torch.inference_mode():
            return bm.eager(feeds)

    return run, None


MAKERS: dict[str, Callable] = {"ours": _make_ours, "onnxruntime": _make_onnxruntime, "torch": _make_torch}


def _as_numpy(x) -> np.ndarray:
    return x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _max_abs_diff(outputs: list, reference: list) -> float:
    return max(float(np.max(np.abs(_as_numpy(o).astype(np.float64) - _as_numpy(r)))) for o, r in zip(outputs, reference))


def bench_model(builder: Callable[[], onnx_models.BenchModel], threads: int, seconds: float, warmup: int,
                rounds: int, min_runs: int, clock: Callable[[], float] = time.perf_counter) -> ModelResult:
    try:
        bm = builder()
    except Exception as exc:  # a broken builder must not stop the other models
        return ModelResult("?", "?", error=_describe(exc))
    result = ModelResult(bm.name, bm.description, notes=list(bm.notes))
    print(f"-- {bm.name}: {bm.description}", flush=True)

    runners: dict[str, Callable] = {}
    sessions: dict[str, object] = {}
    outputs: dict[str, list] = {}
    for name in BACKENDS:
        r = result.backends[name] = BackendResult()
        try:
            start = time.perf_counter()
            runners[name], sessions[name] = MAKERS[name](bm, threads)
            r.load_s = time.perf_counter() - start
            for _ in range(warmup):
                outputs[name] = runners[name]()
        except Exception as exc:
            r.error = _describe(exc)
            runners.pop(name, None)
            print(f"   {name}: FAILED {r.error}", flush=True)
            if os.environ.get("TOB_BENCH_TRACEBACK"):
                traceback.print_exc()

    # How many runs fill `seconds` per backend: one timed probe run each.
    per_round: dict[str, int] = {}
    for name, run in runners.items():
        start = time.perf_counter()
        run()
        probe = time.perf_counter() - start
        fits = int(seconds / max(probe, 1e-6))
        # min_runs only while it costs at most 4x the budget: a 5 s run gets 3 samples, not 10.
        total = min(2000, max(3, fits, min(min_runs, 4 * fits)))
        per_round[name] = max(1, -(-total // rounds))

    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, run in list(runners.items()):
            try:
                for _ in range(per_round[name]):
                    start = clock()
                    run()
                    times[name].append(clock() - start)
            except Exception as exc:
                result.backends[name].error = _describe(exc)
                runners.pop(name)

    for name, samples in times.items():
        r = result.backends[name]
        if r.error is None and samples:
            r.ms = statistics.median(samples) * 1e3
            r.runs = len(samples)
    if "torch" in outputs:
        for name in ("ours", "onnxruntime"):
            if name in outputs and result.backends[name].error is None:
                result.backends[name].max_abs_diff_vs_torch = _max_abs_diff(outputs[name], outputs["torch"])
    if "ours" in sessions and result.backends["ours"].error is None:
        result.peak_bytes = int(sessions["ours"].last_run_stats().get("peak_bytes", 0))
    return result


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def format_table(results: list[ModelResult]) -> str:
    header = ("model", "ours ms", "onnxruntime ms", "torch ms", "ours/ort", "ours/torch",
              "diff ours", "diff ort", "peak MB")
    rows = []
    for res in results:
        b = res.backends

        def ms(name: str) -> str:
            r = b.get(name)
            if r is None:
                return "-"
            return "FAIL" if r.error else _fmt(r.ms, ".2f")

        def diff(name: str) -> str:
            r = b.get(name)
            return "-" if r is None else _fmt(r.max_abs_diff_vs_torch, ".1e")

        peak = None if res.peak_bytes is None else res.peak_bytes / 2**20
        rows.append((res.model, ms("ours"), ms("onnxruntime"), ms("torch"), _fmt(res.ratio("onnxruntime"), ".2f"),
                     _fmt(res.ratio("torch"), ".2f"), diff("ours"), diff("onnxruntime"), _fmt(peak, ".1f")))
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def environment(threads: int) -> dict:
    import onnxruntime

    return {
        "threads": threads,
        "cpu_count": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, short timing: a smoke run")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    parser.add_argument("--models", help="comma-separated subset of: mlp,transformer,resnet50")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (default: torch.get_num_threads())")
    parser.add_argument("--seconds", type=float, default=None, help="timed seconds per backend (default 2.5, quick 0.3)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time runs by the process's CPU time (time.process_time) instead of wall time: with "
                             "--threads 1 a run's own work, whatever other processes take of the cores; with more "
                             "threads it sums them, spinning included")
    args = parser.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    seconds = args.seconds if args.seconds is not None else (0.3 if args.quick else 2.5)
    builders = dict(zip(("mlp", "transformer", "resnet50"), onnx_models.all_models(quick=args.quick)))
    selected = args.models.split(",") if args.models else list(builders)
    unknown = [m for m in selected if m not in builders]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {list(builders)}")

    env = environment(threads)
    print("environment: " + ", ".join(f"{k}={v}" for k, v in env.items()), flush=True)
    results = [
        bench_model(builders[m], threads, seconds, warmup=1 if args.quick else 3, rounds=3,
                    min_runs=3 if args.quick else 10, clock=time.process_time if args.cpu_time else time.perf_counter)
        for m in selected
    ]

    print()
    print(format_table(results))
    print()
    print(("ms = median CPU time per run (--cpu-time). " if args.cpu_time else "ms = median latency per run. ")
          + "Ratios are ours / other: > 1 means our engine is slower.")
    print("diff = max abs difference from torch eager's output. peak MB = our peak intermediate memory.")
    failures = [(r.model, name, b.error) for r in results for name, b in r.backends.items() if b.error]
    failures += [(r.model, "build", r.error) for r in results if r.error]
    for model, name, err in failures:
        print(f"FAILED {model} / {name}: {err}")
    for r in results:
        for note in r.notes:
            print(f"note {r.model}: {note}")

    if args.json:
        payload = {"environment": env, "quick": args.quick, "seconds_per_backend": seconds,
                   "results": [asdict(r) | {"ours_over_onnxruntime": r.ratio("onnxruntime"),
                                            "ours_over_torch": r.ratio("torch")} for r in results]}
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=2)
        print(f"wrote {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
