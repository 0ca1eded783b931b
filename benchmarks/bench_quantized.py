"""The integer GEMM: MatMulInteger (uint8 x int8 -> int32) and QLinearConv on the engine, with
the AVX-512 VNNI kernel and with the portable one (TOB_QGEMM=portable, a second process), beside
onnxruntime's and the engine's own float32 MatMul / Conv of the same shape. The int32 results
must equal onnxruntime's; requantized ones may differ by 1 where onnxruntime's float32 product
rounds differently from the float64 one we (and onnx's reference) use.

    PYTHONPATH=. python benchmarks/bench_quantized.py [--threads 2] [--rounds 15]

Time = median of `rounds` session runs (numpy inputs), each engine timed in turn.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
from onnx import TensorProto, helper

MATMULS = [(128, 768, 768), (512, 768, 3072), (16, 4096, 4096)]  # M, K, N
CONVS = [(1, 64, 56, 56, 64, 3), (1, 256, 14, 14, 256, 3)]        # N, C, H, W, M, k


def _model(node, inputs, outputs, opset):
    g = helper.make_graph([node], "g", inputs, outputs)
    # IR 8 (opsets <= 19): what onnxruntime 1.31 loads (it refuses onnx 1.23's default IR 14).
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _io(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


def cases():
    rng = np.random.default_rng(0)
    out = []
    for m, k, n in MATMULS:
        a = rng.integers(0, 256, (m, k)).astype(np.uint8)
        b = rng.integers(-128, 128, (k, n)).astype(np.int8)
        feeds = {"a": a, "b": b, "za": np.array(128, np.uint8), "zb": np.array(3, np.int8)}
        q = _model(helper.make_node("MatMulInteger", list(feeds), ["y"]),
                   [_io("a", TensorProto.UINT8, [m, k]), _io("b", TensorProto.INT8, [k, n]),
                    _io("za", TensorProto.UINT8, []), _io("zb", TensorProto.INT8, [])],
                   [_io("y", TensorProto.INT32, [m, n])], 10)
        f = _model(helper.make_node("MatMul", ["a", "b"], ["y"]),
                   [_io("a", TensorProto.FLOAT, [m, k]), _io("b", TensorProto.FLOAT, [k, n])],
                   [_io("y", TensorProto.FLOAT, [m, n])], 13)
        ffeeds = {"a": a.astype(np.float32), "b": b.astype(np.float32)}
        out.append((f"MatMulInteger {m}x{k}x{n}", 2 * m * k * n, q, feeds, f, ffeeds))
    for n_, c, h, w, mo, ks in CONVS:
        x = rng.integers(0, 256, (n_, c, h, w)).astype(np.uint8)
        wt = rng.integers(-128, 128, (mo, c, ks, ks)).astype(np.int8)
        feeds = {"x": x, "xs": np.array(0.02, np.float32), "xz": np.array(120, np.uint8), "w": wt,
                 "ws": np.full(mo, 0.01, np.float32), "wz": np.zeros(mo, np.int8), "ys": np.array(0.5, np.float32),
                 "yz": np.array(128, np.uint8)}
        q = _model(helper.make_node("QLinearConv", list(feeds), ["y"], pads=[1, 1, 1, 1]),
                   [_io("x", TensorProto.UINT8, list(x.shape)), _io("xs", TensorProto.FLOAT, []),
                    _io("xz", TensorProto.UINT8, []), _io("w", TensorProto.INT8, list(wt.shape)),
                    _io("ws", TensorProto.FLOAT, [mo]), _io("wz", TensorProto.INT8, [mo]),
                    _io("ys", TensorProto.FLOAT, []), _io("yz", TensorProto.UINT8, [])],
                   [_io("y", TensorProto.UINT8, [n_, mo, h, w])], 10)
        f = _model(helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
                   [_io("x", TensorProto.FLOAT, list(x.shape)), _io("w", TensorProto.FLOAT, list(wt.shape))],
                   [_io("y", TensorProto.FLOAT, [n_, mo, h, w])], 13)
        ffeeds = {"x": x.astype(np.float32), "w": wt.astype(np.float32)}
        out.append((f"QLinearConv {c}x{h}x{w} -> {mo}, {ks}x{ks}", 2 * n_ * mo * c * ks * ks * h * w, q, feeds, f,
                    ffeeds))
    return out


def _time(run, rounds):
    run()
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        run()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def worker(threads: int, rounds: int) -> dict:
    import onnxruntime as ort

    import torch_ort_backend as tob
    from torch_ort_backend._engine import C

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    # onnxruntime's workers spin after each run; in one process with ours they would take the cores
    # our pool runs on (and the reverse), so neither spins here.
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts = tob.SessionOptions()
    opts.intra_op_num_threads = threads
    res = {"isa": C.qgemm_isa(), "rows": []}
    for name, flops, q, feeds, f, ffeeds in cases():
        ours = tob.InferenceSession(q, opts)
        theirs = ort.InferenceSession(q.SerializeToString(), so, providers=["CPUExecutionProvider"])
        ours_f = tob.InferenceSession(f, opts)
        # int32 sums agree exactly; requantized outputs within 1 (onnxruntime multiplies in float32,
        # we in float64 as onnx's reference does).
        a, b = ours.run(None, feeds)[0], theirs.run(None, feeds)[0]
        assert np.abs(a.astype(np.int64) - b).max() <= (0 if a.dtype == np.int32 else 1), name
        t = {"ours": _time(lambda: ours.run(None, feeds), rounds),
             "ours_float32": _time(lambda: ours_f.run(None, ffeeds), rounds),
             "onnxruntime": _time(lambda: theirs.run(None, feeds), rounds)}
        res["rows"].append({"case": name, "gops": flops / 1e9, **t})
    return res


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--worker", action="store_true")
    a = p.parse_args()
    if a.worker:
        print(json.dumps(worker(a.threads, a.rounds)))
        return
    results = {}
    for label, env in (("vnni", {}), ("portable", {"TOB_QGEMM": "portable"})):
        out = subprocess.run([sys.executable, __file__, "--worker", "--threads", str(a.threads), "--rounds",
                              str(a.rounds)], env={**os.environ, **env}, capture_output=True, text=True, check=True)
        results[label] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"kernel chosen by default: {results['vnni']['isa']}; threads {a.threads}; ms, median of {a.rounds}")
    print(f"{'case':38s} {'ours':>8s} {'portable':>9s} {'ort':>8s} {'f32 ours':>9s}  GOPS ours / ort")
    for r, rp in zip(results["vnni"]["rows"], results["portable"]["rows"]):
        print(f"{r['case']:38s} {r['ours'] * 1e3:8.2f} {rp['ours'] * 1e3:9.2f} {r['onnxruntime'] * 1e3:8.2f} "
              f"{r['ours_float32'] * 1e3:9.2f}  {r['gops'] / r['ours']:6.0f} / {r['gops'] / r['onnxruntime']:4.0f}")


if __name__ == "__main__":
    main()
