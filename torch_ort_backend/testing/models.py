"""Models for the tests and the benchmarks, each with its batch maker (one module both import:
``from torch_ort_backend.testing import models``).

Every builder takes its sizes as keyword arguments; the defaults are small enough for a training
step of a few milliseconds on two CPU cores (the benchmark passes larger ones, see BENCH_SIZES).
Dropout defaults to 0 so that a compiled model and its eager twin compute the same thing; pass a
non-zero `dropout` only in a test about RNG.

A model returns either a mapping with "loss" (HuggingFace ModelOutput, or `WithLoss` below) or the
loss itself, so the harness and the benchmark treat every model alike. `make_batch(step)` returns
the keyword arguments of one forward call, seeded by `step`: random, non-zero, reproducible.

MODELS maps a name to a ModelSpec (builder, batch maker, description) for tests and benchmarks.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from .transformer_lm import TransformerModel

Batch = dict[str, Any]


def flatten_outputs(output: Any, prefix: str = "output") -> list[tuple[str, torch.Tensor]]:
    """Every tensor of a (nested) output with its path: dicts and HuggingFace ModelOutputs by key
    (None fields are skipped, as ModelOutput does), lists and tuples by index."""
    if isinstance(output, torch.Tensor):
        return [(prefix, output)]
    if isinstance(output, Mapping):
        items = [(f"{prefix}.{key}", value) for key, value in output.items() if value is not None]
    elif isinstance(output, (list, tuple)):
        items = [(f"{prefix}[{i}]", value) for i, value in enumerate(output)]
    else:
        return []
    return [pair for path, value in items for pair in flatten_outputs(value, path)]


def extract_loss(output: Any) -> torch.Tensor:
    """The scalar to call backward() on: output["loss"] (mappings, ModelOutput), output[0]
    (tuples), or the output itself."""
    if isinstance(output, Mapping):
        loss = output.get("loss")
    elif isinstance(output, (list, tuple)) and output:
        loss = output[0]
    else:
        loss = output
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise TypeError(f"the model must return a scalar loss, a mapping with 'loss' or a tuple starting with it; "
                        f"got {type(output).__name__}")
    return loss


def generator(step: int, salt: int) -> torch.Generator:
    return torch.Generator().manual_seed(1_000_003 * salt + step)


def nonzero(shape: tuple[int, ...], gen: torch.Generator, low: float = 0.1, high: float = 1.0) -> torch.Tensor:
    """float32 with magnitudes in [low, high) and random signs: never zero."""
    mag = torch.rand(shape, generator=gen) * (high - low) + low
    return torch.where(torch.rand(shape, generator=gen) < 0.5, -mag, mag)


def token_ids(shape: tuple[int, ...], vocab: int, gen: torch.Generator) -> torch.Tensor:
    """Token ids in [1, vocab): id 0 is left out so that no input is all-zero by accident."""
    return torch.randint(1, vocab, shape, generator=gen)


def padding_mask(batch: int, seq: int, gen: torch.Generator) -> torch.Tensor:
    """An attention mask (1 = token, 0 = padding) where every row but the first is right-padded by
    1..seq/4 positions, so the masking path is exercised and no row is all padding."""
    mask = torch.ones(batch, seq, dtype=torch.int64)
    for row in range(1, batch):
        pad = int(torch.randint(1, max(2, seq // 4 + 1), (1,), generator=gen))
        mask[row, seq - pad:] = 0
    return mask


class WithLoss(nn.Module):
    """A classifier and its loss in one module, so the compiled graph holds the loss and its
    backward too: forward(x, target) -> {"loss": scalar, "logits": ...}."""

    def __init__(self, model: nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.model(x)
        return {"loss": self.loss_fn(logits, target), "logits": logits}


# --- MLP --------------------------------------------------------------------------------------

def make_mlp(in_features: int = 32, hidden: int = 64, classes: int = 10) -> nn.Module:
    """Linear-ReLU-Linear-GELU-Linear classifier with cross-entropy."""
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(in_features, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.GELU(),
        nn.Linear(hidden, classes),
    )
    return WithLoss(net, F.cross_entropy)


def mlp_batch(step: int, batch: int = 16, in_features: int = 32, classes: int = 10) -> Batch:
    gen = generator(step, 1)
    return {"x": nonzero((batch, in_features), gen), "target": torch.randint(0, classes, (batch,), generator=gen)}


# --- MNIST-style CNN --------------------------------------------------------------------------

class MnistNet(nn.Module):
    """pytorch/examples' MNIST network, narrower: conv-relu-conv-relu-maxpool-dropout-linear-relu-
    dropout-linear-log_softmax on 1x28x28 images."""

    def __init__(self, channels: int = 8, hidden: int = 64, dropout: float = 0.0) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, 1)
        self.conv2 = nn.Conv2d(channels, 2 * channels, 3, 1)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.fc1 = nn.Linear(2 * channels * 12 * 12, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


def make_cnn(channels: int = 8, hidden: int = 64, dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    return WithLoss(MnistNet(channels, hidden, dropout), F.nll_loss)


def cnn_batch(step: int, batch: int = 8) -> Batch:
    gen = generator(step, 2)
    return {"x": nonzero((batch, 1, 28, 28), gen), "target": torch.randint(0, 10, (batch,), generator=gen)}


# --- the transformer language-model tutorial --------------------------------------------------

class LanguageModelLoss(nn.Module):
    """TransformerModel plus the tutorial's loss: cross-entropy of (seq, batch, vocab) logits
    against the next tokens."""

    def __init__(self, model: TransformerModel, ntoken: int) -> None:
        super().__init__()
        self.model = model
        self.ntoken = ntoken

    def forward(self, src: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.model(src)
        return {"loss": F.cross_entropy(logits.view(-1, self.ntoken), target.reshape(-1)), "logits": logits}


def make_transformer_lm(ntoken: int = 100, d_model: int = 32, nhead: int = 2, d_hid: int = 64, nlayers: int = 2,
                        dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    return LanguageModelLoss(TransformerModel(ntoken, d_model, nhead, d_hid, nlayers, dropout), ntoken)


def transformer_lm_batch(step: int, seq: int = 16, batch: int = 4, ntoken: int = 100) -> Batch:
    """(seq, batch) sources and their next tokens, cut from one random stream like get_batch."""
    gen = generator(step, 3)
    stream = token_ids((seq + 1, batch), ntoken, gen)
    return {"src": stream[:-1], "target": stream[1:]}


# --- HuggingFace transformers: GPT-2, BERT, LLaMA -----------------------------------------------

def make_gpt2(attn: str = "eager", vocab: int = 128, hidden: int = 32, layers: int = 2, heads: int = 2,
              positions: int = 64, dropout: float = 0.0) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=vocab, n_positions=positions, n_embd=hidden, n_layer=layers, n_head=heads,
                        resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
                        bos_token_id=vocab - 1, eos_token_id=vocab - 1, attn_implementation=attn)
    model = GPT2LMHeadModel(config)
    # transformers guesses the loss from the class name, finds none for "GPT2LMHeadModel" and logs
    # a warning inside forward, which breaks the torch.compile graph: name it.
    model.loss_type = "ForCausalLM"
    return model


def causal_lm_batch(step: int, batch: int = 2, seq: int = 16, vocab: int = 128) -> Batch:
    """input_ids, a right-padded attention_mask and labels (the ids, -100 on padding)."""
    gen = generator(step, 4)
    ids = token_ids((batch, seq), vocab, gen)
    mask = padding_mask(batch, seq, gen)
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def _bert_config(attn: str, vocab: int, hidden: int, layers: int, heads: int, positions: int, dropout: float,
                 **extra: Any):
    from transformers import BertConfig
    return BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      intermediate_size=2 * hidden, max_position_embeddings=positions,
                      hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                      attn_implementation=attn, **extra)


def make_bert_mlm(attn: str = "eager", vocab: int = 128, hidden: int = 32, layers: int = 2, heads: int = 2,
                  positions: int = 64, dropout: float = 0.0) -> nn.Module:
    from transformers import BertForMaskedLM
    torch.manual_seed(0)
    return BertForMaskedLM(_bert_config(attn, vocab, hidden, layers, heads, positions, dropout))


def bert_mlm_batch(step: int, batch: int = 2, seq: int = 16, vocab: int = 128) -> Batch:
    """Padded ids with token types; labels on about 30% of the real tokens (at least one per row)."""
    gen = generator(step, 5)
    ids = token_ids((batch, seq), vocab, gen)
    mask = padding_mask(batch, seq, gen)
    chosen = (torch.rand(batch, seq, generator=gen) < 0.3) & (mask == 1)
    chosen[:, 0] = True
    token_types = (torch.arange(seq) >= seq // 2).long().expand(batch, seq).contiguous()
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": token_types,
            "labels": ids.masked_fill(~chosen, -100)}


def make_bert_classifier(attn: str = "eager", vocab: int = 128, hidden: int = 32, layers: int = 2, heads: int = 2,
                         positions: int = 64, labels: int = 3, dropout: float = 0.0) -> nn.Module:
    from transformers import BertForSequenceClassification
    torch.manual_seed(0)
    config = _bert_config(attn, vocab, hidden, layers, heads, positions, dropout, num_labels=labels,
                          classifier_dropout=dropout)
    return BertForSequenceClassification(config)


def bert_classifier_batch(step: int, batch: int = 4, seq: int = 16, vocab: int = 128, labels: int = 3) -> Batch:
    gen = generator(step, 6)
    return {"input_ids": token_ids((batch, seq), vocab, gen), "attention_mask": padding_mask(batch, seq, gen),
            "labels": torch.randint(0, labels, (batch,), generator=gen)}


def make_llama(attn: str = "eager", vocab: int = 128, hidden: int = 32, layers: int = 2, heads: int = 4,
               kv_heads: int = 2, positions: int = 64, dropout: float = 0.0) -> nn.Module:
    """Grouped-query attention (kv_heads < heads), RMSNorm, rotary embeddings, SwiGLU."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=positions,
                         attention_dropout=dropout, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                         attn_implementation=attn)
    return LlamaForCausalLM(config)


