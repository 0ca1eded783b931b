"""Environment switches A/B under bfloat16 autocast training, in one process: bench_compile's models
at their benchmark size, each variant a backend plus environment variables, interleaved round by
round, one thread (--threads), the process's CPU time (for a shared, loaded machine; with more
threads it is the sum of theirs, spinning included), median of --rounds rounds of at least
--round-ms each.

    python benchmarks/bench_autocast_switches.py --models gpt2,llama \
        --variants "eager,inductor,ort_off=TOB_LOSS_GRAD_FUSION:0,ort" --rounds 21

A variant is `label[=VAR:value;VAR:value]`; its backend is the label up to the first "_" (eager,
inductor, ort). Its variables are set while it compiles and while it runs, so switches read when a
session is created and switches read on every call both take effect. Each variant compiles its own
code object (TorchDynamo caches compiled graphs per code object, and two torch.compile calls of one
model class would otherwise share their graphs and the first variant's sessions) and gets sessions
of its own; the table lists, for the "ort" variants, the engine ops of their graphs that differ
between variants, which shows that they really differ.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from torch_ort_backend.compile_state import COMPILE_STATE
from torch_ort_backend.testing import models as M
from torch_ort_backend.testing.models import extract_loss
from variant_compile import EnvVars, engine_ops, fresh_forward, graph_serials


def _variant(name: str, label: str, env: dict[str, str]):
    """(step, engine op types of its graphs) for one variant, three steps taken."""
    spec = M.MODELS[name]
    make, make_batch = spec.builders(spec.bench_sizes)
    model = make().train(True)
    batch = make_batch(0)
    backend = label.split("_")[0]
    forward = fresh_forward(f"{name} {label}")
    if backend != "eager":
        forward = torch.compile(forward, backend=backend)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        with EnvVars(env):
            with torch.autocast("cpu", torch.bfloat16):
                out = forward(model, batch)
            extract_loss(out).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    COMPILE_STATE.clear_sessions()
    before = graph_serials()
    for _ in range(3):
        step()
    return step, engine_ops(before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="gpt2,llama")
    parser.add_argument("--variants", default="eager,inductor,ort_off=TOB_LOSS_GRAD_FUSION:0,ort")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--round-ms", type=float, default=60.0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch's and the engine's threads; above 1 the CPU time sums every thread's")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    os.environ.setdefault("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")
    variants = []
    for v in args.variants.split(","):
        label, _, spec = v.partition("=")
        variants.append((label, dict(kv.split(":", 1) for kv in spec.split(";") if kv)))
    for name in args.models.split(","):
        steps, ops = {}, {}
        for label, env in variants:
            steps[label], ops[label] = _variant(name, label, env)
        engine = [label for label in ops if ops[label]]
        shared = set.intersection(*(ops[label] for label in engine)) if engine else set()
        for label in engine:
            print(f"  {name} {label}: ops of its own {sorted(ops[label] - shared)}", flush=True)
        calls = {}
        for label, step in steps.items():
            start = time.process_time()
            step()
            calls[label] = max(1, int(args.round_ms / 1000 / max(time.process_time() - start, 1e-6)))
        samples: dict[str, list[float]] = {label: [] for label in steps}
        for _ in range(args.rounds):
            for label, step in steps.items():
                start = time.process_time()
                for _ in range(calls[label]):
                    step()
                samples[label].append((time.process_time() - start) / calls[label] * 1e3)
        first = statistics.median(samples[variants[0][0]])
        for label in steps:
            med = statistics.median(samples[label])
            print(f"{name:10s} {label:14s} {med:8.2f} ms  {med / first:.3f} of {variants[0][0]}"
                  f"  (min {min(samples[label]):.2f})", flush=True)
        torch._dynamo.reset()


if __name__ == "__main__":
    main()
