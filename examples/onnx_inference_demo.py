"""torch_ort_backend in one minute: run a ResNet-50 from the onnx package on our engine and check
it against onnxruntime and the onnx reference evaluator.

    PYTHONPATH=. python examples/onnx_inference_demo.py [--model PATH] [--runs N]

Exits with status 1 if our outputs disagree with either reference (relative error above 1e-4).
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time

import numpy as np
import onnx
from onnx import helper

import torch_ort_backend as tob

RTOL = 1e-4


def light_resnet50_path() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_resnet50.onnx")


def with_logits_output(model: onnx.ModelProto) -> onnx.ModelProto:
    """Also returns the classifier's input to Softmax: the light model's weights are constants, so
    its probabilities are all 0.001 whatever the image, while the logits still carry the whole
    network's arithmetic."""
    gemm = [n for n in model.graph.node if n.op_type == "Gemm"]
    if not gemm or gemm[-1].output[0] in {o.name for o in model.graph.output}:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    rank = len(model.graph.output[0].type.tensor_type.shape.dim) or 2
    dims = [f"logits_{i}" for i in range(rank)]
    out.graph.output.append(helper.make_tensor_value_info(gemm[-1].output[0], onnx.TensorProto.FLOAT, dims))
    return out


def reference_evaluator(model: onnx.ModelProto):
    """onnx.reference.ReferenceEvaluator, with BatchNormalization fixed to inference mode.

    Its opset-9 BatchNormalization blends in the batch statistics whenever `momentum` is set, and
    the schema always sets it (default 0.9), so a plain one-output inference node comes out wrong
    (onnx/onnx PR #8442, open). A one-output BatchNormalization is inference at every opset.
    """
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun

    class BatchNormalization(OpRun):
        op_domain = ""

        def _run(self, x, scale, bias, mean, var, epsilon=None, momentum=None, training_mode=None):
            if len(self.onnx_node.output) != 1 or training_mode:
                raise NotImplementedError("the demo's reference runs BatchNormalization in inference mode only")
            shape = (1, -1) + (1,) * (x.ndim - 2)
            eps = 1e-5 if epsilon is None else epsilon
            y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * scale.reshape(shape)
            return ((y + bias.reshape(shape)).astype(x.dtype),)

    return ReferenceEvaluator(model, new_ops=[BatchNormalization])


def median_ms(run, runs: int) -> float:
    run()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def relative_error(ours: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    diff = float(np.max(np.abs(ours.astype(np.float64) - reference)))
    return diff, diff / max(float(np.max(np.abs(reference))), 1e-30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a ResNet-50 on torch_ort_backend and compare.")
    parser.add_argument("--model", default=light_resnet50_path(), help="ONNX model (default: onnx's light ResNet-50)")
    parser.add_argument("--runs", type=int, default=10, help="timed runs per engine")
    args = parser.parse_args(argv)

    import onnxruntime as ort
    import torch
    model = with_logits_output(onnx.load(args.model))
    (inp,) = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
    image = np.random.default_rng(0).random(shape, dtype=np.float32)
    feeds = {inp.name: image}
    output_names = [o.name for o in model.graph.output]
    print(f"model  {os.path.basename(args.model)}: {len(model.graph.node)} nodes, input {inp.name} {shape}")

    start = time.perf_counter()
    try:
        sess = tob.InferenceSession(model)
        ours = sess.run(None, feeds)
    except tob.EngineError as exc:
        print(f"\nFAILED: torch_ort_backend could not run the model:\n  {type(exc).__name__}: {exc}")
        return 1
    print(f"ours   session + first run {time.perf_counter() - start:.2f} s, {torch.get_num_threads()} threads")

    ort_opts = ort.SessionOptions()
    ort_opts.intra_op_num_threads = torch.get_num_threads()
    ort_opts.log_severity_level = 3
    ort_sess = ort.InferenceSession(model.SerializeToString(), ort_opts, providers=["CPUExecutionProvider"])
    references = {"onnxruntime": ort_sess.run(None, feeds)}
    start = time.perf_counter()
    references["onnx.reference"] = reference_evaluator(model).run(None, feeds)
    print(f"ref    onnx.reference.ReferenceEvaluator took {time.perf_counter() - start:.1f} s")

    print("\naccuracy (max abs diff, relative to the reference's max |value|):")
    ok = True
    for ref_name, ref_outputs in references.items():
        for name, mine, theirs in zip(output_names, ours, ref_outputs):
            diff, rel = relative_error(np.asarray(mine), np.asarray(theirs))
            good = rel <= RTOL and np.asarray(mine).shape == np.asarray(theirs).shape
            ok &= good
            print(f"  vs {ref_name:<15} {name:<18} max abs diff {diff:.2e}  rel {rel:.1e}  {'ok' if good else 'MISMATCH'}")
    top = int(np.argmax(ours[0]))
    print(f"  top class {top} (p={float(np.asarray(ours[0]).ravel()[top]):.4f})")

    ours_ms = median_ms(lambda: sess.run(None, feeds), args.runs)
    ort_ms = median_ms(lambda: ort_sess.run(None, feeds), args.runs)
    print(f"\nlatency (median of {args.runs}): ours {ours_ms:.1f} ms, onnxruntime {ort_ms:.1f} ms "
          f"(ours/onnxruntime = {ours_ms / ort_ms:.2f}; > 1 = we are slower)")

    report = sess.partition_report().strip().splitlines()
    ops = collections.Counter(line.split()[1] for line in report[1:-1] if len(line.split()) >= 3)
    print(f"\npartition: {report[-1] if report else '(empty)'}")
    print("  ops: " + ", ".join(f"{op} x{n}" for op, n in ops.most_common()))
    stats = sess.last_run_stats()
    print(f"memory: peak intermediates {stats.get('peak_bytes', 0) / 2**20:.1f} MiB, "
          f"arena {stats.get('arena_bytes', 0) / 2**20:.1f} MiB, planned={stats.get('planned')}")

    print("\nOK: torch_ort_backend matches onnxruntime and the onnx reference." if ok
          else "\nFAILED: torch_ort_backend disagrees with a reference (see MISMATCH above).")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
