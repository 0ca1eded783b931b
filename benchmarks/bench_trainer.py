"""Training steps side by side: ORTTrainer (the whole step, Adam included, one engine run) against
torch.compile(backend="ort") + FusedAdam, Inductor + AdamW(fused=True) and eager + AdamW(fused=True).

    python benchmarks/bench_trainer.py [--models gpt2,bert_mlm,transformer_lm] [--steps 20]
                                       [--seconds 1.0] [--rounds 1] [--json PATH]

The models and batches are those of bench_compile.py at their benchmark sizes
(torch_ort_backend/testing/models.py), dropout 0. Every configuration runs in a fresh subprocess; after 3
warm-up steps at least --steps steps and --seconds seconds are timed and the median step is reported
with its ratio to eager's (below 1: faster than eager). All four apply Adam with decoupled weight decay
0.01 at lr 1e-4, no gradient clipping (ORTTrainer: AdamConfig with its default
weight_decay_mode, utils.grad_norm_clip False), so each does the same work per step. "loss diff" compares the loss of the
first step with eager's (relative).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from bench_worker import run_json_worker


MODES = ("eager", "inductor", "ort", "orttrainer")
WARMUP = 3
LR, WEIGHT_DECAY = 1e-4, 0.01


def _desc(batch: dict, logits_rank: int) -> dict:
    """The description of a bench_compile model: its batch's tensors in (the benchmark's one shape),
    loss and logits out."""
    inputs = [(name, list(t.shape)) for name, t in batch.items()]
    return {"inputs": inputs, "outputs": [("loss", [], True), ("logits", [f"l{i}" for i in range(logits_rank)])]}


def _loss_and_logits(out):
    return (out["loss"], out["logits"]) if isinstance(out, dict) or hasattr(out, "keys") else out


def worker(model_name: str, mode: str, steps: int, seconds: float) -> dict:
    import torch

    from torch_ort_backend.testing.models import MODELS

    torch.manual_seed(0)
    make_model, make_batch = MODELS[model_name].builders(MODELS[model_name].bench_sizes)
    model = make_model()
    if hasattr(model, "config"):
        model.config.use_cache = False
    model.train()
    batch = make_batch(0)
    if mode == "orttrainer":
        from torch_ort_backend import ORTTrainer, ORTTrainerOptions, optim

        # DecayMode.BEFORE_WEIGHT_UPDATE (the default) is torch.optim.AdamW's rule (docs/architecture.md).
        config = optim.AdamConfig(lr=LR, lambda_coef=WEIGHT_DECAY)
        with torch.no_grad():
            logits_rank = _loss_and_logits(model(**batch))[1].dim()
        trainer = ORTTrainer(model, _desc(batch, logits_rank), config, options=ORTTrainerOptions({"utils": {"grad_norm_clip": False}}))

        def step():
            return trainer.train_step(**batch)[0]
    else:
        if mode == "ort":
            from torch_ort_backend.optim import FusedAdam

            opt = FusedAdam(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
            fn = torch.compile(model, backend="ort")
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, fused=True)
            fn = torch.compile(model) if mode == "inductor" else model

        def step():
            loss = _loss_and_logits(fn(**batch))[0]
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()

    start = time.perf_counter()
    first_loss = float(step())
    first_call = time.perf_counter() - start
    for _ in range(WARMUP - 1):
        step()
    times = []
    begin = time.perf_counter()
    while len(times) < steps or time.perf_counter() - begin < seconds:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return {"median_ms": statistics.median(times) * 1e3, "first_call_s": first_call, "first_loss": first_loss,
            "steps": len(times)}


def run_config(model: str, mode: str, steps: int, seconds: float) -> dict:
    args = [__file__, "--worker", model, mode, "--steps", str(steps), "--seconds", str(seconds)]
    return run_json_worker(args, timeout=1800)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt2,bert_mlm,transformer_lm")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--json", default="")
    p.add_argument("--worker", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], args.steps, args.seconds)))
        return 0
    models, modes = args.models.split(","), args.modes.split(",")
    rounds: list[dict] = []
    for r in range(max(1, args.rounds)):
        results = {}
        for model in models:
            for mode in modes:
                results[(model, mode)] = run_config(model, mode, args.steps, args.seconds)
                print(f"round {r + 1} {model:15s} {mode:11s} {results[(model, mode)]}", file=sys.stderr)
        rounds.append(results)
    print(f"\nmedian step (ms) and ratio to eager (median over {len(rounds)} round(s)); loss diff vs eager\n")
    print(f"| model | {' | '.join(modes)} |")
    print("|---|" + "---:|" * len(modes))
    table = {}
    for model in models:
        cells = []
        for mode in modes:
            runs = [rd[(model, mode)] for rd in rounds]
            if any("error" in x for x in runs):
                cells.append(f"error: {next(x['error'] for x in runs if 'error' in x)}")
                continue
            ms = statistics.median(x["median_ms"] for x in runs)
            ratios = [x["median_ms"] / rd[(model, "eager")]["median_ms"] for x, rd in zip(runs, rounds)
                      if "eager" in modes and "error" not in rd[(model, "eager")]]
            diff = ""
            if ratios and mode != "eager":
                e = rounds[0][(model, "eager")]["first_loss"]
                diff = f", loss diff {abs(runs[0]['first_loss'] - e) / abs(e):.1e}"
            ratio = f" ({statistics.median(ratios):.2f}x{diff})" if ratios else ""
            cells.append(f"{ms:.1f}{ratio}")
            table[f"{model}/{mode}"] = runs
        print(f"| {model} | {' | '.join(cells)} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
