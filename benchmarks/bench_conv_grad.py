"""Convolution backward: torch's CPU kernel (aten.convolution_backward, oneDNN) against the engine's
ConvGrad, per conv shape and in whole training steps.

    python benchmarks/bench_conv_grad.py                      # both parts, ~3 min
    python benchmarks/bench_conv_grad.py --part shapes        # per shape only
    python benchmarks/bench_conv_grad.py --part models --models hf/resnet,bench/cnn

One intra-op thread and CPU time (time.process_time), so that a shared machine's load from other
processes counts little; every figure is the fastest of 3 medians of --seconds of calls.

shapes: every conv of the CNN benchmark model (small and bench sizes) and of the HuggingFace ResNet
and ConvNeXt of benchmarks/hf_architectures.py, as one ConvGrad node run by our InferenceSession
against aten.convolution_backward with the same output mask (the first layer's input gradient is not
asked for), and the rule the exporter applies (ops_training._torch_conv_grad_wins) beside it.

models: a training step (forward, backward, SGD) of each model, eager, "ort" with every conv
backward on torch's kernel (prefer_torch_kernels=["convolution_backward"], the default before the
per-shape rule) and "ort" as it is by default, interleaved round after round in one process, each
compiled through its own code object (variant_compile.fresh_forward).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

# (x shape, out channels, kernel, stride, pad, groups, input gradient asked for)
SHAPES = [
    ((8, 1, 28, 28), 8, 3, 1, 0, 1, False), ((8, 8, 26, 26), 16, 3, 1, 0, 1, True),  # CNN, small
    ((32, 1, 28, 28), 16, 3, 1, 0, 1, False), ((32, 16, 26, 26), 32, 3, 1, 0, 1, True),  # CNN, bench
    ((4, 3, 32, 32), 32, 7, 2, 3, 1, False), ((4, 32, 8, 8), 32, 3, 1, 1, 1, True),  # HF ResNet
    ((4, 32, 8, 8), 64, 3, 2, 1, 1, True), ((4, 64, 4, 4), 64, 3, 1, 1, 1, True),
    ((4, 32, 8, 8), 64, 1, 2, 0, 1, True), ((4, 64, 4, 4), 128, 3, 2, 1, 1, True),
    ((4, 128, 2, 2), 128, 3, 1, 1, 1, True), ((4, 128, 2, 2), 256, 3, 2, 1, 1, True),
    ((4, 256, 1, 1), 256, 3, 1, 1, 1, True),
    ((4, 3, 32, 32), 32, 4, 4, 0, 1, False), ((4, 32, 8, 8), 32, 7, 1, 3, 32, True),  # HF ConvNeXt
    ((4, 32, 8, 8), 64, 2, 2, 0, 1, True), ((4, 64, 4, 4), 64, 7, 1, 3, 64, True),
    ((4, 128, 2, 2), 128, 7, 1, 3, 128, True), ((4, 256, 1, 1), 256, 7, 1, 3, 256, True),
]
MODELS = ("small/cnn", "bench/cnn", "hf/resnet", "hf/convnext", "hf/vit", "hf/swin")


def _timed(fn, seconds: float) -> float:
    """The fastest of 3 medians of `seconds` of calls, in ms of CPU time."""
    best = float("inf")
    for _ in range(3):
        samples, end = [], time.process_time() + seconds
        while time.process_time() < end or len(samples) < 5:
            start = time.process_time()
            fn()
            samples.append(time.process_time() - start)
        best = min(best, statistics.median(samples))
    return best * 1e3


def _conv_grad_session(dy, x, w, k, s, p, g, dx):
    from onnx import TensorProto, helper

    from torch_ort_backend import InferenceSession

    outs = ["dX" if dx else "", "dW", "dB"]
    node = helper.make_node("ConvGrad", ["dY", "X", "W"], outs, domain="com.microsoft", kernel_shape=[k, k],
                            strides=[s, s], pads=[p] * 4, group=g)

    def vi(name, t):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(t.shape))

    shapes = [x, w, torch.empty(w.shape[0])]
    graph = helper.make_graph([node], "conv_grad", [vi("dY", dy), vi("X", x), vi("W", w)],
                              [vi(o, t) for o, t in zip(outs, shapes) if o])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    return InferenceSession(model.SerializeToString())


def shapes_part(seconds: float) -> None:
    from torch_ort_backend.exporter.ops_training import _torch_conv_grad_wins

    print("| x | out ch, kernel, stride, groups | dX | torch ms | ours ms | ours / torch | rule picks |")
    print("|---|---|---|---:|---:|---:|---|")
    total = {"torch": 0.0, "ours": 0.0, "rule": 0.0}
    for xs, m, k, s, p, g, dx in SHAPES:
        torch.manual_seed(0)
        x, w = torch.randn(xs), torch.randn(m, xs[1] // g, k, k)
        dy = torch.randn_like(torch.nn.functional.conv2d(x, w, None, s, p, 1, g))
        mask = [dx, True, True]
        sess = _conv_grad_session(dy, x, w, k, s, p, g, dx)
        feeds = {"dY": dy, "X": x, "W": w}

        def theirs():
            return torch.ops.aten.convolution_backward(dy, x, w, [m], [s, s], [p, p], [1, 1], False, [0, 0], g, mask)

        def ours():
            return sess.run(None, feeds, as_torch=True)

        ref = [r for r in theirs() if r is not None]
        for a, b in zip(ours(), ref):  # the same gradients, or the timing means nothing
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3 * float(b.abs().max()))
        t_torch, t_ours = _timed(theirs, seconds), _timed(ours, seconds)

        class _Shape:  # what the converter reads of grad_output
            @staticmethod
            def static_shape():
                return list(dy.shape)

        torch_picked = _torch_conv_grad_wins(_Shape, [s, s])
        total["torch"] += t_torch
        total["ours"] += t_ours
        total["rule"] += t_torch if torch_picked else t_ours
        print(f"| {list(xs)} | {m}, {k}x{k}, {s}, {g} | {'yes' if dx else 'no'} | {t_torch:.3f} | {t_ours:.3f} | "
              f"{t_ours / t_torch:.2f} | {'torch' if torch_picked else 'ours'} |", flush=True)
    print(f"\nsum over the shapes: torch {total['torch']:.2f} ms, ours {total['ours']:.2f} ms, "
          f"the rule's pick {total['rule']:.2f} ms")


def models_part(models: list[str], rounds: int, seconds: float) -> None:
    from bench_sweep import _build
    from variant_compile import engine_ops, fresh_forward, graph_serials

    from torch_ort_backend.testing.models import extract_loss

    variants = (("eager", None), ("ort, torch's conv backward", {"prefer_torch_kernels": ["convolution_backward"]}),
                ("ort (default)", {}))
    print("| model | eager ms | ort, torch's conv backward ms | ort (default) ms | default / torch's | ConvGrad nodes |")
    print("|---|---:|---:|---:|---:|---|")
    for spec in models:
        group, name = spec.split("/")
        make_model, make_batch = _build(group, name)
        torch.manual_seed(0)
        base, batch = make_model(), make_batch()
        if hasattr(base, "config"):
            base.config.use_cache = False
        steps, convgrad = {}, False
        for tag, options in variants:
            model = copy.deepcopy(base).train()
            optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
            forward = fresh_forward(f"{name}_{len(steps)}")
            before = graph_serials()
            fn = forward if options is None else torch.compile(forward, backend="ort", options=options)

            def step(model=model, fn=fn, optimizer=optimizer):
                loss = extract_loss(fn(model, batch))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

            for _ in range(3):
                step()
            if tag == "ort (default)":
                convgrad = "ConvGrad" in engine_ops(before)
            steps[tag] = step
        medians: dict[str, list[float]] = {tag: [] for tag in steps}
        for _ in range(rounds):
            for tag, step in steps.items():
                samples, end = [], time.process_time() + seconds
                while time.process_time() < end or len(samples) < 3:
                    start = time.process_time()
                    step()
                    samples.append(time.process_time() - start)
                medians[tag].append(statistics.median(samples))
        ms = [statistics.median(medians[tag]) * 1e3 for tag, _ in variants]
        print(f"| {spec} | {ms[0]:.2f} | {ms[1]:.2f} | {ms[2]:.2f} | {ms[2] / ms[1]:.2f} | "
              f"{'yes' if convgrad else 'no'} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("shapes", "models", "both"), default="both")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.2)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.part in ("shapes", "both"):
        shapes_part(args.seconds)
    if args.part in ("models", "both"):
        print()
        models_part([m for m in args.models.split(",") if m], args.rounds, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
