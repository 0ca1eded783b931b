"""Peak memory and step time of transformer training: eager, eager with torch.utils.checkpoint per
block, Inductor with activation_memory_budget 0.5, and torch.compile(backend="ort") at
memory_opt_level 0, 1 and 2, in one run.

    python benchmarks/bench_memory.py [--models gpt2,llama] [--layers 6] [--batch 16] [--seq 256]
                                      [--hidden 256] [--heads 4] [--vocab 1024] [--steps 5]
                                      [--configs eager,checkpoint,inductor_budget,ort0,ort1,ort2]
                                      [--json PATH]

Two variants of an "ort" level N take a change of docs/memory_optimizer.md back, to measure what it
is worth: ``ortN_keep_arena`` (the backward keeps its engine arena between steps, as level 0 does)
and ``ortN_no_donation`` (torch._functorch.config.donated_buffer off: the backward holds its whole
stash to its end).

The models are torch_ort_backend/testing/models.py's GPT-2 and LLaMA (eager attention, dropout 0.1) at
the given sizes; the default (6 layers, batch 16 x 256 tokens, hidden 256) is one where activations
dominate: they are tens of times the parameters. Every configuration runs in a fresh subprocess with
the same seed and batch; SGD (no momentum: no optimizer state) updates the weights.

Peak memory is the process's: Linux's resident-set high-water mark (VmHWM), reset after the warm-up
steps (``/proc/self/clear_refs``), minus the resident set measured after the model and batch were
built, before the first step. So it counts what a configuration adds to the model while training:
activations, gradients, workspaces, and anything it keeps between steps (compiled code, the
engine's memory arenas). glibc is told to map every block of 64 KiB or more on its own
(MALLOC_MMAP_THRESHOLD_), so freed activations leave the resident set and the mark follows live
memory. "above idle" is the same mark minus the resident set between two steps (after the warm-up):
what a step adds on top of everything a configuration keeps (for "ort" the engine's arenas are
kept, so its intermediates mostly show in the first column). For "ort" the engine's own count
(torch_ort_backend.memory_stats()["step_peak_bytes"]) is shown too. Step time is the median of the
timed steps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from bench_worker import run_json_worker


CONFIGS = ("eager", "checkpoint", "inductor_budget", "ort0", "ort1", "ort2")
WARMUP = 2


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _build(model_name: str, sizes: dict):
    from torch_ort_backend.testing.models import causal_lm_batch, make_gpt2, make_llama

    common = {"vocab": sizes["vocab"], "hidden": sizes["hidden"], "layers": sizes["layers"], "heads": sizes["heads"],
              "positions": sizes["seq"], "dropout": 0.1}
    if model_name == "gpt2":
        model = make_gpt2(**common)
    elif model_name == "llama":
        model = make_llama(kv_heads=max(1, sizes["heads"] // 2), **common)
    else:
        raise ValueError(f"unknown model {model_name!r}: gpt2 or llama")
    model.config.use_cache = False
    return model.train(), causal_lm_batch(0, batch=sizes["batch"], seq=sizes["seq"], vocab=sizes["vocab"])


def worker(model_name: str, config: str, sizes: dict, steps: int) -> dict:
    import torch
    import torch._inductor  # noqa: F401  (imported before the baseline by every configuration alike)

    import torch_ort_backend

    torch.manual_seed(0)
    model, batch = _build(model_name, sizes)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    fn = model
    if config == "checkpoint":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    elif config == "inductor_budget":
        torch._functorch.config.activation_memory_budget = 0.5
        fn = torch.compile(model)
    elif config.startswith("ort"):
        level, _, variant = config[3:].partition("_")
        if variant == "keep_arena":
            from torch_ort_backend.compiled_graph import CompiledGraph

            CompiledGraph._releases_arena = lambda self: False
        elif variant == "no_donation":
            torch._functorch.config.donated_buffer = False
        elif variant:
            raise ValueError(f"unknown configuration {config!r}: the variants are _keep_arena and _no_donation")
        fn = torch.compile(model, backend="ort", options={"memory_opt_level": int(level)})
    elif config != "eager":
        raise ValueError(f"unknown configuration {config!r}; known: {', '.join(CONFIGS)}")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> float:
        loss = fn(**batch)["loss"]
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss)

    baseline = _rss_kib("VmRSS")
    start = time.perf_counter()
    first_loss = step()
    first_call = time.perf_counter() - start
    for _ in range(WARMUP - 1):
        step()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    idle = _rss_kib("VmRSS")
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    hwm = _rss_kib("VmHWM")
    result = {"peak_mib": (hwm - baseline) / 1024, "step_mib": (hwm - idle) / 1024,
              "median_ms": statistics.median(times) * 1e3,
              "first_call_s": first_call, "first_loss": first_loss, "params_mib": params / 2**20}
    if config.startswith("ort"):
        stats = torch_ort_backend.memory_stats()
        result["engine_step_peak_mib"] = stats["step_peak_bytes"] / 2**20
        result["fallbacks"] = torch_ort_backend.compile_stats().fallbacks
    return result


def run_config(model: str, config: str, sizes: dict, steps: int) -> dict:
    args = [__file__, "--worker", model, config, "--sizes", json.dumps(sizes), "--steps", str(steps)]
    return run_json_worker(args, timeout=3600, MALLOC_MMAP_THRESHOLD_="65536")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt2,llama")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--json", default="")
    p.add_argument("--worker", nargs=2, metavar=("MODEL", "CONFIG"), help=argparse.SUPPRESS)
    p.add_argument("--sizes", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], json.loads(args.sizes), args.steps)))
        return 0
    sizes = {k: getattr(args, k) for k in ("layers", "batch", "seq", "hidden", "heads", "vocab")}
    models, configs = args.models.split(","), args.configs.split(",")
    results: dict[str, dict] = {}
    for model in models:
        for config in configs:
            results[f"{model}/{config}"] = r = run_config(model, config, sizes, args.steps)
            print(f"{model:6s} {config:16s} {r}", file=sys.stderr)
    print(f"\npeak memory above the model (MiB) and median step (ms), {sizes}; "
          f"ratios to eager in parentheses\n")
    print("| model | config | peak MiB | above idle MiB | step ms | engine step peak MiB | loss |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for model in models:
        eager = results.get(f"{model}/eager", {})
        for config in configs:
            r = results[f"{model}/{config}"]
            if "error" in r:
                print(f"| {model} | {config} | error: {r['error']} | | | | |")
                continue
            peak, ms = f"{r['peak_mib']:.1f}", f"{r['median_ms']:.1f}"
            if "error" not in eager and eager and config != "eager":
                peak += f" ({r['peak_mib'] / eager['peak_mib']:.2f}x)"
                ms += f" ({r['median_ms'] / eager['median_ms']:.2f}x)"
            engine = f"{r['engine_step_peak_mib']:.1f}" if "engine_step_peak_mib" in r else ""
            print(f"| {model} | {config} | {peak} | {r['step_mib']:.1f} | {ms} | {engine} | {r['first_loss']:.4f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sizes": sizes, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
