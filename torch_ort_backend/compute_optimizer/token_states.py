"""The states the embedding case (embedding_sparsity.py) gives the values of a graph, what it records for
the run-time check (padding_check.py), and the plan it hands over."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import torch
import torch.fx


@dataclasses.dataclass(frozen=True)
class Region:
    flat: bool  # [B*S, *feat] rather than [B, S, *feat]
    feat: tuple[int, ...]

    @property
    def ntok(self) -> int:
        return 1 if self.flat else 2

    @property
    def rank(self) -> int:
        return self.ntok + len(self.feat)


@dataclasses.dataclass(frozen=True)
class Island:
    bdim: int
    tdim: int


@dataclasses.dataclass(frozen=True)
class Scores:
    bdim: int
    qdim: int
    kdim: int
    attention: int  # index into _Builder.attentions


@dataclasses.dataclass(frozen=True)
class Probs:
    bdim: int
    qdim: int
    kdim: int


@dataclasses.dataclass(frozen=True)
class Several:
    """A tuple-valued op (split, chunk): the state of each element."""
    items: tuple


@dataclasses.dataclass
class Attention:
    """One attention whose padded keys the run-time check must find masked (padding_check.py)."""
    kind: str  # "eager" (matmul, scale/mask chain, softmax, matmul) or "sdpa"
    node: str
    rank: int
    bdim: int
    qdim: int
    kdim: int
    dtype: torch.dtype
    chain: list = dataclasses.field(default_factory=list)  # eager: (node, index of the scores operand)
    positive: list = dataclasses.field(default_factory=list)  # eager: (tensor node, strict) multipliers
    mask: torch.fx.Node | None = None  # sdpa
    is_causal: bool = False
    scale: Any = None  # sdpa: None (1/sqrt(head size)), a number, or a node holding one


@dataclasses.dataclass
class Plan:
    """The rewritten graph and what padding_check.py needs to decide, per call, whether it may run."""
    gm: torch.fx.GraphModule
    ids: torch.fx.Node  # the token ids (a node of the graph the pass read)
    padding_idx: int | None
    mask: torch.fx.Node | None  # the attention-mask input marking padding, when found
    attentions: list[Attention]
    losses: list[tuple[torch.fx.Node, int]]  # (labels as the loss reads them, ignore_index)
    gathers: list[torch.fx.Node]  # flat row indices that must point at valid tokens
    entries: list[str]
    restored: list[str]  # graph outputs restored to the padded shape
    moved_ops: Counter


class Declined(Exception):
    """The graph has a reader of per-token values that the pass cannot prove padding-blind."""


__all__ = ["Attention", "Declined", "Island", "Plan", "Probs", "Region", "Scores", "Several"]
