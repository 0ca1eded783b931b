"""Fused attention on the CPU: the engine's FlashAttention / FlashAttentionGrad against torch's fused
kernel (aten._scaled_dot_product_flash_attention_for_cpu and its backward, what
F.scaled_dot_product_attention runs on CPU), forward and forward + backward, and peak memory.

    PYTHONPATH=. python benchmarks/bench_attention.py [--quick] [--threads 2] [--json PATH]

Each size is [batch, heads, seq, 64] float32, causal by default (--no-causal: full attention).
Ours: one-node engine sessions fed torch tensors (zero copy), so the time includes the engine's
per-run overhead; torch: the aten ops called directly (no autograd bookkeeping). Time = median of
interleaved rounds. ratio = torch's time / ours (> 1: ours is faster). Peak memory: the growth of
a fresh worker process's peak RSS (VmHWM, reset through /proc/self/clear_refs) over its RSS before
one forward + backward at the longest sequences (outputs included), for ours,
torch's fused kernel and torch's math attention (which materialises the [seq, seq] scores).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_worker import run_json_worker  # noqa: E402

aten = torch.ops.aten
HEAD = 64
# (seq, batch, heads)
SIZES = [(128, 4, 12), (256, 4, 12), (512, 4, 8), (1024, 2, 8), (2048, 1, 8)]
MEMORY_SEQS = [1024, 2048]


def flash_models(causal: bool):
    """(forward, backward) one-node ONNX models over symbolic [b, h, s, d] operands."""
    def info(name: str, dims: list[str]):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)

    bhsd, bhs = ["b", "h", "s", "d"], ["b", "h", "s"]
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    fwd = helper.make_graph(
        [helper.make_node("FlashAttention", ["Q", "K", "V"], ["Y", "LSE"], domain="com.microsoft",
                          is_causal=int(causal))],
        "flash_fwd", [info(n, bhsd) for n in "QKV"], [info("Y", bhsd), info("LSE", bhs)])
    bwd = helper.make_graph(
        [helper.make_node("FlashAttentionGrad", ["dY", "Q", "K", "V", "Y", "LSE"], ["dQ", "dK", "dV"],
                          domain="com.microsoft", is_causal=int(causal))],
        "flash_bwd", [info(n, bhsd) for n in ("dY", "Q", "K", "V", "Y")] + [info("LSE", bhs)],
        [info(n, bhsd) for n in ("dQ", "dK", "dV")])
    models = []
    for g in (fwd, bwd):
        m = helper.make_model(g, opset_imports=opsets)
        m.ir_version = 10
        models.append(m)
    return models


def sessions(threads: int, causal: bool):
    import torch_ort_backend as tob

    opts = tob.SessionOptions()
    opts.intra_op_num_threads = threads
    fwd, bwd = flash_models(causal)
    return tob.InferenceSession(fwd, opts), tob.InferenceSession(bwd, opts)


def inputs(batch: int, heads: int, seq: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, seq, HEAD, generator=gen) for _ in range(4)]  # q, k, v, dy


def _time(runners: dict, seconds: float, rounds: int = 3) -> dict[str, float]:
    per_round = {}
    for name, run in runners.items():
        run()  # warm-up
        start = time.perf_counter()
        run()
        per_round[name] = max(1, int(seconds / rounds / max(time.perf_counter() - start, 1e-6)))
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, run in runners.items():
            for _ in range(per_round[name]):
                start = time.perf_counter()
                run()
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) for name, s in samples.items()}


def bench_size(seq: int, batch: int, heads: int, causal: bool, threads: int, seconds: float) -> dict:
    fwd, bwd = sessions(threads, causal)
    q, k, v, dy = inputs(batch, heads, seq)
    y, lse = fwd.run(None, {"Q": q, "K": k, "V": v})
    ty, tlse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
    grads = bwd.run(None, {"dY": dy, "Q": q, "K": k, "V": v, "Y": y, "LSE": lse})
    tgrads = aten._scaled_dot_product_flash_attention_for_cpu_backward(dy, q, k, v, ty, tlse, 0.0, causal)
    diff = max(float((a - b).abs().max()) for a, b in zip([y, *grads], [ty, *tgrads]))

    def ours_fwd():
        return fwd.run(None, {"Q": q, "K": k, "V": v})

    def torch_fwd():
        return aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)

    def ours_step():
        o, s = ours_fwd()
        return bwd.run(None, {"dY": dy, "Q": q, "K": k, "V": v, "Y": o, "LSE": s})

    def torch_step():
        o, s = torch_fwd()
        return aten._scaled_dot_product_flash_attention_for_cpu_backward(dy, q, k, v, o, s, 0.0, causal)

    t = _time({"ours fwd": ours_fwd, "torch fwd": torch_fwd, "ours fwd+bwd": ours_step,
               "torch fwd+bwd": torch_step}, seconds)
    row = {"seq": seq, "batch": batch, "heads": heads, "max_abs_diff": diff}
    row.update({f"{name} ms": s * 1e3 for name, s in t.items()})
    row["fwd ratio"] = t["torch fwd"] / t["ours fwd"]
    row["fwd+bwd ratio"] = t["torch fwd+bwd"] / t["ours fwd+bwd"]
    return row


def memory_worker(impl: str, seq: int, batch: int, heads: int, causal: bool, threads: int) -> dict:
    """One forward + backward in this (fresh) process; the growth of its peak RSS in MiB."""
    torch.set_num_threads(threads)
    q, k, v, dy = inputs(batch, heads, seq)
    if impl == "ours":
        fwd, bwd = sessions(threads, causal)
    before = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # resets VmHWM (the peak RSS) to the current RSS
        f.write("5")
    if impl == "ours":
        o, s = fwd.run(None, {"Q": q, "K": k, "V": v})
        out = bwd.run(None, {"dY": dy, "Q": q, "K": k, "V": v, "Y": o, "LSE": s})
    elif impl == "torch":
        o, s = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
        out = aten._scaled_dot_product_flash_attention_for_cpu_backward(dy, q, k, v, o, s, 0.0, causal)
    else:  # torch's math attention: scores and probabilities as [seq, seq] tensors
        from torch.nn.attention import SDPBackend, sdpa_kernel
        qkv = [t.clone().requires_grad_() for t in (q, k, v)]
        with sdpa_kernel(SDPBackend.MATH):
            o = torch.nn.functional.scaled_dot_product_attention(*qkv, is_causal=causal)
        out = torch.autograd.grad(o, qkv, dy)
    del out
    return {"impl": impl, "seq": seq, "peak_growth_mib": (_status_kib("VmHWM") - before) / 1024}


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def format_table(rows: list[dict]) -> str:
    header = ("seq", "batch x heads", "ours fwd ms", "torch fwd ms", "fwd ratio", "ours fwd+bwd ms",
              "torch fwd+bwd ms", "fwd+bwd ratio", "max abs diff")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" ---: " for _ in header) + "|"]
    for r in rows:
        lines.append("| " + " | ".join((
            str(r["seq"]), f"{r['batch']} x {r['heads']}", f"{r['ours fwd ms']:.2f}", f"{r['torch fwd ms']:.2f}",
            f"{r['fwd ratio']:.2f}", f"{r['ours fwd+bwd ms']:.2f}", f"{r['torch fwd+bwd ms']:.2f}",
            f"{r['fwd+bwd ratio']:.2f}", f"{r['max_abs_diff']:.1e}")) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short timing: a smoke run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-causal", action="store_true", help="full (non-causal) attention")
    parser.add_argument("--seconds", type=float, default=None, help="timed seconds per implementation and size")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory workers")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--memory-worker", nargs=4, metavar=("IMPL", "SEQ", "BATCH", "HEADS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    causal = not args.no_causal
    torch.set_num_threads(args.threads)
    if args.memory_worker:
        impl, seq, batch, heads = args.memory_worker
        print(json.dumps(memory_worker(impl, int(seq), int(batch), int(heads), causal, args.threads)))
        return 0
    seconds = args.seconds if args.seconds is not None else (0.3 if args.quick else 2.0)
    print(f"threads={args.threads}, causal={causal}, head size {HEAD}, float32, cpu_count={os.cpu_count()}, "
          f"loadavg_1m={os.getloadavg()[0]:.2f}, torch={torch.__version__}", flush=True)
    rows = []
    for seq, batch, heads in SIZES:
        rows.append(bench_size(seq, batch, heads, causal, args.threads, seconds))
        print(f"  seq {seq}: fwd {rows[-1]['fwd ratio']:.2f}, fwd+bwd {rows[-1]['fwd+bwd ratio']:.2f}", flush=True)
    print()
    print(format_table(rows))
    print(f"\nratio = torch's time / ours (> 1: ours faster). loadavg_1m after: {os.getloadavg()[0]:.2f}")
    memory = []
    if not args.no_memory:
        sizes = {seq: (batch, heads) for seq, batch, heads in SIZES}
        flags = ["--threads", str(args.threads)] + (["--no-causal"] if args.no_causal else [])
        for seq in MEMORY_SEQS:
            batch, heads = sizes[seq]
            for impl in ("ours", "torch", "math"):
                memory.append(run_json_worker([os.path.abspath(__file__), *flags, "--memory-worker", impl, str(seq),
                                               str(batch), str(heads)], timeout=600))
        print("\npeak RSS growth over one forward + backward (MiB):")
        for m in memory:
            print(f"  {m.get('impl', '?'):6} seq {m.get('seq', '?')}: "
                  f"{m['peak_growth_mib']:.1f}" if "peak_growth_mib" in m else f"  error: {m.get('error')}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "causal": causal, "rows": rows, "memory": memory}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
