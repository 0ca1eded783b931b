"""Training step time with padded batches: the compute optimizer's label case on and off under
torch.compile(backend="ort"), beside eager and Inductor, on GPT-2 and BERT (masked LM), in one run.

    python benchmarks/bench_compute_optimizer.py [--models gpt2,bert] [--padding 0,25,50]
        [--batch 16] [--seq 256] [--hidden 128] [--layers 2] [--heads 4] [--vocab 8192]
        [--steps 5] [--configs eager,inductor,ort_off,ort_on] [--return-logits] [--json PATH]

The models are torch_ort_backend/testing/models.py's GPT-2 and BERT MLM (eager attention, dropout 0)
at the given sizes, wrapped to return only their loss, as optimum's ModuleWithLoss did for
onnxruntime-training (with --return-logits the model's whole output is returned: the logits then
keep every row, and only the loss runs over the valid labels). A batch with P% padding pads each
row on the right (lengths spread evenly around P% of the sequence, the total P% of the tokens),
with attention_mask 0 and label -100 there; GPT-2's labels are its ids, BERT's are 15% of the real
tokens (masked-LM pre-training), so BERT's label density is low at any padding. Each configuration
runs in its own subprocess, training with SGD on each padding level in turn (the same compiled
graphs serve every level: the valid-row count is a symbolic size); the step time is the median of
the timed steps after two warm-up steps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from bench_worker import run_json_worker

CONFIGS = ("eager", "inductor", "ort_off", "ort_on")
WARMUP = 2


def make_batch(model_name: str, sizes: dict, padding: int):
    import torch

    from torch_ort_backend.testing.models import generator, token_ids

    batch, seq, vocab = sizes["batch"], sizes["seq"], sizes["vocab"]
    gen = generator(padding, 1919)
    ids = token_ids((batch, seq), vocab, gen)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    target = padding * batch * seq // 100
    for row in range(batch):  # pad lengths spread around the mean, summing to the target
        share = min((target * (2 * row + 1)) // (batch * batch), seq - 1)
        if share:
            mask[row, seq - share:] = 0
    labels = ids.masked_fill(mask == 0, -100)
    out = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    if model_name == "bert":
        chosen = (torch.rand(batch, seq, generator=gen) < 0.15) & (mask == 1)
        chosen[:, 0] = True
        out["labels"] = ids.masked_fill(~chosen, -100)
        out["token_type_ids"] = torch.zeros_like(ids)
    return out


def _build(model_name: str, sizes: dict, return_logits: bool):
    import torch

    from torch_ort_backend.testing.models import make_bert_mlm, make_gpt2

    common = {"vocab": sizes["vocab"], "hidden": sizes["hidden"], "layers": sizes["layers"], "heads": sizes["heads"],
              "positions": sizes["seq"]}
    if model_name == "gpt2":
        model = make_gpt2(**common)
        model.config.use_cache = False
    elif model_name == "bert":
        model = make_bert_mlm(**common)
    else:
        raise ValueError(f"unknown model {model_name!r}: gpt2 or bert")

    class LossOnly(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, **batch):
            return self.inner(**batch).loss

    return (model if return_logits else LossOnly(model)).train()


def worker(model_name: str, config: str, sizes: dict, paddings: list[int], steps: int, return_logits: bool) -> dict:
    import torch

    import torch_ort_backend
    from torch_ort_backend import compute_optimizer
    from torch_ort_backend.testing.models import extract_loss

    torch.manual_seed(0)
    model = _build(model_name, sizes, return_logits)
    fn = model
    if config == "inductor":
        fn = torch.compile(model)
    elif config in ("ort_on", "ort_off"):
        fn = torch.compile(model, backend="ort", options={"enable_compute_optimizer": config == "ort_on"})
    elif config != "eager":
        raise ValueError(f"unknown configuration {config!r}; known: {', '.join(CONFIGS)}")
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    results = {}
    for padding in paddings:
        batch = make_batch(model_name, sizes, padding)

        def step() -> float:
            loss = extract_loss(fn(**batch))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return float(loss)

        first_loss = step()
        for _ in range(WARMUP - 1):
            step()
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        labels = batch["labels"]
        results[str(padding)] = {"median_ms": statistics.median(times) * 1e3, "first_loss": first_loss,
                                 "label_density": float((labels != -100).float().mean()),
                                 "token_density": float(batch["attention_mask"].float().mean())}
    if config.startswith("ort"):
        stats = torch_ort_backend.compile_stats()
        results["fallbacks"] = stats.fallbacks
        results["label_sparse_rewrites"] = stats.label_sparse_rewrites
        results["moved_ops"] = dict(compute_optimizer.STATS.moved_ops)
    return results


def run_config(model: str, config: str, sizes: dict, paddings: list[int], steps: int, return_logits: bool) -> dict:
    args = [__file__, "--worker", model, config, "--sizes", json.dumps(sizes), "--steps", str(steps),
            "--padding", ",".join(map(str, paddings))] + (["--return-logits"] if return_logits else [])
    return run_json_worker(args, timeout=3600)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt2,bert")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--padding", default="0,25,50", help="padding percentages")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--return-logits", action="store_true")
    p.add_argument("--json", default="")
    p.add_argument("--worker", nargs=2, metavar=("MODEL", "CONFIG"), help=argparse.SUPPRESS)
    p.add_argument("--sizes", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    paddings = [int(x) for x in args.padding.split(",")]
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], json.loads(args.sizes), paddings, args.steps,
                                args.return_logits)))
        return 0
    sizes = {k: getattr(args, k) for k in ("batch", "seq", "hidden", "layers", "heads", "vocab")}
    models, configs = args.models.split(","), args.configs.split(",")
    results: dict[str, dict] = {}
    for model in models:
        for config in configs:
            results[f"{model}/{config}"] = r = run_config(model, config, sizes, paddings, args.steps,
                                                          args.return_logits)
            print(f"{model:5s} {config:9s} {r}", file=sys.stderr)
    print(f"\nmedian training step (ms), {sizes}, {'whole output' if args.return_logits else 'loss only'}; "
          f"on/off = ort_off / ort_on (the optimizer's speed-up)\n")
    print("| model | padding | tokens | labels | " + " | ".join(configs) + " | on/off | loss off / on |")
    print("|---|---:|---:|---:|" + "---:|" * len(configs) + "---:|---|")
    for model in models:
        for padding in map(str, paddings):
            row = [results[f"{model}/{c}"].get(padding, {}) for c in configs]
            some = next((r for r in row if r), {})
            cells = [f"{r['median_ms']:.1f}" if r else "error" for r in row]
            on = results.get(f"{model}/ort_on", {}).get(padding)
            off = results.get(f"{model}/ort_off", {}).get(padding)
            ratio = f"{off['median_ms'] / on['median_ms']:.2f}x" if on and off else ""
            losses = f"{off['first_loss']:.6f} / {on['first_loss']:.6f}" if on and off else ""
            print(f"| {model} | {padding}% | {some.get('token_density', 0):.2f} | {some.get('label_density', 0):.2f} | "
                  + " | ".join(cells) + f" | {ratio} | {losses} |")
    for key, r in results.items():
        if "error" in r:
            print(f"{key}: error: {r['error']}")
        elif "label_sparse_rewrites" in r:
            print(f"{key}: rewrites {r['label_sparse_rewrites']}, moved ops {r['moved_ops']}, "
                  f"fallbacks {r['fallbacks']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sizes": sizes, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
