"""FusedAdam against its reference in each mode: torch.optim.Adam (L2), the transformers AdamW
formula in float64, torch.optim.AdamW; float32 and bfloat16 parameters, several param groups,
1,000 steps, and a state_dict round trip in the middle of training."""

import copy
import io

import pytest
import torch

from torch_ort_backend.optim import AdamWMode, FusedAdam

STEPS = 1000
SHAPES = [(37,), (16, 9), (5,), (8, 8, 3), (1,)]
# Three param groups over the five tensors; the first takes the optimizer defaults.
GROUPS = [
    {"idx": [0, 1]},
    {"idx": [2], "lr": 2e-3, "weight_decay": 0.05},
    {"idx": [3, 4], "betas": (0.8, 0.99), "eps": 1e-7, "weight_decay": 0.0},
]
DEFAULTS = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)


def nonzero(shape, seed, scale=1.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    mag = torch.rand(shape, generator=g, dtype=torch.float64) * 1.9 + 0.1
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0).double()
    return (mag * sign * scale).to(dtype)


def make_params(dtype, scale):
    return [torch.nn.Parameter(nonzero(s, seed=i, scale=scale, dtype=dtype)) for i, s in enumerate(SHAPES)]


def grads_for(step, dtype):
    return [nonzero(s, seed=10_000 + 100 * step + i, scale=0.1, dtype=dtype) for i, s in enumerate(SHAPES)]


def param_groups(params, lr_scale=1.0):
    groups = []
    for g in GROUPS:
        options = {k: v for k, v in g.items() if k != "idx"}
        options["lr"] = options.get("lr", DEFAULTS["lr"]) * lr_scale
        groups.append({"params": [params[i] for i in g["idx"]], **options})
    return groups


class FormulaAdam:
    """The three update rules written out in float64 (or any dtype), per param group."""

    def __init__(self, params, mode, bias_correction=True, lr_scale=1.0):
        self.mode = mode
        self.bias_correction = bias_correction
        self.groups = []
        for g in param_groups(params, lr_scale):
            opts = {**DEFAULTS, **{k: v for k, v in g.items() if k != "params"}}
            self.groups.append((g["params"], opts))
        self.state = {id(p): (torch.zeros_like(p), torch.zeros_like(p)) for p in params}
        self.t = 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        for params, o in self.groups:
            b1, b2 = o["betas"]
            lr, eps, wd = o["lr"], o["eps"], o["weight_decay"]
            bc1 = 1 - b1**self.t if self.bias_correction else 1.0
            bc2 = 1 - b2**self.t if self.bias_correction else 1.0
            for p in params:
                m, v = self.state[id(p)]
                g = p.grad.to(p.dtype)
                if self.mode == AdamWMode.ADAM_L2_REGULARIZATION:
                    g = g + wd * p
                if self.mode == AdamWMode.ADAMW_TORCH:
                    p.mul_(1 - lr * wd)
                m.mul_(b1).add_((1 - b1) * g)
                v.mul_(b2).add_((1 - b2) * g * g)
                if self.mode == AdamWMode.ADAMW_TRANSFORMERS:
                    p.sub_(lr * bc2**0.5 / bc1 * m / (v.sqrt() + eps))
                    p.sub_(lr * wd * p)
                else:
                    p.sub_(lr / bc1 * m / (v.sqrt() / bc2**0.5 + eps))


def reference_optimizer(mode, params, lr_scale):
    """The mode's reference: torch's optimizer where it has one, else the float64 formula."""
    if mode == AdamWMode.ADAM_L2_REGULARIZATION:
        return torch.optim.Adam(param_groups(params, lr_scale), foreach=False, **DEFAULTS)
    if mode == AdamWMode.ADAMW_TORCH:
        return torch.optim.AdamW(param_groups(params, lr_scale), foreach=False, **DEFAULTS)
    return FormulaAdam(params, mode, lr_scale=lr_scale)


def run_pair(mode, dtype, scale, round_reference, state_dict_at=None, lr_scale=1.0):
    """Trains FusedAdam on `dtype` parameters and the reference on float32 (or float64) masters
    that are rounded to `dtype` after every step, as FusedAdam's parameters are."""
    ours = make_params(dtype, scale)
    ref_dtype = torch.float64 if mode == AdamWMode.ADAMW_TRANSFORMERS else torch.float32
    ref = [torch.nn.Parameter(p.detach().to(ref_dtype)) for p in ours]
    opt = FusedAdam(param_groups(ours, lr_scale), adam_w_mode=mode, **DEFAULTS)
    ref_opt = reference_optimizer(mode, ref, lr_scale)
    for step in range(1, STEPS + 1):
        for p, q, g in zip(ours, ref, grads_for(step, dtype)):
            p.grad = g
            q.grad = g.to(ref_dtype)
        opt.step()
        ref_opt.step()
        if round_reference:
            with torch.no_grad():
                for q in ref:
                    q.copy_(q.to(dtype))
        if step == state_dict_at:
            buffer = io.BytesIO()
            torch.save(opt.state_dict(), buffer)
            buffer.seek(0)
            opt = FusedAdam(param_groups(ours, lr_scale=500.0), adam_w_mode=AdamWMode.ADAM_L2_REGULARIZATION)
            opt.load_state_dict(torch.load(buffer, weights_only=True))
    return ours, ref, opt


