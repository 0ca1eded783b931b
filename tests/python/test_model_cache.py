"""The on-disk cache of exported graphs (ORTMODULE_CACHE_DIR / cache_dir, model_cache.py): a warm
cache skips the export in a new process with the same numbers; corrupt, foreign, tampered or
badly-owned entries are ignored with a warning; the key separates graphs and options."""

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

from torch_ort_backend.testing.models import causal_lm_batch, make_gpt2
from ortmodule_helpers import assert_engine_ran, fresh_state
from torch_ort_backend import compile_stats, model_cache
from torch_ort_backend.model_cache import CacheWarning



@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.setattr(model_cache, "STATS", model_cache.STATS.__class__())
    yield from fresh_state(monkeypatch)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(6, 12), nn.Linear(12, 3)

    def forward(self, x):
        return self.b(torch.nn.functional.gelu(self.a(x))).log_softmax(-1)


def _step(cache_dir, x, **options):
    """One forward/backward through a fresh dynamo; returns (output, grads)."""
    torch._dynamo.reset()
    net = Net()
    out = torch.compile(net, backend="ort", options={"cache_dir": str(cache_dir), **options})(x)
    out.square().sum().backward()
    return out.detach(), [p.grad for p in net.parameters()]


def _eager(x):
    net = Net()
    out = net(x)
    out.square().sum().backward()
    return out.detach(), [p.grad for p in net.parameters()]


def _entries(cache_dir):
    """The graph entries (exports); a region's record (warm_region.py, test_warm_region.py) is beside them."""
    return sorted(p for p in cache_dir.iterdir() if p.name.startswith("tob-") and p.suffix == ".onnx")


def _records(cache_dir):
    return sorted(p for p in cache_dir.iterdir() if p.name.endswith(".region.json"))


def test_a_warm_cache_skips_the_export_with_the_same_numbers(tmp_path):
    x = torch.randn(4, 6)
    ref_out, ref_grads = _eager(x)
    out, grads = _step(tmp_path, x)
    assert compile_stats().exports == 2 and model_cache.STATS["stored"] == 2
    assert len(_entries(tmp_path)) == 2 and not [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]
    assert len(_records(tmp_path)) == 1 and model_cache.STATS["region_stored"] == 1
    compile_stats().reset()
    out2, grads2 = _step(tmp_path, x)
    assert compile_stats().exports == 0 and model_cache.STATS["hits"] == 2 and model_cache.STATS["region_hits"] == 1
    for o in (out, out2):
        torch.testing.assert_close(o, ref_out, rtol=1e-5, atol=1e-6)
    for g, g2, r in zip(grads, grads2, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(g2, r, rtol=1e-5, atol=1e-6)
    assert_engine_ran(2)
    for p in [tmp_path, *_entries(tmp_path), *_records(tmp_path)]:
        assert os.stat(p).st_mode & 0o077 == 0, oct(os.stat(p).st_mode)  # private to this user


def test_options_that_shape_the_export_and_the_shapes_are_in_the_key(tmp_path):
    """Another opset, another input shape: new entries, not the old ones."""
    _step(tmp_path, torch.randn(4, 6))
    _step(tmp_path, torch.randn(4, 6), opset=17)
    assert len(_entries(tmp_path)) == 4
    _step(tmp_path, torch.randn(5, 6))
    assert len(_entries(tmp_path)) >= 5 and model_cache.STATS["hits"] == 0


def _rewrite(path, edit):
    model = onnx.load(str(path))
    edit(model)
    onnx.save(model, str(path))


def _props(model):
    return {p.key: p for p in model.metadata_props}


@pytest.mark.parametrize("damage", ["truncated", "garbage", "foreign", "checksum", "tampered_op", "metadata"])
def test_a_damaged_or_foreign_entry_is_ignored_with_a_warning(tmp_path, damage):
    """Each entry is re-exported after one CacheWarning naming the file; the numbers stay eager's.
    (Without the region's record, so that the graph entries are read with their own graphs in hand;
    test_warm_region.py damages entries a record names.)"""
    x = torch.randn(4, 6)
    _step(tmp_path, x)
    for record in _records(tmp_path):
        record.unlink()
    entries = _entries(tmp_path)
    victim = entries[0]
    if damage == "truncated":
        victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    elif damage == "garbage":
        victim.write_bytes(b"\x00not a model" * 10)
    elif damage == "foreign":  # another graph's entry under this key
        victim.write_bytes(entries[1].read_bytes())
    elif damage == "checksum":  # a changed graph (an initializer's bytes) under the old checksum
        def edit(model):
            model.graph.node[0].name += "_x"
        _rewrite(victim, edit)
    elif damage == "tampered_op":
        # A local writer swaps an operator for one this graph never calls, and fixes the checksum:
        # the ATen check still refuses to run it with our own graphs' trust.
        def edit(model):
            node = onnx.helper.make_node("ATen", [model.graph.input[0].name], ["tampered"], domain="com.microsoft",
                                         operator="from_file", overload_name="")
            model.graph.node.append(node)
            _props(model)[model_cache._GRAPH_SHA_PROP].value = model_cache._graph_sha(model)
        _rewrite(victim, edit)
    else:
        def edit(model):
            meta = _props(model)[model_cache._META_PROP]
            meta.value = json.dumps({"input_names": {"list": []}})
        _rewrite(victim, edit)
    compile_stats().reset()
    why = {"tampered_op": "calls torch operators this graph does not: .*from_file", "foreign": "another graph",
           "checksum": "does not match the checksum"}.get(damage, "")
    with pytest.warns(CacheWarning, match=rf"(?s)ignoring .*{victim.name}.*{why}.*exporting again"):
        out, grads = _step(tmp_path, x)
    assert compile_stats().exports == 1 and model_cache.STATS["hits"] == 1 and model_cache.STATS["rejected"] == 1
    ref_out, ref_grads = _eager(x)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-6)
    assert_engine_ran(2)


