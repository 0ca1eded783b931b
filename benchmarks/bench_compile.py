"""torch.compile backends side by side: eager PyTorch, Inductor (torch.compile's default) and "ort".

    python benchmarks/bench_compile.py [--models mlp,cnn,...] [--backends eager,inductor,ort]
                                       [--modes train,infer] [--steps 20] [--rounds 1]
                                       [--size bench|test] [--autocast none|bf16] [--json PATH]

For each model (torch_ort_backend/testing/models.py: MLP, MNIST CNN, the tutorial transformer LM, GPT-2,
BERT, LLaMA) and each backend it times
  - train: one training step = forward, backward, AdamW step (model.train(), the model's own loss);
  - infer: one forward in model.eval() under torch.no_grad().
The batch is built once and reused, so only the step is timed. After 3 warm-up calls, at least
--steps calls and at least --seconds seconds are timed, and the median call is reported (robust to
the spikes of a shared machine), with its ratio to eager's median (> 1: slower than eager).

"first call" is the wall time of the first call, which for a compiled backend includes TorchDynamo's
capture, AOTAutograd and the backend's compilation; for eager it is the cold-start cost alone.
Inductor keeps compiled kernels in on-disk caches across processes; they are disabled here
(TORCHINDUCTOR_FORCE_DISABLE_CACHES=1) so that its first call is a real compilation, as for "ort",
which caches nothing on disk (--warm-caches lets Inductor use them).

Peak memory: every (model, backend, mode) runs in a fresh subprocess, one at a time, so that no
compiled code, allocator cache or memory high-water mark leaks from one configuration into the
next. In it, after the imports, the model, the optimizer and the batch exist, the kernel's peak-RSS
mark is reset (writing 5 to /proc/self/clear_refs resets VmHWM) and the resident set is read
(VmRSS); at the end "peak MiB" is VmHWM minus that baseline: all memory the first (compiling) call
and the timed calls added at their peak, the compiler's work in this process included (Inductor's
pool of compile worker processes is not counted). Where clear_refs is not writable, the
baseline is the process's peak so far instead (ru_maxrss), which can only under-report; the table
says which was used.

"max diff" compares the compiled model's first call with eager PyTorch's on the same weights and
batch: for every output tensor (loss, logits, ...), max |compiled - eager| / max |eager|, the largest
over the outputs. A fast but wrong backend shows here.

--rounds R repeats the whole sweep R times, round after round, so that a burst of load from other
processes hits one round of every configuration rather than all rounds of one. The table then
gives, per configuration, the median over rounds of its median call, and "vs eager" is the median
over rounds of the ratio to eager's time in the same round; "range" shows the lowest and highest
per-round ratio.

A configuration that fails (Inductor without a working C++ compiler, "ort" not installed yet, an op
the exporter lacks) is reported in its cell and below the table; the others still run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import traceback


DEFAULT_MODELS = "mlp,cnn,transformer_lm,gpt2,bert_mlm,llama"
DEFAULT_BACKENDS = "eager,inductor,ort"
WARMUP_CALLS = 3


# --- the worker: one configuration in its own process ------------------------------------------

def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> tuple[int, str]:
    """Returns (baseline KiB, method) after resetting the peak-RSS mark where the kernel allows it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        rss = _status_kib("VmRSS")
        if rss is not None:
            return rss, "VmHWM reset"
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "ru_maxrss"


def _peak_rss_kib() -> int:
    hwm = _status_kib("VmHWM")
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _output_tensors(output) -> list:
    from torch_ort_backend.testing.models import flatten_outputs
    return [t.detach().double() for _, t in flatten_outputs(output)]


def _max_relative_diff(got: list, want: list) -> float:
    if len(got) != len(want):
        return float("inf")
    return max((float((g - w).abs().max() / w.abs().max().clamp_min(1e-30)) for g, w in zip(got, want)),
               default=0.0)