@pytest.mark.parametrize("mode", list(AdamWMode))
def test_float32_matches_reference_over_1000_steps(mode):
    ours, ref, _ = run_pair(mode, torch.float32, scale=1.0, round_reference=False)
    for p, q in zip(ours, ref):
        torch.testing.assert_close(p.detach(), q.detach().float(), rtol=0, atol=1e-4)
    moved = sum(float((p.detach() - nonzero(s, seed=i)).abs().max()) for i, (p, s) in enumerate(zip(ours, SHAPES)))
    assert moved > 0.1, "the parameters must actually have been trained"


@pytest.mark.parametrize("mode", list(AdamWMode))
def test_bfloat16_matches_reference_over_1000_steps(mode):
    # bfloat16 parameters are rounded after every step, so the reference is rounded the same way.
    # A float32-level difference may still round to the neighbouring bfloat16 value; parameters of
    # magnitude < 2^-6 keep that neighbour within 6.1e-5 (one bfloat16 ulp there).
    ours, ref, opt = run_pair(mode, torch.bfloat16, scale=0.003, round_reference=True, lr_scale=0.02)
    assert max(float(p.detach().abs().max()) for p in ours) < 2**-6
    for p, q in zip(ours, ref):
        assert p.dtype == torch.bfloat16
        torch.testing.assert_close(p.detach().float(), q.detach().float(), rtol=0, atol=1e-4)
    changed = sum(int((p.detach() != nonzero(s, seed=i, scale=0.003, dtype=torch.bfloat16)).sum())
                  for i, (p, s) in enumerate(zip(ours, SHAPES)))
    assert changed > 0.5 * sum(p.numel() for p in ours), "most parameters must have moved"
    for state in opt.state.values():
        assert state["exp_avg"].dtype == torch.float32 and state["exp_avg_sq"].dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_state_dict_round_trip_mid_training_changes_nothing(dtype):
    mode = AdamWMode.ADAMW_TORCH
    straight, _, _ = run_pair(mode, dtype, scale=1.0, round_reference=False)
    resumed, ref, opt = run_pair(mode, dtype, scale=1.0, round_reference=False, state_dict_at=STEPS // 2)
    for p, q in zip(straight, resumed):
        assert torch.equal(p, q)
    if dtype == torch.float32:  # and both are torch's AdamW (bfloat16 is checked against it above)
        for p, q in zip(resumed, ref):
            torch.testing.assert_close(p.detach(), q.detach().float(), rtol=0, atol=1e-4)
    # The reloaded optimizer took back the saved hyper-parameters and float32 moments.
    assert opt.param_groups[0]["lr"] == DEFAULTS["lr"]
    assert opt.param_groups[0]["adam_w_mode"] == AdamWMode.ADAMW_TORCH
    assert all(s["exp_avg"].dtype == torch.float32 for s in opt.state.values())
    assert all(float(s["step"]) == STEPS for s in opt.state.values())


def test_state_dict_moves_between_torch_adamw_and_fused_adam():
    params = make_params(torch.float32, 1.0)
    ref = [torch.nn.Parameter(p.detach().clone()) for p in params]
    torch_opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, eps=1e-8)
    ref_opt = torch.optim.AdamW(ref, lr=1e-2, weight_decay=0.1, eps=1e-8)
    for step in range(1, 21):
        for p, q, g in zip(params, ref, grads_for(step, torch.float32)):
            p.grad, q.grad = g, g.clone()
        if step == 11:
            state = torch_opt.state_dict()
            torch_opt = FusedAdam(params, adam_w_mode=AdamWMode.ADAMW_TORCH)
            torch_opt.load_state_dict(state)
            assert torch_opt.param_groups[0]["lr"] == 1e-2
        torch_opt.step()
        ref_opt.step()
    for p, q in zip(params, ref):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6)


