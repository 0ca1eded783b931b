"""The getting-started sample on torch_ort_backend: the tutorial's model trained by the legacy
ORTTrainer (onnxruntime.capi.ort_trainer's API, unchanged apart from the import), exported at opset 12,
with SGD at lr 5.0 decayed by 0.95 per epoch. The whole step (forward, loss, gradients, SGD update)
is one engine run.

    python examples/getting_started/train_ort.py --epochs 1 --max-batches 200
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from torch import nn
from tqdm import tqdm

from torch_ort_backend.capi.ort_trainer import IODescription, ModelDescription, ORTTrainer

from data import get_batch, load_data
from train import build, evaluate

bptt = 35
batch_size = 20


def model_description(ntokens: int) -> ModelDescription:
    # As in the sample: loose descriptions (src holds token ids; the label is flattened), which the
    # trainer completes from the tensors it is given.
    input_desc = IODescription("src", [bptt, batch_size], torch.float32)
    label_desc = IODescription("label", [bptt, batch_size, ntokens], torch.int64)
    loss_desc = IODescription("loss", [], torch.float32)
    output_desc = IODescription("output", [bptt, batch_size, ntokens], torch.float32)
    return ModelDescription([input_desc, label_desc], [loss_desc, output_desc])


def learning_rate_description() -> IODescription:
    return IODescription("Learning_Rate", [1], torch.float32)


def make_trainer(model: nn.Module, ntokens: int) -> ORTTrainer:
    criterion = nn.CrossEntropyLoss()

    def loss_with_flat_output(output, target):
        output = output.view(-1, ntokens)
        return criterion(output, target)

    return ORTTrainer(model, loss_with_flat_output, model_description(ntokens), "SGDOptimizer", None,
                      learning_rate_description(), torch.device("cpu"), _opset_version=12)


def train_epoch(trainer: ORTTrainer, train_data, lr: float, max_batches: int | None, epoch: int) -> list[float]:
    losses = []
    starts = list(range(0, train_data.size(0) - 1, bptt))[:max_batches]
    bar = tqdm(starts, desc=f"epoch {epoch} (ORTTrainer)", unit="batch")
    for i in bar:
        data, targets = get_batch(train_data, i, bptt)
        loss, _ = trainer.train_step(data, targets, torch.tensor([lr]))
        losses.append(loss.item())
        bar.set_postfix(loss=f"{losses[-1]:.2f}", ppl=f"{math.exp(min(losses[-1], 20)):.0f}")
    return losses


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=5.0)
    p.add_argument("--max-batches", type=int, default=None, help="batches per epoch (default: all)")
    args = p.parse_args(argv)
    ntokens, train_data, val_data, _ = load_data(batch_size=batch_size)
    model = build(ntokens)
    trainer = make_trainer(model, ntokens)
    lr = args.lr
    for epoch in range(1, args.epochs + 1):
        start = time.time()
        train_epoch(trainer, train_data, lr, args.max_batches, epoch)
        # The trained weights are the model's own parameters: evaluate them in torch.
        val = evaluate(model, val_data, ntokens, bptt)
        print(f"| end of epoch {epoch} | {time.time() - start:.1f}s | valid loss {val:.2f} | ppl {math.exp(val):.1f}")
        lr *= 0.95
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
