"""The engine's ElementwiseFusion pass on (the default) against off (TOB_ELEMENTWISE_FUSION=0), on
bench_compile's models at their benchmark size under "ort": training steps (forward, backward, SGD)
and no_grad forwards, both configurations in one process, interleaved round by round.

The variable is read when a session is created, so each configuration compiles with it set (and
runs with it set), the sessions shared between identical exports are dropped in between, and each
configuration compiles a code object of its own (benchmarks/variant_compile.py: TorchDynamo caches
graphs per code object, and before 2026-11-27 this script's "off" reused the "on" graphs, so its
A/Bs timed one graph twice). The engine ops that differ between the two are printed, which shows
that they really differ. Time is the process's CPU time of one thread (torch.set_num_threads(1)),
median of --rounds rounds of 2 calls after warm-up: on a shared machine, wall time measures the
other jobs.

    python benchmarks/bench_elementwise_fusion.py                       # mlp, transformer_lm, gpt2, bert_mlm, llama
    python benchmarks/bench_elementwise_fusion.py --models llama --rounds 15

--switch names another pass's variable to measure it the same way (the RMSNorm fusion
TOB_RMS_NORM_FUSION, the rotary embedding fusion TOB_ROTARY_FUSION, MatMulTransposeFusion's batched
products TOB_BATCHED_MATMUL_TRANSPOSE, TanhGrad as a fused instruction TOB_TANHGRAD_FUSION, the
cross-entropy backward fusion TOB_LOSS_GRAD_FUSION, elementwise rematerialisation
TOB_ELEMENTWISE_REMAT); --autocast bf16 runs each forward under torch.autocast("cpu", torch.bfloat16)
with AdamW:

    python benchmarks/bench_elementwise_fusion.py --switch TOB_RMS_NORM_FUSION --models llama --rounds 15
    python benchmarks/bench_elementwise_fusion.py --switch TOB_TANHGRAD_FUSION --models gpt2 --autocast bf16 --modes train

--level sets memory_opt_level, --memory-size builds GPT-2 / LLaMA at bench_memory.py's size instead
(--modes train: the training step only):

    python benchmarks/bench_elementwise_fusion.py --switch TOB_BATCHED_MATMUL_TRANSPOSE --models gpt2 llama \
        --memory-size --level 1 --modes train --rounds 3
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

SWITCHES = ("TOB_ELEMENTWISE_FUSION", "TOB_RMS_NORM_FUSION", "TOB_ROTARY_FUSION", "TOB_BATCHED_MATMUL_TRANSPOSE",
            "TOB_TANHGRAD_FUSION", "TOB_LOSS_GRAD_FUSION", "TOB_ELEMENTWISE_REMAT")


def _memory_size_model(name: str):
    """bench_memory.py's model and batch at its default size (6 layers, batch 16 x 256, hidden 256)."""
    sizes = {"vocab": 1024, "hidden": 256, "layers": 6, "heads": 4, "positions": 256, "dropout": 0.1}
    model = M.make_gpt2(**sizes) if name == "gpt2" else M.make_llama(kv_heads=2, **sizes)
    model.config.use_cache = False
    return model, lambda _seed: M.causal_lm_batch(0, batch=16, seq=256, vocab=1024)


def _step(name: str, fused: bool, train: bool, switch: str, level: int = 0, memory_size: bool = False,
          autocast: bool = False):
    """(step, engine ops of its graphs) for one configuration, three steps taken."""
    env = EnvVars({switch: "1" if fused else "0"})
    COMPILE_STATE.clear_sessions()
    torch.manual_seed(0)
    if memory_size:
        model, make_batch = _memory_size_model(name)
    else:
        spec = M.MODELS[name]
        make, make_batch = spec.builders(spec.bench_sizes)
        model = make()
    model = model.train()
    forward = torch.compile(fresh_forward(f"{name} {switch}={int(fused)} {'train' if train else 'infer'}"),
                            backend="ort", options={"memory_opt_level": level})
    params = model.parameters()
    optimizer = torch.optim.AdamW(params, lr=1e-4) if autocast else torch.optim.SGD(params, lr=0.01)
    data = make_batch(0)

    def call():
        if autocast:
            with torch.autocast("cpu", torch.bfloat16):
                return forward(model, data)
        return forward(model, data)

    def step() -> None:
        with env:
            if not train:
                with torch.no_grad():
                    call()
                return
            extract_loss(call()).backward()
            optimizer.step()
            optimizer.zero_grad()

    before = graph_serials()
    for _ in range(3):
        step()
    return step, engine_ops(before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["mlp", "transformer_lm", "gpt2", "bert_mlm", "llama"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--switch", default="TOB_ELEMENTWISE_FUSION", choices=SWITCHES)
    parser.add_argument("--autocast", choices=["none", "bf16"], default="none")
    parser.add_argument("--modes", nargs="+", default=["train", "infer"], choices=["train", "infer"])
    parser.add_argument("--level", type=int, default=0, help="memory_opt_level of the compiled models")
    parser.add_argument("--memory-size", action="store_true",
                        help="GPT-2 / LLaMA at bench_memory.py's size (6 layers, batch 16 x 256, hidden 256)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    os.environ.setdefault("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")
    print(f"{args.switch}, autocast {args.autocast}, level {args.level}, {time.strftime('%Y-%m-%d')}, "
          f"loadavg {os.getloadavg()[0]:.1f}")
    print(f"{'model':15s} {'mode':6s} {'on ms':>8s} {'off ms':>8s} {'off/on':>7s}")
    for name in args.models:
        for train in [mode == "train" for mode in args.modes]:
            built = {key: _step(name, key == "on", train, args.switch, args.level, args.memory_size,
                                args.autocast == "bf16") for key in ("on", "off")}
            steps = {key: step for key, (step, _) in built.items()}
            on_ops, off_ops = built["on"][1], built["off"][1]
            print(f"  ops only with it on: {sorted(on_ops - off_ops)}; only with it off: {sorted(off_ops - on_ops)}",
                  flush=True)
            times = {key: [] for key in steps}
            for _ in range(args.rounds):
                for key, step in steps.items():
                    start = time.process_time()
                    step()
                    step()
                    times[key].append((time.process_time() - start) / 2 * 1000)
            med = {key: statistics.median(v) for key, v in times.items()}
            print(f"{name:15s} {'train' if train else 'infer':6s} {med['on']:8.2f} {med['off']:8.2f} "
                  f"{med['off'] / med['on']:7.3f}", flush=True)
            torch._dynamo.reset()


if __name__ == "__main__":
    main()
