"""FP16_Optimizer: master weights and dynamic loss scaling around torch optimizers (skips and
rescales on injected overflow, otherwise tracks a float32 run), the Apex modifiers on stand-ins
of Apex's optimizer classes, and the errors for a missing library or unknown version. (The
DeepSpeed modifier is tested on the real DeepSpeed: test_fp16_optimizer_deepspeed.py.)"""

import copy
import math
import sys
import types

import pytest
import torch

from torch_ort_backend.optim import FP16_Optimizer, FusedAdam, MixedPrecisionOptimizer

SHAPES = [(8, 5), (5,), (70001,)]


def nonzero(shape, seed, scale=1.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    mag = torch.rand(shape, generator=g, dtype=torch.float64) * 1.9 + 0.1
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0).double()
    return (mag * sign * scale).to(dtype)


def half_params(dtype=torch.float16):
    return [torch.nn.Parameter(nonzero(s, seed=i, dtype=dtype)) for i, s in enumerate(SHAPES)]


def grads(step):
    return [nonzero(s, seed=1000 * step + i, scale=0.01) for i, s in enumerate(SHAPES)]


def test_master_weights_follow_the_unscaled_gradients_exactly():
    params = half_params()
    opt = FP16_Optimizer(torch.optim.SGD(params, lr=0.1, momentum=0.9), init_scale=1024.0)
    assert isinstance(opt, MixedPrecisionOptimizer)
    ref = [torch.nn.Parameter(p.detach().float()) for p in params]
    ref_opt = torch.optim.SGD(ref, lr=0.1, momentum=0.9)
    for step in range(1, 6):
        for p, q, g in zip(params, ref, grads(step)):
            p.grad = (g * opt.loss_scale).half()  # what backward of a scaled loss leaves
            q.grad = p.grad.float() / opt.loss_scale
        opt.step()
        ref_opt.step()
    for p, q, master in zip(params, ref, opt.master_params()):
        assert master.dtype == torch.float32
        torch.testing.assert_close(master.detach(), q.detach(), rtol=1e-6, atol=1e-7)
        assert torch.equal(p.detach(), master.detach().half()), "the model holds the rounded masters"
    assert opt.skipped_steps == 0 and not opt.overflow


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_overflow_skips_the_step_backs_off_and_grows_again(bad):
    params = half_params()
    inner = FusedAdam(params, lr=1e-2)
    opt = FP16_Optimizer(inner, init_scale=2.0**10, scale_factor=2.0, scale_window=3, min_scale=1.0)
    for p, g in zip(params, grads(1)):
        p.grad = (g * opt.loss_scale).half()
    opt.step()
    before_model = [p.detach().clone() for p in params]
    before_master = [m.detach().clone() for m in opt.master_params()]
    before_state = copy.deepcopy(inner.state[next(opt.master_params())])

    for p, g in zip(params, grads(2)):
        p.grad = (g * opt.loss_scale).half()
    params[2].grad[-1] = bad  # the last element of the largest tensor
    opt.step()
    assert opt.overflow and opt.skipped_steps == 1 and opt.good_steps == 0
    assert opt.loss_scale == 2.0**9
    for p, b in zip(params, before_model):
        assert torch.equal(p.detach(), b)
    for m, b in zip(opt.master_params(), before_master):
        assert torch.equal(m.detach(), b)
    for k, v in inner.state[next(opt.master_params())].items():
        same = torch.equal(v, before_state[k]) if isinstance(v, torch.Tensor) else v == before_state[k]
        assert same, f"optimizer state '{k}' must not move on a skipped step"

    for step in range(3, 6):  # scale_window good steps: the scale grows once
        for p, g in zip(params, grads(step)):
            p.grad = (g * opt.loss_scale).half()
        opt.step()
        assert not opt.overflow
    assert opt.loss_scale == 2.0**10 and opt.good_steps == 3
    assert opt.state_dict()["loss_scaler"]["skipped_steps"] == 1


