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
  tiles    `conv` with TOB_CONV_IMPLICIT=0: the transposed tiles of im2col columns
  implicit `conv` with TOB_CONV_IMPLICIT=1: the implicit GEMM on phase planes (conv_implicit.h)
           wherever the weights are packed (the switch is read on every call, so these two and
           `conv` alternate in one process)
--cells picks columns (comma-separated; default all).
Each cell is GFLOP/s (2*M*K*N / time) of the best of --rounds interleaved rounds, each round the
median of enough runs to fill --seconds. --cpu-time times with time.process_time (one thread
only: a loaded machine then hurts less). "x count" weighs each shape by how often ResNet-50 has it.

    PYTHONPATH=. python benchmarks/bench_conv_shapes.py --profile-resnet [--threads 2] [--runs 20]

runs the whole ResNet-50 of bench_onnx_models with the engine's profiling (enable_profiling) and
reports each conv shape's time inside the model (per node, the best of the runs, summed over
the nodes of that shape) and GFLOP/s, and the time of the other op types.

    PYTHONPATH=. python benchmarks/bench_conv_shapes.py --compare-ort [--threads 1] [--runs 30]

profiles the same model in our engine and in onnxruntime (SessionOptions.enable_profiling, its
default graph optimizations, so its NCHWc convs), the runs of the two alternating in one process,
and puts the node times side by side, matched by conv shape (per node the best of the runs,
summed per shape); onnxruntime's layout reorders and the other ops by op type.

    PYTHONPATH=. python benchmarks/bench_conv_shapes.py --ab-implicit [--threads 1] [--runs 20]

runs one ResNet-50 session with TOB_CONV_IMPLICIT=0 and =1 alternating run by run (the switch is
read on every conv call) and sums each side's per-node best times by kind (kxk convs, 1x1 convs,
other ops), plus each run's process CPU time at one thread.
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


CELLS = ("conv", "fed", "W.col", "colT.WT", "tiles", "implicit")


def _implicit_switch(cell: str) -> None:
    # TOB_CONV_IMPLICIT is read on every conv call: "tiles" and "implicit" force either path.
    if cell == "tiles":
        os.environ["TOB_CONV_IMPLICIT"] = "0"
    elif cell == "implicit":
        os.environ["TOB_CONV_IMPLICIT"] = "1"
    else:
        os.environ.pop("TOB_CONV_IMPLICIT", None)


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
        if node.op_type in ("Conv", "FusedConv", "NchwcConv", "NchwcConvNchwInput"):
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


def _conv_key(c, h, m, k, oh):
    st = max(1, round(h / oh))
    return f"{c}x{h} -> {m}, {k}x{k}, s{st}", 2.0 * m * c * k * k * oh * oh


