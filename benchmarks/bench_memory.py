"""Peak memory and step time of transformer training: eager, eager with torch.utils.checkpoint per
block, Inductor with activation_memory_budget 0.5, and torch.compile(backend="ort") at
memory_opt_level 0, 1 and 2, in one run.

    python benchmarks/bench_memory.py [--models gpt2,llama] [--layers 6] [--batch 16] [--seq 256]
                                      [--hidden 256] [--heads 4] [--vocab 1024] [--steps 5]
                                      [--configs eager,checkpoint,inductor_budget,ort0,ort1,ort2]
                                      [--threads 1] [--rounds 3] [--no-time] [--no-memory] [--json PATH]
    python benchmarks/bench_memory.py --from-json RUN.json [RUN2.json ...]   # the table of saved runs

Variants of an "ort" level N take a change of docs/memory_optimizer.md back, to measure what it
is worth: ``ortN_arena`` (the training graphs plan an arena and free it after each run, as level
>= 1 did before it ran without one), ``ortN_keep_arena`` (they plan one and keep the largest between
runs, as level 0 does), ``ortN_no_donation`` (torch._functorch.config.donated_buffer off: the
backward holds its whole stash to its end) and ``ortN_all_layers`` (the ``TransformerLayer:1:-1`` plan:
the last transformer layer recomputed too, where level 1 keeps it).

The models are torch_ort_backend/testing/models.py's GPT-2 and LLaMA (eager attention, dropout 0.1)
at the given sizes; the default (6 layers, batch 16 x 256 tokens, hidden 256) is one where
activations dominate: they are tens of times the parameters. Every configuration runs in a fresh
subprocess with the same seed and batch; SGD (no momentum: no optimizer state) updates the weights.

Peak memory (one process per configuration) is the process's: Linux's resident-set high-water mark
(VmHWM), reset after the warm-up steps (``/proc/self/clear_refs``), minus the resident set measured
after the model and batch were built, before the first step. So it counts what a configuration
adds to the model while training: activations, gradients, workspaces, and anything it keeps
between steps (what compiling imported and keeps, the engine's memory arenas). glibc is told to map
every block of 64 KiB or more on its own (MALLOC_MMAP_THRESHOLD_), so freed activations leave the
resident set and the mark follows live memory. "above idle" is the same mark minus the resident set
between two steps (after the warm-up): what a step adds on top of everything a configuration keeps;
"held between steps" is the difference (what compiling keeps for the process's life, memory glibc
keeps, the engine's arenas). All three are measured the same way for every configuration, so
their ratios compare like with like; torch's CPU allocator keeps no peak statistics, and the
engine's memory is not torch's, so no allocator-level figure could cover every configuration.
For "ort" the engine's own count (torch_ort_backend.memory_stats()["step_peak_bytes"]) is shown too.
benchmarks/memory_attribution.py takes these peaks apart.

Step time (other processes: ``--rounds`` rounds, each running every configuration once, in turn,
so that a change of the machine's load reaches all of them alike) is the process's CPU time per
step (``time.process_time``: user and system time of all its threads), the median of the timed
steps, then the median over the rounds; with ``--threads 1`` (torch.set_num_threads(1), which the
engine follows) it is single-thread time, which other processes on a shared machine disturb far
less than wall time. These processes run with glibc's default allocator settings: the 64 KiB mmap
threshold of the memory runs makes every allocation of an activation fault its pages in again,
which nearly doubles eager's step (GPT-2 at the default size, one thread: 2.06 -> 3.80 s of CPU)
while the engine's arenas are immune, so timing under it favoured "ort". Their peak (the same
high-water mark, median over the rounds) is shown as "peak MiB, glibc defaults": what a user who
sets nothing sees, freed memory that glibc keeps in its heap included.
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


def _apply_config(model, config: str):
    import torch

    fn = model
    if config == "checkpoint":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    elif config == "inductor_budget":
        torch._functorch.config.activation_memory_budget = 0.5
        fn = torch.compile(model)
    elif config.startswith("ort"):
        level, _, variant = config[3:].partition("_")
        options: dict = {"memory_opt_level": int(level)}
        if variant == "all_layers":
            options["memory_opt_config"] = ["TransformerLayer:1:-1"]
        elif variant:
            from torch_ort_backend.compiled_graph import CompiledGraph

            if variant == "arena":
                CompiledGraph._arena_policy = lambda self: (True, self.stage in ("forward", "backward"))
            elif variant == "keep_arena":
                CompiledGraph._arena_policy = lambda self: (True, False)
            elif variant == "no_donation":
                torch._functorch.config.donated_buffer = False
            else:
                raise ValueError(f"unknown configuration {config!r}: the variants are _arena, _keep_arena, "
                                 "_no_donation and _all_layers")
        fn = torch.compile(model, backend="ort", options=options)
    elif config != "eager":
        raise ValueError(f"unknown configuration {config!r}; known: {', '.join(CONFIGS)}")
    return fn


def worker(model_name: str, config: str, sizes: dict, steps: int, threads: int) -> dict:
    import torch
    import torch._inductor  # noqa: F401  (imported before the baseline by every configuration alike)

    import torch_ort_backend

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, batch = _build(model_name, sizes)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    fn = _apply_config(model, config)
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
    wall, cpu = [], []
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
    hwm = _rss_kib("VmHWM")
    result = {"peak_mib": (hwm - baseline) / 1024, "step_mib": (hwm - idle) / 1024,
              "median_ms": statistics.median(wall) * 1e3, "median_cpu_ms": statistics.median(cpu) * 1e3,
              "cpu_ms": [c * 1e3 for c in cpu], "threads": torch.get_num_threads(),
              "first_call_s": first_call, "first_loss": first_loss, "params_mib": params / 2**20}
    if config.startswith("ort"):
        stats = torch_ort_backend.memory_stats()
        result["engine_step_peak_mib"] = stats["step_peak_bytes"] / 2**20
        result["fallbacks"] = torch_ort_backend.compile_stats().fallbacks
    return result


def run_config(model: str, config: str, sizes: dict, steps: int, threads: int, memory: bool) -> dict:
    """One fresh process; memory runs with glibc's 64 KiB mmap threshold, time runs without it."""
    args = [__file__, "--worker", model, config, "--sizes", json.dumps(sizes), "--steps", str(steps),
            "--threads", str(threads)]
    env = {"MALLOC_MMAP_THRESHOLD_": "65536"} if memory else {}
    return run_json_worker(args, timeout=3600, **env)


