"""HuggingFace architectures that no test of ours builds, for benchmarks/bench_sweep.py: the models a
new user would try first, from small configs ("2 layers, hidden 128", as issue 15 measured them),
with their own loss (labels in the batch) and their default attention implementation.

Each entry of ARCHITECTURES is (make_model(), make_batch()) -> a model returning a HuggingFace
ModelOutput with "loss", and the keyword arguments of one training forward. Inputs are random and
seeded; images are non-zero normal noise, token ids avoid the pad id.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

Batch = dict[str, Any]

HIDDEN, LAYERS, HEADS, VOCAB = 128, 2, 4, 1024
BATCH, SEQ, IMAGE, LABELS = 4, 64, 32, 10


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


def _tokens(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randint(3, VOCAB, shape, generator=_gen())


def _causal_lm_batch() -> Batch:
    ids = _tokens((BATCH, SEQ))
    return {"input_ids": ids, "labels": ids.clone()}


def _seq2seq_batch() -> Batch:
    ids = _tokens((BATCH, SEQ))
    return {"input_ids": ids, "labels": torch.roll(ids, 1, dims=1)}


def _classifier_batch() -> Batch:
    return {"input_ids": _tokens((BATCH, SEQ)), "attention_mask": torch.ones(BATCH, SEQ, dtype=torch.long),
            "labels": torch.randint(0, 3, (BATCH,), generator=_gen())}


def _image_batch() -> Batch:
    pixels = torch.randn(BATCH, 3, IMAGE, IMAGE, generator=_gen())
    return {"pixel_values": pixels, "labels": torch.randint(0, LABELS, (BATCH,), generator=_gen())}


def _decoder_lm(config_name: str, model_name: str, **extra: Any) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        import transformers

        config = getattr(transformers, config_name)(
            vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, num_key_value_heads=HEADS // 2, max_position_embeddings=4 * SEQ,
            pad_token_id=0, bos_token_id=1, eos_token_id=2, **extra)
        return getattr(transformers, model_name)(config)
    return make


def make_opt() -> nn.Module:
    from transformers import OPTConfig, OPTForCausalLM

    return OPTForCausalLM(OPTConfig(vocab_size=VOCAB, hidden_size=HIDDEN, ffn_dim=2 * HIDDEN,
                                    num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                    word_embed_proj_dim=HIDDEN, max_position_embeddings=4 * SEQ,
                                    pad_token_id=0, bos_token_id=1, eos_token_id=2, dropout=0.0))


def make_roberta_classifier() -> nn.Module:
    from transformers import RobertaConfig, RobertaForSequenceClassification

    return RobertaForSequenceClassification(RobertaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=2 * HIDDEN, max_position_embeddings=SEQ + 4, num_labels=3, pad_token_id=1,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def make_t5() -> nn.Module:
    from transformers import T5Config, T5ForConditionalGeneration

    return T5ForConditionalGeneration(T5Config(
        vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=2 * HIDDEN, num_layers=LAYERS,
        num_heads=HEADS, dropout_rate=0.0, pad_token_id=0, decoder_start_token_id=0, eos_token_id=1))


def make_bart() -> nn.Module:
    from transformers import BartConfig, BartForConditionalGeneration

    return BartForConditionalGeneration(BartConfig(
        vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=2 * HIDDEN,
        decoder_ffn_dim=2 * HIDDEN, max_position_embeddings=4 * SEQ, dropout=0.0, attention_dropout=0.0,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2))


def make_vit() -> nn.Module:
    from transformers import ViTConfig, ViTForImageClassification

    return ViTForImageClassification(ViTConfig(
        image_size=IMAGE, patch_size=4, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=2 * HIDDEN, num_labels=LABELS, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0))


def make_convnext() -> nn.Module:
    from transformers import ConvNextConfig, ConvNextForImageClassification

    return ConvNextForImageClassification(ConvNextConfig(
        hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1], num_labels=LABELS, image_size=IMAGE))


def make_resnet() -> nn.Module:
    from transformers import ResNetConfig, ResNetForImageClassification

    return ResNetForImageClassification(ResNetConfig(
        embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1], layer_type="basic",
        num_labels=LABELS))


def make_swin() -> nn.Module:
    from transformers import SwinConfig, SwinForImageClassification

    return SwinForImageClassification(SwinConfig(
        image_size=IMAGE, patch_size=2, embed_dim=32, depths=[1, 1], num_heads=[2, 4], window_size=4,
        num_labels=LABELS, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0))


ARCHITECTURES: dict[str, tuple[Callable[[], nn.Module], Callable[[], Batch]]] = {
    "mistral": (_decoder_lm("MistralConfig", "MistralForCausalLM", sliding_window=None), _causal_lm_batch),
    "qwen2": (_decoder_lm("Qwen2Config", "Qwen2ForCausalLM"), _causal_lm_batch),
    "opt": (make_opt, _causal_lm_batch),
    "roberta_classifier": (make_roberta_classifier, _classifier_batch),
    "t5": (make_t5, _seq2seq_batch),
    "bart": (make_bart, _seq2seq_batch),
    "vit": (make_vit, _image_batch),
    "convnext": (make_convnext, _image_batch),
    "resnet": (make_resnet, _image_batch),
    "swin": (make_swin, _image_batch),
}
