"""One-node pooling sessions against onnxruntime: ours and onnxruntime's alternating run by run in
one process, process CPU time per run (one thread), the median and the best over --runs runs.

    python benchmarks/bench_pool.py [--runs 300] [--threads 1]

Shapes: ResNet-50's stem MaxPool (3x3, stride 2, pad 1 on 64x112x112), the same with Indices, a
stride-1 3x3 MaxPool, and a global max pool.
"""

import argparse
import os
import statistics
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

CASES = [
    ("MaxPool 3x3 s2 p1, 64x112x112", [1, 64, 112, 112], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), 1),
    ("MaxPool 3x3 s2 p1 + Indices", [1, 64, 112, 112], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), 2),
    ("MaxPool 3x3 s1 p1, 64x56x56", [1, 64, 56, 56], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), 1),
    ("MaxPool 2x2 s2, 128x56x56", [1, 128, 56, 56], dict(kernel_shape=[2, 2], strides=[2, 2]), 1),
    ("GlobalMaxPool, 2048x7x7", [1, 2048, 7, 7], None, 1),
]


def _model(shape, attrs, n_out):
    outs = ["y", "i"][:n_out]
    if attrs is None:
        node = helper.make_node("GlobalMaxPool", ["x"], ["y"])
    else:
        node = helper.make_node("MaxPool", ["x"], outs, **attrs)
    graph = helper.make_graph(
        [node],
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT if o == "y" else TensorProto.INT64, None) for o in outs],
    )
    graph = onnx.shape_inference.infer_shapes(helper.make_model(graph)).graph
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import onnxruntime as ort

    import torch_ort_backend as tob

    print(f"threads={args.threads} runs={args.runs} load={os.getloadavg()}")
    print("| node | ours ms (median / best) | onnxruntime ms (median / best) | ours/ort (median) |")
    print("| --- | --- | --- | --- |")
    rng = np.random.default_rng(0)
    for name, shape, attrs, n_out in CASES:
        model = _model(shape, attrs, n_out)
        x = rng.standard_normal(shape).astype(np.float32)
        opts = tob.SessionOptions()
        opts.intra_op_num_threads = args.threads
        ours = tob.InferenceSession(model.SerializeToString(), opts)
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        theirs = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        a = ours.run(None, {"x": x})
        b = theirs.run(None, {"x": x})
        for u, v in zip(a, b):
            np.testing.assert_array_equal(np.asarray(u), v)
        times = {"ours": [], "ort": []}
        for _ in range(args.runs):
            for key, sess in (("ours", ours), ("ort", theirs)):
                t0 = time.process_time()
                sess.run(None, {"x": x})
                times[key].append(time.process_time() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        best = {k: min(v) * 1e3 for k, v in times.items()}
        print(
            f"| {name} | {med['ours']:.3f} / {best['ours']:.3f} | {med['ort']:.3f} / {best['ort']:.3f} | "
            f"{med['ours'] / med['ort']:.2f} |"
        )


if __name__ == "__main__":
    main()