def _ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}x" if value is not None and base else "-"


def print_table(memory: dict, times: dict, models: list, configs: list, sizes: dict, steps: int, rounds: int,
                threads: int) -> None:
    """One row per model and configuration. Every peak column is measured the same way for every
    configuration (the module docstring): "peak" is what training adds to the process, "above idle"
    what one step adds on top of what the configuration keeps between steps, and "held between
    steps" the difference (what compiling keeps, memory glibc keeps, the engine's arenas). Ratios:
    to eager's and to checkpointed eager's figure of the same column."""

    def cpu_ms(key: str) -> float | None:
        ok = [r["median_cpu_ms"] for r in times.get(key, []) if "error" not in r]
        return statistics.median(ok) if ok else None

    print(f"\npeak memory (MiB) and step CPU time (median, ms; {rounds} round(s) of {steps} steps, threads "
          f"{threads or 'default'}); {sizes}; (x eager / x checkpoint)\n")
    print("| model | config | peak MiB | above idle MiB | held between steps MiB | engine step peak MiB "
          "| peak MiB, glibc defaults | step CPU ms | rounds' medians | loss |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for model in models:
        eager, ckpt = memory.get(f"{model}/eager", {}), memory.get(f"{model}/checkpoint", {})
        eager_ms, ckpt_ms = cpu_ms(f"{model}/eager"), cpu_ms(f"{model}/checkpoint")
        for config in configs:
            key = f"{model}/{config}"
            r = memory.get(key, {})
            cells = ["", "", "", ""]
            if "error" in r:
                cells[0] = f"error: {r['error']}"
            elif r:
                cells[0] = (f"{r['peak_mib']:.1f} ({_ratio(r['peak_mib'], eager.get('peak_mib'))} / "
                            f"{_ratio(r['peak_mib'], ckpt.get('peak_mib'))})")
                cells[1] = f"{r['step_mib']:.1f} ({_ratio(r['step_mib'], ckpt.get('step_mib'))} of checkpoint)"
                cells[2] = f"{r['peak_mib'] - r['step_mib']:.1f}"
                cells[3] = f"{r['engine_step_peak_mib']:.1f}" if "engine_step_peak_mib" in r else ""
            ms = cpu_ms(key)
            ms_cell = "" if ms is None else f"{ms:.0f} ({_ratio(ms, eager_ms)} / {_ratio(ms, ckpt_ms)})"
            runs = ", ".join(f"{t['median_cpu_ms']:.0f}" if "error" not in t else "error" for t in times.get(key, []))
            default_peaks = [t["peak_mib"] for t in times.get(key, []) if "error" not in t]
            default_peak = f"{statistics.median(default_peaks):.0f}" if default_peaks else ""
            loss = r.get("first_loss") or next((t["first_loss"] for t in times.get(key, []) if "first_loss" in t), None)
            loss_cell = f"{loss:.4f}" if loss is not None else ""
            print(f"| {model} | {config} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | {default_peak} "
                  f"| {ms_cell} | {runs} | {loss_cell} |")


def _print_saved(paths: list, models: list, configs: list) -> int:
    """The table of earlier runs (--json files), merged: one run may hold the memory figures and
    another the times, or other configurations. Runs at other sizes are refused."""
    memory: dict = {}
    times: dict = {}
    sizes = None
    timing = (0, 0)  # (rounds, threads) of the last run that timed
    for path in paths:
        with open(path) as f:
            saved = json.load(f)
        if sizes is not None and saved["sizes"] != sizes:
            raise SystemExit(f"{path} was measured at {saved['sizes']}, not {sizes}")
        sizes = saved["sizes"]
        memory.update({k: v for k, v in saved["memory"].items() if v})
        times.update({k: v for k, v in saved["times"].items() if v})
        if any(saved["times"].values()):
            timing = (saved["rounds"], saved["threads"])
    models = [m for m in models if any(k.startswith(m + "/") for k in list(memory) + list(times))]
    configs = [c for c in configs if any(k.endswith("/" + c) for k in list(memory) + list(times))]
    steps = next((len(t[0]["cpu_ms"]) for t in times.values() if t and "cpu_ms" in t[0]), 0)
    print_table(memory, times, models, configs, sizes, steps, *timing)
    return 0


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
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    p.add_argument("--rounds", type=int, default=1, help="time runs of every configuration, interleaved")
    p.add_argument("--no-time", action="store_true", help="peak memory only")
    p.add_argument("--no-memory", action="store_true", help="step time only")
    p.add_argument("--json", default="")
    p.add_argument("--from-json", nargs="+", default=[], metavar="PATH",
                   help="print the table of earlier --json runs (merged in order: a later run's configuration wins)")
    p.add_argument("--worker", nargs=2, metavar=("MODEL", "CONFIG"), help=argparse.SUPPRESS)
    p.add_argument("--sizes", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], json.loads(args.sizes), args.steps, args.threads)))
        return 0
    sizes = {k: getattr(args, k) for k in ("layers", "batch", "seq", "hidden", "heads", "vocab")}
    models, configs = args.models.split(","), args.configs.split(",")
    if args.from_json:
        return _print_saved(args.from_json, models, configs)
    memory: dict[str, dict] = {}
    times: dict[str, list] = {f"{m}/{c}": [] for m in models for c in configs}
    if not args.no_memory:
        for model in models:
            for config in configs:
                memory[f"{model}/{config}"] = r = run_config(model, config, sizes, args.steps, args.threads, True)
                print(f"memory {model:6s} {config:16s} {r}", file=sys.stderr)
    for rnd in range(0 if args.no_time else args.rounds):
        for model in models:
            for config in configs:
                r = run_config(model, config, sizes, args.steps, args.threads, False)
                times[f"{model}/{config}"].append(r)
                print(f"time round {rnd} {model:6s} {config:16s} {r}", file=sys.stderr)

    print_table(memory, times, models, configs, sizes, args.steps, args.rounds, args.threads)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sizes": sizes, "threads": args.threads, "rounds": args.rounds, "memory": memory,
                       "times": times}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
