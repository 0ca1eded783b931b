"""The label case of the compute optimizer for ORTTrainer, which captures its model with torch.export
(trainer/training_graph.py) rather than through TorchDynamo's graph.

While the trainer's model and loss are exported, every call of ``F.cross_entropy`` that
label_sparsity.py could rewrite (hard labels [N] against logits [N, C], mean or sum, no label
smoothing) runs over the rows whose label is not the ignore index instead:

    rows = nonzero(labels != ignore_index).view(-1)
    cross_entropy(logits.index_select(0, rows), labels.index_select(0, rows), ...)

so the exported training graph computes the log-softmax over the vocabulary and its gradient for the
valid rows only, where onnxruntime-training put its ShrunkenGather (InsertGatherBeforeSceLoss). The
logits themselves are still computed for every row: ORTTrainer's model description returns them.
Same numbers as label_sparsity.py argues: the selected rows are exactly those the loss counts, and the
backward of index_select gives the other rows the zeros the ignore index gave them.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .label_sparsity import bound_cross_entropy, selectable

_CROSS_ENTROPY = F.cross_entropy


class SelectValidLabels(TorchFunctionMode):
    """Active while the trainer exports: eligible cross-entropies run over the valid labels' rows.
    ``rewrites`` counts the calls it rewrote (a trace may call the loss more than once)."""

    def __init__(self) -> None:
        super().__init__()
        self.rewrites = 0

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is _CROSS_ENTROPY:
            a = bound_cross_entropy(args, kwargs)
            if a is not None and selectable(a, a["input"], a["target"], a["weight"]):
                labels = a["target"]
                rows = torch.nonzero(labels != a["ignore_index"]).view(-1)
                a["input"] = a["input"].index_select(0, rows)
                a["target"] = labels.index_select(0, rows)
                self.rewrites += 1
                return _CROSS_ENTROPY(**a)
        return func(*args, **kwargs)


__all__ = ["SelectValidLabels"]
