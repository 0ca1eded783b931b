"""bfloat16 autocast side by side, in one run: the compile-benchmark models trained and run under
torch.autocast("cpu", torch.bfloat16) with eager PyTorch, Inductor and "ort"; then GEMM throughput
in bfloat16 beside float32, ours (a one-node MatMul session) and torch.mm.

    python benchmarks/bench_autocast.py [--models gpt2,bert_mlm,...] [--backends eager,inductor,ort]
                                        [--modes train,infer] [--size bench|test] [--steps 20]
                                        [--rounds 1] [--shapes 1024x256x768,...] [--seconds 1.0]
                                        [--cpu-time] [--skip-models] [--skip-gemm] [--json PATH]

The model part is benchmarks/bench_compile.py with --autocast bf16 (one subprocess per model,
backend and mode; its docstring says what is timed and how): wall time, for a quiet machine.

--cpu-time is the measurement for a shared, loaded machine: every backend of one model and mode
lives in this one process, on one thread (torch.set_num_threads(1)), and is timed by the process's
CPU time (time.process_time()), the backends interleaved round by round (--rounds, default 9 here),
each round at least --round-ms of CPU time per backend; the table gives the median step per backend
and its ratio to eager autocast's median. Other jobs on the machine then cost wall time but not this
process's CPU time, and a burst of load hits every backend of a round alike. Training is forward
(under autocast), backward and AdamW; inference a no_grad forward under autocast. "max diff" compares
the first call's outputs with eager autocast's, as bench_compile does. The GEMM part times C = A @ B for
each MxKxN shape: float32 and bfloat16 operands, our engine at torch's thread count (operands fed
as torch tensors, no copy, so the engine's per-run overhead is included) and torch.mm (oneDNN's
bfloat16 kernels on CPUs that have them). GFLOP/s = 2 M K N / median time. "bf16 / f32" is the
speed-up bfloat16 brings to each; "ours / torch.mm" compares us with torch at the same dtype.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_compile  # noqa: E402  (the model benchmark, run with --autocast bf16)
from bench_gemm import _time  # noqa: E402  (interleaved median timing)

DEFAULT_MODELS = "mlp,transformer_lm,gpt2,bert_mlm,llama"
# Linear layers of the benchmark models (batch 4 x seq 128 rows; hidden 128, MLP 512, vocab 1024)
# and of a larger GPT-2 (hidden 768), and one per-head attention product.
DEFAULT_SHAPES = ["512x128x512", "512x512x128", "512x128x1024", "512x768x768", "512x768x3072", "2048x768x768",
                  "128x64x128"]
_ONNX_TYPES = {torch.float32: TensorProto.FLOAT, torch.bfloat16: TensorProto.BFLOAT16}


def matmul_model(m: int, k: int, n: int, dtype: torch.dtype):
    elem = _ONNX_TYPES[dtype]
    node = helper.make_node("MatMul", ["A", "B"], ["C"])
    graph = helper.make_graph([node], "matmul", [helper.make_tensor_value_info("A", elem, [m, k]),
                                                 helper.make_tensor_value_info("B", elem, [k, n])],
                              [helper.make_tensor_value_info("C", elem, [m, n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def bench_gemm_shape(shape: str, seconds: float) -> dict:
    import torch_ort_backend as tob

    m, k, n = (int(v) for v in shape.lower().split("x"))
    torch.manual_seed(0)
    a32, b32 = torch.randn(m, k), torch.randn(k, n)
    row: dict = {"shape": shape}
    runners = {}
    for dtype, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        a, b = a32.to(dtype), b32.to(dtype)
        runners[f"torch.mm {tag}"] = lambda a=a, b=b: torch.mm(a, b)
        try:
            sess = tob.InferenceSession(matmul_model(m, k, n, dtype))
            feeds = {"A": a, "B": b}
            got = sess.run(None, feeds, as_torch=True)[0].float()
            want = a.double() @ b.double()
            row[f"ours {tag} max rel err"] = float((got.double() - want).abs().max() / want.abs().max())
            runners[f"ours {tag}"] = lambda sess=sess, feeds=feeds: sess.run(None, feeds, as_torch=True)
        except Exception as exc:  # reported in the table, the other runners still go
            row[f"ours {tag} error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    flops = 2.0 * m * k * n
    for name, t in _time(runners, seconds).items():
        row[f"{name} GFLOP/s"] = flops / t / 1e9
    return row


def format_gemm_table(rows: list[dict]) -> str:
    cols = ("ours f32", "ours bf16", "torch.mm f32", "torch.mm bf16")
    header = ("MxKxN",) + tuple(f"{c} GFLOP/s" for c in cols) + (
        "ours bf16 / f32", "torch bf16 / f32", "ours / torch.mm bf16", "ours bf16 max rel err")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for r in rows:
        def rate(c: str) -> float | None:
            return r.get(f"{c} GFLOP/s")

        def ratio(x: float | None, y: float | None) -> str:
            return f"{x / y:.2f}" if x and y else "-"
        cells = [r["shape"]] + [f"{rate(c):.1f}" if rate(c) else "FAIL" for c in cols]
        cells += [ratio(rate("ours bf16"), rate("ours f32")), ratio(rate("torch.mm bf16"), rate("torch.mm f32")),
                  ratio(rate("ours bf16"), rate("torch.mm bf16"))]
        err = r.get("ours bf16 max rel err")
        cells.append(f"{err:.1e}" if err is not None else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cpu_time_step(model_name: str, backend: str, train: bool, size: str):
    """(step, first output) for one backend: the model made afresh (same seed, so the same weights
    for every backend), compiled unless eager, and one step already taken."""
    from torch_ort_backend.testing import models as M
    from torch_ort_backend.testing.models import extract_loss

    spec = M.MODELS[model_name]
    make, make_batch = spec.builders(spec.bench_sizes if size == "bench" else None)
    model = make().train(train)
    batch = make_batch(0)
    fn = model if backend == "eager" else torch.compile(model, backend=backend)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4) if train else None

    def step():
        if not train:
            with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
                return fn(**batch)
        with torch.autocast("cpu", torch.bfloat16):
            output = fn(**batch)
        extract_loss(output).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return output

    first = step()
    return step, bench_compile._output_tensors(first)


def cpu_time_models(models: list[str], backends: list[str], modes: list[str], size: str, rounds: int,
                    round_ms: float) -> list[dict]:
    """Every backend of one (model, mode) in this process, interleaved; one thread's CPU time."""
    torch.set_num_threads(1)
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    os.environ.setdefault("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")
    backends = sorted(backends, key=lambda b: b != "eager")
    rows = []
    for name in models:
        for mode in modes:
            steps, outputs, errors = {}, {}, {}
            for backend in backends:
                try:
                    steps[backend], outputs[backend] = _cpu_time_step(name, backend, mode == "train", size)
                    for _ in range(2):
                        steps[backend]()
                except Exception as exc:  # reported in the table; the other backends still run
                    errors[backend] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
            # Calls per round: at least round_ms of CPU time for the slowest backend's first guess.
            calls = {}
            for backend, step in steps.items():
                start = time.process_time()
                step()
                calls[backend] = max(1, int(round_ms / 1000 / max(time.process_time() - start, 1e-6)))
            samples = {b: [] for b in steps}
            for _ in range(rounds):
                for backend, step in steps.items():
                    start = time.process_time()
                    for _ in range(calls[backend]):
                        step()
                    samples[backend].append((time.process_time() - start) / calls[backend] * 1e3)
            eager_ms = statistics.median(samples["eager"]) if "eager" in samples else None
            for backend in backends:
                row = {"model": name, "mode": mode, "backend": backend}
                if backend in errors:
                    row["error"] = errors[backend]
                else:
                    row["ms"] = statistics.median(samples[backend])
                    row["calls_per_round"] = calls[backend]
                    row["rounds_ms"] = samples[backend]
                    if eager_ms:
                        row["vs_eager"] = row["ms"] / eager_ms
                    if "eager" in outputs and backend != "eager":
                        row["max_diff"] = bench_compile._max_relative_diff(outputs[backend], outputs["eager"])
                rows.append(row)
                status = row.get("error") or f"{row['ms']:.3f} ms" + (
                    f"  {row['vs_eager']:.3f} of eager" if "vs_eager" in row else "")
                print(f"  {name:>15} {mode:5} {backend:9} {status}", file=sys.stderr, flush=True)
            torch._dynamo.reset()
    return rows