def compare_ort(args) -> None:
    import json
    import tempfile
    from collections import defaultdict

    import onnxruntime as ort

    import torch_ort_backend as tob

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import onnx_models

    bm = onnx_models.light_resnet50(random_weights=True)
    feeds = dict(bm.feeds)
    np_feeds = {k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in feeds.items()}
    opts = tob.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.enable_profiling = True
    optimized_path = os.path.join(tempfile.mkdtemp(), "optimized.onnx")
    opts.optimized_model_filepath = optimized_path
    ours = tob.InferenceSession(bm.model, opts)
    optimized = onnx.load(optimized_path)
    inits = {i.name: list(i.dims) for i in optimized.graph.initializer}
    conv_w = {}
    for node in optimized.graph.node:
        if node.op_type in ("Conv", "FusedConv", "NchwcConv", "NchwcConvNchwInput"):
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            conv_w[node.name] = (inits[node.input[1]], attrs.get("strides", [1, 1])[0])
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    theirs = ort.InferenceSession(bm.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    warm = 3
    for _ in range(warm):
        ours.run(None, feeds)
        theirs.run(None, np_feeds)
    for _ in range(args.runs):
        ours.run(None, feeds)
        theirs.run(None, np_feeds)

    def split_runs(events):
        per_run = len(events) // (args.runs + warm)
        return [events[i * per_run : (i + 1) * per_run] for i in range(warm, args.runs + warm)]

    traces = [ours.end_profiling(), theirs.end_profiling()]
    with open(traces[0]) as f:
        our_runs = split_runs([e for e in json.load(f) if e.get("cat") == "Node"])
    with open(traces[1]) as f:
        their_runs = split_runs([e for e in json.load(f) if e.get("cat") == "Node"])
    for trace in traces:
        os.remove(trace)
    # (C, M, k, OH, stride) -> our nodes, their nodes, our us, their us, their flops, input H
    table = defaultdict(lambda: [0, 0, 0.0, 0.0, 0.0, 0])
    other = defaultdict(lambda: [0.0, 0.0])
    totals = [0.0, 0.0]
    for j, e in enumerate(our_runs[0]):
        best = min(r[j]["dur"] for r in our_runs)
        totals[0] += best
        op = e["args"]["op_type"]
        if op in ("Conv", "FusedConv", "NchwcConv", "NchwcConvNchwInput"):
            (m, c, k, _), st = conv_w[e["name"]]
            oh = json.loads(e["args"]["output_shapes"])[2]
            table_key = (c, m, k, oh, st)
            table[table_key][0] += 1
            table[table_key][2] += best
        else:
            other[op][0] += best
    for j, e in enumerate(their_runs[0]):
        best = min(r[j]["dur"] for r in their_runs)
        totals[1] += best
        a = e["args"]
        op = a.get("op_name", "?")
        if op == "Conv":
            x, w = a["input_type_shape"][0]["float"], a["input_type_shape"][1]["float"]
            y = a["output_type_shape"][0]["float"]
            table_key = (w[1], w[0], w[2], y[2], max(1, round(x[2] / y[2])))
            table[table_key][1] += 1
            table[table_key][3] += best
            table[table_key][4] += 2.0 * w[0] * w[1] * w[2] * w[3] * y[2] * y[3]
            table[table_key][5] = x[2]
        else:
            other[op][1] += best
    print(
        f"threads={args.threads} runs={args.runs} (alternating) load={os.getloadavg()}; per node the best of the runs"
    )
    print(f"nodes sum: ours {totals[0] / 1e3:.2f} ms, onnxruntime {totals[1] / 1e3:.2f} ms")
    print("| conv (C x H -> M, k, s) | nodes | ours ms | ort ms | ours/ort | ours GFLOP/s | ort GFLOP/s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    conv = [0.0, 0.0]
    for (c, m, k, oh, st), row in table.items():
        key, _ = _conv_key(c, row[5] or oh * st, m, k, oh)
        flops = row[4] / max(1, row[1]) * row[0]
        conv[0] += row[2]
        conv[1] += row[3]
        print(
            f"| {key} | {row[0]}/{row[1]} | {row[2] / 1e3:.3f} | {row[3] / 1e3:.3f} | {row[2] / max(row[3], 1):.2f} | "
            f"{flops / max(row[2], 1) / 1e3:.0f} | {row[4] / max(row[3], 1) / 1e3:.0f} |"
        )
    print(f"| **all convs** | | **{conv[0] / 1e3:.2f}** | **{conv[1] / 1e3:.2f}** | {conv[0] / conv[1]:.2f} | | |")
    for op, (a, b) in sorted(other.items(), key=lambda kv: -max(kv[1])):
        print(f"| {op} | | {a / 1e3:.3f} | {b / 1e3:.3f} | | | |")


def ab_implicit(args) -> None:
    """Two sessions of the ResNet-50, one per side; runs alternate between them with
    TOB_CONV_IMPLICIT=0 / =1 (read on every conv call), profiled; per node the best of each side's
    runs, and each run's process CPU time. One session per side because the memory plan is recorded
    by a session's first run: a side whose convs allocate other scratch than the recorded run missed
    the plan (84 allocations a run went to malloc instead of the arena), so each side plans its own;
    the two share the process's arena (memory/arena_pool.h)."""
    import json

    import torch_ort_backend as tob

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import onnx_models

    bm = onnx_models.light_resnet50(random_weights=True)
    feeds = dict(bm.feeds)
    opts = tob.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.enable_profiling = True
    sessions = {m: tob.InferenceSession(bm.model, opts) for m in ("0", "1")}
    modes = ["0", "1"] * (args.runs + 2)
    cpu = {"0": [], "1": []}
    misses = {"0": 0, "1": 0}
    for m in modes:
        os.environ["TOB_CONV_IMPLICIT"] = m
        t0 = time.process_time()
        sessions[m].run(None, feeds)
        cpu[m].append(time.process_time() - t0)
        misses[m] += sessions[m].last_run_stats()["plan_misses"]
    os.environ.pop("TOB_CONV_IMPLICIT", None)
    runs = {"0": [], "1": []}
    for m, sess in sessions.items():
        trace = sess.end_profiling()
        with open(trace) as f:
            events = [e for e in json.load(f) if e.get("cat") == "Node"]
        os.remove(trace)
        per_run = len(events) // len(cpu[m])
        for i in range(2, len(cpu[m])):  # two warm-up runs of each
            runs[m].append(events[i * per_run : (i + 1) * per_run])
    print(f"memory plan misses over all runs: tiles {misses['0']}, implicit {misses['1']}")
    sums = {"0": {}, "1": {}}
    for m in runs:
        for j, e in enumerate(runs[m][0]):
            best = min(r[j]["dur"] for r in runs[m])
            kind = e["args"]["op_type"]
            if kind in ("Conv", "FusedConv", "NchwcConv"):
                kind = "conv " + ("1x1" if e["name"] in args._pointwise else "kxk")
            sums[m][kind] = sums[m].get(kind, 0.0) + best
    print(f"threads={args.threads} runs={args.runs} per side (alternating) load={os.getloadavg()}")
    print("| | TOB_CONV_IMPLICIT=0 (tiles) ms | =1 (implicit) ms |")
    print("| --- | --- | --- |")
    for kind in sorted(sums["0"], key=lambda k: -sums["0"][k]):
        print(f"| {kind} | {sums['0'][kind] / 1e3:.2f} | {sums['1'][kind] / 1e3:.2f} |")
    print(f"| nodes sum | {sum(sums['0'].values()) / 1e3:.2f} | {sum(sums['1'].values()) / 1e3:.2f} |")
    if args.threads == 1:
        med = {m: statistics.median(cpu[m][2:]) * 1e3 for m in cpu}
        print(f"| run, process CPU time (median) | {med['0']:.2f} | {med['1']:.2f} |")


def ab_nchwc(args) -> None:
    """Two sessions of the ResNet-50, TOB_NCHWC set to each of --ab-modes (default 1 and 0; "convs"
    keeps the stem and its MaxPool NCHW; read when a session is created), their runs alternating in
    one process with no other engine in it; wall and process CPU time per run."""
    import torch_ort_backend as tob

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import onnx_models

    bm = onnx_models.light_resnet50(random_weights=True)
    feeds = dict(bm.feeds)
    modes = args.ab_modes.split(",")
    assert len(modes) == 2, "--ab-modes takes two values"
    sessions = {}
    for mode in modes:
        os.environ["TOB_NCHWC"] = mode
        opts = tob.SessionOptions()
        opts.intra_op_num_threads = args.threads
        sessions[mode] = tob.InferenceSession(bm.model, opts)
    os.environ.pop("TOB_NCHWC", None)
    for sess in sessions.values():
        for _ in range(3):
            sess.run(None, feeds)
    wall, cpu = {m: [] for m in modes}, {m: [] for m in modes}
    for i in range(args.runs):
        for mode in modes if i % 2 == 0 else modes[::-1]:
            t0, c0 = time.perf_counter(), time.process_time()
            sessions[mode].run(None, feeds)
            wall[mode].append(time.perf_counter() - t0)
            cpu[mode].append(time.process_time() - c0)
    print(f"threads={args.threads} runs={args.runs} per side (alternating) load={os.getloadavg()}")
    print("| | wall median ms | wall min ms | CPU time median ms | CPU time min ms |")
    print("| --- | --- | --- | --- | --- |")
    for mode in modes:
        print(
            f"| TOB_NCHWC={mode} | {statistics.median(wall[mode]) * 1e3:.1f} | {min(wall[mode]) * 1e3:.1f} | "
            f"{statistics.median(cpu[mode]) * 1e3:.1f} | {min(cpu[mode]) * 1e3:.1f} |"
        )


def _pointwise_nodes() -> set:
    import tempfile

    import torch_ort_backend as tob

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import onnx_models

    bm = onnx_models.light_resnet50(random_weights=True)
    opts = tob.SessionOptions()
    path = os.path.join(tempfile.mkdtemp(), "optimized.onnx")
    opts.optimized_model_filepath = path
    tob.InferenceSession(bm.model, opts)
    optimized = onnx.load(path)
    inits = {i.name: list(i.dims) for i in optimized.graph.initializer}
    return {
        n.name
        for n in optimized.graph.node
        if n.op_type in ("Conv", "FusedConv", "NchwcConv") and inits[n.input[1]][2:] == [1, 1]
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.2, help="per cell per round")
    ap.add_argument("--cpu-time", action="store_true", help="time.process_time instead of wall time")
    ap.add_argument("--only", default="", help="comma-separated shape indices")
    ap.add_argument("--cells", default="", help="comma-separated columns of " + ",".join(CELLS))
    ap.add_argument("--profile-resnet", action="store_true", help="profile the whole ResNet-50 instead")
    ap.add_argument("--runs", type=int, default=20, help="--profile-resnet: profiled runs")
    ap.add_argument("--compare-ort", action="store_true", help="per-node profile beside onnxruntime's")
    ap.add_argument("--ab-implicit", action="store_true", help="ResNet-50 with TOB_CONV_IMPLICIT=0/1 alternating")
    ap.add_argument("--ab-nchwc", action="store_true", help="ResNet-50 sessions with two TOB_NCHWC values alternating")
    ap.add_argument("--ab-modes", default="1,0", help="--ab-nchwc: the two TOB_NCHWC values (1, 0, convs)")
    args = ap.parse_args()
    if args.ab_nchwc:
        return ab_nchwc(args)
    if args.ab_implicit:
        args._pointwise = _pointwise_nodes()
        return ab_implicit(args)
    if args.compare_ort:
        return compare_ort(args)
    if args.profile_resnet:
        return profile_resnet(args)

    import torch_ort_backend as tob

    clock = time.process_time if args.cpu_time else time.perf_counter
    opts = tob.SessionOptions()
    opts.intra_op_num_threads = args.threads
    rng = np.random.default_rng(0)
    picks = [int(i) for i in args.only.split(",")] if args.only else range(len(SHAPES))
    print(f"threads={args.threads} clock={'process_time' if args.cpu_time else 'perf_counter'} load={os.getloadavg()}")
    names = args.cells.split(",") if args.cells else list(CELLS)
    print("| # | conv (C x H -> M, k, s) | GEMM MxKxN | " + " | ".join(f"{n} GFLOP/s" for n in names) + " | x count |")
    print("| --- " * (len(names) + 4) + "|")
    total = {name: 0.0 for name in names}
    for i in picks:
        count, C, H, M, k, s, p = SHAPES[i]
        oh = (H + 2 * p - k) // s + 1
        K, N = C * k * k, oh * oh
        flops = 2.0 * M * K * N
        conv = conv_model(C, H, M, k, s, p, rng)
        cells = {
            "conv": conv,
            "fed": conv_model(C, H, M, k, s, p, rng, fed=True),
            "W.col": matmul_model((M, K), (K, N), True, rng),
            "colT.WT": matmul_model((N, K), (K, M), False, rng),
            "tiles": conv,
            "implicit": conv,
        }
        cells = {name: cell for name, cell in cells.items() if name in names}
        runs = {}
        for name, (model, feeds) in cells.items():
            sess = tob.InferenceSession(model, opts)
            for _ in range(3):
                sess.run(None, feeds)
            runs[name] = (sess, feeds)
        best = {name: float("inf") for name in cells}
        for _ in range(args.rounds):
            for name, (sess, feeds) in runs.items():
                _implicit_switch(name)
                times = []
                t_end = time.perf_counter() + args.seconds
                while time.perf_counter() < t_end or len(times) < 3:
                    t0 = clock()
                    sess.run(None, feeds)
                    times.append(clock() - t0)
                best[name] = min(best[name], statistics.median(times))
        _implicit_switch("")
        for name in best:
            total[name] += best[name] * count
        g = {name: flops / best[name] / 1e9 for name in best}
        print(
            f"| {i} | {C}x{H} -> {M}, {k}x{k}, s{s} | {M}x{K}x{N} | "
            + " | ".join(f"{g[n]:.0f}" for n in names)
            + f" | {count} |",
            flush=True,
        )
    print("sum over ResNet-50's convs (ms): " + ", ".join(f"{n} {t * 1e3:.2f}" for n, t in total.items()))


if __name__ == "__main__":
    sys.exit(main())
