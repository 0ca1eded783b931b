"""The size sweep of issue 15: eager, Inductor and "ort" on every bench_compile model at a small
(overhead-bound) size and at its benchmark size, and on HuggingFace architectures that nothing here
was tuned for (benchmarks/hf_architectures.py), in one run.

    python benchmarks/bench_sweep.py [--rows small,bench,hf] [--models gpt2,mistral,...]
                                     [--modes train] [--rounds 5] [--seconds 0.4] [--json PATH]

Rows:
  - small: the bench_compile models (torch_ort_backend/testing/models.py) at their default (test)
    sizes, a few milliseconds a step: per-call and per-node overhead dominate;
  - bench: the same models at bench_compile's benchmark sizes;
  - hf: Mistral, Qwen2, OPT, RoBERTa classifier, T5, BART, ViT, ConvNeXt, ResNet, Swin from small
    configs (2 layers, hidden 128, batch 4, sequence 64 or 32x32 images), default attention.

Each row runs in a fresh process. There the model is built once and copied for each backend (same
weights); "ort" runs with ORTMODULE_FALLBACK_POLICY=FALLBACK_DISABLE so that a failure raises
instead of being timed as eager. train: forward, backward, SGD step (lr 1e-3), zero_grad; infer:
forward under torch.no_grad() in eval mode. After the first call (its time is reported, it includes
the compilation) and 2 warm-up calls, the backends are timed in turn, round after round: each turn
repeats the step for --seconds and records the median step; a row's time is the median over the
rounds. Alternating in one process makes a burst of load from elsewhere hit every backend alike.

"speed-up" columns are eager's time over the backend's (above 1: faster than eager), and ort over
Inductor; the geometric means over all rows and per group follow the table. "loss diff" compares the
first call's loss with eager's (relative): a fast wrong answer shows there.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import sys
import time

from bench_worker import run_json_worker

BACKENDS = ("eager", "inductor", "ort")
WARMUP = 2
COMPILE_MODELS = ("mlp", "cnn", "transformer_lm", "gpt2", "bert_mlm", "llama")


def _build(group: str, name: str):
    if group == "hf":
        from hf_architectures import ARCHITECTURES

        make_model, make_batch = ARCHITECTURES[name]
        return make_model, make_batch
    from torch_ort_backend.testing.models import MODELS

    spec = MODELS[name]
    make_model, make_batch = spec.builders(spec.bench_sizes if group == "bench" else None)
    return make_model, (lambda: make_batch(0))


def worker(group: str, name: str, mode: str, rounds: int, seconds: float) -> dict:
    import torch

    from torch_ort_backend.testing.models import extract_loss

    torch.manual_seed(0)
    make_model, make_batch = _build(group, name)
    base = make_model()
    if hasattr(base, "config"):
        base.config.use_cache = False
    batch = make_batch()
    train = mode == "train"
    steps, first_call, losses = {}, {}, {}
    for backend in BACKENDS:
        model = copy.deepcopy(base)
        model.train(train)
        fn = model if backend == "eager" else torch.compile(model, backend=backend)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3) if train else None

        def step(fn=fn, optimizer=optimizer):
            if not train:
                with torch.no_grad():
                    return extract_loss(fn(**batch))
            loss = extract_loss(fn(**batch))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss

        start = time.perf_counter()
        losses[backend] = float(step())
        first_call[backend] = time.perf_counter() - start
        for _ in range(WARMUP):
            step()
        steps[backend] = step
    from torch_ort_backend import compile_stats

    stats = compile_stats()  # the engine ran "ort" (runs), nothing fell back, and which ATen ops it borrowed
    engine = {"runs": stats.runs, "fallbacks": stats.fallbacks, "aten_ops": dict(stats.aten_fallback_ops)}
    per_round: dict[str, list[float]] = {b: [] for b in BACKENDS}
    for _ in range(rounds):
        for backend in BACKENDS:
            samples, began = [], time.perf_counter()
            while time.perf_counter() - began < seconds or len(samples) < 3:
                start = time.perf_counter()
                steps[backend]()
                samples.append(time.perf_counter() - start)
            per_round[backend].append(statistics.median(samples))
    eager_loss = losses["eager"]
    return {
        "ms": {b: statistics.median(v) * 1e3 for b, v in per_round.items()},
        "round_ms": {b: [x * 1e3 for x in v] for b, v in per_round.items()},
        "first_call_s": first_call,
        "loss_diff": {b: abs(losses[b] - eager_loss) / max(abs(eager_loss), 1e-30) for b in BACKENDS},
        "engine": engine,
        "threads": torch.get_num_threads(),
    }


def _rows(args: argparse.Namespace) -> list[tuple[str, str]]:
    from hf_architectures import ARCHITECTURES

    wanted = set(args.models.split(",")) if args.models else None
    rows = []
    for group in args.rows.split(","):
        names = ARCHITECTURES if group == "hf" else COMPILE_MODELS
        rows += [(group, n) for n in names if wanted is None or n in wanted]
    return rows


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def report(results: list[dict]) -> str:
    lines = ["| group | model | mode | eager ms | Inductor ms | ort ms | eager/ort | Inductor/ort | "
             "first call s (Ind. / ort) | loss diff ort |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['group']} | {r['model']} | {r['mode']} | FAILED: {r['error'][:120]} | | | | | | |")
            continue
        ms, first = r["ms"], r["first_call_s"]
        lines.append(f"| {r['group']} | {r['model']} | {r['mode']} | {ms['eager']:.2f} | {ms['inductor']:.2f} | "
                     f"{ms['ort']:.2f} | {ms['eager'] / ms['ort']:.2f} | {ms['inductor'] / ms['ort']:.2f} | "
                     f"{first['inductor']:.1f} / {first['ort']:.1f} | {r['loss_diff']['ort']:.1e} |")
        if r["engine"]["runs"] == 0 or r["engine"]["fallbacks"]:
            lines[-1] += f" engine runs {r['engine']['runs']}, fallbacks {r['engine']['fallbacks']}"
    ok = [r for r in results if "error" not in r]
    lines.append("")
    for mode in sorted({r["mode"] for r in ok}):
        for group in ["all"] + sorted({r["group"] for r in ok}):
            rows = [r for r in ok if r["mode"] == mode and (group == "all" or r["group"] == group)]
            vs_eager = [r["ms"]["eager"] / r["ms"]["ort"] for r in rows]
            vs_inductor = [r["ms"]["inductor"] / r["ms"]["ort"] for r in rows]
            worst = min(rows, key=lambda r: r["ms"]["eager"] / r["ms"]["ort"])
            lines.append(f"- {mode}, {group} ({len(rows)} rows): geomean ort speed-up {_geomean(vs_eager):.2f}x "
                         f"eager, {_geomean(vs_inductor):.2f}x Inductor; lowest vs eager "
                         f"{min(vs_eager):.2f}x ({worst['group']} {worst['model']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="small,bench,hf", help="groups of rows: small, bench, hf")
    parser.add_argument("--models", default="", help="only these model names (comma-separated)")
    parser.add_argument("--modes", default="train", help="train, infer or both")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.4, help="time per backend per round")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per row")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--worker", nargs=3, metavar=("GROUP", "MODEL", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        group, name, mode = args.worker
        try:
            result = worker(group, name, mode, args.rounds, args.seconds)
        except Exception as exc:  # reported in the table; the sweep goes on
            import traceback

            traceback.print_exc()
            result = {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"}
        print(json.dumps(result), flush=True)
        return 0

    results = []
    for mode in args.modes.split(","):
        for group, name in _rows(args):
            began = time.perf_counter()
            try:
                outcome = run_json_worker([os.path.abspath(__file__), "--worker", group, name, mode,
                                           "--rounds", str(args.rounds), "--seconds", str(args.seconds)],
                                          args.timeout, ORTMODULE_FALLBACK_POLICY="FALLBACK_DISABLE")
            except Exception as exc:  # subprocess.TimeoutExpired
                outcome = {"error": f"{type(exc).__name__}: {exc}"}
            results.append({"group": group, "model": name, "mode": mode, **outcome})
            status = outcome.get("error") or " ".join(f"{b} {outcome['ms'][b]:.2f}" for b in BACKENDS)
            print(f"  {group:5} {name:18} {mode:5} {status}  ({time.perf_counter() - began:.0f} s)",
                  file=sys.stderr, flush=True)
    threads = next((r["threads"] for r in results if "threads" in r), "?")
    print(f"\n{os.cpu_count()} CPUs, {threads} threads, {args.rounds} rounds of {args.seconds:g} s per backend, "
          f"{time.strftime('%Y-%m-%d')}\n")
    print(report(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
