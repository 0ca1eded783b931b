"""Warm regions (warm_region.py): with ORTMODULE_CACHE_DIR, a new process builds a region from the
cached exports and the region's record, without AOTAutograd; the numbers are a cold run's and
eager's. A damaged or tampered record (or an export it names) draws a CacheWarning and a cold
compile; regions the lean path cannot take, dynamic shapes, inference and grad-mode changes,
and calls under the profiler keep to AOTAutograd's path where they must."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import onnx
import pytest
import torch
from torch import nn

from ortmodule_helpers import assert_engine_ran, fresh_state
from torch_ort_backend import compile_stats, model_cache
from torch_ort_backend.lean_call import live_regions
from torch_ort_backend.model_cache import CacheWarning
from torch_ort_backend.testing import models as cm


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.setattr(model_cache, "STATS", model_cache.STATS.__class__())
    yield from fresh_state(monkeypatch)


@pytest.fixture
def aot_calls(monkeypatch):
    """How many times AOTAutograd was asked to compile a region."""
    import torch._dynamo.backends.common as common

    calls = [0]
    original = common.aot_module_simplified

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(common, "aot_module_simplified", counted)
    return calls


# ---- a new process: GPT-2, BERT and LLaMA from small configs ----

_MODELS = {"gpt2": ("make_gpt2", "causal_lm_batch"), "bert_mlm": ("make_bert_mlm", "bert_mlm_batch"),
           "llama": ("make_llama", "causal_lm_batch")}

_CHILD = textwrap.dedent("""
    import json, sys, torch
    import torch._dynamo.backends.common as common
    from torch_ort_backend.testing import models as cm
    from torch_ort_backend import compile_stats, model_cache
    from torch_ort_backend.lean_call import live_regions
    calls = [0]
    original = common.aot_module_simplified
    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)
    common.aot_module_simplified = counted
    make, batch = getattr(cm, sys.argv[1]), getattr(cm, sys.argv[2])
    model = make()
    compiled = torch.compile(model, backend="ort")
    losses, grads = [], []
    for step in range(2):
        loss = compiled(**batch(step)).loss
        loss.backward()
        losses.append(loss.detach())
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        model.zero_grad(set_to_none=True)
    torch.save({"losses": losses, "grads": grads}, sys.argv[3])
    regions = live_regions()
    print(json.dumps({"aot_calls": calls[0], "exports": compile_stats().exports, "runs": compile_stats().runs,
                      "fallbacks": compile_stats().fallbacks, "stats": dict(model_cache.STATS),
                      "warm": [getattr(r, "warm", False) for r in regions],
                      "lean_calls": [r.lean_calls for r in regions]}))
