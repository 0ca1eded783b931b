"""A collective inside a graph "ort" compiles, on 2 CPU ranks (gloo, loopback).

torch.distributed._functional_collectives (what DTensor and tensor-parallel code call) trace into
the graph as _c10d_functional.all_reduce and wait_tensor; the exporter writes each as an ATen node,
so torch's dispatcher runs the collective on the process group: the engine moves no data between
ranks. wait_tensor finds the pending all-reduce by the storage all_reduce returned, so the engine
must hand torch's own result tensor back to it (providers/torch/aten_tensor_bridge.cc); with a new
tensor over the same bytes it waited for nothing and the graph read each rank's own, un-reduced
values. Compared with eager: the output and the weight's gradient on every rank.
"""

from __future__ import annotations

import torch

from distributed_harness import init_gloo, nonzero, reset_compilation, run_on_ranks


def _row_parallel(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A row-parallel linear layer as tensor-parallel code writes it: each rank's partial product,
    summed over the ranks, then more computation on the sum."""
    import torch.distributed._functional_collectives as funcol

    partial = torch.relu(x @ w)
    total = funcol.all_reduce(partial, "sum", torch.distributed.group.WORLD)
    return torch.tanh(total * 0.1)


def collectives_worker(rank: int, world_size: int) -> dict:
    import torch_ort_backend

    init_gloo()
    x = nonzero((4, 8), seed=rank)  # each rank's own input: the sum differs from every part
    w = nonzero((8, 6), seed=100 + rank, scale=0.3)
    results = {}
    for name, fn in (("eager", _row_parallel),
                     ("ort", torch.compile(_row_parallel, backend="ort",
                                           options={"fallback_policy": "FALLBACK_DISABLE"}))):
        reset_compilation()
        weight = w.clone().requires_grad_()
        out = fn(x, weight)
        out.backward(nonzero(out.shape, seed=200))
        stats = torch_ort_backend.compile_stats()
        results[name] = {"out": out.detach(), "grad": weight.grad, "runs": stats.runs,
                         "aten_ops": dict(stats.aten_fallback_ops)}
    results["local"] = torch.tanh(torch.relu(x @ w) * 0.1)  # what a graph that never waited would give
    torch.distributed.destroy_process_group()
    return results


def test_functional_all_reduce_runs_in_the_graph_through_torch():
    for rank, result in enumerate(run_on_ranks("test_distributed_collectives:collectives_worker")):
        ours, eager = result["ort"], result["eager"]
        assert ours["runs"] >= 2, f"rank {rank}: the engine ran {ours['runs']} graphs"
        assert ours["aten_ops"].get("_c10d_functional.all_reduce.default", 0) >= 1, ours["aten_ops"]
        assert ours["aten_ops"].get("_c10d_functional.wait_tensor.default", 0) >= 1, ours["aten_ops"]
        assert not torch.allclose(eager["out"], result["local"]), "the all-reduce changed nothing: not exercised"
        torch.testing.assert_close(ours["out"], eager["out"], rtol=1e-5, atol=1e-6,
                                   msg=lambda m: f"rank {rank}: output: {m}")
        torch.testing.assert_close(ours["grad"], eager["grad"], rtol=1e-5, atol=1e-6,
                                   msg=lambda m: f"rank {rank}: weight gradient: {m}")
