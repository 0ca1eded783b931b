"""Every convolution shape of ResNet-50 (benchmarks/onnx_models.py's light ResNet-50, batch 1) as
a one-node model, against the GEMM it amounts to, on our engine.

    PYTHONPATH=. python benchmarks/bench_conv_shapes.py [--threads 1] [--rounds 5] [--cpu-time]

Per shape (C x H -> M, kernel, stride; GEMM M x K x N with K = C*kh*kw, N = output positions):
  conv     Conv + bias + Relu (the optimizer fuses it into FusedConv), weights an initializer
           (packed once per session; the tiles take the orientation conv_packed.h chooses)
  fed      the same with W and B fed as graph inputs: nothing to pre-pack, so every tile runs the
           per-call GEMM Y = W col (the path before pre-packing)
  W.col    MatMul(W [M, K] constant, col [K, N] fed): the conv's GEMM as the standard orientation,
           col packed per call
  colT.WT  MatMul(colT [N, K] fed, W^T [K, M] constant): the transposed orientation, W^T
           pre-packed once per session (sgemm_packed's PackedSgemmB)
Each cell is GFLOP/s (2*M*K*N / time) of the best of --rounds interleaved rounds, each round the
median of enough runs to fill --seconds. --cpu-time times with time.process_time (one thread
only: a loaded machine then hurts less). "x count" weighs each shape by how often ResNet-50 has it.

    PYTHONPATH=. python benchmarks/bench_conv_shapes.py --profile-resnet [--threads 2] [--runs 20]

runs the whole ResNet-50 of bench_onnx_models with the engine's profiling (enable_profiling) and
reports each conv shape's time inside the model (per node, the best of the runs, summed over
the nodes of that shape) and GFLOP/s, and the time of the other op types.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# (count in ResNet-50, C, H, M, kernel, stride, pad)
SHAPES = [
    (1, 3, 224, 64, 7, 2, 3),
    (1, 64, 56, 64, 1, 1, 0),
    (3, 64, 56, 64, 3, 1, 1),
    (4, 64, 56, 256, 1, 1, 0),
    (2, 256, 56, 64, 1, 1, 0),
    (1, 256, 56, 128, 1, 1, 0),
    (1, 128, 56, 128, 3, 2, 1),
    (4, 128, 28, 512, 1, 1, 0),
    (1, 256, 56, 512, 1, 2, 0),
    (3, 512, 28, 128, 1, 1, 0),
    (3, 128, 28, 128, 3, 1, 1),
    (1, 512, 28, 256, 1, 1, 0),
    (1, 256, 28, 256, 3, 2, 1),
    (6, 256, 14, 1024, 1, 1, 0),
    (1, 512, 28, 1024, 1, 2, 0),
    (5, 1024, 14, 256, 1, 1, 0),
    (5, 256, 14, 256, 3, 1, 1),
    (1, 1024, 14, 512, 1, 1, 0),
    (1, 512, 14, 512, 3, 2, 1),
    (3, 512, 7, 2048, 1, 1, 0),
    (1, 1024, 14, 2048, 1, 2, 0),
    (2, 2048, 7, 512, 1, 1, 0),
    (2, 512, 7, 512, 3, 1, 1),
]


def _model(nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def conv_model(C, H, M, k, s, p, rng, fed=False):
    w = rng.standard_normal((M, C, k, k)).astype(np.float32) * 0.05
    b = rng.standard_normal(M).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    oh = (H + 2 * p - k) // s + 1
    x = rng.standard_normal((1, C, H, H)).astype(np.float32)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])]
    if fed:
        inputs += [
            helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape)),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [M]),
        ]
    model = _model(
        nodes,
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, M, oh, oh])],
        [] if fed else [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return model, ({"x": x, "w": w, "b": b} if fed else {"x": x})


def matmul_model(a_shape, b_shape, const_a, rng):
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    inputs, inits, feeds = [], [], {}
    for name, arr, const in (("a", a, const_a), ("b", b, not const_a)):
        if const:
            inits.append(numpy_helper.from_array(arr, name))
        else:
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(arr.shape)))
            feeds[name] = arr
    model = _model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [a_shape[0], b_shape[1]])],
        inits,
    )
    return model, feeds


def profile_resnet(args) -> None:
    import json
    from collections import defaultdict

    import torch_ort_backend as tob

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import onnx_models

    import tempfile

    bm = onnx_models.light_resnet50(random_weights=True)
    opts = tob.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.enable_profiling = True
    optimized_path = os.path.join(tempfile.mkdtemp(), "optimized.onnx")
    opts.optimized_model_filepath = optimized_path
    sess = tob.InferenceSession(bm.model, opts)
    # Each conv node of the optimized graph (FusedConv after the fusions): its weight's dims and
    # stride; the profile gives its output shape, and the input size is output x stride here.
    optimized = onnx.load(optimized_path)
    inits = {i.name: list(i.dims) for i in optimized.graph.initializer}
    conv_nodes = {}
    for node in optimized.graph.node:
        if node.op_type in ("Conv", "FusedConv"):
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            conv_nodes[node.name] = (inits[node.input[1]], attrs.get("strides", [1, 1])[0])
    feeds = dict(bm.feeds)
    for _ in range(3):
        sess.run(None, feeds)
    t0 = time.perf_counter()
    for _ in range(args.runs):
        sess.run(None, feeds)
    wall = (time.perf_counter() - t0) / args.runs
    trace = sess.end_profiling()
    with open(trace) as f:
        events = [e for e in json.load(f) if e.get("cat") == "Node"]
    os.remove(trace)
    per_run = len(events) // (args.runs + 3)
    runs = [events[i * per_run : (i + 1) * per_run] for i in range(3, args.runs + 3)]
    conv_ops = ("Conv", "FusedConv")
    by_shape = defaultdict(lambda: [0, 0.0, 0.0])  # count, median us summed, flops
    other = defaultdict(float)
    node_total = 0.0
    for j, e in enumerate(runs[0]):
        med = min(r[j]["dur"] for r in runs)  # the run least hit by other processes
        node_total += med
        if e["args"]["op_type"] in conv_ops:
            (m, c, k, _), st = conv_nodes[e["name"]]
            oh = json.loads(e["args"]["output_shapes"])[2]
            key, flops = f"{c}x{oh * st} -> {m}, {k}x{k}, s{st}", 2.0 * m * c * k * k * oh * oh
            entry = by_shape[key]
            entry[0] += 1
            entry[1] += med
            entry[2] += flops
        else:
            other[e["args"]["op_type"]] += med
    print(f"threads={args.threads} runs={args.runs} load={os.getloadavg()} wall per run {wall * 1e3:.2f} ms")
    print(f"nodes sum (best of runs) {node_total / 1e3:.2f} ms")
    print("| conv (C x H -> M, k, s) | nodes | ms | GFLOP/s |")
    print("| --- | --- | --- | --- |")
    conv_total = 0.0
    for key, (count, us, flops) in by_shape.items():
        conv_total += us
        print(f"| {key} | {count} | {us / 1e3:.3f} | {flops / us / 1e3:.0f} |")
    print(f"conv total {conv_total / 1e3:.2f} ms; " + ", ".join(f"{k} {v / 1e3:.2f}" for k, v in other.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.2, help="per cell per round")
    ap.add_argument("--cpu-time", action="store_true", help="time.process_time instead of wall time")
    ap.add_argument("--only", default="", help="comma-separated shape indices")
    ap.add_argument("--profile-resnet", action="store_true", help="profile the whole ResNet-50 instead")
    ap.add_argument("--runs", type=int, default=20, help="--profile-resnet: profiled runs")
    args = ap.parse_args()
    if args.profile_resnet:
        return profile_resnet(args)

    import torch_ort_backend as tob

    clock = time.process_time if args.cpu_time else time.perf_counter
    opts = tob.SessionOptions()
    opts.intra_op_num_threads = args.threads
    rng = np.random.default_rng(0)
    picks = [int(i) for i in args.only.split(",")] if args.only else range(len(SHAPES))
    print(f"threads={args.threads} clock={'process_time' if args.cpu_time else 'perf_counter'} load={os.getloadavg()}")
    print(
        "| # | conv (C x H -> M, k, s) | GEMM MxKxN | conv GFLOP/s | fed GFLOP/s | W.col GFLOP/s | colT.WT GFLOP/s "
        "| x count |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    total = {"conv": 0.0, "fed": 0.0, "W.col": 0.0, "colT.WT": 0.0}
    for i in picks:
        count, C, H, M, k, s, p = SHAPES[i]
        oh = (H + 2 * p - k) // s + 1
        K, N = C * k * k, oh * oh
        flops = 2.0 * M * K * N
        cells = {
            "conv": conv_model(C, H, M, k, s, p, rng),
            "fed": conv_model(C, H, M, k, s, p, rng, fed=True),
            "W.col": matmul_model((M, K), (K, N), True, rng),
            "colT.WT": matmul_model((N, K), (K, M), False, rng),
        }
        runs = {}
        for name, (model, feeds) in cells.items():
            sess = tob.InferenceSession(model, opts)
            for _ in range(3):
                sess.run(None, feeds)
            runs[name] = (sess, feeds)
        best = {name: float("inf") for name in cells}
        for _ in range(args.rounds):
            for name, (sess, feeds) in runs.items():
                times = []
                t_end = time.perf_counter() + args.seconds
                while time.perf_counter() < t_end or len(times) < 3:
                    t0 = clock()
                    sess.run(None, feeds)
                    times.append(clock() - t0)
                best[name] = min(best[name], statistics.median(times))
        for name in best:
            total[name] += best[name] * count
        g = {name: flops / best[name] / 1e9 for name in best}
        print(
            f"| {i} | {C}x{H} -> {M}, {k}x{k}, s{s} | {M}x{K}x{N} | {g['conv']:.0f} | {g['fed']:.0f} | {g['W.col']:.0f} | "
            f"{g['colT.WT']:.0f} | {count} |",
            flush=True,
        )
    print("sum over ResNet-50's convs (ms): " + ", ".join(f"{n} {t * 1e3:.2f}" for n, t in total.items()))


if __name__ == "__main__":
    sys.exit(main())