def run_worker(args: argparse.Namespace) -> dict:
    import contextlib
    import copy

    import torch

    from torch_ort_backend.testing import models as compile_models
    from torch_ort_backend.testing.models import extract_loss

    if args.threads:
        torch.set_num_threads(args.threads)
    spec = compile_models.MODELS[args.model]
    make_model, make_batch = spec.builders(spec.bench_sizes if args.size == "bench" else None)
    model = make_model()
    batch = make_batch(0)
    train = args.mode == "train"
    model.train(train)

    # --autocast bf16: every forward (eager's reference included) under CPU autocast, as a user
    # training in mixed precision writes it; the backward and the optimizer step stay outside.
    def precision():
        return torch.autocast("cpu", torch.bfloat16) if args.autocast == "bf16" else contextlib.nullcontext()

    # Eager's answer on the same weights, from a copy so that the measured model stays untouched.
    with torch.no_grad(), precision():
        reference = _output_tensors(copy.deepcopy(model)(**batch))

    if args.backend == "eager":
        fn = model
    else:
        if args.backend == "ort":
            torch._dynamo.lookup_backend("ort")  # fail here, clearly, if it is not installed
        fn = torch.compile(model, backend=args.backend)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4) if train else None

    def step():
        if train:
            with precision():
                output = fn(**batch)
            extract_loss(output).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return output
        with torch.no_grad(), precision():
            return fn(**batch)

    baseline_kib, memory_method = _reset_peak_rss()
    start = time.perf_counter()
    first = step()
    first_call_s = time.perf_counter() - start
    diff = _max_relative_diff(_output_tensors(first), reference)
    del first
    for _ in range(WARMUP_CALLS - 1):
        step()
    samples: list[float] = []
    began = time.perf_counter()
    while len(samples) < args.steps or (time.perf_counter() - began < args.seconds and len(samples) < 10_000):
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    return {
        "ms": statistics.median(samples) * 1e3,
        "calls": len(samples),
        "first_call_s": first_call_s,
        "peak_mib": max(0, _peak_rss_kib() - baseline_kib) / 1024,
        "memory_method": memory_method,
        "max_diff": diff,
        "threads": torch.get_num_threads(),
    }


# --- the driver --------------------------------------------------------------------------------

