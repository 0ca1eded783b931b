"""More HuggingFace architectures nothing here was tuned for, beyond hf_architectures.py's ten (which
the size sweep times): the decoder, encoder, speech and vision families a new user tries next, from
small configs (hf_architectures.py's sizes), with their own loss and default attention. Used by
tools/check_architectures.py, which trains and runs each under "ort" against float64 and eager.

Dropout-like randomness is off where the config allows (stochastic depth, classifier dropout), so
that a float64 run of the same model is a reference; attention dropout stays at each config's default.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from hf_architectures import BATCH, HEADS, HIDDEN, IMAGE, LABELS, LAYERS, SEQ, VOCAB, Batch, _causal_lm_batch
from hf_architectures import _classifier_batch, _decoder_lm, _gen, _image_batch


def _config(name: str, **fields: Any):
    import transformers

    return getattr(transformers, name)(**fields)


def _model(name: str, config: str, **fields: Any) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        import transformers

        return getattr(transformers, name)(_config(config, **fields))
    return make


def _encoder_classifier(config: str, model: str, **extra: Any) -> Callable[[], nn.Module]:
    return _model(model, config, vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, intermediate_size=2 * HIDDEN, max_position_embeddings=SEQ + 4,
                  num_labels=3, pad_token_id=0, **extra)


def _audio_batch() -> Batch:
    gen = _gen()
    return {"input_values": torch.randn(BATCH, 4000, generator=gen), "labels": torch.randint(0, 3, (BATCH,), generator=gen)}


def _speech_seq2seq_batch() -> Batch:
    gen = _gen()
    return {"input_features": torch.randn(BATCH, 16, 64, generator=gen),
            "labels": torch.randint(3, VOCAB, (BATCH, 8), generator=gen)}


def _segmentation_batch() -> Batch:
    gen = _gen()
    return {"pixel_values": torch.randn(BATCH, 3, IMAGE, IMAGE, generator=gen),
            "labels": torch.randint(0, 4, (BATCH, IMAGE, IMAGE), generator=gen)}


EXTRA_ARCHITECTURES: dict[str, tuple[Callable[[], nn.Module], Callable[[], Batch]]] = {
    "phi3": (_decoder_lm("Phi3Config", "Phi3ForCausalLM"), _causal_lm_batch),
    "gemma2": (_decoder_lm("Gemma2Config", "Gemma2ForCausalLM", head_dim=HIDDEN // HEADS), _causal_lm_batch),
    "qwen3": (_decoder_lm("Qwen3Config", "Qwen3ForCausalLM", head_dim=HIDDEN // HEADS), _causal_lm_batch),
    "stablelm": (_decoder_lm("StableLmConfig", "StableLmForCausalLM"), _causal_lm_batch),
    "granite": (_decoder_lm("GraniteConfig", "GraniteForCausalLM"), _causal_lm_batch),
    "olmo2": (_decoder_lm("Olmo2Config", "Olmo2ForCausalLM"), _causal_lm_batch),
    "gpt_neox": (_model("GPTNeoXForCausalLM", "GPTNeoXConfig", vocab_size=VOCAB, hidden_size=HIDDEN,
                        num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=2 * HIDDEN,
                        max_position_embeddings=4 * SEQ), _causal_lm_batch),
    "falcon": (_model("FalconForCausalLM", "FalconConfig", vocab_size=VOCAB, hidden_size=HIDDEN,
                      num_hidden_layers=LAYERS, num_attention_heads=HEADS, new_decoder_architecture=True,
                      num_kv_heads=HEADS // 2), _causal_lm_batch),
    "bloom": (_model("BloomForCausalLM", "BloomConfig", vocab_size=VOCAB, hidden_size=HIDDEN, n_layer=LAYERS,
                     n_head=HEADS), _causal_lm_batch),
    "gptj": (_model("GPTJForCausalLM", "GPTJConfig", vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                    rotary_dim=16, n_positions=4 * SEQ), _causal_lm_batch),
    "codegen": (_model("CodeGenForCausalLM", "CodeGenConfig", vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS,
                       n_head=HEADS, rotary_dim=16, n_positions=4 * SEQ), _causal_lm_batch),
    "mpt": (_model("MptForCausalLM", "MptConfig", vocab_size=VOCAB, d_model=HIDDEN, n_layers=LAYERS, n_heads=HEADS),
            _causal_lm_batch),
    "distilbert": (_model("DistilBertForSequenceClassification", "DistilBertConfig", vocab_size=VOCAB, dim=HIDDEN,
                          n_layers=LAYERS, n_heads=HEADS, hidden_dim=2 * HIDDEN, num_labels=3,
                          max_position_embeddings=SEQ), _classifier_batch),
    "electra": (_encoder_classifier("ElectraConfig", "ElectraForSequenceClassification", embedding_size=HIDDEN),
                _classifier_batch),
    "deberta_v2": (_encoder_classifier("DebertaV2Config", "DebertaV2ForSequenceClassification"), _classifier_batch),
    "modernbert": (_encoder_classifier("ModernBertConfig", "ModernBertForSequenceClassification"), _classifier_batch),
    "whisper": (_model("WhisperForConditionalGeneration", "WhisperConfig", vocab_size=VOCAB, d_model=HIDDEN,
                       encoder_layers=LAYERS, decoder_layers=LAYERS, encoder_attention_heads=HEADS,
                       decoder_attention_heads=HEADS, encoder_ffn_dim=2 * HIDDEN, decoder_ffn_dim=2 * HIDDEN,
                       num_mel_bins=16, max_source_positions=32, max_target_positions=64, pad_token_id=0,
                       decoder_start_token_id=1, eos_token_id=2, bos_token_id=1), _speech_seq2seq_batch),
    "wav2vec2": (_model("Wav2Vec2ForSequenceClassification", "Wav2Vec2Config", hidden_size=HIDDEN,
                        num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=2 * HIDDEN,
                        num_labels=3, conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                        num_feat_extract_layers=3, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                        mask_time_prob=0.0), _audio_batch),
    "mobilenet_v2": (_model("MobileNetV2ForImageClassification", "MobileNetV2Config", num_labels=LABELS,
                            image_size=IMAGE, depth_multiplier=0.35, classifier_dropout_prob=0.0), _image_batch),
    "efficientnet": (_model("EfficientNetForImageClassification", "EfficientNetConfig", num_labels=LABELS,
                            image_size=IMAGE, width_coefficient=1.0, depth_coefficient=0.2, hidden_dim=1280,
                            dropout_rate=0.0, drop_connect_rate=0.0), _image_batch),
    "deit": (_model("DeiTForImageClassification", "DeiTConfig", hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                    num_attention_heads=HEADS, intermediate_size=2 * HIDDEN, image_size=IMAGE, patch_size=4,
                    num_labels=LABELS), _image_batch),
    "segformer": (_model("SegformerForSemanticSegmentation", "SegformerConfig", num_labels=4,
                         hidden_sizes=[16, 32, 64, 128], decoder_hidden_size=64, depths=[1, 1, 1, 1],
                         drop_path_rate=0.0, classifier_dropout_prob=0.0), _segmentation_batch),
    "regnet": (_model("RegNetForImageClassification", "RegNetConfig", num_labels=LABELS,
                      hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1], embedding_size=16, groups_width=16),
               _image_batch),
}
