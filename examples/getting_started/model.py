"""The getting-started sample's model: the PyTorch tutorial's TransformerModel (word embedding,
positional encoding, a causal TransformerEncoder and a linear decoder over the vocabulary) in the
tutorial's sequence-first layout: `src` is (seq, batch) token ids, the output (seq, batch, ntoken).
It is the model the demo trains, so it lives once, in examples/transformer_lm_model.py."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from transformer_lm_model import TransformerModel  # noqa: E402

__all__ = ["TransformerModel"]
