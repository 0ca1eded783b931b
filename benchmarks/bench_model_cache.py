"""The first call of a new process: "ort" with a cold on-disk cache, "ort" with a warm one
(ORTMODULE_CACHE_DIR, torch_ort_backend/model_cache.py), and Inductor with a cold and a warm cache
of its own (TORCHINDUCTOR_CACHE_DIR, FX graph cache on).

    python benchmarks/bench_model_cache.py [--models gpt2,bert_mlm] [--rounds 1] [--json PATH]

Each measurement is a fresh subprocess that builds the model (torch_ort_backend/testing/models.py, the
small test configs: the point is the fixed cost of compiling, not the step) and times its first
training step (forward + backward: TorchDynamo, AOTAutograd, export or cache read, engine session,
the run) and then a second step, for reference. "cold" starts from an empty cache directory,
"warm" from the one the cold run of the same round filled. The figure the issue sets: warm / cold
first call of "ort" at most 0.3.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile


_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
from torch_ort_backend.testing import models as cm
from torch_ort_backend import compile_stats
make, batch = {{"gpt2": (cm.make_gpt2, cm.causal_lm_batch), "bert_mlm": (cm.make_bert_mlm, cm.bert_mlm_batch)}}[{model!r}]
model = make()
compiled = torch.compile(model, backend={backend!r})
t1 = time.perf_counter()
compiled(**batch(0)).loss.backward()
t2 = time.perf_counter()
compiled(**batch(1)).loss.backward()
t3 = time.perf_counter()
print(json.dumps({{"import_s": t1 - t0, "first_s": t2 - t1, "second_s": t3 - t2,
                  "exports": compile_stats().exports}}))
"""


def _run(model: str, backend: str, env_extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORTMODULE_", "TORCHINDUCTOR_"))}
    env.update(env_extra)
    code = _CHILD.format(model=model, backend=backend)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{model}/{backend} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="gpt2,bert_mlm")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    results = []
    for model in args.models.split(","):
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory() as ort_dir, tempfile.TemporaryDirectory() as inductor_dir:
                ort_env = {"ORTMODULE_CACHE_DIR": os.path.join(ort_dir, "cache")}
                ind_env = {"TORCHINDUCTOR_CACHE_DIR": inductor_dir, "TORCHINDUCTOR_FX_GRAPH_CACHE": "1"}
                row = {"model": model}
                row["ort_cold"] = _run(model, "ort", ort_env)
                row["ort_warm"] = _run(model, "ort", ort_env)
                row["inductor_cold"] = _run(model, "inductor", ind_env)
                row["inductor_warm"] = _run(model, "inductor", ind_env)
                results.append(row)
                first = {k: row[k]["first_s"] for k in ("ort_cold", "ort_warm", "inductor_cold", "inductor_warm")}
                print(f"{model:9s} first call: ort cold {first['ort_cold']:.2f}s, warm {first['ort_warm']:.2f}s "
                      f"(x{first['ort_warm'] / first['ort_cold']:.2f}, exports {row['ort_warm']['exports']}); "
                      f"inductor cold {first['inductor_cold']:.2f}s, warm {first['inductor_warm']:.2f}s "
                      f"(x{first['inductor_warm'] / first['inductor_cold']:.2f})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