def test_without_bias_correction_and_float16_parameters():
    # Small parameters, so that the float16 rounding after each step stays far below the tolerance.
    ours = make_params(torch.float16, 0.01)
    ref = [torch.nn.Parameter(p.detach().double()) for p in ours]
    opt = FusedAdam(param_groups(ours, 0.1), adam_w_mode=AdamWMode.ADAMW_TRANSFORMERS, bias_correction=False)
    ref_opt = FormulaAdam(ref, AdamWMode.ADAMW_TRANSFORMERS, bias_correction=False, lr_scale=0.1)
    for step in range(1, 101):
        for p, q, g in zip(ours, ref, grads_for(step, torch.float16)):
            p.grad, q.grad = g, g.double()
        opt.step()
        ref_opt.step()
        with torch.no_grad():
            for q in ref:
                q.copy_(q.half())
    for p, q in zip(ours, ref):
        assert p.dtype == torch.float16
        torch.testing.assert_close(p.detach().double(), q.detach(), rtol=0, atol=1e-4)


def test_params_without_grad_are_left_alone_and_closure_loss_is_returned():
    a, b = torch.nn.Parameter(torch.ones(4)), torch.nn.Parameter(torch.ones(3))
    opt = FusedAdam([a, b], lr=0.1)
    a.grad = torch.full((4,), 0.5)
    assert opt.step(lambda: torch.tensor(3.0)).item() == 3.0
    assert torch.equal(b.detach(), torch.ones(3)) and b not in opt.state
    assert (a.detach() < 1).all()


def test_zero_grad_honours_set_grad_none():
    p = torch.nn.Parameter(torch.ones(3))
    for set_grad_none, expect_none in [(True, True), (False, False)]:
        opt = FusedAdam([p], set_grad_none=set_grad_none)
        p.grad = torch.ones(3)
        opt.zero_grad()
        assert (p.grad is None) == expect_none
        if not expect_none:
            assert torch.equal(p.grad, torch.zeros(3))
    opt = FusedAdam([p], set_grad_none=False)
    p.grad = torch.ones(3)
    opt.zero_grad(set_to_none=True)
    assert p.grad is None


def test_sparse_gradients_and_unsupported_dtypes_raise():
    emb = torch.nn.Embedding(10, 4, sparse=True)
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(RuntimeError, match="sparse gradients.*parameter 0 of param group 0"):
        FusedAdam(emb.parameters()).step()
    p = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    p.grad = torch.ones(3, dtype=torch.float64)
    with pytest.raises(TypeError, match="float32, float16 and bfloat16.*float64"):
        FusedAdam([p]).step()
    q = torch.nn.Parameter(torch.ones(4, 3).t())
    q.grad = torch.ones(3, 4)
    with pytest.raises(RuntimeError, match="contiguous"):
        FusedAdam([q]).step()


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(lr=-1.0), "lr"),
        (dict(eps=-1e-8), "eps"),
        (dict(betas=(1.0, 0.999)), "beta"),
        (dict(betas=(0.9, -0.1)), "beta"),
        (dict(betas=(0.9,)), "betas"),
        (dict(weight_decay=-0.1), "weight_decay"),
        (dict(adam_w_mode=3), "adam_w_mode"),
    ],
)
def test_bad_hyper_parameters_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        FusedAdam([torch.nn.Parameter(torch.ones(2))], **kwargs)


def test_bad_param_group_names_the_group():
    with pytest.raises(ValueError, match="param group 1.*lr"):
        FusedAdam([{"params": [torch.nn.Parameter(torch.ones(2))]},
                   {"params": [torch.nn.Parameter(torch.ones(2))], "lr": -3.0}])


def test_optimizer_is_a_torch_optimizer_and_deep_copies():
    opt = FusedAdam([torch.nn.Parameter(torch.ones(2))])
    assert isinstance(opt, torch.optim.Optimizer)
    torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    copy.deepcopy(opt)


def test_bad_state_is_an_error_not_memory_corruption():
    p = torch.nn.Parameter(torch.ones(16))
    p.grad = torch.ones(16)
    opt = FusedAdam([p])
    opt.step()
    opt.state[p]["exp_avg"] = torch.zeros(3)
    with pytest.raises(RuntimeError, match="contiguous float32 of shape \\(16,\\)"):
        opt.step()
    amsgrad = torch.optim.Adam([p], amsgrad=True)
    amsgrad.step()
    with pytest.raises(ValueError, match="amsgrad"):
        FusedAdam([p]).load_state_dict(amsgrad.state_dict())
    wrong_shape = FusedAdam([torch.nn.Parameter(torch.ones(4))])
    with pytest.raises(ValueError, match="shape"):
        wrong_shape.load_state_dict(opt.state_dict() | {"state": {0: {"step": torch.tensor(1.0),
                                                                       "exp_avg": torch.zeros(16),
                                                                       "exp_avg_sq": torch.zeros(16)}}})
