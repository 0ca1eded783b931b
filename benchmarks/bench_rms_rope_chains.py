"""The RMSNorm and rotary-embedding chains alone, as HuggingFace LLaMA's export spells them (float32),
run by an InferenceSession with the engine's fusion on against off (TOB_RMS_NORM_FUSION /
TOB_ROTARY_FUSION, read when a session is created), interleaved round by round in one process; one
thread's CPU time, median of --rounds rounds of --calls calls. Complements bench_elementwise_fusion.py
--switch, where the chains are a small part of a whole LLaMA step.

    python benchmarks/bench_rms_rope_chains.py                      # [4, 512, 1024] RMSNorm, [4, 16, 512, 64] RoPE
    python benchmarks/bench_rms_rope_chains.py --rows 2048 --hidden 4096 --rounds 9
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

import torch_ort_backend as tob


def _const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def rms_model(batch: int, seq: int, hidden: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"]),
             helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["s"]),
             helper.make_node("Reciprocal", ["s"], ["r"]),
             helper.make_node("Mul", ["x", "r"], ["n"]),
             helper.make_node("Mul", ["w", "n"], ["y"])]
    graph = helper.make_graph(
        nodes, "rms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, hidden])],
        [_const("axes", np.array([-1], np.int64)), _const("eps", np.float32(1e-6)),
         _const("w", np.linspace(0.5, 1.5, hidden, dtype=np.float32))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def rope_model(batch: int, heads: int, seq: int, dim: int) -> onnx.ModelProto:
    half = dim // 2
    nodes = [helper.make_node("Concat", ["f", "f"], ["emb"], axis=-1),
             helper.make_node("Cos", ["emb"], ["c"]), helper.make_node("Sin", ["emb"], ["s"]),
             helper.make_node("Unsqueeze", ["c", "one"], ["c4"]), helper.make_node("Unsqueeze", ["s", "one"], ["s4"])]
    outputs = []
    for q in ("q", "k"):
        nodes += [helper.make_node("Mul", [q, "c4"], [q + "c"]),
                  helper.make_node("Slice", [q, "zero", "half", "last"], [q + "1"]),
                  helper.make_node("Slice", [q, "half", "end", "last"], [q + "2"]),
                  helper.make_node("Neg", [q + "2"], [q + "n"]),
                  helper.make_node("Concat", [q + "n", q + "1"], [q + "r"], axis=-1),
                  helper.make_node("Mul", [q + "r", "s4"], [q + "rs"]),
                  helper.make_node("Add", [q + "c", q + "rs"], [q + "_out"])]
        outputs.append(helper.make_tensor_value_info(q + "_out", TensorProto.FLOAT, [batch, heads, seq, dim]))
    inputs = [helper.make_tensor_value_info(q, TensorProto.FLOAT, [batch, heads, seq, dim]) for q in ("q", "k")]
    inputs.append(helper.make_tensor_value_info("f", TensorProto.FLOAT, [1, seq, half]))
    graph = helper.make_graph(nodes, "rope", inputs, outputs,
                              [_const("one", np.array([1], np.int64)), _const("zero", np.array([0], np.int64)),
                               _const("half", np.array([half], np.int64)),
                               _const("end", np.array([2**62], np.int64)), _const("last", np.array([-1], np.int64))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def _session(model: onnx.ModelProto, switch: str, on: bool) -> tob.InferenceSession:
    os.environ[switch] = "1" if on else "0"
    options = tob.SessionOptions()
    options.intra_op_num_threads = 1
    session = tob.InferenceSession(model, options)
    fused = {"TOB_RMS_NORM_FUSION": "RmsNormFusion", "TOB_ROTARY_FUSION": "RotaryEmbeddingFusion"}[switch]
    assert any(line.startswith(fused) for line in session.applied_passes()) == on, session.applied_passes()
    return session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    dim = args.hidden // args.heads
    cases = {
        "RMSNorm": (rms_model(args.batch, args.seq, args.hidden), "TOB_RMS_NORM_FUSION",
                    {"x": rng.standard_normal((args.batch, args.seq, args.hidden), dtype=np.float32)}),
        "RoPE q+k": (rope_model(args.batch, args.heads, args.seq, dim), "TOB_ROTARY_FUSION",
                     {"q": rng.standard_normal((args.batch, args.heads, args.seq, dim), dtype=np.float32),
                      "k": rng.standard_normal((args.batch, args.heads, args.seq, dim), dtype=np.float32),
                      "f": rng.uniform(-3, 3, (1, args.seq, dim // 2)).astype(np.float32)}),
    }
    print(f"{'chain':10s} {'on ms':>8s} {'off ms':>8s} {'off/on':>7s}")
    for name, (model, switch, feeds) in cases.items():
        saved = os.environ.get(switch)
        sessions = {"on": _session(model, switch, True), "off": _session(model, switch, False)}
        if saved is None:
            os.environ.pop(switch, None)
        else:
            os.environ[switch] = saved
        outs = {key: s.run(None, feeds) for key, s in sessions.items()}
        for a, b in zip(outs["on"], outs["off"]):
            assert np.array_equal(a, b), f"{name}: fused and unfused results differ"
        times = {key: [] for key in sessions}
        for _ in range(args.rounds):
            for key, session in sessions.items():
                start = time.process_time()
                for _ in range(args.calls):
                    session.run(None, feeds)
                times[key].append((time.process_time() - start) / args.calls * 1000)
        med = {key: statistics.median(v) for key, v in times.items()}
        print(f"{name:10s} {med['on']:8.2f} {med['off']:8.2f} {med['off'] / med['on']:7.3f}", flush=True)


if __name__ == "__main__":
    main()
