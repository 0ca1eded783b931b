"""Training step time with padded batches: the compute optimizer off, its label case (the default), and
its label and embedding cases together under torch.compile(backend="ort"), beside eager and Inductor, on
GPT-2 and BERT (masked LM), in one run.

    python benchmarks/bench_compute_optimizer.py [--models gpt2,bert] [--padding 0,25,50]
        [--batch 16] [--seq 256] [--hidden 128] [--layers 2] [--heads 4] [--vocab 8192]
        [--rounds 5] [--configs eager,inductor,ort_off,ort_label,ort_on] [--return-logits]
        [--threads 1] [--json PATH]

The models are torch_ort_backend/testing/models.py's GPT-2 and BERT MLM (eager attention, dropout 0)
at the given sizes, wrapped to return only their loss, as optimum's ModuleWithLoss did for
onnxruntime-training (with --return-logits the model's whole output is returned: the logits then
keep every row, so the label case can only shrink the loss, while the embedding case still runs the
vocabulary projection over the valid tokens). A batch with P% padding pads each row on the right
(lengths spread evenly around P% of the sequence, the total P% of the tokens) with the pad id (0;
GPT-2's embedding has no padding_idx and goes by the mask), attention_mask 0 and label -100 there;
GPT-2's labels are its ids, BERT's are 15% of the real tokens (masked-LM pre-training).

The machine these figures come from is shared, so the measure is CPU time of one thread
(torch.set_num_threads(1), time.process_time around each step), not wall time. Each model runs in
its own process holding every configuration; for each padding level every configuration is warmed
up, then the configurations take turns, one step each, for --rounds rounds (interleaved, so a load
change hits them alike), and the median per configuration is reported. ort_on is the compute
optimizer with both cases ("label + embedding"); on/off = ort_off / ort_on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from bench_worker import run_json_worker

CONFIGS = ("eager", "inductor", "ort_off", "ort_label", "ort_on")
WARMUP = 2
_OPTIONS = {"ort_off": {"enable_compute_optimizer": False}, "ort_label": {},
            "ort_on": {"enable_embedding_sparse_optimizer": True}}


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
    ids = ids.masked_fill(mask == 0, 0)
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


def worker(model_name: str, configs: list[str], sizes: dict, paddings: list[int], rounds: int,
           return_logits: bool, threads: int) -> dict:
    import copy

    import torch

    import torch_ort_backend
    from torch_ort_backend import compute_optimizer
    from torch_ort_backend.testing.models import extract_loss

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    base = _build(model_name, sizes, return_logits)
    runners = {}
    for config in configs:
        model = copy.deepcopy(base)
        if config == "inductor":
            fn = torch.compile(model)
        elif config in _OPTIONS:
            fn = torch.compile(model, backend="ort", options=_OPTIONS[config])
        elif config == "eager":
            fn = model
        else:
            raise ValueError(f"unknown configuration {config!r}; known: {', '.join(CONFIGS)}")
        runners[config] = (fn, torch.optim.SGD(model.parameters(), lr=1e-4))
    results: dict = {c: {} for c in configs}
    for padding in paddings:
        batch = make_batch(model_name, sizes, padding)

        def step(config: str) -> tuple[float, float]:
            fn, opt = runners[config]
            t0 = time.process_time()
            loss = extract_loss(fn(**batch))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return time.process_time() - t0, float(loss)

        first = {c: step(c)[1] for c in configs}
        for c in configs:
            for _ in range(WARMUP - 1):
                step(c)
        times: dict = {c: [] for c in configs}
        for _ in range(rounds):
            for c in configs:
                times[c].append(step(c)[0])
        labels = batch["labels"]
        for c in configs:
            results[c][str(padding)] = {"median_ms": statistics.median(times[c]) * 1e3, "first_loss": first[c],
                                        "times_ms": [t * 1e3 for t in times[c]],
                                        "label_density": float((labels != -100).float().mean()),
                                        "token_density": float(batch["attention_mask"].float().mean())}
    stats = torch_ort_backend.compile_stats()
    co = compute_optimizer.STATS
    results["_stats"] = {"fallbacks": stats.fallbacks, "label_sparse_rewrites": stats.label_sparse_rewrites,
                         "embedding_rewrites": co.embedding_rewrites, "embedding_sparse_calls": co.embedding_sparse_calls,
                         "embedding_dense_calls": co.embedding_dense_calls,
                         "embedding_check_failures": co.embedding_check_failures,
                         "embedding_declined": co.embedding_declined,
                         "embedding_moved_ops": dict(co.embedding_moved_ops)}
    return results


def run_model(model: str, configs: list[str], sizes: dict, paddings: list[int], rounds: int, return_logits: bool,
              threads: int) -> dict:
    args = [__file__, "--worker", model, "--configs", ",".join(configs), "--sizes", json.dumps(sizes),
            "--rounds", str(rounds), "--padding", ",".join(map(str, paddings)), "--threads", str(threads)]
    args += ["--return-logits"] if return_logits else []
    return run_json_worker(args, timeout=7200)


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
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--return-logits", action="store_true")
    p.add_argument("--json", default="")
    p.add_argument("--worker", metavar="MODEL", help=argparse.SUPPRESS)
    p.add_argument("--sizes", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    paddings = [int(x) for x in args.padding.split(",")]
    configs = args.configs.split(",")
    if args.worker:
        print(json.dumps(worker(args.worker, configs, json.loads(args.sizes), paddings, args.rounds,
                                args.return_logits, args.threads)))
        return 0
    sizes = {k: getattr(args, k) for k in ("batch", "seq", "hidden", "layers", "heads", "vocab")}
    models = args.models.split(",")
    results: dict[str, dict] = {}
    for model in models:
        results[model] = r = run_model(model, configs, sizes, paddings, args.rounds, args.return_logits, args.threads)
        print(f"{model}: {r.get('_stats', r)}", file=sys.stderr)
    print(f"\nmedian training step, CPU ms of {args.threads} thread(s) ({args.rounds} interleaved rounds), {sizes}, "
          f"{'whole output' if args.return_logits else 'loss only'}; on/off = ort_off / ort_on (label + embedding), "
          f"label/off = ort_off / ort_label\n")
    print("| model | padding | tokens | labels | " + " | ".join(configs) + " | label/off | on/off | loss off / on |")
    print("|---|---:|---:|---:|" + "---:|" * len(configs) + "---:|---:|---|")
    for model in models:
        r = results[model]
        if "error" in r:
            print(f"| {model} | error: {r['error']} |")
            continue
        for padding in map(str, paddings):
            row = [r.get(c, {}).get(padding, {}) for c in configs]
            some = next((x for x in row if x), {})
            cells = [f"{x['median_ms']:.0f}" if x else "-" for x in row]
            off, lab, on = (r.get(c, {}).get(padding) for c in ("ort_off", "ort_label", "ort_on"))
            ratio = lambda a, b: f"{a['median_ms'] / b['median_ms']:.2f}x" if a and b else ""  # noqa: E731
            losses = f"{off['first_loss']:.6f} / {on['first_loss']:.6f}" if on and off else ""
            print(f"| {model} | {padding}% | {some.get('token_density', 0):.2f} | {some.get('label_density', 0):.2f} | "
                  + " | ".join(cells) + f" | {ratio(off, lab)} | {ratio(off, on)} | {losses} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sizes": sizes, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
