"""Soak worker for test_soak.py: a training loop that keeps changing what the engine sees, measuring
this process's resident memory after every cycle. Prints one JSON line:
{"rss": [bytes after each cycle], "stats": {...}, "losses": [...]}.

Each cycle:
- trains a small model compiled with the backend one step, at one of four batch shapes in turn
  (TorchDynamo specialises, then recompiles with a dynamic batch dimension);
- trains the same architecture wrapped in ORTModule one step, at another of the shapes;
- runs a torch.autograd.Function (PythonOp / PythonOpGrad and their ctx table);
- calls a function the engine cannot take (complex input: the fallback policy runs it in eager);
- every RECOMPILE_EVERY cycles drops TorchDynamo's caches and compiles everything again;
- creates and drops an InferenceSession on a saved ONNX model (session teardown).

With BACKEND "aot_eager" the same loop runs on torch's own reference backend (torch.compile with
"aot_eager" in place of ORTModule, no InferenceSession): the memory torch itself keeps across
TorchDynamo resets, which the test subtracts.

    python soak_worker.py BACKEND CYCLES RECOMPILE_EVERY
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys
import warnings

import onnx
import torch
from torch import nn

import torch_ort_backend as tob
from torch_ort_backend import ORTModule
from torch_ort_backend.compiled_graph import live_graphs

SHAPES = [4, 7, 5, 9]


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 4)

    def forward(self, x, y):
        h = self.norm(torch.nn.functional.gelu(self.fc1(x)))
        h = Square.apply(h) * 0.1 + h
        return nn.functional.cross_entropy(self.fc2(h), y)


def complex_fn(z):
    return (z * 2).abs()


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main(backend: str, cycles: int, recompile_every: int) -> None:
    warnings.simplefilter("ignore")  # the fallback warns once per graph; not what is measured here
    libc = ctypes.CDLL(None)
    torch.manual_seed(0)
    nets = {"compile": Net(), "ortmodule": Net()}
    opts = {name: torch.optim.SGD(net.parameters(), lr=0.01) for name, net in nets.items()}
    compiled = fallback = module = None
    onnx_path = os.path.join(os.environ.get("SOAK_TMP", "."), "soak_model.onnx")
    rss, losses = [], []
    for cycle in range(cycles):
        if cycle % recompile_every == 0:
            torch._dynamo.reset()
            compiled = torch.compile(nets["compile"], backend=backend)
            fallback = torch.compile(complex_fn, backend=backend)
            module = ORTModule(nets["ortmodule"]) if backend == "ort" else torch.compile(nets["ortmodule"], backend=backend)
        for name, model in (("compile", compiled), ("ortmodule", module)):
            batch = SHAPES[(cycle + (name == "ortmodule")) % len(SHAPES)]
            g = torch.Generator().manual_seed(cycle)
            x = torch.randn(batch, 16, generator=g)
            y = torch.randint(0, 4, (batch,), generator=g)
            opts[name].zero_grad()
            loss = model(x, y)
            loss.backward()
            opts[name].step()
            losses.append(float(loss))
        fallback(torch.randn(6, dtype=torch.complex64))
        if backend == "ort" and cycle == 0:
            # One of this process's exported graphs, saved, then loaded every cycle like any file.
            graph = next(g for g in live_graphs() if g.exported is not None)
            onnx.save(graph.exported.model, onnx_path)
        if backend == "ort":
            options = tob.SessionOptions()
            options.allow_unsafe_aten_ops = True  # our own graph's ATen nodes
            session = tob.InferenceSession(onnx_path, options)
            del session
        gc.collect()
        libc.malloc_trim(0)  # measure live memory, not what glibc keeps of freed blocks
        rss.append(rss_bytes())
    stats = tob.compile_stats()
    print(json.dumps({"rss": rss, "losses": losses, "stats": {
        "runs": stats.runs, "fallbacks": stats.fallbacks, "graphs": stats.graphs, "exports": stats.exports,
        "sessions_created": stats.sessions_created, "session_cache_hits": stats.session_cache_hits}}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
