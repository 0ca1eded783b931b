"""Per-call overhead of a compiled call (issue 15): a one-Linear model (Linear(8, 8), batch 4), where
the arithmetic is nothing and every microsecond is the run path's.

    python benchmarks/bench_call_overhead.py [--rounds 15] [--calls 200] [--threads 2] [--json PATH]

Runners, alternating in one process (round after round, each timing --calls calls), so that load
from other processes hits all of them alike:
  eager       the nn.Module itself
  floor       torch.compile with a backend whose code does nothing (hands back cached outputs):
              TorchDynamo's own per-call cost, the floor under every backend
  dynamo      torch.compile(backend="eager"): TorchDynamo's guards and frame, the FX graph in Python
  aot_eager   torch.compile(backend="aot_eager"): dynamo plus AOTAutograd's runtime wrappers
  inductor    torch.compile(): Inductor's compiled code behind the same dynamo and AOTAutograd
  ort_lean_off  torch.compile(backend="ort", options={"lean_call": False}): AOTAutograd's runtime
              wrappers around our graphs on every call (the code before lean_call.py)
  ort_dlpack  "ort" with its graphs' fast path exchanging DLPack capsules instead of calling
              Session.run_torch (CompiledGraph._torch_exchange off; the code before run_torch)
  ort         torch.compile(backend="ort"), its default: lean_call.py's path where it applies
Modes: infer (one forward under torch.no_grad()) and train (forward, then backward of out.sum()).
Reported: the fastest round's microseconds per call (the least disturbed by other processes) and
the median round's, and ort's ratio to each runner's fastest round.

"ort" by component, each measured by its own timer loop in the same process (best of --rounds):
  engine graphs    CompiledGraph.__call__ with the arguments AOTAutograd passed it (captured once):
                   everything of ours, per graph (forward and backward in train mode)
  dynamo + wrapper the compiled call minus the engine graphs: TorchDynamo's guards and frame,
                   the region's wrapper (lean_call.py's, else AOTAutograd's) and, in train mode,
                   autograd's engine, out.sum() and its backward (the 'dynamo' runner's excess over
                   eager bounds dynamo's share)
  lean wrapper     lean_call.py's call (in train: its forward, the autograd.Function's apply) on
                   the arguments the graph was given, minus the graph's own call
  lean backward    train: a step through lean_call.py's call (forward, out.sum(), backward) minus
                   its forward and minus out.sum().backward() on a leaf of the output's shape
  in each graph:
    engine call    Session.torch_runner()'s call (Session.run_torch without pybind11's argument
                   dispatch; run_torch itself for a graph that donates inputs), the fast path's one
                   call into the engine: each input's
                   memory borrowed from its torch tensor, the input checks, the memory plan, the
                   executor's steps, each output wrapped in a new torch tensor
    bookkeeping    the rest of CompiledGraph.__call__ (run counters, memory_stats' record, the
                   output plan)
    lean run       CompiledGraph.lean_run, what lean_call.py's region calls instead of __call__
                   (run_list's common case as one closure; run_list itself otherwise), and its
                   bookkeeping (lean run minus engine call)
    DLPack path    for comparison, the same engine run exchanging DLPack capsules (the fast path
                   before Session.run_torch, and of an engine built without torch): torch's C-level
                   export of the inputs, Session.run_positional, torch's import of the outputs
  per-node dispatch  the executor's cost per node: the run time of a chain of 51 Add nodes on
                   [4, 8] tensors minus a chain of 1, over 50 (optimisation level 0, no fusion),
                   through Session.run_torch

"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Callable


def _best_us(fn: Callable[[], object], calls: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def _floor_backend(gm, example_inputs):
    """A backend whose compiled code does nothing: it hands back the outputs of its first call
    (leaves, so that a training step's out.sum().backward() runs). What is left is TorchDynamo's own
    cost per call, the floor of every backend: its guards, frame and torch._dynamo.disable wrapper."""
    import torch

    cache: list = []

    def call(*args):
        if not cache:
            with torch.no_grad():
                cache.extend(o.detach().requires_grad_(o.is_floating_point()) for o in gm(*args))
        return tuple(cache)
    return call


def _use_dlpack_exchange(torch, runner: Callable, step: Callable) -> None:
    """Compiles the runner's graphs (two calls) and turns their Session.run_torch exchange off."""
    from torch_ort_backend.compiled_graph import live_graphs

    before = {id(g) for g in live_graphs()}
    step(runner)
    step(runner)
    graphs = [g for g in live_graphs() if id(g) not in before and g.session is not None]
    if not graphs:
        raise RuntimeError("the ort_dlpack runner compiled no engine graph")
    for g in graphs:
        g._torch_exchange = False
        g._make_lean_run()  # the lean path's closure calls the runner: back to run_list


def _runners(torch, model):
    return {
        "eager": model,
        "floor": torch.compile(model, backend=_floor_backend),
        "dynamo": torch.compile(model, backend="eager"),
        "aot_eager": torch.compile(model, backend="aot_eager"),
        "inductor": torch.compile(model),
        "ort_lean_off": torch.compile(model, backend="ort", options={"lean_call": False}),
        # its own options object, so that TorchDynamo gives it graphs of its own (checked by ort_components)
        "ort_dlpack": torch.compile(model, backend="ort", options={"lean_call": True}),
        "ort": torch.compile(model, backend="ort"),
    }


def _step(torch, mode: str, x) -> Callable:
    if mode == "infer":
        def infer(f):
            with torch.no_grad():
                f(x)
        return infer

    def train(f):
        f(x).sum().backward()
    return train


def time_runners(torch, runners: dict, step: Callable, calls: int, rounds: int) -> dict:
    for f in runners.values():
        for _ in range(20):
            step(f)
    per_round: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, f in runners.items():
            start = time.perf_counter()
            for _ in range(calls):
                step(f)
            per_round[name].append((time.perf_counter() - start) / calls * 1e6)
    return {name: {"best_us": min(v), "median_us": statistics.median(v)} for name, v in per_round.items()}


def ort_components(torch, compiled, step: Callable, calls: int, rounds: int) -> dict:
    """The engine graphs' share of an 'ort' call and its parts (the module docstring)."""
    from torch_ort_backend.compiled_graph import _from_dlpack, _to_dlpack, live_graphs

    graphs = [g for g in live_graphs() if g.session is not None]
    captured: dict[int, list] = {}
    originals = {}
    lean_runs = {}
    for g in graphs:
        originals[id(g)] = g._run_fast
        lean_runs[id(g)] = g.lean_run
        def spy(args, g=g):
            captured.setdefault(id(g), list(args))
            return originals[id(g)](args)
        def lean_spy(args, g=g):
            captured.setdefault(id(g), list(args))
            return lean_runs[id(g)](args)
        g._run_fast = spy
        g.lean_run = lean_spy
    step(compiled)
    for g in graphs:
        del g._run_fast  # the class's method again
        g.lean_run = lean_runs[id(g)]
    out: dict = {"graphs": {}}
    # lean_call.py's region wrapper alone: its lean call on the arguments its graph was given (no
    # parameters are lifted when TorchDynamo inlines modules, so they are the region's arguments)
    import gc

    from torch_ort_backend.lean_call import live_regions

    gc.collect()
    regions = [r for r in live_regions() if r.lean[0] is not None]
    for r in regions[-1:]:
        g = r._graph("inference" if r.inference else "forward")
        args = captured.get(id(g))
        if args is None or r.params:
            continue
        lean = r.lean[0]
        # the graph as the lean call runs it (CompiledGraph.lean_run, not __call__)
        if r.inference:
            with torch.no_grad():
                total = _best_us(lambda: lean(tuple(args)), calls, rounds)
                graph_us = _best_us(lambda: g.lean_run(list(args)), calls, rounds)
        else:
            total = _best_us(lambda: lean(tuple(args)), calls, rounds)
            graph_us = _best_us(lambda: g.lean_run(list(args)), calls, rounds)
            # the backward side: a step through the lean call minus its forward and minus the same
            # out.sum().backward() on a leaf; what is left is autograd's engine running our
            # autograd.Function's backward (its Python, the backward graph) and the gradients' accumulation
            step = _best_us(lambda: lean(tuple(args))[0].sum().backward(), calls, rounds)
            leaf = torch.zeros_like(lean(tuple(args))[0]).requires_grad_()
            sum_backward = _best_us(lambda: leaf.sum().backward(), calls, rounds)
            out["lean_backward_side_us"] = step - total - sum_backward
        out["lean_wrapper_us"] = total - graph_us
    for g in graphs:
        args = captured.get(id(g))
        if args is None:
            continue  # a graph of the other mode
        if not g._fast:
            out["graphs"][g.stage] = {"error": "not on the fast path"}
            continue
        if not g._torch_exchange:
            raise RuntimeError("the 'ort' runner ran a graph of the 'ort_dlpack' runner: they share graphs")
        session = g.session._session
        results = session.run_torch(list(args))
        call = _best_us(lambda: g(list(args)), calls, rounds)
        lean_run = _best_us(lambda: g.lean_run(list(args)), calls, rounds)
        # the engine call _run_fast makes: the session's runner (run_torch as one C call) unless the
        # graph donates inputs (run_torch with its flags; timed here without them)
        engine = g._runner if getattr(g, "_runner", None) is not None and not g._donates else session.run_torch
        engine_call = _best_us(lambda: engine(list(args)), calls, rounds)
        # the DLPack path, for comparison
        caps = _best_us(lambda: [_to_dlpack(a) for a in args], calls, rounds)
        run = _best_us(lambda: session.run_positional([_to_dlpack(a) for a in args]), calls, rounds) - caps
        wrap = _best_us(lambda: [_from_dlpack(_to_dlpack(a)) for a in args[:len(results)]], calls, rounds) - \
            _best_us(lambda: [_to_dlpack(a) for a in args[:len(results)]], calls, rounds)
        out["graphs"][g.stage] = {
            "call_us": call, "engine_call_us": engine_call, "bookkeeping_us": call - engine_call,
            "lean_run_us": lean_run, "lean_run_bookkeeping_us": lean_run - engine_call,
            "dlpack_capsules_us": caps, "dlpack_engine_run_us": run, "dlpack_outputs_us": wrap,
            "inputs": len(args), "engine_outputs": len(results), "steps": len(g.session._session.partition()),
        }
    return out


def per_node_dispatch(torch, calls: int, rounds: int) -> dict:
    from onnx import TensorProto, helper
    from torch_ort_backend.session import GraphOptimizationLevel, InferenceSession, SessionOptions

    def chain(n: int):
        nodes, prev = [], "x"
        for i in range(n):
            nodes.append(helper.make_node("Add", [prev, "y"], [f"v{i}"]))
            prev = f"v{i}"
        io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 8]) for n in ("x", "y")]
        g = helper.make_graph(nodes, "chain", io, [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [4, 8])])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    times = {}
    for n in (1, 51):
        so = SessionOptions()
        so.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
        session = InferenceSession(chain(n), so)._session
        times[n] = _best_us(lambda: session.run_torch([x, y]), calls, rounds)
    per_node = (times[51] - times[1]) / 50
    return {"per_node_us": per_node, "one_node_run_us": times[1], "fixed_us": times[1] - per_node}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="rounds of alternating runners")
    parser.add_argument("--calls", type=int, default=200, help="calls per runner per round")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--modes", default="infer,train")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)

    import torch

    import torch_ort_backend  # noqa: F401  (registers the "ort" backend)

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    load_before = os.getloadavg()[0]
    results: dict = {"threads": args.threads, "rounds": args.rounds, "calls": args.calls, "modes": {}}
    for mode in args.modes.split(","):
        torch._dynamo.reset()
        model = torch.nn.Linear(8, 8)
        x = torch.randn(4, 8)
        runners = _runners(torch, model)
        step = _step(torch, mode, x)
        _use_dlpack_exchange(torch, runners["ort_dlpack"], step)
        timings = time_runners(torch, runners, step, args.calls, args.rounds)
        ort = timings["ort"]["best_us"]
        components = ort_components(torch, runners["ort"], step, args.calls, args.rounds)
        # the graphs as "ort"'s lean path runs them (CompiledGraph.lean_run)
        graphs_us = sum(g.get("lean_run_us", 0.0) for g in components["graphs"].values())
        components["dynamo_aot_us"] = ort - graphs_us
        components["dynamo_share_us"] = timings["dynamo"]["best_us"] - timings["eager"]["best_us"]
        components["floor_us"] = timings["floor"]["median_us"]
        components["ours_us"] = timings["ort"]["median_us"] - timings["floor"]["median_us"]
        results["modes"][mode] = {"runners": timings, "ort_components": components,
                                  "ort_vs": {k: ort / v["best_us"] for k, v in timings.items()}}
    results["dispatch"] = per_node_dispatch(torch, args.calls * 5, args.rounds)
    results["loadavg_1m"] = [load_before, os.getloadavg()[0]]

    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {args.threads} threads, "
          f"{args.rounds} rounds x {args.calls} calls, loadavg_1m {load_before:.2f} -> {os.getloadavg()[0]:.2f}")
    for mode, r in results["modes"].items():
        print(f"\n{mode}: us per call (best round / median round), ort's ratio to the best")
        for name, t in r["runners"].items():
            print(f"  {name:10} {t['best_us']:7.1f} / {t['median_us']:7.1f}   ort / {name}: {r['ort_vs'][name]:.2f}")
        c = r["ort_components"]
        print(f"  ort by component: dynamo + the region's wrapper (+ autograd in train) {c['dynamo_aot_us']:.1f} us "
              f"(dynamo alone ~{c['dynamo_share_us']:.1f}; lean_call.py's wrapper (forward in train) "
              f"{c.get('lean_wrapper_us', float('nan')):.2f})")
        print(f"  ort above the floor (medians): {c['ours_us']:.1f} us of {r['runners']['ort']['median_us']:.1f}")
        if "lean_backward_side_us" in c:
            print(f"  lean backward side (autograd's engine, our Function's backward, the backward graph, "
                  f"accumulation): {c['lean_backward_side_us']:.1f} us")
        for stage, g in c["graphs"].items():
            if "error" in g:
                print(f"    {stage}: {g['error']}")
                continue
            print(f"    {stage} graph {g['call_us']:.2f} us ({g['steps']} engine nodes, {g['inputs']} inputs, "
                  f"{g['engine_outputs']} outputs): engine call (Session.run_torch) {g['engine_call_us']:.2f}, "
                  f"bookkeeping {g['bookkeeping_us']:.2f}; the DLPack path: capsules {g['dlpack_capsules_us']:.2f}, "
                  f"engine run {g['dlpack_engine_run_us']:.2f}, outputs {g['dlpack_outputs_us']:.2f}")
            print(f"      lean run (what lean_call.py calls) {g['lean_run_us']:.2f} us, bookkeeping "
                  f"{g['lean_run_bookkeeping_us']:.2f}")
    d = results["dispatch"]
    print(f"\nexecutor: {d['per_node_us']:.3f} us per node (Add chain), {d['fixed_us']:.2f} us per run besides")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
