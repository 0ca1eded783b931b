"""Small models for the distributed tests: their forward is code of this file (a class of ours,
as a user's model is), so TorchDynamo traces it; see docs/distributed.md for why a module whose
forward is torch's own (nn.Sequential, nn.Linear) behaves differently behind DDP, FSDP2 and
Module.compile()."""

from __future__ import annotations

import torch
from torch import nn

from distributed_harness import nonzero


class Block(nn.Module):
    """A pre-norm residual MLP block: LayerNorm, Linear, GELU, Linear."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


class BlockStack(nn.Module):
    """Blocks then a linear head; returns the MSE loss against `target`."""

    def __init__(self, width: int = 32, hidden: int = 64, blocks: int = 2, out: int = 4) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(width, hidden) for _ in range(blocks))
        self.head = nn.Linear(width, out)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return nn.functional.mse_loss(self.head(x).float(), target)


def make_block_stack(seed: int = 0, **sizes: int) -> BlockStack:
    """The same weights on every rank and for every wrapping (random, non-zero)."""
    model = BlockStack(**sizes)
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(nonzero(p.shape, seed=1000 * seed + i, scale=0.5 / p.shape[-1] ** 0.5))
    return model


def batch(step: int, rank: int, rows: int = 4, width: int = 32, out: int = 4,
          dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch at this step: different on every rank, so the all-reduce has work to do."""
    seed = 10_000 + 100 * step + rank
    return nonzero((rows, width), seed, dtype=dtype), nonzero((rows, out), seed + 50)
