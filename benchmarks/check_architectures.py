"""Coverage check: every HuggingFace architecture of hf_architectures.py and hf_more_architectures.py
(33 families nothing here was tuned for) under torch.compile(backend="ort") with the fallback
disabled, as a new user would first try them: one training step (loss and every gradient) and one
inference forward, each against a float64 run of the same model and against eager float32.

    python benchmarks/check_architectures.py [--models gemma2,whisper,...] [--modes train,infer] [--json PATH]

Per row: "ok" when "ort"'s float32 error against float64 is at most 4x eager float32's (plus 1e-5
relative), for the loss or logits and for every gradient (each relative to its own size, floored at
1e-3 of the largest, so that a gradient that is zero in exact arithmetic compares as noise); the
engine's runs, the graphs that fell back (none allowed) and the ops that ran as ATen nodes. Dropout
probabilities are set to 0 (every float attribute of a module whose name has "dropout" in it, and
nn.Dropout's p) so that the float64 run is a reference. Each row runs in a fresh process.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time

from bench_worker import run_json_worker

FACTOR, SLACK = 4.0, 1e-5


def _architectures() -> dict:
    from hf_architectures import ARCHITECTURES
    from hf_more_architectures import EXTRA_ARCHITECTURES

    return {**ARCHITECTURES, **EXTRA_ARCHITECTURES}


def _no_dropout(model) -> None:
    from torch import nn

    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        for attr, value in list(vars(module).items()):
            if "dropout" in attr and isinstance(value, float):
                setattr(module, attr, 0.0)


def _relative_errors(found: dict, exact: dict) -> dict:
    scale = max((t.double().norm().item() for t in exact.values()), default=0.0)
    return {k: (found[k].double() - exact[k]).norm().item() / max(exact[k].norm().item(), 1e-3 * scale, 1e-300)
            for k in exact}


def worker(name: str, mode: str) -> dict:
    import torch

    from torch_ort_backend import compile_stats

    make_model, make_batch = _architectures()[name]
    torch.manual_seed(0)
    model = make_model()
    _no_dropout(model)
    model.train(mode == "train")
    batch = make_batch()
    if mode == "infer" and not getattr(model.config, "is_encoder_decoder", False):
        batch.pop("labels", None)  # an encoder-decoder keeps them: they make its decoder's inputs
    exact = copy.deepcopy(model).double()
    eager = copy.deepcopy(model)
    batch64 = {k: v.double() if v.is_floating_point() else v for k, v in batch.items()}

    def run(m, call, inputs) -> dict:
        if mode == "infer":
            with torch.no_grad():
                out = call(**inputs)
            return {"logits": (out["logits"] if "logits" in out else out[0]).detach().double()}
        loss = call(**inputs).loss
        loss.backward()
        found = {"loss": loss.detach().double().reshape(1)}
        found.update({n: p.grad.detach().double() for n, p in m.named_parameters() if p.grad is not None})
        return found

    torch.manual_seed(1)  # each run draws the same random numbers (LayerDrop and the like)
    reference = run(exact, exact, batch64)
    torch.manual_seed(1)
    eager_errors = _relative_errors(run(eager, eager, batch), reference)
    compile_stats().reset()
    torch.manual_seed(1)
    ours_errors = _relative_errors(run(model, torch.compile(model, backend="ort"), batch), reference)
    stats = compile_stats()
    worse = {k: (ours_errors[k], eager_errors[k]) for k in reference
             if ours_errors[k] > FACTOR * eager_errors[k] + SLACK}
    return {"ok": not worse and stats.fallbacks == 0 and stats.runs > 0, "runs": stats.runs,
            "fallbacks": stats.fallbacks, "aten_ops": dict(stats.aten_fallback_ops), "values": len(reference),
            "worst_ours": max(ours_errors.values()), "worst_eager": max(eager_errors.values()),
            "worse": {k: list(v) for k, v in list(worse.items())[:3]}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="", help="only these (comma-separated); default: all")
    parser.add_argument("--modes", default="train,infer")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per row")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        try:
            result = worker(*args.worker)
        except Exception as exc:  # reported in the table; the check goes on
            import traceback

            traceback.print_exc()
            text = str(exc).strip()
            result = {"ok": False, "error": f"{type(exc).__name__}: {text.splitlines()[0][:300] if text else ''}"}
        print(json.dumps(result), flush=True)
        return 0

    names = args.models.split(",") if args.models else sorted(_architectures())
    results = []
    print("| model | mode | result | engine runs | ATen nodes | worst error: ort / eager float32 (vs float64) |")
    print("|---|---|---|---:|---|---|")
    for name in names:
        for mode in args.modes.split(","):
            began = time.perf_counter()
            try:
                r = run_json_worker([os.path.abspath(__file__), "--worker", name, mode], args.timeout,
                                    ORTMODULE_FALLBACK_POLICY="FALLBACK_DISABLE")
            except Exception as exc:  # subprocess.TimeoutExpired
                r = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            results.append({"model": name, "mode": mode, **r})
            if "error" in r:
                print(f"| {name} | {mode} | **error**: {r['error']} | | | |", flush=True)
                continue
            aten = ", ".join(f"{k.removeprefix('aten.')} {v}" for k, v in sorted(r["aten_ops"].items())) or "none"
            verdict = "ok" if r["ok"] else f"**worse**: {r['worse']}" if r["worse"] else "**fell back**"
            print(f"| {name} | {mode} | {verdict} | {r['runs']} | {aten} | {r['worst_ours']:.1e} / "
                  f"{r['worst_eager']:.1e} |", flush=True)
            print(f"  ({time.perf_counter() - began:.0f} s)", file=sys.stderr, flush=True)
    failed = [f"{r['model']} {r['mode']}" for r in results if not r.get("ok")]
    print(f"\n{len(results) - len(failed)} of {len(results)} rows ok, {time.strftime('%Y-%m-%d')}"
          + (f"; not ok: {', '.join(failed)}" if failed else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