def format_cpu_time_table(rows: list[dict], backends: list[str]) -> str:
    others = [b for b in backends if b != "eager"]
    header = ["model", "mode", "eager ms"] + [f"{b} / eager" for b in others] + [f"{b} max diff" for b in others]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i < 2 else "---:" for i in range(len(header))) + "|"]
    keys = list(dict.fromkeys((r["model"], r["mode"]) for r in rows))
    for model, mode in keys:
        by = {r["backend"]: r for r in rows if (r["model"], r["mode"]) == (model, mode)}
        eager = by.get("eager", {})
        cells = [model, mode, f"{eager['ms']:.3f}" if "ms" in eager else "FAIL"]
        cells += [f"{by[b]['vs_eager']:.3f}" if "vs_eager" in by.get(b, {}) else "FAIL" for b in others]
        cells += [f"{by[b]['max_diff']:.1e}" if "max_diff" in by.get(b, {}) else "-" for b in others]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--backends", default="eager,inductor,ort")
    parser.add_argument("--modes", default="train,infer")
    parser.add_argument("--size", choices=("bench", "test"), default="bench")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=None, help="default 1, or 9 with --cpu-time")
    parser.add_argument("--cpu-time", action="store_true",
                        help="one process, one thread, CPU time, backends interleaved (a loaded machine)")
    parser.add_argument("--round-ms", type=float, default=60.0, help="--cpu-time: CPU ms per backend and round")
    parser.add_argument("--shapes", default=",".join(DEFAULT_SHAPES), help="comma-separated MxKxN list")
    parser.add_argument("--seconds", type=float, default=1.0, help="timed seconds per GEMM runner and shape")
    parser.add_argument("--skip-models", action="store_true")
    parser.add_argument("--skip-gemm", action="store_true")
    parser.add_argument("--json", metavar="PATH", help="write the GEMM rows (and the models' to PATH.models.json)")
    args = parser.parse_args(argv)

    status = 0
    if args.cpu_time and not args.skip_models:
        backends = [b for b in args.backends.split(",") if b]
        rounds = args.rounds or 9
        rows = cpu_time_models([m for m in args.models.split(",") if m], backends,
                               [m for m in args.modes.split(",") if m], args.size, rounds, args.round_ms)
        print(f"\nbf16 autocast, 1 thread, process CPU time, median of {rounds} interleaved rounds, "
              f"--size {args.size}, loadavg_1m {os.getloadavg()[0]:.2f}, {time.strftime('%Y-%m-%d')}\n")
        print(format_cpu_time_table(rows, sorted(backends, key=lambda b: b != "eager")))
        status = 1 if any("error" in r for r in rows) else 0
        if args.json:
            with open(args.json + ".models.json", "w") as f:
                json.dump({"method": "cpu-time", "rounds": rounds, "rows": rows}, f, indent=1)
    elif not args.skip_models:
        model_args = ["--models", args.models, "--backends", args.backends, "--modes", args.modes, "--size", args.size,
                      "--steps", str(args.steps), "--rounds", str(args.rounds or 1), "--autocast", "bf16"]
        if args.json:
            model_args += ["--json", args.json + ".models.json"]
        status = bench_compile.main(model_args)
    if not args.skip_gemm:
        import torch_ort_backend._C as engine

        print(f"\nGEMM, {torch.get_num_threads()} threads, loadavg_1m {os.getloadavg()[0]:.2f}, "
              f"native bfloat16 GEMM: {engine.bf16_gemm_available()}\n", flush=True)
        rows = [bench_gemm_shape(s, args.seconds) for s in args.shapes.split(",")]
        print(format_gemm_table(rows))
        errors = [f"{r['shape']}: {v}" for r in rows for k, v in r.items() if k.endswith(" error")]
        for e in errors:
            print(f"FAILED {e}")
        status = status or (1 if errors else 0)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"threads": torch.get_num_threads(), "rows": rows}, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
