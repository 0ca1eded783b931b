"""Runs one function on 2 CPU ranks, each a fresh Python process, and hands back what each rank
returned.

    results = run_on_ranks("test_distributed_ddp:ddp_worker")   # [rank 0's result, rank 1's result]

The target is "module:function" importable from tests/python; it is called as function(rank,
world_size) in every rank process and returns a picklable value (tensors, dicts, lists), written
with torch.save and read back here. The ranks find each other through gloo on 127.0.0.1 only
(MASTER_ADDR/MASTER_PORT/RANK/LOCAL_RANK/WORLD_SIZE, what torchrun sets), one intra-op thread each.

Each rank must finish within `timeout` seconds (a deadlock fails the test instead of hanging CI)
and must exit with status 0 the way a user's script does: the function returns, the interpreter
shuts down, nothing calls os._exit. So a crash at interpreter exit (an abort in a static destructor
or in a communication thread) fails the test, with the rank's stderr in the message.

The comparisons every distributed test makes live here too: the "ort" counters of every rank
(graphs exported and run, no fallback to eager) and a training record compared with eager's.
"""

from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Mapping, Sequence

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD_SIZE = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


def run_on_ranks(target: str, world_size: int = WORLD_SIZE, timeout: float = 300.0,
                 env: Mapping[str, str] | None = None) -> list[Any]:
    """Runs `target` on `world_size` rank processes; returns their results in rank order."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="tob_dist_") as out_dir:
        procs = []
        for rank in range(world_size):
            rank_env = dict(os.environ)
            rank_env.update(env or {})
            rank_env.update({
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(world_size), "LOCAL_WORLD_SIZE": str(world_size), "OMP_NUM_THREADS": "1",
                "PYTHONPATH": os.pathsep.join(p for p in (HERE, rank_env.get("PYTHONPATH", "")) if p),
            })
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), target, out_dir],
                                          env=rank_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        outputs = _wait_all(procs, timeout, target)
        failed = [(rank, p.returncode) for rank, p in enumerate(procs) if p.returncode != 0]
        if failed:
            report = "\n".join(f"--- rank {rank} exited with status {code}; stderr:\n{_tail(outputs[rank][1])}"
                               for rank, code in failed)
            raise AssertionError(f"{target}: {len(failed)} of {world_size} ranks did not exit with status 0\n{report}")
        return [torch.load(os.path.join(out_dir, f"rank{rank}.pt"), weights_only=False) for rank in range(world_size)]


def _wait_all(procs: list[subprocess.Popen], timeout: float, target: str) -> list[tuple[str, str]]:
    deadline = time.monotonic() + timeout
    outputs = []
    for rank, proc in enumerate(procs):
        try:
            outputs.append(proc.communicate(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            for other in procs:
                if other.poll() is None:
                    other.kill()
            details = []
            for r, other in enumerate(procs):
                _, err = other.communicate()
                details.append(f"--- rank {r} stderr:\n{_tail(err or '')}")
            raise AssertionError(f"{target}: rank {rank} did not finish within {timeout:.0f} s (a deadlock?)\n"
                                 + "\n".join(details)) from None
    return outputs


def _rank_main(target: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    module_name, function_name = target.split(":")
    function = getattr(importlib.import_module(module_name), function_name)
    result = function(rank, world_size)
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))


# ---- what the rank functions share ----

def init_gloo() -> None:
    """The default process group over gloo, from the environment run_on_ranks set."""
    torch.distributed.init_process_group("gloo")


def reset_compilation() -> None:
    """A clean slate before each configuration: TorchDynamo's caches and the "ort" counters."""
    import torch_ort_backend

    torch._dynamo.reset()
    torch_ort_backend.compile_stats().reset()


def ort_counters() -> dict[str, int]:
    import torch_ort_backend

    stats = torch_ort_backend.compile_stats()
    return {"graphs": stats.graphs, "exports": stats.exports, "runs": stats.runs, "fallbacks": stats.fallbacks}


def nonzero(shape: Sequence[int], seed: int, scale: float = 1.0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Random magnitudes in [0.1, 2) * scale with random signs: never zero, reproducible by seed."""
    g = torch.Generator().manual_seed(seed)
    mag = torch.rand(tuple(shape), generator=g, dtype=torch.float64) * 1.9 + 0.1
    sign = torch.where(torch.rand(tuple(shape), generator=g) < 0.5, -1.0, 1.0).double()
    return (mag * sign * scale).to(dtype)


def local(t: torch.Tensor) -> torch.Tensor:
    """A plain tensor of what this rank holds (a DTensor's local shard), detached, in float32 for
    comparisons."""
    if hasattr(t, "to_local"):
        t = t.to_local()
    return t.detach().clone().float()


# ---- what the tests assert ----

def assert_compiled_on_every_rank(results: Sequence[Mapping[str, Any]], what: str,
                                  min_graphs: int = 1) -> None:
    """Every rank exported graphs for the engine and ran them, and no graph fell back to eager."""
    for rank, result in enumerate(results):
        c = result["counters"]
        assert c["exports"] >= min_graphs and c["runs"] > 0, (
            f"{what}: rank {rank} compiled {c['exports']} graphs (expected at least {min_graphs}) and ran "
            f"{c['runs']}: 'ort' did not run the model there: {c}")
        assert c["fallbacks"] == 0, f"{what}: rank {rank}: a graph fell back to eager PyTorch: {c}"


def assert_same_training(expected: Mapping[str, Any], actual: Mapping[str, Any], what: str,
                         rtol: float = 1e-4, atol: float = 1e-5, norm_rtol: float | None = None) -> None:
    """Compares two training records (new_record): the loss of every step, every gradient after
    every backward, every parameter after every optimizer step; names the first mismatch.

    Tensors are compared element by element (rtol, atol), or, with norm_rtol, by the relative
    error of the whole tensor, |actual - expected| / |expected| <= norm_rtol: for 16-bit training,
    where an element that is a sum of cancelling terms (a bias gradient) moves by a few ulps of
    its terms, not of itself."""
    assert len(expected["losses"]) == len(actual["losses"]) > 0, f"{what}: step counts differ"
    for step, (want, got) in enumerate(zip(expected["losses"], actual["losses"])):
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m: f"{what}: loss at step {step}: {m}")
    for kind in ("grads", "params"):
        for step, (want_step, got_step) in enumerate(zip(expected[kind], actual[kind])):
            assert sorted(want_step) == sorted(got_step), (
                f"{what}: step {step}: {kind} of {sorted(got_step)}, eager has {sorted(want_step)}")
            assert want_step, f"{what}: step {step}: no {kind} recorded"
            for name, want in want_step.items():
                got, label = got_step[name], f"{what}: step {step}: {kind[:-1]} {name}"
                if norm_rtol is None:
                    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m, label=label: f"{label}: {m}")
                    continue
                assert got.shape == want.shape, f"{label}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
                error = float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30))
                assert error <= norm_rtol, f"{label}: relative error {error:.2e} > {norm_rtol:.0e}"


def new_record() -> dict[str, list]:
    return {"losses": [], "grads": [], "params": []}


def record_grads(record: dict, named_parameters) -> None:
    record["grads"].append({name: local(p.grad) for name, p in named_parameters if p.grad is not None})


def record_params(record: dict, named_parameters) -> None:
    record["params"].append({name: local(p) for name, p in named_parameters})


if __name__ == "__main__":
    _rank_main(sys.argv[1], sys.argv[2])
