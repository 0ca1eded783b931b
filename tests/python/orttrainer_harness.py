"""Shared pieces of the ORTTrainer tests: small models with their description and loss, and an eager
reference trainer that applies the same update rules with torch ops in float64."""

from __future__ import annotations

import copy

import torch
from torch import nn

VOCAB, HIDDEN = 32, 16

LM_DESC = {"inputs": [("ids", ["batch", "seq"]), ("labels", ["batch", "seq"])],
           "outputs": [("loss", [], True), ("logits", ["batch", "seq", VOCAB])]}


class TinyLM(nn.Module):
    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.ln = nn.LayerNorm(HIDDEN)
        self.fc = nn.Linear(HIDDEN, HIDDEN)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, ids):
        return self.head(self.drop(torch.nn.functional.gelu(self.fc(self.ln(self.embed(ids))))))


def lm_loss(logits, labels):
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))


def make_model(seed: int = 0) -> TinyLM:
    torch.manual_seed(seed)
    return TinyLM()


def batches(n: int, seed: int = 1, shapes=((4, 6), (4, 6), (3, 5), (2, 9))):
    g = torch.Generator().manual_seed(seed)
    out = []
    for k in range(n):
        shape = shapes[k % len(shapes)]
        out.append((torch.randint(0, VOCAB, shape, generator=g), torch.randint(0, VOCAB, shape, generator=g)))
    return out


class EagerReference:
    """The training step in eager PyTorch with float64 optimizer arithmetic: `update(params, grads, lr)`
    is the rule under test (SGD, Adam, Lamb as the optimizer ops document it)."""

    def __init__(self, model: nn.Module, trainable: list[str], accumulation: int = 1, clip: float | None = None):
        self.model = copy.deepcopy(model)
        self.params = dict(self.model.named_parameters())
        self.trainable = trainable
        self.accumulation = accumulation
        self.clip = clip
        self.sums = {n: torch.zeros_like(self.params[n]) for n in trainable}
        self.calls = 0

    def step(self, ids, labels, lr, rule) -> torch.Tensor:
        self.model.zero_grad()
        logits = self.model(ids)
        loss = lm_loss(logits, labels)
        loss.backward()
        self.calls += 1
        for n in self.trainable:
            self.sums[n] += self.params[n].grad
        if self.calls % self.accumulation == 0:
            grads = {n: self.sums[n].double() for n in self.trainable}
            if self.clip is not None:
                norm = torch.sqrt(sum((g * g).sum() for g in grads.values()))
                scale = max(1.0, float(norm) / self.clip)
                grads = {n: g / scale for n, g in grads.items()}
            with torch.no_grad():
                for n in self.trainable:
                    self.params[n].copy_(rule(n, self.params[n].double(), grads[n], lr).float())
                    self.sums[n].zero_()
        return loss.detach()


def sgd_rule(name, w, g, lr):
    return w - lr * g
