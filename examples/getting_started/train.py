"""The getting-started sample in plain PyTorch (the tutorial's training loop), the reference that
train_ort.py is compared with: SGD at lr 5.0 decayed by 0.95 per epoch, gradients clipped to 0.5.

    python examples/getting_started/train.py --epochs 1 --max-batches 200
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from torch import nn
from tqdm import tqdm

from data import get_batch, load_data
from model import TransformerModel


def build(ntokens: int, seed: int = 0, dropout: float = 0.2) -> TransformerModel:
    torch.manual_seed(seed)
    return TransformerModel(ntokens, 200, 2, 200, 2, dropout)


def train_epoch(model, train_data, ntokens: int, lr: float, bptt: int, clip: float, max_batches: int | None,
                epoch: int) -> list[float]:
    """One epoch of the tutorial's loop; returns the per-batch losses."""
    criterion = nn.CrossEntropyLoss()
    model.train()
    losses = []
    starts = list(range(0, train_data.size(0) - 1, bptt))[:max_batches]
    bar = tqdm(starts, desc=f"epoch {epoch} (torch)", unit="batch")
    for i in bar:
        data, targets = get_batch(train_data, i, bptt)
        model.zero_grad()
        loss = criterion(model(data).view(-1, ntokens), targets)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-lr)
        losses.append(loss.item())
        bar.set_postfix(loss=f"{losses[-1]:.2f}", ppl=f"{math.exp(min(losses[-1], 20)):.0f}")
    return losses


def evaluate(model, data, ntokens: int, bptt: int) -> float:
    criterion = nn.CrossEntropyLoss(reduction="sum")
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, data.size(0) - 1, bptt):
            x, y = get_batch(data, i, bptt)
            total += criterion(model(x).view(-1, ntokens), y).item()
            count += y.numel()
    return total / count


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=5.0)
    p.add_argument("--bptt", type=int, default=35)
    p.add_argument("--max-batches", type=int, default=None, help="batches per epoch (default: all)")
    args = p.parse_args(argv)
    ntokens, train_data, val_data, _ = load_data()
    model = build(ntokens)
    lr = args.lr
    for epoch in range(1, args.epochs + 1):
        start = time.time()
        train_epoch(model, train_data, ntokens, lr, args.bptt, 0.5, args.max_batches, epoch)
        val = evaluate(model, val_data, ntokens, args.bptt)
        print(f"| end of epoch {epoch} | {time.time() - start:.1f}s | valid loss {val:.2f} | ppl {math.exp(val):.1f}")
        lr *= 0.95
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
