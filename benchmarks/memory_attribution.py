"""Where a training configuration's peak memory goes: the attribution behind docs/memory_optimizer.md.

    python benchmarks/memory_attribution.py [--models gpt2,llama] [--configs checkpoint,ort1]
                                            [sizes as bench_memory.py] [--json PATH]

Each configuration runs in a fresh process, built and measured as benchmarks/bench_memory.py does
(same models, batch, SGD, MALLOC_MMAP_THRESHOLD_=65536, baseline = the resident set after the
model and batch were built). After two warm-up steps it reports:

* **the step's timeline**: a thread samples the resident set (/proc/self/statm) every ~0.2 ms
  through one step, with marks where each compiled graph's run starts and ends (or, for eager
  configurations, where the forward and the backward start and end); the peak is placed in its
  phase, and the engine's own count of that run (``last_run_stats``, ``memory_stats``) is beside it.
* **what stays between steps**: the resident set between steps above the baseline, split into
  anonymous and file-backed pages (/proc/self/smaps_rollup), and then taken apart by releasing the
  pieces one after another, each measured after ``gc.collect()`` and ``malloc_trim(0)``:
  glibc's free memory, the engine's free arenas, the exported ModelProtos, the FX graphs our
  compiled graphs keep, everything TorchDynamo and AOTAutograd keep (``torch._dynamo.reset()``),
  the engine sessions. What is left after all of them is the code the compilation imported and the
  heap around it; ``--import-only`` measures the modules alone: a fresh process imports what the
  configuration's process had imported after its steps, nothing compiled.

Not a benchmark of time: the sampler thread slows the steps.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import sys
import threading
import time

from bench_worker import run_json_worker

WARMUP = 2


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _smaps_kib() -> dict:
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1])
    return out


_PAGE_KIB = 4


def _statm_rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE_KIB


class Sampler:
    """Samples the resident set on a thread; marks are (time, label) from the main thread."""

    def __init__(self, interval: float = 2e-4) -> None:
        self.interval = interval
        self.samples: list[tuple[float, int]] = []
        self.marks: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        f = open("/proc/self/statm")
        while not self._stop.is_set():
            f.seek(0)
            self.samples.append((time.perf_counter(), int(f.read().split()[1]) * _PAGE_KIB))
            time.sleep(self.interval)
        f.close()

    def mark(self, label: str) -> None:
        self.marks.append((time.perf_counter(), label))
        self.samples.append((time.perf_counter(), _statm_rss_kib()))

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def phase_of(self, t: float) -> str:
        label = "before the first mark"
        for tm, lab in self.marks:
            if tm <= t:
                label = lab
        return label


def _trim() -> None:
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def _build(model_name: str, sizes: dict):
    from bench_memory import _build as build

    return build(model_name, sizes)


def worker(model_name: str, config: str, sizes: dict) -> dict:
    import torch
    import torch._inductor  # noqa: F401  (as bench_memory.py: imported before the baseline)

    import torch_ort_backend

    torch.manual_seed(0)
    model, batch = _build(model_name, sizes)
    from bench_memory import _apply_config

    fn = _apply_config(model, config)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    active: list = []  # the Sampler of the measured step

    if config.startswith("ort"):
        from torch_ort_backend.compiled_graph import CompiledGraph

        call = CompiledGraph.__call__

        def marked_call(self, *args):
            if active:
                active[0].mark(f"{self.name} runs")
            try:
                return call(self, *args)
            finally:
                if active:
                    active[0].mark(f"after {self.name}")

        CompiledGraph.__call__ = marked_call

    def mark(label: str) -> None:
        if active:
            active[0].mark(label)

    def step() -> float:
        mark("forward")
        loss = fn(**batch)["loss"]
        mark("backward")
        loss.backward()
        mark("optimizer")
        opt.step()
        opt.zero_grad(set_to_none=True)
        mark("end")
        return float(loss)

    baseline = _status_kib("VmRSS")
    modules_before = set(sys.modules)
    for _ in range(WARMUP):
        step()
    idle = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    with Sampler() as sampler:
        active.append(sampler)
        step()
    hwm = _status_kib("VmHWM")
    peak_t, peak_rss = max(sampler.samples, key=lambda s: s[1])
    result: dict = {
        "params_mib": sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20,
        "peak_mib": (hwm - baseline) / 1024, "idle_mib": (idle - baseline) / 1024,
        "sampled_peak_mib": (peak_rss - baseline) / 1024, "peak_phase": sampler.phase_of(peak_t),
        "modules_imported_by_steps": sorted(set(sys.modules) - modules_before),
    }
    # The resident set at each mark and the highest sample of each phase, above the baseline.
    phases: list[dict] = []
    bounds = sampler.marks + [(float("inf"), "")]
    for (t0, label), (t1, _) in zip(bounds, bounds[1:]):
        inside = [(t, r) for t, r in sampler.samples if t0 <= t < t1]
        row = {"phase": label, "samples": len(inside)}
        if inside:
            t_max, r_max = max(inside, key=lambda s: s[1])
            end = inside[-1][0]
            row.update(start_mib=(inside[0][1] - baseline) / 1024, max_mib=(r_max - baseline) / 1024,
                       end_mib=(inside[-1][1] - baseline) / 1024,
                       max_at=(t_max - t0) / (end - t0) if end > t0 else 0.0)  # share of the phase's time
        phases.append(row)
    result["phases"] = phases
    if config.startswith("ort"):
        from torch_ort_backend.compiled_graph import live_graphs

        stats = torch_ort_backend.memory_stats()
        result["engine"] = {name: {k: v / 2**20 if k.endswith("bytes") else v for k, v in g.items()}
                            for name, g in stats["graphs"].items()}
        for g in live_graphs():
            if g.session is not None and g.name in result["engine"]:
                rs = g.session.last_run_stats()
                result["engine"][g.name].update(arena_mib=rs["arena_bytes"] / 2**20,
                                                prepacked_mib=rs["prepacked_bytes"] / 2**20)
        result["idle"] = _idle_breakdown(baseline)
    else:
        result["idle"] = _idle_breakdown(baseline, compiled=False)
    return result


def _idle_breakdown(baseline: int, compiled: bool = True) -> list:
    """Releases what stays between steps piece by piece; each row: (what was released, MiB freed,
    resident MiB above the baseline after it)."""
    import torch

    rows = []
    smaps = _smaps_kib()
    rss = _status_kib("VmRSS")
    rows.append({"what": "between steps", "rss_mib": (rss - baseline) / 1024,
                 "anonymous_mib": smaps.get("Anonymous", 0) / 1024,
                 "file_mib": (smaps.get("Rss", 0) - smaps.get("Anonymous", 0)) / 1024})

    def release(what: str, fn) -> None:
        nonlocal rss
        before = rss
        extra = fn()
        _trim()
        rss = _status_kib("VmRSS")
        row = {"what": what, "freed_mib": (before - rss) / 1024, "rss_mib": (rss - baseline) / 1024}
        if extra:
            row.update(extra)
        rows.append(row)

    release("glibc's free memory (gc.collect, malloc_trim)", lambda: None)
    if compiled:
        from torch_ort_backend._engine import C
        from torch_ort_backend.compile_state import COMPILE_STATE
        from torch_ort_backend.compiled_graph import live_graphs

        graphs = live_graphs()
        release("the engine's free arenas", lambda: {"arena_pool_free_mib": C.arena_pool_free_bytes() / 2**20})

        def drop_protos():
            size = 0
            for g in graphs:
                if g.exported is not None and g.exported.model is not None:
                    size += g.exported.model.ByteSize()
                    g.exported.model = None
            return {"serialized_mib": size / 2**20}

        release("the exported ModelProtos", drop_protos)

        def drop_gms():
            nodes = sum(len(g.gm.graph.nodes) for g in graphs if g.gm is not None)
            tensors = 0
            for g in graphs:
                if g.gm is not None:
                    for _, b in list(g.gm.named_buffers()) + list(g.gm.named_parameters()):
                        tensors += b.numel() * b.element_size()
                    g.gm = None
            return {"fx_nodes": nodes, "gm_tensor_mib": tensors / 2**20}

        release("the FX graphs the compiled graphs keep (CompiledGraph.gm)", drop_gms)
        graphs = None
        release("TorchDynamo's and AOTAutograd's state (torch._dynamo.reset())", torch._dynamo.reset)
        release("the engine sessions (COMPILE_STATE.clear_sessions())", COMPILE_STATE.clear_sessions)
    return rows


def import_only(modules: list) -> dict:
    """A fresh process: the baseline as the worker's, then the given modules imported, nothing run."""
    import importlib

    import torch
    import torch._inductor  # noqa: F401

    import torch_ort_backend  # noqa: F401

    torch.manual_seed(0)
    baseline = _status_kib("VmRSS")
    failed = 0
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:
            failed += 1
    _trim()
    smaps = _smaps_kib()
    return {"import_mib": (_status_kib("VmRSS") - baseline) / 1024, "modules": len(modules), "failed": failed,
            "anonymous_mib": smaps.get("Anonymous", 0) / 1024}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt2,llama")
    p.add_argument("--configs", default="checkpoint,ort1")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--json", default="")
    p.add_argument("--worker", nargs=2, metavar=("MODEL", "CONFIG"), help=argparse.SUPPRESS)
    p.add_argument("--import-only", default="", help=argparse.SUPPRESS)
    p.add_argument("--sizes", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], json.loads(args.sizes))))
        return 0
    if args.import_only:
        with open(args.import_only) as f:
            print(json.dumps(import_only(json.load(f))))
        return 0
    sizes = {k: getattr(args, k) for k in ("layers", "batch", "seq", "hidden", "heads", "vocab")}
    results = {}
    for model in args.models.split(","):
        for config in args.configs.split(","):
            r = run_json_worker([__file__, "--worker", model, config, "--sizes", json.dumps(sizes)], timeout=3600,
                                MALLOC_MMAP_THRESHOLD_="65536")
            if "modules_imported_by_steps" in r and config.startswith("ort"):
                import tempfile

                with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                    json.dump(r["modules_imported_by_steps"], f)
                r["import_only"] = run_json_worker([__file__, "--import-only", f.name], timeout=600,
                                                   MALLOC_MMAP_THRESHOLD_="65536")
            r["modules_imported_by_steps"] = len(r.get("modules_imported_by_steps", []))
            results[f"{model}/{config}"] = r
            print(f"\n== {model} {config}", file=sys.stderr)
            print(json.dumps(r, indent=1), file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sizes": sizes, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