# --- the registry -------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelSpec:
    make_model: Callable[..., nn.Module]
    make_batch: Callable[..., Batch]
    description: str
    bench_sizes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def builders(self, sizes: dict[str, dict[str, Any]] | None = None
                 ) -> tuple[Callable[[], nn.Module], Callable[[int], Batch]]:
        """(make_model(), make_batch(step)) with the given {"model": {...}, "batch": {...}} sizes."""
        sizes = sizes or {}
        return (functools.partial(self.make_model, **sizes.get("model", {})),
                functools.partial(self.make_batch, **sizes.get("batch", {})))


# Benchmark sizes: a step of roughly 10-100 ms on two cores, big enough that kernels, not per-op
# overhead, dominate, small enough that every backend of every model runs in a few minutes.
_GPT_BENCH = {"model": {"vocab": 1024, "hidden": 128, "layers": 2, "heads": 4, "positions": 256},
              "batch": {"batch": 4, "seq": 128, "vocab": 1024}}

MODELS: dict[str, ModelSpec] = {
    "mlp": ModelSpec(make_mlp, mlp_batch, "MLP: Linear-ReLU-Linear-GELU-Linear, cross-entropy",
                     {"model": {"in_features": 256, "hidden": 512}, "batch": {"batch": 64, "in_features": 256}}),
    "cnn": ModelSpec(make_cnn, cnn_batch, "MNIST CNN: conv-relu x2, max-pool, linear, log_softmax + nll_loss",
                     {"model": {"channels": 16, "hidden": 128}, "batch": {"batch": 32}}),
    "transformer_lm": ModelSpec(make_transformer_lm, transformer_lm_batch,
                                "tutorial transformer LM: embedding, positional encoding, causal encoder, decoder",
                                {"model": {"ntoken": 1024, "d_model": 128, "nhead": 4, "d_hid": 512, "nlayers": 2},
                                 "batch": {"seq": 64, "batch": 8, "ntoken": 1024}}),
    "gpt2": ModelSpec(make_gpt2, causal_lm_batch, "GPT-2 LM head (eager attention)", _GPT_BENCH),
    "gpt2_sdpa": ModelSpec(functools.partial(make_gpt2, "sdpa"), causal_lm_batch, "GPT-2 LM head (SDPA attention)",
                           _GPT_BENCH),
    "bert_mlm": ModelSpec(make_bert_mlm, bert_mlm_batch, "BERT masked LM (eager attention)", _GPT_BENCH),
    "bert_mlm_sdpa": ModelSpec(functools.partial(make_bert_mlm, "sdpa"), bert_mlm_batch,
                               "BERT masked LM (SDPA attention)", _GPT_BENCH),
    "bert_classifier": ModelSpec(make_bert_classifier, bert_classifier_batch,
                                 "BERT sequence classification (eager attention)", _GPT_BENCH),
    "llama": ModelSpec(make_llama, causal_lm_batch, "LLaMA causal LM, GQA (eager attention)",
                       {"model": {**_GPT_BENCH["model"], "kv_heads": 2}, "batch": _GPT_BENCH["batch"]}),
    "llama_sdpa": ModelSpec(functools.partial(make_llama, "sdpa"), causal_lm_batch,
                            "LLaMA causal LM, GQA (SDPA attention)",
                            {"model": {**_GPT_BENCH["model"], "kv_heads": 2}, "batch": _GPT_BENCH["batch"]}),
}
