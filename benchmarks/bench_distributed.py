"""Data-parallel training steps per second: eager PyTorch, Inductor and "ort", under DDP and ZeRO 2,
on 1 and 2 ranks, in one run.

    python benchmarks/bench_distributed.py [--wrappers ddp,zero2] [--ranks 1,2]
                                           [--backends eager,inductor,ort] [--steps 10] [--rounds 1]
                                           [--size bench|test] [--threads 0] [--json PATH]

The model is GPT-2 from a small config (torch_ort_backend/testing/models.py, "gpt2" at its benchmark
size: 2 layers, hidden 128, 4 heads, vocab 1024, 4 sequences of 128 tokens per rank and step).
A step is forward, backward (with the gradients' all-reduce or reduce-scatter) and AdamW:
- ddp:   DDP(torch.compile(model, backend=B)) with torch.optim.AdamW (eager: DDP(model));
- zero2: deepspeed.initialize(model, AdamW, ZeRO stage 2, fp32) then engine.compile(backend=B)
         (eager: no compile).
Every configuration starts fresh processes, one per rank, connected by gloo on 127.0.0.1; each rank
uses --threads intra-op threads (0: the machine's cores divided among the ranks). Ranks get
different batches. After 3 warm-up steps (the first compiles) at least --steps steps are timed;
rank 0 reports the median step and its steps/s, the first step's loss and, for "ort", whether the
engine ran every graph (compile_stats; the fallback policy is FALLBACK_DISABLE, so a graph the
engine cannot run fails the configuration instead of being timed as eager).

"vs eager" is eager's median step time divided by this one's (> 1: faster than eager) in the same
wrapper and rank count; --rounds R repeats the sweep and reports medians over rounds. A failing
configuration (Inductor without a C++ compiler, DeepSpeed missing) is reported in its cell.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import traceback


WARMUP_STEPS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- one rank ----------------------------------------------------------------------------------

def _build(args: argparse.Namespace):
    """(step function, model) for this rank's wrapper and backend."""
    import torch

    from torch_ort_backend.testing import models as compile_models

    spec = compile_models.MODELS["gpt2"]
    make_model, make_batch = spec.builders(spec.bench_sizes if args.size == "bench" else None)
    model = make_model()
    rank = int(os.environ["RANK"])
    batch = make_batch(rank)
    if args.wrapper == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        torch.distributed.init_process_group("gloo")
        inner = model if args.backend == "eager" else torch.compile(model, backend=args.backend)
        wrapped = DDP(inner)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            loss = wrapped(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss
    else:
        import deepspeed

        # DeepSpeed's CPU backend JIT-builds a shared-memory all-reduce for inference at start-up
        # (about a minute); training does not use it.
        sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
        deepspeed.init_distributed(dist_backend="gloo")
        config = {"train_micro_batch_size_per_gpu": batch["input_ids"].shape[0], "zero_optimization": {"stage": 2},
                  "steps_per_print": 10**9}
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4),
                                               config=config)
        if args.backend != "eager":
            engine.compile(backend=args.backend)

        def step():
            loss = engine(**batch).loss
            engine.backward(loss)
            engine.step()
            return loss
    return step


