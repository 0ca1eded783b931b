"""Attention's backward products with transposed operands, as AOTAutograd exports them (heads folded
into the batch: Transpose [0, 2, 1] + MatMul), run by an InferenceSession with MatMulTransposeFusion's
batched fold on (FusedMatMul reads the operands in place) against off (TOB_BATCHED_MATMUL_TRANSPOSE=0:
Transpose copies), interleaved round by round in one process; one thread's CPU time, median of
--rounds rounds of --calls calls; results asserted equal bit for bit. Complements
bench_elementwise_fusion.py --switch TOB_BATCHED_MATMUL_TRANSPOSE, where they are a small part of a step.

    python benchmarks/bench_batched_transpose.py      # GPT-2 at bench_memory.py's size: [64, 256, 256] x [64, 256, 64]
    python benchmarks/bench_batched_transpose.py --batch 4 --heads 16 --seq 512 --dim 64
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

import torch_ort_backend as tob

SWITCH = "TOB_BATCHED_MATMUL_TRANSPOSE"


def attention_backward(bh: int, seq: int, dim: int) -> onnx.ModelProto:
    """dV = P^T dO, dP = dO V^T, dQ = dS (K^T)^T, dK^T = Q^T dS: each product reads one transposed operand."""
    def t(x: str) -> onnx.NodeProto:
        return helper.make_node("Transpose", [x], [x + "_t"], perm=[0, 2, 1])

    nodes = [t("P"), helper.make_node("MatMul", ["P_t", "dO"], ["dV"]),
             t("V"), helper.make_node("MatMul", ["dO", "V_t"], ["dP"]),
             t("Kt"), helper.make_node("MatMul", ["dS", "Kt_t"], ["dQ"]),
             t("Q"), helper.make_node("MatMul", ["Q_t", "dS"], ["dKt"])]
    shapes = {"P": [bh, seq, seq], "dS": [bh, seq, seq], "dO": [bh, seq, dim], "V": [bh, seq, dim],
              "Q": [bh, seq, dim], "Kt": [bh, dim, seq]}
    outputs = {"dV": [bh, seq, dim], "dP": [bh, seq, seq], "dQ": [bh, seq, dim], "dKt": [bh, dim, seq]}
    graph = helper.make_graph(
        nodes, "attention_backward",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _session(model: onnx.ModelProto, on: bool) -> tob.InferenceSession:
    saved = os.environ.get(SWITCH)
    os.environ[SWITCH] = "1" if on else "0"
    try:
        options = tob.SessionOptions()
        options.intra_op_num_threads = 1
        session = tob.InferenceSession(model, options)
    finally:
        if saved is None:
            os.environ.pop(SWITCH, None)
        else:
            os.environ[SWITCH] = saved
    folded = any(line.startswith("MatMulTransposeFusion") for line in session.applied_passes())
    assert folded == on, session.applied_passes()
    return session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    bh = args.batch * args.heads
    model = attention_backward(bh, args.seq, args.dim)
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim], dtype=np.float32)
             for i in model.graph.input}
    sessions = {"on": _session(model, True), "off": _session(model, False)}
    outs = {key: s.run(None, feeds) for key, s in sessions.items()}
    for a, b in zip(outs["on"], outs["off"]):
        assert np.array_equal(a, b), "folded and unfolded results differ"
    times = {key: [] for key in sessions}
    for _ in range(args.rounds):
        for key, session in sessions.items():
            start = time.process_time()
            for _ in range(args.calls):
                session.run(None, feeds)
            times[key].append((time.process_time() - start) / args.calls * 1000)
    med = {key: statistics.median(v) for key, v in times.items()}
    print(f"[{bh}, {args.seq}, {args.seq}] x [{bh}, {args.seq}, {args.dim}]: on {med['on']:.2f} ms, "
          f"off {med['off']:.2f} ms, off/on {med['off'] / med['on']:.3f}")


if __name__ == "__main__":
    main()
