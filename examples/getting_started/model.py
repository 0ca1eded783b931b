"""The getting-started sample's model: the PyTorch tutorial's TransformerModel (word embedding,
positional encoding, a causal TransformerEncoder and a linear decoder over the vocabulary) in the
tutorial's sequence-first layout: `src` is (seq, batch) token ids, the output (seq, batch, ntoken).
It is the model the demo trains, so it lives once, in torch_ort_backend/testing/transformer_lm.py."""

from __future__ import annotations

from torch_ort_backend.testing.transformer_lm import TransformerModel

__all__ = ["TransformerModel"]