def test_an_entry_others_may_write_is_not_trusted(tmp_path):
    x = torch.randn(4, 6)
    _step(tmp_path, x)
    os.chmod(tmp_path, 0o777)
    compile_stats().reset()
    with pytest.warns(CacheWarning, match="writable by other users"):
        _step(tmp_path, x)
    assert compile_stats().exports == 2 and model_cache.STATS["hits"] == 0


_CHILD = textwrap.dedent("""
    import json, sys, torch
    from torch_ort_backend.testing.models import causal_lm_batch, make_gpt2
    from torch_ort_backend import compile_stats, model_cache
    model = make_gpt2()
    compiled = torch.compile(model, backend="ort")
    out = compiled(**causal_lm_batch(0))
    out.loss.backward()
    print(json.dumps({{"loss": out.loss.item(), "grad": model.transformer.h[0].mlp.c_fc.weight.grad.double().norm().item(),
                      "exports": compile_stats().exports, "runs": compile_stats().runs,
                      "fallbacks": compile_stats().fallbacks, "hits": model_cache.STATS["hits"]}}))
""")


def test_a_new_process_with_a_warm_cache_skips_the_export_of_gpt2(tmp_path):
    """Two processes with ORTMODULE_CACHE_DIR: the second exports nothing and computes the same loss
    and gradients as the first and as eager."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORTMODULE_")}
    env.update(ORTMODULE_CACHE_DIR=str(tmp_path / "cache"), ORTMODULE_FALLBACK_POLICY="FALLBACK_DISABLE")
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", _CHILD.format()], env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["exports"] >= 2 and cold["hits"] == 0
    assert warm["exports"] == 0 and warm["hits"] == cold["exports"]
    assert cold["fallbacks"] == warm["fallbacks"] == 0 and warm["runs"] >= 2
    model = make_gpt2()
    loss = model(**causal_lm_batch(0)).loss
    loss.backward()
    grad = model.transformer.h[0].mlp.c_fc.weight.grad.double().norm().item()
    for run in runs:
        assert run["loss"] == pytest.approx(loss.item(), rel=1e-5)
        assert run["grad"] == pytest.approx(grad, rel=1e-4)
    assert warm["loss"] == cold["loss"] and warm["grad"] == cold["grad"]


class ViewNet(nn.Module):
    """Two outputs where the second is a view of the first: the export hands the view back as a
    replay of aten operators on the engine's output (an output kind ("view", ...) in the entry)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(6, 8)

    def forward(self, x):
        y = self.a(x).tanh()
        return y, y.transpose(0, 1)


def _view_step(cache_dir, x):
    torch._dynamo.reset()
    net = ViewNet()
    y, yt = torch.compile(net, backend="ort", options={"cache_dir": str(cache_dir)})(x)
    (y.square().sum() + (yt * yt.detach().flip(0)).sum()).backward()
    return y.detach(), yt.detach(), [p.grad for p in net.parameters()]


def _swap_ops(node, to):
    """The JSON of an entry's metadata with every operator it names replaced by `to`."""
    if isinstance(node, dict):
        if set(node) == {"op"}:
            return {"op": list(to)}
        return {k: _swap_ops(v, to) for k, v in node.items()}
    if isinstance(node, list):
        return [_swap_ops(v, to) for v in node]
    return node


@pytest.mark.parametrize("op,why", [(("aten::as_strided", ""), "as_strided.default, which this graph does not call"),
                                    (("aten::fill_", "Scalar"), "fill_, which is not a view operator")])
def test_a_view_replay_the_graph_does_not_call_is_refused(tmp_path, op, why):
    """An entry's metadata may only replay view operators its own graph calls: a local writer who
    swaps the replayed transpose for another operator (the graph's checksum does not cover the
    metadata) gets a CacheWarning naming it, and the graph is exported again."""
    x = torch.randn(4, 6)
    ref = _view_step(tmp_path / "ref", x)
    torch.testing.assert_close(ref[1], ref[0].transpose(0, 1))
    for record in _records(tmp_path / "ref"):
        record.unlink()
    swapped = 0
    for entry in _entries(tmp_path / "ref"):
        model = onnx.load(str(entry))
        meta = _props(model)[model_cache._META_PROP]
        if '"op"' in meta.value:
            meta.value = json.dumps(_swap_ops(json.loads(meta.value), op))
            onnx.save(model, str(entry))
            swapped += 1
    assert swapped >= 1  # the forward's entry replays the transpose
    compile_stats().reset()
    with pytest.warns(CacheWarning, match=rf"(?s)ignoring .*{why}.*exporting again"):
        y, yt, grads = _view_step(tmp_path / "ref", x)
    assert model_cache.STATS["rejected"] == swapped
    torch.testing.assert_close(y, ref[0])
    torch.testing.assert_close(yt, y.transpose(0, 1))
    for g, r in zip(grads, ref[2]):
        torch.testing.assert_close(g, r)
    assert_engine_ran(2)