def test_scale_stays_within_min_and_max():
    params = half_params()
    opt = FP16_Optimizer(torch.optim.SGD(params, lr=0.1), init_scale=4.0, min_scale=2.0, max_scale=8.0,
                         scale_window=1)
    for _ in range(3):
        for p in params:
            p.grad = torch.full(p.shape, float("inf"), dtype=torch.float16)
        opt.step()
    assert opt.loss_scale == 2.0 and opt.skipped_steps == 3
    for step in range(3):
        for p, g in zip(params, grads(step)):
            p.grad = g.half()
        opt.step()
    assert opt.loss_scale == 8.0


def test_static_loss_scale_never_changes():
    params = half_params()
    opt = FP16_Optimizer(torch.optim.SGD(params, lr=0.1), dynamic_loss_scale=False, static_loss_scale=128.0)
    for step in range(4):
        for p, g in zip(params, grads(step)):
            p.grad = (g * 128).half()
        opt.step()
    assert opt.loss_scale == 128.0 and opt.skipped_steps == 0


def make_mlp(dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    return model.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_training_tracks_a_float32_run(dtype):
    x = nonzero((64, 16), seed=7)
    y = (x[:, :1] * 0.5 - x[:, 1:2] * 0.25).tanh()
    fp32 = make_mlp(torch.float32)
    low = make_mlp(dtype)
    ref_opt = torch.optim.Adam(fp32.parameters(), lr=1e-2)
    opt = FP16_Optimizer(torch.optim.Adam(low.parameters(), lr=1e-2), init_scale=2.0**12)
    losses = []
    for _ in range(60):
        ref_opt.zero_grad()
        ref_loss = torch.nn.functional.mse_loss(fp32(x), y)
        ref_loss.backward()
        ref_opt.step()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(low(x.to(dtype)).float(), y)
        opt.backward(loss)
        opt.step()
        losses.append((ref_loss.item(), loss.item()))
    first, last = losses[0], losses[-1]
    assert last[0] < 0.3 * first[0], "the float32 run must learn"
    assert last[1] == pytest.approx(last[0], rel=0.15, abs=2e-3)
    for p, q in zip(fp32.parameters(), opt.master_params()):
        torch.testing.assert_close(q.detach(), p.detach(), rtol=0, atol=5e-2)


def test_state_dict_round_trip_resumes_exactly():
    def run(save_at=None):
        params = half_params()
        opt = FP16_Optimizer(FusedAdam(params, lr=1e-3), init_scale=256.0, scale_window=2)
        for step in range(1, 9):
            for p, g in zip(params, grads(step)):
                p.grad = (g * opt.loss_scale).half()
            if step == 4:
                params[0].grad[0, 0] = float("inf")
            opt.step()
            if step == save_at:
                state = opt.state_dict()
                opt = FP16_Optimizer(FusedAdam(params, lr=5.0), init_scale=1.0)
                opt.load_state_dict(state)
        return params, opt

    # The reference here is the uninterrupted run: the claim is that a round trip changes nothing.
    # That run's own arithmetic is checked against float32 math in the tests above.
    straight, opt_a = run()
    resumed, opt_b = run(save_at=5)
    for p, q in zip(straight, resumed):
        assert torch.equal(p, q)
    for m, n in zip(opt_a.master_params(), opt_b.master_params()):
        assert torch.equal(m, n)
    assert (opt_a.loss_scale, opt_a.skipped_steps) == (opt_b.loss_scale, opt_b.skipped_steps)


def test_bad_arguments():
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        FP16_Optimizer(object())
    with pytest.raises(TypeError, match="int64"):
        FP16_Optimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(2)), torch.ones(2, dtype=torch.int64)], lr=1))
    with pytest.raises(ValueError, match="scale_factor"):
        FP16_Optimizer(torch.optim.SGD(half_params(), lr=1), scale_factor=1.0)


# ---- Apex modifiers on stand-ins of its classes (NVIDIA Apex cannot be installed here: it is built
# from GitHub sources); choosing a modifier and its errors. DeepSpeed's modifier is tested on the
# real library in test_fp16_optimizer_deepspeed.py. ----


def install_fake_modules(monkeypatch, root, names):
    for name in [root] + names:
        module = types.ModuleType(name)
        module.__version__ = "0.0-test"
        monkeypatch.setitem(sys.modules, name, module)


def fake_class(module, name, **methods):
    def original(*args, **kwargs):
        raise AssertionError("the original method must have been replaced")

    body = {m: original for m in methods.get("replaced", ())}
    body.update(methods.get("kept", {}))
    cls = type(name, (), body)
    cls.__module__ = module
    cls.__qualname__ = name
    return cls