def run_rank(args: argparse.Namespace) -> dict:
    import torch

    threads = args.threads or max(1, (os.cpu_count() or 1) // int(os.environ["WORLD_SIZE"]))
    torch.set_num_threads(threads)
    step = _build(args)
    start = time.perf_counter()
    first_loss = float(step().detach())
    first_step_s = time.perf_counter() - start
    for _ in range(WARMUP_STEPS - 1):
        step()
    samples = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    result = {"ms": statistics.median(samples) * 1e3, "first_step_s": first_step_s, "loss0": first_loss,
              "threads": threads}
    if args.backend == "ort":
        import torch_ort_backend

        stats = torch_ort_backend.compile_stats()
        result["engine_runs"], result["fallbacks"] = stats.runs, stats.fallbacks
    torch.distributed.barrier()  # no rank leaves while another still times its steps
    torch.distributed.destroy_process_group()
    return result


# --- the driver --------------------------------------------------------------------------------

def run_configuration(wrapper: str, ranks: int, backend: str, args: argparse.Namespace) -> dict:
    port = _free_port()
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(ranks),
           "LOCAL_WORLD_SIZE": str(ranks), "ORTMODULE_FALLBACK_POLICY": "FALLBACK_DISABLE",
           "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--wrappers", wrapper, "--backends", backend,
           "--steps", str(args.steps), "--size", args.size, "--threads", str(args.threads)]
    procs = [subprocess.Popen(cmd, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(ranks)]
    deadline = time.monotonic() + args.timeout
    outputs = []
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            for other in procs:
                if other.poll() is None:
                    other.kill()
            return {"error": f"timed out after {args.timeout} s"}
    for rank, (proc, (out, err)) in enumerate(zip(procs, outputs)):
        if proc.returncode != 0:
            tail = (err or out).strip().splitlines()[-3:]
            return {"error": f"rank {rank} exited {proc.returncode}: " + " | ".join(tail)}
    for line in reversed(outputs[0][0].splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": "rank 0 printed no result"}


def combine_rounds(rounds: list[list[dict]]) -> list[dict]:
    combined = []
    for i, first in enumerate(rounds[0]):
        runs = [r[i] for r in rounds if "ms" in r[i]]
        if not runs:
            combined.append(first)
            continue
        row = {**runs[0], "rounds": len(runs)}
        for key in ("ms", "first_step_s"):
            row[key] = statistics.median(r[key] for r in runs)
        ratios = []
        for one_round in rounds:
            mine = one_round[i]
            eager = next((x for x in one_round if x["wrapper"] == mine["wrapper"] and x["ranks"] == mine["ranks"]
                          and x["backend"] == "eager" and "ms" in x), None)
            if eager and "ms" in mine:
                ratios.append(eager["ms"] / mine["ms"])
        if ratios:
            row["vs_eager"] = statistics.median(ratios)
        combined.append(row)
    return combined


def format_table(results: list[dict]) -> str:
    lines = ["| wrapper | ranks | backend | median step ms | steps/s | vs eager | first step s | loss0 |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in results:
        head = f"| {r['wrapper']} | {r['ranks']} | {r['backend']} |"
        if "error" in r:
            lines.append(f"{head} FAILED (see below) | | | | |")
            continue
        ratio = f"{r['vs_eager']:.2f}" if "vs_eager" in r else "-"
        lines.append(f"{head} {r['ms']:.1f} | {1e3 / r['ms']:.2f} | {ratio} | {r['first_step_s']:.1f} | "
                     f"{r['loss0']:.5f} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wrappers", default="ddp,zero2", help="ddp, zero2 or both")
    parser.add_argument("--ranks", default="1,2", help="comma-separated rank counts")
    parser.add_argument("--backends", default="eager,inductor,ort", help="comma-separated torch.compile backends")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per configuration")
    parser.add_argument("--size", choices=("bench", "test"), default="bench",
                        help="bench: GPT-2's benchmark size; test: the tiny test size")
    parser.add_argument("--rounds", type=int, default=1, help="repeat the sweep; report medians over rounds")
    parser.add_argument("--threads", type=int, default=0,
                        help="intra-op threads per rank (0: the machine's cores divided among the ranks)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per configuration")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.wrapper_list = [w for w in args.wrappers.split(",") if w]
    args.rank_list = [int(n) for n in args.ranks.split(",") if n]
    args.backend_list = sorted((b for b in args.backends.split(",") if b), key=lambda b: b != "eager")
    unknown = set(args.wrapper_list) - {"ddp", "zero2"}
    if unknown:
        parser.error(f"unknown wrapper(s) {sorted(unknown)}: expected ddp and/or zero2")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        args.wrapper, args.backend = args.wrapper_list[0], args.backend_list[0]
        try:
            result = run_rank(args)
        except Exception as exc:  # reported by the driver in the table; the sweep goes on
            traceback.print_exc()
            print(json.dumps({"error": f"{type(exc).__name__}: {str(exc).strip()[:300]}"}), flush=True)
            return 1
        print(json.dumps(result), flush=True)
        return 0

    rounds = []
    for round_index in range(max(1, args.rounds)):
        results = []
        for wrapper in args.wrapper_list:
            for ranks in args.rank_list:
                for backend in args.backend_list:
                    start = time.perf_counter()
                    result = {"wrapper": wrapper, "ranks": ranks, "backend": backend,
                              **run_configuration(wrapper, ranks, backend, args)}
                    results.append(result)
                    status = result.get("error") or f"{result['ms']:.1f} ms"
                    print(f"  round {round_index + 1} {wrapper:5} {ranks} rank(s) {backend:9} {status}  "
                          f"({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
        rounds.append(results)
    results = combine_rounds(rounds)
    threads = sorted({(r["ranks"], r["threads"]) for r in results if "threads" in r})
    print(f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, threads per rank "
          f"{', '.join(f'{t} at {n} rank(s)' for n, t in threads) or '?'}, --size {args.size}, "
          f"median of {args.steps} steps after {WARMUP_STEPS} warm-up, {len(rounds)} round(s)\n")
    print(format_table(results))
    failures = [r for r in results if "error" in r]
    for r in failures:
        print(f"\n{r['wrapper']} {r['ranks']} rank(s) {r['backend']}: {r['error']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
