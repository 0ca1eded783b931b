"""The PyTorch transformer language-model tutorial's model.

Same structure as pytorch/examples' word_language_model `TransformerModel` and the "Language
Modeling with nn.Transformer" tutorial: token embedding scaled by sqrt(d_model), sinusoidal
positional encoding followed by dropout, an `nn.TransformerEncoder` under a causal (square
subsequent) mask, and a linear decoder to vocabulary logits. Inputs are laid out (seq, batch) as in
the tutorial's `batchify` / `get_batch`.

It is used by the getting-started demo (examples/demo.py, examples/getting_started), and by the
tests and benchmarks through torch_ort_backend.testing.models.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class PositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal position signal of "Attention Is All You Need" to (seq, batch, d)."""

    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        # A buffer, not a parameter: it moves with .to(device) and is saved, but is never trained.
        self.register_buffer("pe", pe)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(x + self.pe[: x.size(0)])


class TransformerModel(nn.Module):
    """Causal transformer language model: (seq, batch) token ids -> (seq, batch, ntoken) logits."""

    def __init__(self, ntoken: int, d_model: int = 200, nhead: int = 2, d_hid: int = 200, nlayers: int = 2,
                 dropout: float = 0.2) -> None:
        super().__init__()
        self.model_type = "Transformer"
        self.d_model = d_model
        self.embedding = nn.Embedding(ntoken, d_model)
        self.pos_encoder = PositionalEncoding(d_model, dropout)
        layer = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout)
        # The nested-tensor fast path only applies to padded batches in inference; a language
        # model's batches are dense, and leaving it on just prints a warning.
        self.transformer_encoder = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
        self.linear = nn.Linear(d_model, ntoken)
        self.init_weights()

    def init_weights(self) -> None:
        initrange = 0.1
        self.embedding.weight.data.uniform_(-initrange, initrange)
        self.linear.bias.data.zero_()
        self.linear.weight.data.uniform_(-initrange, initrange)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """src: (seq, batch) int64 token ids; src_mask: (seq, seq) additive float mask, causal when None."""
        # Saying is_causal spares nn.TransformerEncoder from comparing the mask with a causal one,
        # a data-dependent check that would break a torch.compile graph in two.
        is_causal = src_mask is None
        if is_causal:
            src_mask = causal_mask(src.size(0), src.device)
        x = self.embedding(src) * math.sqrt(self.d_model)
        x = self.pos_encoder(x)
        return self.linear(self.transformer_encoder(x, src_mask, is_causal=is_causal))


def causal_mask(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(size, size) float mask: 0 on and below the diagonal, -inf above (no attending to the future)."""
    return torch.triu(torch.full((size, size), float("-inf"), device=device), diagonal=1)