""")


def _child(model: str, cache_dir, out) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORTMODULE_")}
    env.update(ORTMODULE_CACHE_DIR=str(cache_dir), ORTMODULE_FALLBACK_POLICY="FALLBACK_DISABLE")
    done = subprocess.run([sys.executable, "-c", _CHILD, *_MODELS[model], str(out)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("model", sorted(_MODELS))
def test_a_new_process_compiles_the_region_without_aotautograd(tmp_path, model):
    """Cold process, then warm process: the warm one calls AOTAutograd zero times, exports nothing,
    runs every call on the engine through the warm region's lean path, and its losses and every
    gradient of two steps equal the cold run's and eager's."""
    cache = tmp_path / "cache"
    cold = _child(model, cache, tmp_path / "cold.pt")
    assert cold["aot_calls"] >= 1 and cold["exports"] >= 2 and cold["stats"].get("region_stored") == 1, cold
    warm = _child(model, cache, tmp_path / "warm.pt")
    assert warm["aot_calls"] == 0 and warm["exports"] == 0, warm
    assert warm["stats"].get("region_hits") == 1 and not warm["stats"].get("rejected"), warm
    assert warm["warm"] == [True] and warm["lean_calls"] == [2], warm
    assert warm["runs"] == cold["runs"] >= 4 and warm["fallbacks"] == cold["fallbacks"] == 0
    make, batch = (getattr(cm, name) for name in _MODELS[model])
    eager = make()
    results = {k: torch.load(tmp_path / f"{k}.pt", weights_only=True) for k in ("cold", "warm")}
    for step in range(2):
        loss = eager(**batch(step)).loss
        loss.backward()
        ref = {n: p.grad for n, p in eager.named_parameters() if p.grad is not None}
        for kind, res in results.items():
            torch.testing.assert_close(res["losses"][step], loss.detach(), rtol=1e-5, atol=1e-6, msg=kind)
            assert res["grads"][step].keys() == ref.keys()
            for name, g in ref.items():
                torch.testing.assert_close(res["grads"][step][name], g, rtol=1e-4, atol=1e-5,
                                           msg=lambda m, n=name, k=kind: f"{k} {n}: {m}")
        for name in ref:  # the same models and engine: the warm run is the cold run
            torch.testing.assert_close(results["warm"]["grads"][step][name], results["cold"]["grads"][step][name],
                                       rtol=0, atol=0)
        eager.zero_grad(set_to_none=True)


# ---- in one process (torch._dynamo.reset between compiles) ----

class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(6, 12), nn.Linear(12, 3)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.a(x))
        return self.b(h).log_softmax(-1), h.square()


def _step(cache_dir, x, net_type=Net, grad=True, **options):
    """A fresh dynamo and a fresh model: one call (and a backward when `grad`); (outputs, grads)."""
    torch._dynamo.reset()
    net = net_type()
    compiled = torch.compile(net, backend="ort", options={"cache_dir": str(cache_dir), **options})
    with torch.set_grad_enabled(grad):
        out = compiled(x)
    if grad:
        (out[0].square().sum() + out[1].sin().sum()).backward()
    return [o.detach() for o in out], [p.grad for p in net.parameters()]


def _eager(x, net_type=Net, grad=True):
    net = net_type()
    with torch.set_grad_enabled(grad):
        out = net(x)
    if grad:
        (out[0].square().sum() + out[1].sin().sum()).backward()
    return [o.detach() for o in out], [p.grad for p in net.parameters()]


def _assert_eager(result, reference, rtol=1e-5, atol=1e-6):
    (out, grads), (ref_out, ref_grads) = result, reference
    for o, r in zip(out, ref_out):
        torch.testing.assert_close(o, r, rtol=rtol, atol=atol)
    for g, r in zip(grads, ref_grads):
        if r is None:
            assert g is None
        else:
            torch.testing.assert_close(g, r, rtol=rtol, atol=atol)


def _warm_lean_calls():
    """lean_calls of the warm regions alive (after a collection: earlier tests' are gone)."""
    import gc

    gc.collect()
    return [r.lean_calls for r in live_regions() if getattr(r, "warm", False)]


def _record(cache_dir):
    records = sorted(cache_dir.glob("*.region.json"))
    assert len(records) == 1, records
    return records[0]


def test_a_warm_region_in_the_same_process(tmp_path, aot_calls):
    x = torch.randn(4, 6)
    _assert_eager(_step(tmp_path, x), _eager(x))
    assert aot_calls[0] == 1 and model_cache.STATS["region_stored"] == 1
    assert os.stat(_record(tmp_path)).st_mode & 0o077 == 0  # private to this user
    compile_stats().reset()
    _assert_eager(_step(tmp_path, x), _eager(x))
    assert aot_calls[0] == 1 and model_cache.STATS["region_hits"] == 1 and compile_stats().exports == 0
    assert _warm_lean_calls() == [1]
    assert_engine_ran(2)


def _set(record, path, value):
    data = json.loads(record.read_text())
    target = data
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    record.write_text(json.dumps(data))


def _tamper_model(cache_dir):
    """A local writer makes the forward export read a file (aten::from_file) and fixes its checksum."""
    data = json.loads(_record(cache_dir).read_text())
    path = cache_dir / f"tob-{data['graphs']['forward']}.onnx"
    model = onnx.load(str(path))
    out = model.graph.output[0]
    node = onnx.helper.make_node("ATen", [model.graph.input[0].name], ["tampered"], domain="com.microsoft",
                                 operator="from_file", overload_name="")
    model.graph.node.append(node)
    out.name = "tampered"
    props = {p.key: p for p in model.metadata_props}
    props[model_cache._GRAPH_SHA_PROP].value = model_cache._graph_sha(model)
    onnx.save(model, str(path))


_DAMAGE = {
    "truncated": (lambda r, d: r.write_bytes(r.read_bytes()[:100]), "JSONDecodeError"),
    "garbage": (lambda r, d: r.write_bytes(b"\xff\x00" * 50), "Error"),
    "not_a_record": (lambda r, d: r.write_text("[1, 2]"), "fields are not a region record's"),
    "foreign": (lambda r, d: _set(r, ["key"], "0" * 64), "another region"),
    "kind": (lambda r, d: _set(r, ["kind"], "inference"), "records a inference region"),
    "n_fw": (lambda r, d: _set(r, ["plan", "n_fw"], 10 ** 6), "n_fw must be an integer"),
    "surviving": (lambda r, d: _set(r, ["plan", "surviving"], [5, 1]), "surviving must be"),
    "detach": (lambda r, d: _set(r, ["plan", "detach"], [-1]), "detach must be"),
    "coercion": (lambda r, d: _set(r, ["plan", "coercions"], [["format", "__class__"]]), "coercion"),
    "flag": (lambda r, d: _set(r, ["plan", "donated"], "yes"), "donated must be a boolean"),
    "donated": (lambda r, d: _set(r, ["donated"], [0]), "stashed or donated"),
    "graph_key": (lambda r, d: _set(r, ["graphs", "forward"], "../../etc/passwd"), "graph keys are malformed"),
    "missing_export": (lambda r, d: _set(r, ["graphs", "forward"], "a" * 64), "missing or was ignored"),
    "tampered_op": (lambda r, d: _tamper_model(d), "from_file"),
}


@pytest.mark.parametrize("damage", sorted(_DAMAGE))
def test_a_damaged_or_tampered_record_is_ignored_with_a_warning(tmp_path, damage, aot_calls):
    """One CacheWarning naming the record and what is wrong, then a cold compile (AOTAutograd
    called) with eager's numbers."""
    x = torch.randn(4, 6)
    _step(tmp_path, x)
    record = _record(tmp_path)
    edit, why = _DAMAGE[damage]
    edit(record, tmp_path)
    aot_calls[0] = 0
    with pytest.warns(CacheWarning, match=rf"(?s)ignoring .*{record.name}.*{why}.*compiling the region again"):
        result = _step(tmp_path, x)
    assert aot_calls[0] == 1 and model_cache.STATS["region_hits"] == 0
    _assert_eager(result, _eager(x))
    assert_engine_ran(2)


def test_a_record_others_may_write_is_not_trusted(tmp_path, aot_calls):
    x = torch.randn(4, 6)
    _step(tmp_path, x)
    os.chmod(_record(tmp_path), 0o666)
    aot_calls[0] = 0
    with pytest.warns(CacheWarning, match=r"region\.json.*writable by other users"):
        _assert_eager(_step(tmp_path, x), _eager(x))
    assert aot_calls[0] == 1


class Mutating(nn.Module):
    """BatchNorm in training mode updates its running statistics: an input mutation."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.bn = nn.Linear(6, 12), nn.BatchNorm1d(12)

    def forward(self, x):
        h = self.bn(self.a(x))
        return h.tanh(), h.square().sum(0)


def test_a_region_the_lean_path_cannot_take_keeps_aotautograd_with_the_cache_on(tmp_path, aot_calls):
    x = torch.randn(4, 6)
    for _ in range(2):
        # batch normalisation's gradients divide by a batch's spread: float32 rounding, amplified
        _assert_eager(_step(tmp_path, x, Mutating), _eager(x, Mutating), rtol=1e-4, atol=1e-5)
    assert aot_calls[0] == 2 and model_cache.STATS["region_uncacheable"] == 2
    assert not list(tmp_path.glob("*.region.json")) and model_cache.STATS["hits"] == 2  # the exports still cached


def test_dynamic_shapes_keep_aotautograd(tmp_path, aot_calls):
    for n in (4, 4):
        x = torch.randn(n, 6)
        torch._dynamo.reset()
        net = Net()
        out = torch.compile(net, backend="ort", dynamic=True, options={"cache_dir": str(tmp_path)})(x)
        (out[0].square().sum() + out[1].sin().sum()).backward()
        _assert_eager(([o.detach() for o in out], [p.grad for p in net.parameters()]), _eager(x))
    assert aot_calls[0] == 2 and not list(tmp_path.glob("*.region.json"))


def test_inference_and_grad_mode_are_separate_regions(tmp_path, aot_calls):
    """A region compiled under no_grad is an inference region; its record never serves a call with
    grad on (another key), and a record of the wrong kind is refused."""
    x = torch.randn(4, 6)
    _assert_eager(_step(tmp_path, x, grad=False), _eager(x, grad=False))
    _assert_eager(_step(tmp_path, x, grad=False), _eager(x, grad=False))
    assert aot_calls[0] == 1 and model_cache.STATS["region_hits"] == 1
    assert json.loads(_record(tmp_path).read_text())["kind"] == "inference"
    _assert_eager(_step(tmp_path, x), _eager(x))  # grad on: another key, a cold compile
    assert aot_calls[0] == 2 and model_cache.STATS["region_hits"] == 1
    assert len(list(tmp_path.glob("*.region.json"))) == 2
    _assert_eager(_step(tmp_path, x), _eager(x))
    assert aot_calls[0] == 2 and model_cache.STATS["region_hits"] == 2


def test_inputs_that_require_grad_or_not_are_separate_regions(tmp_path, aot_calls):
    """Whether an argument requires grad changes what AOTAutograd compiles: it is in the key."""
    x = torch.randn(4, 6)
    _step(tmp_path, x)
    xg = x.clone().requires_grad_()
    torch._dynamo.reset()
    net = Net()
    out = torch.compile(net, backend="ort", options={"cache_dir": str(tmp_path)})(xg)
    out[0].square().sum().backward()
    ref = x.clone().requires_grad_()
    Net()(ref)[0].square().sum().backward()
    torch.testing.assert_close(xg.grad, ref.grad, rtol=1e-5, atol=1e-6)
    assert aot_calls[0] == 2 and model_cache.STATS["region_hits"] == 0


def test_a_warm_region_under_the_profiler_compiles_aotautograds_path(tmp_path, aot_calls):
    x = torch.randn(4, 6)
    _step(tmp_path, x)
    torch._dynamo.reset()
    net = Net()
    compiled = torch.compile(net, backend="ort", options={"cache_dir": str(tmp_path)})
    with torch.profiler.profile():
        out = compiled(x)
        (out[0].square().sum() + out[1].sin().sum()).backward()
    assert aot_calls[0] == 2 and model_cache.STATS["region_hits"] == 1
    _assert_eager(([o.detach() for o in out], [p.grad for p in net.parameters()]), _eager(x))
    assert _warm_lean_calls() == [0]
    compiled(x)  # after the profiler: the lean path again
    assert _warm_lean_calls() == [1]
    assert_engine_ran(3)


def test_ortmodule_with_the_cache_builds_its_regions_warm(tmp_path, aot_calls):
    """ORTModule compiles through the same backend: training and evaluation regions are recorded
    and built warm after a reset, with eager's numbers."""
    from torch_ort_backend import ORTModule

    x = torch.randn(4, 6)
    for round_ in range(2):
        torch._dynamo.reset()
        net = Net()
        wrapped = ORTModule(net, options={"cache_dir": str(tmp_path)})
        out = wrapped(x)
        (out[0].square().sum() + out[1].sin().sum()).backward()
        _assert_eager(([o.detach() for o in out], [p.grad for p in net.parameters()]), _eager(x))
        wrapped.eval()
        with torch.no_grad():
            evaluated = wrapped(x)
        _assert_eager(([o for o in evaluated], []), _eager(x, grad=False))
        assert aot_calls[0] == 2, round_  # the first round compiled both regions; the second, none
    assert model_cache.STATS["region_stored"] == 2 and model_cache.STATS["region_hits"] == 2
