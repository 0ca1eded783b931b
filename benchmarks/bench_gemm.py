"""float32 GEMM throughput: our engine (a one-node MatMul model) vs torch.mm vs numpy.

    PYTHONPATH=. python benchmarks/bench_gemm.py [--quick] [--json PATH] [--shapes 512x768x768,...]

Shapes are MxKxN: C[M, N] = A[M, K] @ B[K, N], 2*M*K*N flops. Both operands are graph inputs fed
as torch tensors (zero copy), so the engine time includes its per-run overhead (feed binding,
output allocation), as a user would see it. All backends run at torch.get_num_threads() threads
(numpy uses its own BLAS and thread setting). Time = median of interleaved rounds, about
--seconds per backend and shape. The target is ours/torch.mm >= 0.9 (GFLOP/s ratio; > 1 = we are
faster here, since this table compares throughput, not time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
from onnx import TensorProto, helper

DEFAULT_SHAPES = ["512x768x768", "512x768x3072", "2048x768x768", "512x3072x768", "128x768x768"]
TARGET = 0.9


def matmul_model(m: int, k: int, n: int):
    node = helper.make_node("MatMul", ["A", "B"], ["C"])
    graph = helper.make_graph(
        [node], "matmul",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [m, k]),
         helper.make_tensor_value_info("B", TensorProto.FLOAT, [k, n])],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, [m, n])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _time(runners: dict, seconds: float, rounds: int = 3, min_runs: int = 5) -> dict[str, float]:
    per_round = {}
    for name, run in runners.items():
        run()  # warm-up
        start = time.perf_counter()
        run()
        probe = time.perf_counter() - start
        fits = int(seconds / max(probe, 1e-6))
        total = max(3, fits, min(min_runs, 4 * fits))
        per_round[name] = max(1, -(-total // rounds))
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, run in runners.items():
            for _ in range(per_round[name]):
                start = time.perf_counter()
                run()
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) for name, s in samples.items()}


def bench_shape(shape: str, threads: int, seconds: float) -> dict:
    import torch_ort_backend as tob

    m, k, n = (int(v) for v in shape.lower().split("x"))
    torch.manual_seed(0)
    a, b = torch.randn(m, k), torch.randn(k, n)
    a_np, b_np = a.numpy(), b.numpy()
    row: dict = {"shape": shape, "M": m, "K": k, "N": n}
    runners = {"torch.mm": lambda: torch.mm(a, b), "numpy": lambda: a_np @ b_np}
    try:
        opts = tob.SessionOptions()
        opts.intra_op_num_threads = threads
        sess = tob.InferenceSession(matmul_model(m, k, n), opts)
        feeds = {"A": a, "B": b}
        ours = sess.run(None, feeds)[0]
        row["max_abs_diff"] = float((ours - torch.mm(a, b)).abs().max())
        runners = {"ours": lambda: sess.run(None, feeds), **runners}
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    times = _time(runners, seconds)
    flops = 2.0 * m * k * n
    for name, t in times.items():
        row[f"{name} GFLOP/s"] = flops / t / 1e9
        row[f"{name} ms"] = t * 1e3
    if "ours" in times:
        row["ours/torch.mm"] = times["torch.mm"] / times["ours"]
    return row


def format_table(rows: list[dict]) -> str:
    header = ("MxKxN", "ours GFLOP/s", "torch.mm GFLOP/s", "numpy GFLOP/s", "ours/torch.mm", "max abs diff")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for r in rows:
        def g(key: str, spec: str = ".1f") -> str:
            return format(r[key], spec) if key in r else "-"
        ours = "FAIL" if "error" in r else g("ours GFLOP/s")
        lines.append("| " + " | ".join((r["shape"], ours, g("torch.mm GFLOP/s"), g("numpy GFLOP/s"),
                                         g("ours/torch.mm", ".2f"), g("max_abs_diff", ".1e"))) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short timing: a smoke run")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    parser.add_argument("--shapes", default=",".join(DEFAULT_SHAPES), help="comma-separated MxKxN list")
    parser.add_argument("--threads", type=int, default=0, help="threads (default: torch.get_num_threads())")
    parser.add_argument("--seconds", type=float, default=None, help="timed seconds per backend and shape")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    seconds = args.seconds if args.seconds is not None else (0.2 if args.quick else 1.5)
    print(f"threads={threads}, cpu_count={os.cpu_count()}, loadavg_1m={os.getloadavg()[0]:.2f}, "
          f"torch={torch.__version__}, numpy={np.__version__}", flush=True)
    rows = [bench_shape(s, threads, seconds) for s in args.shapes.split(",")]
    print()
    print(format_table(rows))
    print()
    print(f"ours/torch.mm = our GFLOP/s over torch.mm's (target >= {TARGET}; < 1 = we are slower).")
    failed = [r for r in rows if "error" in r]
    for r in failed:
        print(f"FAILED {r['shape']}: {r['error']}")
    below = [r["shape"] for r in rows if r.get("ours/torch.mm", TARGET) < TARGET]
    if below:
        print(f"below target: {', '.join(below)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": threads, "loadavg_1m": os.getloadavg()[0], "rows": rows}, f, indent=2)
        print(f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
