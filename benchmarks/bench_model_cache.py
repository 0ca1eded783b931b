"""The first call of a new process: "ort" with a cold on-disk cache, with a warm one
(ORTMODULE_CACHE_DIR: torch_ort_backend/model_cache.py and warm_region.py), with a warm one
holding only the exports (the regions' records removed: the cache before warm regions), and
Inductor with a cold and a warm cache of its own (TORCHINDUCTOR_CACHE_DIR: FX graph and
AOTAutograd caches on).

    python benchmarks/bench_model_cache.py [--models gpt2,bert_mlm,llama] [--rounds 3] [--json PATH]

Each measurement is a fresh subprocess that builds the model (torch_ort_backend/testing/models.py, the
small test configs: the point is the fixed cost of compiling, not the step) and times its first
training step (forward + backward: TorchDynamo, AOTAutograd or the warm region, export or cache
read, engine sessions, the runs) and then a second step, for reference. The machine is shared, so
the measure is the CPU time of the process (time.process_time, one intra-op thread), and the child
also reports where the first call's CPU went: outside the backend call (TorchDynamo's tracing, the
backward graph that AOTAutograd compiles at the first backward, the runs), the backend call, ours
alone (the region key, the warm region's load, CompiledGraph._compile: export or cache read,
sessions), TorchDynamo's reading of source files for its trace log (funcname_cache, done whether
or not the log is on), and how often AOTAutograd was called. "cold" starts from an empty cache
directory, "warm" from the one the cold run of the same round filled, "exports" from that one
without the region records; the five runs of a round follow each other, rounds repeat, medians are
reported. The figure the issue sets: warm / cold first call of "ort" at most 0.3.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile


_CHILD = r"""
import json, sys, time
import torch
torch.set_num_threads(1)
from torch_ort_backend.testing import models as cm
from torch_ort_backend import compile_stats
import torch._dynamo.output_graph as og
import torch_ort_backend.compiled_graph as cg
import torch_ort_backend.warm_region as wr
import torch._dynamo.funcname_cache as fc
import torch._dynamo.backends.common as common
spent = {{"backend": 0.0, "ours": 0.0, "sources": 0.0, "aot": 0.0}}
aot_calls = [0]
def timed(cls, name, label):
    f = getattr(cls, name)
    def g(*a, **k):
        t = time.process_time()
        try:
            return f(*a, **k)
        finally:
            spent[label] += time.process_time() - t
    setattr(cls, name, g)
timed(og.OutputGraph, "call_user_compiler", "backend")
timed(cg.CompiledGraph, "_compile", "ours")
timed(wr, "region_key", "ours")
timed(wr, "load", "ours")
timed(fc, "_add_file", "sources")
original_aot = common.aot_module_simplified
def counted(*a, **k):
    aot_calls[0] += 1
    return original_aot(*a, **k)
common.aot_module_simplified = counted
make, batch = {{"gpt2": (cm.make_gpt2, cm.causal_lm_batch), "bert_mlm": (cm.make_bert_mlm, cm.bert_mlm_batch),
               "llama": (cm.make_llama, cm.causal_lm_batch)}}[{model!r}]
model = make()
compiled = torch.compile(model, backend={backend!r})
t1 = time.process_time()
compiled(**batch(0)).loss.backward()
t2 = time.process_time()
compiled(**batch(1)).loss.backward()
t3 = time.process_time()
print(json.dumps({{"first_s": t2 - t1, "second_s": t3 - t2, "backend_s": spent["backend"], "ours_s": spent["ours"],
                  "outside_s": t2 - t1 - spent["backend"], "sources_s": spent["sources"],
                  "exports": compile_stats().exports, "aot_calls": aot_calls[0]}}))
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
    import statistics

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="gpt2,bert_mlm,llama")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    kinds = ("ort_cold", "ort_exports", "ort_warm", "inductor_cold", "inductor_warm")
    results = {}
    for model in args.models.split(","):
        rows = []
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory() as ort_dir, tempfile.TemporaryDirectory() as inductor_dir:
                ort_env = {"ORTMODULE_CACHE_DIR": os.path.join(ort_dir, "cache")}
                ind_env = {"TORCHINDUCTOR_CACHE_DIR": inductor_dir, "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
                           "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}
                row = {"ort_cold": _run(model, "ort", ort_env)}
                for record in glob.glob(os.path.join(ort_dir, "cache", "*.region.json")):
                    os.unlink(record)  # the exports alone (this run writes the records again)
                row["ort_exports"] = _run(model, "ort", ort_env)
                row["ort_warm"] = _run(model, "ort", ort_env)
                row["inductor_cold"] = _run(model, "inductor", ind_env)
                row["inductor_warm"] = _run(model, "inductor", ind_env)
                rows.append(row)
                print(model, {k: round(v["first_s"], 2) for k, v in row.items()}, file=sys.stderr, flush=True)
        med = {k: {f: statistics.median(r[k][f] for r in rows) for f in rows[0][k]} for k in kinds}
        results[model] = {"rounds": rows, "median": med}
        print(f"{model}: first call, median CPU s of {args.rounds} rounds (outside the backend / backend / ours; "
              f"TorchDynamo reading sources):")
        for k in kinds:
            m = med[k]
            print(f"  {k:14s} {m['first_s']:6.2f}  ({m['outside_s']:.2f} / {m['backend_s']:.2f} / {m['ours_s']:.2f}; "
                  f"{m['sources_s']:.2f}), exports {m['exports']:.0f}, AOTAutograd calls {m['aot_calls']:.0f}, "
                  f"second call {m['second_s']:.3f}")
        print(f"  ort warm / cold {med['ort_warm']['first_s'] / med['ort_cold']['first_s']:.2f}, "
              f"exports only / cold {med['ort_exports']['first_s'] / med['ort_cold']['first_s']:.2f}, "
              f"inductor warm / cold {med['inductor_warm']['first_s'] / med['inductor_cold']['first_s']:.2f}, "
              f"ort warm / inductor warm {med['ort_warm']['first_s'] / med['inductor_warm']['first_s']:.2f}",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