def run_configuration(model: str, backend: str, mode: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--models", model, "--backends", backend,
           "--modes", mode, "--steps", str(args.steps), "--seconds", str(args.seconds), "--size", args.size,
           "--threads", str(args.threads), "--autocast", args.autocast]
    # A backend that falls back to eager on a failure would be timed as eager: make it raise.
    env = {**os.environ, "ORTMODULE_FALLBACK_POLICY": "FALLBACK_DISABLE"}
    if not args.warm_caches:
        env["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"error": f"worker exited {proc.returncode}: " + " | ".join(tail)}


def missing_backends(backends: list[str]) -> dict[str, str]:
    """Backends torch.compile cannot find, with the reason, so their configurations are not started."""
    import torch

    missing = {}
    for backend in backends:
        if backend == "eager":
            continue
        try:
            torch._dynamo.lookup_backend(backend)
        except Exception as exc:  # InvalidBackend, or an import error in the backend's package
            missing[backend] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    return missing


def combine_rounds(rounds: list[list[dict]]) -> list[dict]:
    """One row per configuration: medians over the rounds; "ratio" is the median of the per-round
    ratios to eager's time in the same round, with their range."""
    combined = []
    for i, first in enumerate(rounds[0]):
        runs = [r[i] for r in rounds]
        ok = [r for r in runs if "error" not in r]
        if not ok:
            combined.append(first)
            continue
        row = {**ok[0], "rounds": len(ok)}
        for key in ("ms", "first_call_s", "peak_mib", "max_diff"):
            row[key] = statistics.median(r[key] for r in ok)
        ratios = []
        for r, one_round in zip(runs, rounds):
            eager = next((x for x in one_round if x["model"] == r["model"] and x["mode"] == r["mode"]
                          and x["backend"] == "eager" and "ms" in x), None)
            if eager and "ms" in r:
                ratios.append(r["ms"] / eager["ms"])
        if ratios:
            row["ratio"], row["ratio_min"], row["ratio_max"] = statistics.median(ratios), min(ratios), max(ratios)
        combined.append(row)
    return combined


def format_table(results: list[dict]) -> str:
    lines = ["| model | mode | backend | median ms | vs eager | range | first call s | peak MiB | max diff |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['mode']} | {r['backend']} | FAILED (see below) | | | | | |")
            continue
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else "-"
        spread = f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f}" if "ratio" in r and r.get("rounds", 1) > 1 else ""
        lines.append(f"| {r['model']} | {r['mode']} | {r['backend']} | {r['ms']:.2f} | {ratio} | {spread} | "
                     f"{r['first_call_s']:.2f} | {r['peak_mib']:.1f} | {r['max_diff']:.1e} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated keys of torch_ort_backend.testing.models.MODELS")
    parser.add_argument("--backends", default=DEFAULT_BACKENDS, help="comma-separated torch.compile backends")
    parser.add_argument("--modes", default="train,infer", help="train, infer or both")
    parser.add_argument("--steps", type=int, default=20, help="timed calls per configuration, at least")
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="keep timing until this much time has passed (small models get more calls)")
    parser.add_argument("--size", choices=("bench", "test"), default="bench",
                        help="bench: the models' benchmark sizes; test: the tiny test sizes")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat the whole sweep this many times; report medians over rounds")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch's default)")
    parser.add_argument("--autocast", choices=("none", "bf16"), default="none",
                        help="bf16: each forward under torch.autocast('cpu', torch.bfloat16)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per configuration")
    parser.add_argument("--warm-caches", action="store_true",
                        help="let Inductor reuse its on-disk caches from earlier runs (first call then "
                             "measures a cache hit, not a compilation)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.model_list = [m for m in args.models.split(",") if m]
    args.backend_list = [b for b in args.backends.split(",") if b]
    args.mode_list = [m for m in args.modes.split(",") if m]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        args.model, args.backend, args.mode = args.model_list[0], args.backend_list[0], args.mode_list[0]
        try:
            result = run_worker(args)
        except Exception as exc:  # reported by the driver in the table, the run goes on
            traceback.print_exc()
            result = {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"}
        print(json.dumps(result), flush=True)
        return 0

    from torch_ort_backend.testing import models as compile_models
    unknown = [m for m in args.model_list if m not in compile_models.MODELS]
    if unknown:
        print(f"unknown model(s) {unknown}; known: {', '.join(compile_models.MODELS)}", file=sys.stderr)
        return 2
    # eager first: the others' ratios need it.
    backends = sorted(args.backend_list, key=lambda b: b != "eager")
    missing = missing_backends(backends)
    rounds = []
    for round_index in range(max(1, args.rounds)):
        results = []
        for model in args.model_list:
            for mode in args.mode_list:
                for backend in backends:
                    start = time.perf_counter()
                    if backend in missing:
                        outcome = {"error": missing[backend]}
                    else:
                        outcome = run_configuration(model, backend, mode, args)
                    result = {"model": model, "mode": mode, "backend": backend, **outcome}
                    results.append(result)
                    status = result.get("error") or f"{result['ms']:.2f} ms"
                    print(f"  round {round_index + 1} {model:>15} {mode:5} {backend:9} {status}  "
                          f"({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
        rounds.append(results)
    results = combine_rounds(rounds)

    threads = next((r["threads"] for r in results if "threads" in r), "?")
    methods = sorted({r["memory_method"] for r in results if "memory_method" in r})
    print(f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {threads} threads, "
          f"--size {args.size}, autocast {args.autocast}, "
          f"median of >= {args.steps} calls / {args.seconds:g} s after {WARMUP_CALLS} warm-up, "
          f"{len(rounds)} round(s); "
          f"peak memory by {', '.join(methods) or '-'}\n")
    print(format_table(results))
    failures = [r for r in results if "error" in r]
    if failures:
        print("\nfailures:")
        for r in failures:
            print(f"- {r['model']} {r['mode']} {r['backend']}: {r['error']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": args.size, "steps": args.steps, "results": results, "rounds": rounds}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
