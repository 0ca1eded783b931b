"""HuggingFace Trainer unchanged, with torch_compile_backend="onnxrt" (accelerate accepts only a fixed
list of backend names; ours registers that one): the losses of a few training steps equal an eager
Trainer's on the same model, data and seed, and the steps really ran on the engine."""

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from torch_ort_backend import compile_stats  # noqa: E402


class TokenData(torch.utils.data.Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(100 + i))
        return {"input_ids": ids, "labels": ids}


def _train(tmp_path, backend):
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=2, n_positions=32,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / (backend or "eager")), per_device_train_batch_size=4, max_steps=3,
        learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=0,
        torch_compile=backend is not None, torch_compile_backend=backend, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=TokenData())
    trainer.train()
    return [log["loss"] for log in trainer.state.log_history if "loss" in log]


def test_trainer_with_onnxrt_backend_matches_eager(tmp_path, monkeypatch):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")
    torch._dynamo.reset()
    compile_stats().reset()
    ours = _train(tmp_path, "onnxrt")
    assert compile_stats().runs >= 6 and compile_stats().fallbacks == 0
    torch._dynamo.reset()
    eager = _train(tmp_path, None)
    assert len(ours) == len(eager) == 3
    torch.testing.assert_close(torch.tensor(ours), torch.tensor(eager), rtol=1e-4, atol=1e-5)