def test_apex_fp16_utils_optimizer_is_patched(monkeypatch):
    install_fake_modules(monkeypatch, "apex", ["apex.fp16_utils"])
    cls = fake_class("apex.fp16_utils.fp16_optimizer", "FP16_Optimizer",
                     replaced=("_check_overflow", "clip_master_grads"))
    opt = cls()
    params = half_params()
    masters = [torch.nn.Parameter(p.detach().float()) for p in params]
    for p, m, g in zip(params, masters, grads(3)):
        p.grad, m.grad = g.half(), g.clone()
    opt.fp16_groups, opt.fp32_from_fp32_groups = [params], [[]]
    opt.optimizer = torch.optim.SGD(masters, lr=1.0)
    opt.dynamic_loss_scale = True
    assert FP16_Optimizer(opt) is opt
    opt._check_overflow()
    assert opt.overflow is False
    ref = [m.grad.clone() for m in masters]
    ref_norm = torch.nn.utils.clip_grad_norm_([_with_grad(r) for r in ref], 0.01)
    torch.testing.assert_close(opt.clip_master_grads(0.01), ref_norm, rtol=1e-6, atol=0)
    params[0].grad[1, 1] = float("-inf")
    opt._check_overflow()
    assert opt.overflow is True and opt.clip_master_grads(0.01) == -1


def _with_grad(g):
    p = torch.nn.Parameter(torch.zeros_like(g))
    p.grad = g
    return p


def test_apex_amp_loss_scaler_unscale_is_patched(monkeypatch):
    install_fake_modules(monkeypatch, "apex", ["apex.amp"])

    class Scaler:
        def __init__(self):
            self._has_overflow, self._loss_scale, self.dynamic = False, 512.0, True

        def unscale(self, *args, **kwargs):
            raise AssertionError("replaced")

    scaler = Scaler()
    masters = [torch.nn.Parameter(torch.zeros(s)) for s in SHAPES]
    amp = sys.modules["apex.amp"]
    amp._amp_state = types.SimpleNamespace(loss_scalers=[scaler])
    amp.master_params = lambda optimizer: iter(masters)
    sys.modules["apex"].amp = amp
    opt = torch.optim.SGD(masters, lr=1.0)
    opt._amp_stash = types.SimpleNamespace()
    assert FP16_Optimizer(opt) is opt

    model_grads = [(g * 512).half() for g in grads(4)]
    for m in masters:
        m.grad = torch.empty_like(m)
    scaler.unscale(model_grads, [m.grad for m in masters], 512.0)
    for m, g in zip(masters, model_grads):
        assert torch.equal(m.grad, g.float() / 512)
    assert scaler._has_overflow is False
    assert float(opt.clip_master_grads(1e9)) == pytest.approx(
        math.sqrt(sum(float(m.grad.double().pow(2).sum()) for m in masters)), rel=1e-6)
    model_grads[1][0] = float("inf")
    scaler.unscale(model_grads, [m.grad for m in masters], 512.0)
    assert scaler._has_overflow is True


def test_missing_library_gives_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # import deepspeed -> ImportError
    cls = fake_class("deepspeed.runtime.zero.stage_1_and_2", "DeepSpeedZeroOptimizer",
                     replaced=("has_overflow_serial", "get_grad_norm_direct"))
    with pytest.raises(ImportError, match="needs the 'deepspeed' package.*pip install deepspeed"):
        FP16_Optimizer(cls())
    monkeypatch.setitem(sys.modules, "apex", None)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=1.0)
    opt._amp_stash = object()
    with pytest.raises(ImportError, match="'apex'.*NVIDIA Apex"):
        FP16_Optimizer(opt)


def test_unknown_library_version_without_the_methods_is_refused(monkeypatch):
    install_fake_modules(monkeypatch, "deepspeed", [])
    cls = fake_class("deepspeed.runtime.zero.stage_1_and_2", "DeepSpeedZeroOptimizer",
                     replaced=("has_overflow_serial",))
    with pytest.raises(RuntimeError, match="get_grad_norm_direct"):
        FP16_Optimizer(cls())
