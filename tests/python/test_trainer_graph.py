"""ORTTrainer's joint graph (trainer/training_graph.py) on its own: the model and loss exported once as
forward + loss + gradients, run by the engine with the parameters fed as inputs, gives eager's loss,
every parameter gradient and the buffer updates, at new sizes of the dimensions the description
names, at the opsets the trainer's users exported with."""

import onnx
import pytest
import torch
from torch import nn

from torch_ort_backend import InferenceSession
from torch_ort_backend.trainer.model_desc import parse_model_desc
from torch_ort_backend.trainer.training_graph import ModelWithLoss, export_model


class TinyLM(nn.Module):
    def __init__(self, vocab=40, hidden=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        self.ln = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, ids):
        return self.out(torch.nn.functional.gelu(self.fc(self.ln(self.emb(ids)))))


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


LM_DESC = {"inputs": [("ids", ["batch", "seq"]), ("labels", ["batch", "seq"])],
           "outputs": [("loss", [], True), ("logits", ["batch", "seq", 40])]}


def lm_loss(logits, labels):
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def _run(exported, model, inputs, names):
    feeds = {n: p.detach() for n, p in model.named_parameters() if n in exported.params}
    feeds.update({n: b for n, b in model.named_buffers() if n in exported.buffers})
    feeds.update({n: c for n, c in exported.constants.items()})
    feeds.update(dict(zip(names, inputs)))
    sess = InferenceSession(exported.model)
    outs = sess.run(None, feeds)
    return dict(zip([o.name for o in exported.model.graph.output], outs))


@pytest.mark.parametrize("opset", [12, 14, 18])
def test_joint_graph_matches_eager_loss_and_gradients_at_new_sizes(opset):
    torch.manual_seed(0)
    model = TinyLM()
    desc = parse_model_desc(LM_DESC)
    wrapper = ModelWithLoss(model, lm_loss, 0, input_names=desc.input_names)
    example = (torch.randint(0, 40, (3, 7)), torch.randint(0, 40, (3, 7)))
    exported = export_model(wrapper, desc, example, joint=True, opset=opset)
    onnx.checker.check_model(exported.model)
    assert exported.dynamic_axes == {"ids": [0, 1], "labels": [0, 1]}
    assert set(exported.gradients) == {n for n, _ in model.named_parameters()}
    assert not exported.aten_fallback_ops, exported.aten_fallback_ops
    for shape in [(3, 7), (5, 2), (1, 9)]:
        ids, labels = torch.randint(0, 40, shape), torch.randint(0, 40, shape)
        got = _run(exported, model, (ids, labels), desc.input_names)
        model.zero_grad()
        logits = model(ids)
        loss = lm_loss(logits, labels)
        loss.backward()
        torch.testing.assert_close(got["loss"], loss.detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got["logits"], logits.detach(), rtol=1e-5, atol=1e-6)
        for name, p in model.named_parameters():
            torch.testing.assert_close(got[exported.gradients[name]], p.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_buffer_updates_are_outputs_and_frozen_parameters_get_no_gradient():
    torch.manual_seed(1)
    model = ConvBN()
    model.conv.weight.requires_grad_(False)
    desc = parse_model_desc({"inputs": [("x", ["n", 3, 6, 6]), ("y", ["n"])], "outputs": [("loss", [], True), ("logits", ["n", 5])]})
    wrapper = ModelWithLoss(model, nn.functional.cross_entropy, 0, input_names=desc.input_names)
    x, y = torch.randn(4, 3, 6, 6), torch.randint(0, 5, (4,))
    exported = export_model(wrapper, desc, (x, y), joint=True, opset=18)
    assert "conv.weight" not in exported.gradients and "conv.bias" in exported.gradients
    assert set(exported.buffer_updates) == {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}
    reference = ConvBN()
    reference.load_state_dict(model.state_dict())
    got = _run(exported, model, (x, y), desc.input_names)
    loss = nn.functional.cross_entropy(reference(x), y)
    loss.backward()
    torch.testing.assert_close(got["loss"], loss.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[exported.gradients["fc.weight"]], reference.fc.weight.grad, rtol=1e-4, atol=1e-6)
    for name, buf in reference.named_buffers():
        torch.testing.assert_close(got[exported.buffer_updates[name]], buf, rtol=1e-5, atol=1e-6, msg=name)
    assert model.bn.num_batches_tracked.item() == 0  # the export never ran the model's own update


def test_description_that_miscounts_the_outputs_is_a_named_error():
    desc = parse_model_desc({"inputs": [("ids", ["b", "s"]), ("labels", ["b", "s"])],
                             "outputs": [("loss", [], True), ("logits", ["b", "s", 40]), ("extra", [])]})
    wrapper = ModelWithLoss(TinyLM(), lm_loss, 0, input_names=desc.input_names)
    with pytest.raises(ValueError, match=r"model_desc lists 3 outputs \['loss', 'logits', 'extra'\], but the model \(with its loss\) returns 2"):
        export_model(wrapper, desc, (torch.randint(0, 40, (2, 3)),) * 2, joint=True, opset=18)
