"""Host memory the engine hands to torch comes back to the engine's block cache and is reused:
after the first training steps, every later step is served from the cache (no new blocks from the
C library), results stay equal to eager, and the cache can be emptied and switched off."""

import copy

import torch
import torch.nn as nn

from torch_ort_backend._engine import C


def _model() -> nn.Module:
    torch.manual_seed(0)
    # Activations of 64 x 512 floats (128 KiB): above the cache's 64 KiB floor.
    return nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, 8))


def _step(model, x):
    loss = model(x).square().mean()
    loss.backward()
    return loss


def test_training_steps_reuse_cached_blocks_and_match_eager():
    C.set_host_cache_limit(256 << 20)
    eager = _model()
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, backend="ort")
    x = torch.rand(64, 256) + 0.1
    misses = []
    for _ in range(5):
        want = _step(eager, x)
        got = _step(compiled, x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        misses.append(C.host_cache_stats()["misses"])
    for p, q in zip(compiled_model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    assert misses[-1] == misses[2], f"steps after warm-up still allocate new blocks: misses {misses}"
    assert C.host_cache_stats()["hits"] > 0


def test_release_and_limit_zero_empty_the_cache():
    x = torch.rand(64, 256) + 0.1
    compiled = torch.compile(_model(), backend="ort")
    try:
        for _ in range(2):
            _step(compiled, x)
        assert C.host_cache_stats()["cached_bytes"] > 0
        C.release_host_cache()
        assert C.host_cache_stats()["cached_bytes"] == 0
        C.set_host_cache_limit(0)
        for _ in range(2):
            _step(compiled, x)
        assert C.host_cache_stats()["cached_bytes"] == 0
    finally:
        C.set_host_cache_limit(256 << 20)
