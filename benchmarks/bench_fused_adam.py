"""One optimizer step over the parameters of a ~110M-parameter transformer (BERT-base shapes).

FusedAdam (ADAMW_TORCH mode, the same update as torch.optim.AdamW) against torch.optim.AdamW with
foreach=True and with fused=True, all float32 on CPU, in one run. Each optimizer has its own
parameters and state; the gradients are shared (none of them writes to them). After warm-up the
three are timed in interleaved rounds, so a burst of load from elsewhere hits all of them alike;
we report the median step time. Ratios are ``torch / ours`` time: > 1 means FusedAdam is faster.

    PYTHONPATH=. python benchmarks/bench_fused_adam.py [--threads N] [--rounds R] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from torch_ort_backend.optim import AdamWMode, FusedAdam


def bert_base_shapes(layers: int = 12, hidden: int = 768, ffn: int = 3072, vocab: int = 30522) -> list[tuple]:
    shapes: list[tuple] = [(vocab, hidden), (512, hidden), (2, hidden), (hidden,), (hidden,)]
    for _ in range(layers):
        for _ in range(4):  # query, key, value, attention output
            shapes += [(hidden, hidden), (hidden,)]
        shapes += [(hidden,), (hidden,)]  # attention LayerNorm
        shapes += [(ffn, hidden), (ffn,), (hidden, ffn), (hidden,)]
        shapes += [(hidden,), (hidden,)]  # output LayerNorm
    shapes += [(hidden, hidden), (hidden,)]  # pooler
    return shapes


def make_optimizers(shapes: list[tuple], grads: list[torch.Tensor]) -> dict[str, torch.optim.Optimizer]:
    def params() -> list[torch.Tensor]:
        ps = [torch.nn.Parameter(torch.randn(s) * 0.02) for s in shapes]
        for p, g in zip(ps, grads):
            p.grad = g
        return ps

    hyper = dict(lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    return {
        "FusedAdam": FusedAdam(params(), adam_w_mode=AdamWMode.ADAMW_TORCH, **hyper),
        "AdamW(foreach)": torch.optim.AdamW(params(), foreach=True, **hyper),
        "AdamW(fused)": torch.optim.AdamW(params(), fused=True, **hyper),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps-per-round", type=int, default=2)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    shapes = bert_base_shapes()
    grads = [torch.randn(s) * 1e-3 for s in shapes]
    numel = sum(g.numel() for g in grads)
    optimizers = make_optimizers(shapes, grads)
    for opt in optimizers.values():  # state allocation and first-touch page faults
        for _ in range(2):
            opt.step()

    times: dict[str, list[float]] = {name: [] for name in optimizers}
    for _ in range(args.rounds):
        for name, opt in optimizers.items():
            for _ in range(args.steps_per_round):
                start = time.perf_counter()
                opt.step()
                times[name].append(time.perf_counter() - start)

    median = {name: statistics.median(t) for name, t in times.items()}
    ours = median["FusedAdam"]
    print(f"{len(shapes)} tensors, {numel / 1e6:.1f}M float32 parameters, {args.threads} threads")
    print(f"{'optimizer':<16}{'median ms':>11}{'min ms':>9}{'GB/s':>7}{'torch/ours':>12}")
    bytes_per_step = numel * 4 * 7  # read param, grad, exp_avg, exp_avg_sq; write three
    for name, t in times.items():
        ratio = median[name] / ours
        print(
            f"{name:<16}{median[name] * 1e3:>11.1f}{min(t) * 1e3:>9.1f}{bytes_per_step / median[name] / 1e9:>7.1f}"
            f"{ratio:>12.2f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "tensors": len(shapes),
                    "parameters": numel,
                    "threads": args.threads,
                    "median_s": median,
                    "min_s": {name: min(t) for name, t in times.items()},
                },
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
