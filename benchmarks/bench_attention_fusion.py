"""Eager attention fused (attention_fusion.py, the default) against the same chain run op by op
(ORTMODULE_USE_EFFICIENT_ATTENTION=0), training steps of bench_compile's eager-attention models under
"ort", in one process, interleaved.

Time is the process's CPU time of one thread (torch.set_num_threads(1)), median of --rounds rounds of
2 steps each after warm-up: on a shared machine, wall time measures the other jobs. Peak is the
engine's step peak (the largest step_peak_bytes of the configuration's own graphs in memory_stats()).

    python benchmarks/bench_attention_fusion.py                          # gpt2, bert_mlm, llama at bench size
    python benchmarks/bench_attention_fusion.py --models gpt2 --seq 512 --batch 2
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import torch_ort_backend as tob
from torch_ort_backend.compile_state import live_graphs
from torch_ort_backend.testing import models as M


def _serial() -> int:
    return max((g.serial for g in live_graphs()), default=0)


def _peak_mib(since: int) -> float:
    """The largest step peak of the graphs compiled after `since` (this configuration's)."""
    names = {g.name for g in live_graphs() if g.serial > since}
    graphs = tob.memory_stats()["graphs"]
    return max((m["step_peak_bytes"] for n, m in graphs.items() if n in names), default=0) / 2**20


def _trainer(name: str, opts: dict, seq: int | None, batch: int | None):
    spec = M.MODELS[name]
    sizes = {k: dict(v) for k, v in spec.bench_sizes.items()}
    if seq is not None:
        sizes["batch"]["seq"] = seq
        sizes["model"]["positions"] = max(sizes["model"].get("positions", 0), 2 * seq)
    if batch is not None:
        sizes["batch"]["batch"] = batch
    make, make_batch = spec.builders(sizes)
    torch.manual_seed(0)
    model = make().train()
    compiled = torch.compile(model, backend="ort", options=opts)
    sgd = torch.optim.SGD(model.parameters(), lr=0.01)
    data = make_batch(0)

    def step() -> None:
        out = compiled(**data)
        out["loss"].backward()
        sgd.step()
        sgd.zero_grad()

    for _ in range(3):
        step()
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["gpt2", "bert_mlm", "llama"])
    parser.add_argument("--seq", type=int, default=None, help="sequence length (default: the bench size, 128)")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'model':10s} {'seq':>5s} {'fused ms':>9s} {'chain ms':>9s} {'chain/fused':>12s} "
          f"{'fused peak MiB':>15s} {'chain peak MiB':>15s}")
    for name in args.models:
        configs = {"fused": {}, "chain": {"use_efficient_attention": False}}
        steps, peaks = {}, {}
        for key, opts in configs.items():
            since = _serial()
            steps[key] = _trainer(name, opts, args.seq, args.batch)
            peaks[key] = _peak_mib(since)
        times = {key: [] for key in steps}
        for _ in range(args.rounds):
            for key, step in steps.items():
                start = time.process_time()
                step()
                step()
                times[key].append((time.process_time() - start) / 2 * 1000)
        med = {key: statistics.median(v) for key, v in times.items()}
        seq = args.seq or M.MODELS[name].bench_sizes["batch"]["seq"]
        print(f"{name:10s} {seq:5d} {med['fused']:9.2f} {med['chain']:9.2f} {med['chain'] / med['fused']:12.2f} "
              f"{peaks['fused']:15.1f} {peaks['chain']:15.1f}")


if __name__ == "__main__":
    main()
