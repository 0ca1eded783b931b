"""Convolutions over a batch of images with a few output positions each (an image classifier's last
stages at small resolutions), one Conv node per model, with conv.cc's batch-folded path (one GEMM
over every image's columns) against the per-image paths (TOB_CONV_BATCH_FOLD=0).

    python benchmarks/bench_conv_batch_fold.py [--repeats 3] [--seconds 0.2] [--packed]

Weights are fed as a graph input (training's case: nothing to pre-pack) unless --packed makes them an
initializer (inference's case, where the per-image tiles read pre-packed weights and the fold is
not taken by default; TOB_CONV_BATCH_FOLD=1 forces it for the comparison). The switch is read once
per process, so each measurement is its own process, the two variants alternating --repeats times;
a process times its session by the process's CPU time, one thread, best of 5 rounds of --seconds.
Reported: microseconds per run, median over the repeats, and per-image / folded.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

# (N, C, H, M, kernel, stride, pad): HuggingFace ResNet's stages at 32x32 images (batch 4), and others
SHAPES = [(4, 256, 1, 256, 3, 1, 1), (4, 128, 2, 256, 3, 2, 1), (4, 128, 2, 128, 3, 1, 1), (4, 64, 4, 128, 3, 2, 1),
          (4, 128, 3, 128, 3, 1, 1), (4, 128, 4, 128, 3, 1, 1), (16, 64, 4, 64, 3, 1, 1), (4, 64, 4, 64, 3, 1, 1)]


def _worker(shape: str, packed: bool, seconds: float) -> float:
    import numpy as np
    import torch
    from onnx import TensorProto, helper, numpy_helper

    import torch_ort_backend as tob

    torch.set_num_threads(1)
    N, C, H, M, k, s, p = (int(v) for v in shape.split(","))
    out = (H + 2 * p - k) // s + 1
    rng = np.random.default_rng(0)
    w = rng.standard_normal((M, C, k, k)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, C, H, H])]
    if not packed:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [M, C, k, k]))
    graph = helper.make_graph([node], "conv", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                                     [N, M, out, out])],
                              [numpy_helper.from_array(w, "w")] if packed else [])
    sess = tob.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    feeds = {"x": rng.standard_normal((N, C, H, H)).astype(np.float32)}
    if not packed:
        feeds["w"] = w
    for _ in range(20):
        sess.run(None, feeds)
    best = float("inf")
    for _ in range(5):
        t0, n = time.process_time(), 0
        while time.process_time() - t0 < seconds:
            sess.run(None, feeds)
            n += 1
        best = min(best, (time.process_time() - t0) / n * 1e6)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=0.2)
    ap.add_argument("--packed", action="store_true", help="weights as an initializer (pre-packed)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(f"{_worker(args.worker, args.packed, args.seconds):.2f}")
        return 0
    fold = "1" if args.packed else ""  # packed weights fold only when forced
    print(f"Conv, weights {'pre-packed' if args.packed else 'fed'}, 1 thread, CPU us per run, median of "
          f"{args.repeats} alternating process pairs, {time.strftime('%Y-%m-%d')}, "
          f"loadavg {os.getloadavg()[0]:.1f}\n")
    print("| X (N, C, H, H) | W (M, k, stride, pad) | positions | per image us | folded us | per image / folded |")
    print("|---|---|---:|---:|---:|---:|")
    for shape in SHAPES:
        spec = ",".join(str(v) for v in shape)
        times: dict[str, list[float]] = {"0": [], fold: []}
        for _ in range(args.repeats):
            for value in ("0", fold):
                env = dict(os.environ, TOB_CONV_BATCH_FOLD=value)
                cmd = [sys.executable, os.path.abspath(__file__), "--worker", spec, "--seconds", str(args.seconds)]
                out = subprocess.run(cmd + (["--packed"] if args.packed else []), env=env, capture_output=True,
                                     text=True, check=True).stdout
                times[value].append(float(out.strip().splitlines()[-1]))
        per_image, folded = statistics.median(times["0"]), statistics.median(times[fold])
        N, C, H, M, k, s, p = shape
        out = (H + 2 * p - k) // s + 1
        print(f"| {N}, {C}, {H}, {H} | {M}, {k}x{k}, {s}, {p} | {out * out} | {per_image:.1f} | {folded:.1f} | "
              f"{per_image / folded:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
