"""Pre-packed constant weights, A/B in one process: bench_onnx_models' MLP (batch 64,
1024-4096-4096-1024) with its weights as initializers (MatMul pre-packs them once per session)
against the same graph with the weights fed as graph inputs (nothing to pre-pack: B is packed on
every call), and onnxruntime on the first. Interleaved runs; best and median per variant.

    PYTHONPATH=. python benchmarks/bench_prepacked_mlp.py [--runs 15] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnx
import torch
from onnx import numpy_helper

import onnx_models
import torch_ort_backend as tob


def weights_as_inputs(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The model with every 2-D initializer turned into a graph input, and those arrays."""
    fed = onnx.ModelProto()
    fed.CopyFrom(model)
    weights, keep = {}, []
    for t in fed.graph.initializer:
        arr = numpy_helper.to_array(t)
        if arr.ndim == 2:
            weights[t.name] = arr
            fed.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(arr.shape)))
        else:
            keep.append(t)
    del fed.graph.initializer[:]
    fed.graph.initializer.extend(keep)
    return fed, weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="interleaved rounds")
    parser.add_argument("--threads", type=int, default=0, help="torch (and so engine) threads; 0: as is")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    bm = onnx_models.mlp()
    fed_model, weights = weights_as_inputs(bm.model)
    x = {k: v.numpy() for k, v in bm.feeds.items()}
    packed, unpacked = tob.InferenceSession(bm.model), tob.InferenceSession(fed_model)
    runs = {"pre-packed": lambda: packed.run(None, x), "unpacked": lambda: unpacked.run(None, {**x, **weights})}
    try:
        import onnxruntime as ort

        o = ort.InferenceSession(bm.model.SerializeToString(), providers=["CPUExecutionProvider"])
        runs["onnxruntime"] = lambda: o.run(None, x)
    except ImportError:
        pass
    diff = float(np.abs(runs["pre-packed"]()[0] - runs["unpacked"]()[0]).max())
    stats = packed.last_run_stats()
    print(f"threads {torch.get_num_threads()}, pre-packed constants {stats['prepacked_constants']} "
          f"({stats['prepacked_bytes'] / 2**20:.0f} MiB), max |pre-packed - unpacked| {diff:.1e}")
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.runs):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    for name, t in times.items():
        print(f"{name:12s} best {min(t) * 1e3:8.2f} ms   median {statistics.median(t) * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()
