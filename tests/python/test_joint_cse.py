"""memory_optimizer/joint_cse.py: the partitioner's common-subexpression elimination without torch's
Inductor import. On the joint graphs of GPT-2, BERT, LLaMA (the compute optimizer's label and embedding
cases on: unbacked sizes, index_select, nonzero) it must leave exactly the graph torch's fx_graph_cse
leaves; a graph with a mutating op is left to torch's pass."""

from __future__ import annotations

import functools

import pytest
import torch
from torch._functorch.compile_utils import fx_graph_cse

from ortmodule_helpers import fresh_state
from torch_ort_backend.memory_optimizer import partition
from torch_ort_backend.memory_optimizer.joint_cse import cse_joint
from torch_ort_backend.testing.models import causal_lm_batch, make_bert_mlm, make_gpt2, make_llama, bert_mlm_batch


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    yield from fresh_state(monkeypatch)


def _copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of the graph (nodes copied, their fake values shared: fake tensors do not deepcopy)."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return torch.fx.GraphModule(gm, graph)


def _lines(graph: torch.fx.Graph) -> list[str]:
    return [f"{n.op} {n.name} {n.target} {n.args} {n.kwargs}" for n in graph.nodes]


@pytest.mark.parametrize("make_model, make_batch", [(make_gpt2, causal_lm_batch), (make_bert_mlm, bert_mlm_batch),
                                                    (functools.partial(make_llama, attn="sdpa"), causal_lm_batch)])
def test_same_graph_as_torchs_pass(make_model, make_batch, monkeypatch):
    joints = []
    original = partition._min_cut

    def capture(joint, joint_inputs, **kwargs):
        joints.append(_copy(joint))
        return original(joint, joint_inputs, **kwargs)

    monkeypatch.setattr(partition, "_min_cut", capture)
    model = torch.compile(make_model(), backend="ort", options={"enable_embedding_sparse_optimizer": True})
    model(**make_batch(0)).loss.backward()
    assert len(joints) == 2  # the graph over the valid tokens and the dense one
    for joint in joints:
        want = fx_graph_cse(_copy(joint).graph)
        ours = _copy(joint)
        assert cse_joint(ours)
        assert _lines(ours.graph) == _lines(want)
        assert len(ours.graph.nodes) < len(joint.graph.nodes)  # there was something to merge


def test_a_mutating_graph_is_left_to_torch():
    def f(x):
        y = x.sin() + x.sin()
        x.add_(1)
        return y

    gm = torch.fx.experimental.proxy_tensor.make_fx(f)(torch.randn(3))
    before = _lines(gm.graph)
    assert not cse_joint(gm)
    assert _lines(gm.graph) == before
