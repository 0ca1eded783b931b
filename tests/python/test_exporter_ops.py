"""Per-op export: each function below is compiled with backend="ort" (fallback disabled), its outputs
and input gradients compared with eager PyTorch in float64-checked float32, every exported model is
checked with onnx.checker, the engine ran the forward (and backward) graph, and exactly the ops
listed in EXPECTED_FALLBACKS reach the ATen fallback: none for every other case."""

import pytest
import torch
import torch.nn.functional as F

from torch_ort_backend import compiled_graph
from ortmodule_helpers import fresh_state
from torch_ort_backend.backend import compile_stats, ort_backend


def _r(*shape, lo=0.1, hi=1.0, gen=None):
    """Random non-zero values with random signs."""
    g = gen or torch.Generator().manual_seed(hash(shape) % 1000)
    mag = torch.rand(*shape, generator=g) * (hi - lo) + lo
    sign = torch.where(torch.rand(*shape, generator=g) < 0.5, -1.0, 1.0)
    return mag * sign


# name -> (fn, make_inputs, differentiable input indices)
CASES = {
    "add_alpha": (lambda x, y: torch.add(x, y, alpha=2.5), lambda: (_r(3, 4), _r(4)), (0, 1)),
    "sub_rsub": (lambda x: (x - 2) + (1 - x) * 3, lambda: (_r(5, 2),), (0,)),
    "mul_div": (lambda x, y: x * y / (y.abs() + 1), lambda: (_r(4, 3), _r(4, 3)), (0, 1)),
    "div_floor_mode": (lambda x, y: torch.div(x, y, rounding_mode="floor"), lambda: (_r(6) * 9, _r(6) + 2), ()),
    "pow_sqrt_rsqrt": (lambda x: x.abs().pow(3) + x.abs().sqrt() + x.abs().rsqrt() + x.pow(2), lambda: (_r(7),), (0,)),
    "exp_log_tanh_sigmoid": (lambda x: x.exp() + (x.abs() + 1).log() + x.tanh() + x.sigmoid(), lambda: (_r(3, 3),), (0,)),
    "relu_gelu_silu": (lambda x: F.relu(x) + F.gelu(x) + F.gelu(x, approximate="tanh") + F.silu(x),
                       lambda: (_r(4, 5),), (0,)),
    "leaky_hardtanh_elu": (lambda x: F.leaky_relu(x, 0.1) + F.hardtanh(x, -0.5, 0.5) + F.elu(x),
                           lambda: (_r(8),), (0,)),
    "clamp_min_max": (lambda x: x.clamp(-0.3, 0.4) + x.clamp_min(0.2) + x.clamp_max(-0.1), lambda: (_r(9),), (0,)),
    "where_masked_fill": (lambda x, y: torch.where(x > y, x, y * 2).masked_fill(x < -0.5, 0.25),
                          lambda: (_r(4, 4), _r(4, 4)), (0, 1)),
    "compare_logical": (lambda x, y: ((x > 0) & (y <= 0.2) | (x == y)).float() + (~(x != 0)).float(),
                        lambda: (_r(5), _r(5)), ()),
    "cast": (lambda x: x.to(torch.float64).sum() + x.to(torch.int64).float().sum(), lambda: (_r(6) * 5,), (0,)),
    "matmul_linear": (lambda x, w, b: F.linear(x, w, b) @ w, lambda: (_r(3, 4), _r(4, 4), _r(4)), (0, 1, 2)),
    "bmm": (lambda x, y: torch.bmm(x, y), lambda: (_r(2, 3, 4), _r(2, 4, 5)), (0, 1)),
    "softmax_logsoftmax": (lambda x: x.softmax(-1) * 2 + x.log_softmax(1), lambda: (_r(3, 6),), (0,)),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (6,), w, b, 1e-5), lambda: (_r(2, 3, 6), _r(6), _r(6)), (0, 1, 2)),
    "layer_norm_no_affine": (lambda x: F.layer_norm(x, (3, 6)), lambda: (_r(2, 3, 6),), (0,)),
    "cross_entropy": (lambda x, t: F.cross_entropy(x, t), lambda: (_r(5, 7), torch.tensor([0, 6, 3, 2, 1])), (0,)),
    "nll_weighted_ignore": (lambda x, t, w: F.nll_loss(F.log_softmax(x, 1), t, w, ignore_index=2),
                            lambda: (_r(6, 4), torch.tensor([0, 2, 3, 1, 2, 3]), _r(4).abs()), (0,)),
    "embedding_padding": (lambda w, i: F.embedding(i, w, padding_idx=1).sum(1),
                          lambda: (_r(10, 4), torch.tensor([[1, 3, 3], [9, 0, 1]])), (0,)),
    "conv2d_pad_stride": (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
                          lambda: (_r(2, 3, 8, 8), _r(4, 3, 3, 3), _r(4)), (0, 1, 2)),
    "conv1d_groups": (lambda x, w: F.conv1d(x, w, groups=2, dilation=2), lambda: (_r(2, 4, 10), _r(6, 2, 3)), (0, 1)),
    "max_pool": (lambda x: F.max_pool2d(x, 3, stride=2, padding=1) * 2, lambda: (_r(2, 3, 7, 7),), (0,)),
    # ceil_mode windows reaching past the input's end, a window larger than the whole input among them
    # (HF EfficientNet's AvgPool2d(1280, ceil_mode=True) on its 1x1 map)
    "pool_ceil_past_input": (lambda x: F.avg_pool2d(x, 8, ceil_mode=True).sum((2, 3))
                             + F.max_pool2d(x, (5, 4), stride=4, ceil_mode=True).sum((2, 3))
                             + F.avg_pool2d(x, 2, ceil_mode=True, count_include_pad=False).sum((2, 3)),
                             lambda: (_r(2, 3, 3, 3),), (0,)),
    "batch_norm_train": (lambda x, w, b: F.batch_norm(x, torch.zeros(3), torch.ones(3), w, b, training=True),
                         lambda: (_r(4, 3, 5, 5), _r(3), _r(3)), (0, 1, 2)),
    "avg_pool_global": (lambda x: F.avg_pool2d(x, 2) .sum() + F.adaptive_avg_pool2d(x, 1).sum(),
                        lambda: (_r(2, 3, 6, 6),), (0,)),
    "reductions": (lambda x: x.sum(1) + x.mean(-1) + x.amax(1) - x.amin(1) + x.sum() + x.mean(),
                   lambda: (_r(3, 5),), (0,)),
    "max_argmax": (lambda x: x.max(1).values + x.argmax(1).float() + x.argmin().float(), lambda: (_r(4, 6),), (0,)),
    "view_permute_transpose": (lambda x: x.view(2, 3, 4).permute(2, 0, 1).transpose(0, 2).reshape(-1, 4) * 2,
                               lambda: (_r(6, 4),), (0,)),
    "expand_unsqueeze_squeeze": (lambda x: x.unsqueeze(0).expand(3, -1, -1).squeeze(0).sum(0) + x.squeeze(),
                                 lambda: (_r(1, 5),), (0,)),
    "slice_select": (lambda x: x[:, 1:4] .sum(1) + x[:, -1] + x[1] .sum() + x[:, -2:].sum(1), lambda: (_r(3, 6),), (0,)),
    "strided_slice": (lambda x: x[:, ::2] * 3, lambda: (_r(3, 7),), (0,)),
    # Padding and cropping on two axes, each side its own amount; the gradient of a padding is a
    # crop (constant_pad_nd with negative pads), MobileNetV2's TF-style "same" padding.
    "pad_crop_2d": (lambda x, w: F.pad(x, (1, 2, 2, 1), value=0.5) * w + F.pad(x, (-1, 2, 1, -2)).sum(),
                    lambda: (_r(2, 3, 5, 6), _r(2, 3, 8, 9)), (0, 1)),
    # Bounds past the ends clamp, as torch's slicing does (Gemma2's sliding-window mask slices
    # [-window:] of a shorter sequence); a backwards range is empty.
    "slice_out_of_range": (lambda x: x[:, -100:] * 2 + x[:, :100] + x[:, -9:-1].sum(1, keepdim=True)
                           + x[:, 5:2].sum(), lambda: (_r(3, 7),), (0,)),
    "cat_split_unbind": (lambda x, y: torch.cat([x, y], 1).split([2, 5], 1)[1] * torch.stack(x.unbind(1), 1).sum(),
                         lambda: (_r(3, 2), _r(3, 5)), (0, 1)),
    "index_gather": (lambda x, i: x[i] .sum() + x.index_select(1, i).sum() + x.gather(1, i.view(1, -1).expand(4, -1)).sum(),
                     lambda: (_r(4, 4), torch.tensor([3, 0, 2])), (0,)),
    "creation": (lambda x: x + torch.ones_like(x) + torch.zeros(x.shape) + torch.full((4,), 0.5) + torch.arange(4.0),
                 lambda: (_r(3, 4),), (0,)),
    "pad_trilu_cumsum": (lambda x: F.pad(x, (1, 2)).sum() + x.triu().sum() + x.tril(-1).sum() + x.cumsum(1).sum(),
                         lambda: (_r(4, 4),), (0,)),
    "repeat": (lambda x: x.repeat(2, 3) * 1.5, lambda: (_r(2, 2),), (0,)),
    "dropout_eval": (lambda x: F.dropout(x, 0.3, training=False) * 2, lambda: (_r(5),), (0,)),
    "topk": (lambda x: torch.cat([torch.topk(x, 3, dim=1).values.flatten() * 2,
                                  torch.topk(x, 2, dim=0, largest=False).indices.flatten().float()]),
             lambda: (_r(4, 6),), (0,)),
    "grid_sample": (lambda x, g: torch.cat([F.grid_sample(x, g, padding_mode="border", align_corners=False).flatten(),
                                           F.grid_sample(x, g, mode="nearest", align_corners=True).flatten(),
                                           F.grid_sample(x, g, mode="bicubic", padding_mode="reflection",
                                                         align_corners=False).flatten()]),
                    lambda: (_r(2, 3, 5, 6), _r(2, 4, 3, 2, lo=0.05, hi=1.2)), (0, 1)),
}

# The cases that send ops to the ATen fallback on purpose: exactly these ops, for the reason given
# (each one a converter that does not exist yet; grep torch_ort_backend/exporter for it). Every other
# case runs natively (no ATen node), forward and backward.
EXPECTED_FALLBACKS: dict[str, tuple[set[str], str]] = {
    "index_gather": ({"aten.scatter_add.default", "aten.index_put.default"},
                     "the gradients of gather and x[i] add into possibly repeated indices; no converter maps "
                     "aten.scatter_add or aten.index_put(accumulate=True) (index_select's index_add is GatherGrad)"),
    "strided_slice": ({"aten.slice_backward.default"},
                      "ops_tensor.slice_backward converts unit-step slices only; x[:, ::2]'s gradient has step 2"),
    "avg_pool_global": ({"aten.avg_pool2d_backward.default"},
                        "avg_pool2d's gradient has no converter (the engine has no AveragePool gradient kernel)"),
    "pool_ceil_past_input": ({"aten.avg_pool2d_backward.default"},
                             "avg_pool2d's gradient has no converter (the engine has no AveragePool gradient kernel)"),
    "grid_sample": ({"aten.grid_sampler_2d_backward.default"},
                    "GridSample runs the forward; its gradient has no engine kernel"),
}


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    yield from fresh_state(monkeypatch)


def check_case(name: str, options: dict, expected_fallbacks: set[str], why: str = "") -> list:
    """Compiles CASES[name] with `options`, compares outputs and input gradients with eager, checks
    that the engine ran every graph (onnx.checker-valid) and that exactly `expected_fallbacks` went to
    ATen nodes; returns the exported graphs."""
    import onnx

    fn, make, grads = CASES[name]
    # Only this case's graphs: an earlier test's may still be alive in this process (docs/torch_compile.md,
    # "What torch._dynamo.reset() leaves alive").
    earlier = {g.serial for g in compiled_graph.live_graphs()}
    inputs = make()
    ours = [t.clone().requires_grad_(i in grads) for i, t in enumerate(inputs)]
    ref = [t.clone().requires_grad_(i in grads) for i, t in enumerate(inputs)]
    out = torch.compile(fn, backend=ort_backend, options=options)(*ours)
    exp = fn(*ref)
    torch.testing.assert_close(out, exp, rtol=1e-4, atol=1e-5)
    if grads:
        g = _r(*exp.shape) if exp.dim() else torch.tensor(0.7)
        out.backward(g)
        exp.backward(g)
        for i in grads:
            torch.testing.assert_close(ours[i].grad, ref[i].grad, rtol=1e-4, atol=1e-5, msg=f"grad of input {i}")
    graphs = [g for g in compiled_graph.live_graphs() if g.exported is not None and g.serial not in earlier]
    stats = compile_stats()
    assert graphs and stats.fallbacks == 0
    assert stats.runs >= (2 if grads else 1), f"the engine ran {stats.runs} graphs: {stats}"
    for g in graphs:
        onnx.checker.check_model(g.exported.model)
    assert set(stats.aten_fallback_ops) == expected_fallbacks, \
        f"{dict(stats.aten_fallback_ops)}; expected {expected_fallbacks}: {why}"
    return graphs


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_eager_forward_and_backward(name):
    # Every converter is exercised, including those of ops whose torch kernel is preferred by default.
    expected, why = EXPECTED_FALLBACKS.get(name, (set(), "native"))
    check_case(name, {"prefer_torch_kernels": []}, expected, why)


def test_prefer_torch_kernels_sends_an_op_to_its_torch_kernel():
    """prefer_torch_kernels runs every node of the op by torch's kernel: a strided conv, whose
    gradient the engine's ConvGrad computes by default, becomes an ATen node; the gradients are
    eager's either way."""
    x, w = _r(2, 3, 8, 8), _r(4, 3, 3, 3)
    ours = [x.clone().requires_grad_(), w.clone().requires_grad_()]
    ref = [x.clone().requires_grad_(), w.clone().requires_grad_()]
    conv = lambda a, b: F.conv2d(a, b, stride=2)  # noqa: E731
    torch.compile(conv, backend=ort_backend, options={"prefer_torch_kernels": ["convolution_backward"]})(
        *ours).sum().backward()
    conv(*ref).sum().backward()
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
    assert compile_stats().aten_fallback_ops == {"aten.convolution_backward.default": 1}
    assert compile_stats().runs >= 2 and compile_stats().fallbacks == 0


# (input shape, stride, padding, groups, torch's kernel expected): stride-1 convs with more than 16
# output positions per image take torch's convolution_backward, the others the engine's ConvGrad
# (ops_training._torch_conv_grad_wins; docs/performance.md "Convolution backward").
CONV_GRAD_CHOICES = [
    ((2, 4, 10, 10), 1, 0, 1, True),    # 8x8 output, stride 1
    ((2, 4, 10, 10), 2, 1, 1, False),   # strided
    ((2, 4, 4, 4), 1, 1, 1, False),     # 4x4 output: 16 positions
    ((2, 4, 1, 1), 1, 1, 1, False),     # one position (a ResNet's last stage at small resolutions)
    ((2, 4, 6, 6), 1, 3, 4, True),      # depthwise 7x7 over 6x6: 36 positions
    ((2, 4, 2, 2), 1, 3, 4, False),     # depthwise 7x7 over 2x2
]


@pytest.mark.parametrize("shape,stride,padding,groups,torch_kernel", CONV_GRAD_CHOICES)
def test_conv_backward_kernel_choice_by_shape(shape, stride, padding, groups, torch_kernel):
    """By default the converter picks the faster kernel per shape; input, weight and bias gradients
    are eager's whichever runs, and the engine ran the graphs."""
    k = 3 if groups == 1 else 7
    x, w, b = _r(*shape), _r(4, 4 // groups, k, k), _r(4)
    ours = [t.clone().requires_grad_() for t in (x, w, b)]
    ref = [t.clone().requires_grad_() for t in (x, w, b)]
    conv = lambda a, c, d: F.conv2d(a, c, d, stride=stride, padding=padding, groups=groups)  # noqa: E731
    dy = _r(*conv(x, w, b).shape)
    (torch.compile(conv, backend=ort_backend)(*ours) * dy).sum().backward()
    (conv(*ref) * dy).sum().backward()
    for a, r in zip(ours, ref):
        torch.testing.assert_close(a.grad, r.grad, rtol=1e-4, atol=1e-5)
    expected = {"aten.convolution_backward.default": 1} if torch_kernel else {}
    assert dict(compile_stats().aten_fallback_ops) == expected
    assert compile_stats().runs >= 2 and compile_stats().fallbacks == 0


def test_layer_norm_backward_in_bfloat16():
    """torch declares a bf16 layer norm's saved mean and rstd bf16; the gradient op reads float32
    statistics, so the converter widens them (a bf16 model under DeepSpeed, test_distributed_deepspeed.py).
    Compared with a float64 computation from the same bf16 inputs: ours within bf16 rounding of it,
    as eager is."""
    x, w, b = (_r(4, 8, 16).bfloat16(), _r(16).bfloat16(), _r(16).bfloat16())
    dy = _r(4, 8, 16).bfloat16()

    def grads(fn, dtype):
        leaves = [t.to(dtype).requires_grad_() for t in (x, w, b)]
        fn(*leaves).backward(dy.to(dtype))
        return [t.grad.double() for t in leaves]

    def layer_norm(x, w, b):
        return F.layer_norm(x, (16,), w, b, 1e-5)

    reference = grads(layer_norm, torch.float64)
    ours = grads(torch.compile(layer_norm, backend=ort_backend), torch.bfloat16)
    eager = grads(layer_norm, torch.bfloat16)
    for name, got, want, theirs in zip(("x", "weight", "bias"), ours, reference, eager):
        error = float((got - want).norm() / want.norm())
        eager_error = float((theirs - want).norm() / want.norm())
        assert error <= max(2 * eager_error, 8e-3), f"grad of {name}: relative error {error:.2e}, eager's {eager_error:.2e}"
    stats = compile_stats()
    assert stats.runs >= 2 and stats.fallbacks == 0, stats


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_nonzero_runs_on_the_engine(dtype):
    """torch.nonzero (a data-dependent row count) becomes the engine's NonZero and a Transpose, not an
    ATen node; the indices equal eager's, and one compiled graph serves another count."""
    def fn(x):
        idx = torch.nonzero(x)
        return idx, idx.sum(0)

    gen = torch.Generator().manual_seed(3)
    compiled = torch.compile(fn, backend=ort_backend, dynamic=False)
    for density in (0.3, 0.7):
        x = torch.rand(6, 9, generator=gen) < density
        x = x.to(dtype) * (torch.rand(6, 9, generator=gen) + 0.5).to(dtype) if dtype != torch.bool else x
        with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
            got = compiled(x)
        for a, b in zip(got, fn(x)):
            assert torch.equal(a, b)
    stats = compile_stats()
    assert stats.runs == 2 and stats.fallbacks == 0 and not stats.aten_fallback_ops, stats
    ops = {n.op_type for g in compiled_graph.live_graphs() if g.exported is not None for n in g.exported.model.graph.node}
    assert "NonZero" in ops


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cross_entropy_backward_runs_as_one_fused_node(dtype):
    """A language-model head's cross-entropy (ignored labels included): the engine's optimizer fuses
    the backward's NegativeLogLikelihoodLossGrad + LogSoftmaxGrad_13 into one
    SoftmaxCrossEntropyLossGrad; loss and gradients match eager (float32: float32 rounding; under
    bfloat16 autocast the logits and their gradient are bfloat16, so within two bfloat16 roundings
    of eager autocast's)."""
    from torch_ort_backend.compile_state import live_graphs

    gen = torch.Generator().manual_seed(3)
    head = torch.nn.Linear(16, 301)
    x = _r(24, 16, gen=gen)
    labels = torch.randint(0, 301, (24,), generator=gen)
    labels[[2, 9]] = -100

    def loss_fn(m, inp):
        with torch.autocast("cpu", torch.bfloat16, enabled=dtype == torch.bfloat16):
            return F.cross_entropy(m(inp), labels)

    since = max((g.serial for g in live_graphs()), default=0)
    results = []
    for f in (torch.compile(loss_fn, backend="ort"), loss_fn):
        head.zero_grad(set_to_none=True)
        inp = x.clone().requires_grad_()
        loss = f(head, inp)
        loss.backward()
        results.append([loss.detach(), inp.grad, head.weight.grad, head.bias.grad])
    tol = 1e-5 if dtype == torch.float32 else 2 * 2.0 ** -8
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    ops = {n["op_type"] for g in live_graphs() if g.serial > since and g.session is not None
           for n in g.session._session.optimized_graph()["nodes"]}
    assert "SoftmaxCrossEntropyLossGrad" in ops, sorted(ops)
    assert not {"LogSoftmaxGrad_13", "NegativeLogLikelihoodLossGrad"} & ops, sorted(ops)
    assert compile_stats().fallbacks == 0


@pytest.mark.parametrize("bounds", [(5, None), (2, 6), (0, 4)])
def test_slice_gradient_clamps_symbolic_sizes(bounds):
    """x[:, start:stop] under dynamic shapes: the gradient's padding is clamped in the graph (Min /
    Max), so an axis shorter than the bounds gives eager's gradient too, one graph for every size."""
    start, stop = bounds
    fn = lambda x: (x[:, start:stop] * 3).sum()  # noqa: E731
    compiled = torch.compile(fn, backend="ort", dynamic=True)
    for n in (9, 7, 4, 3):
        x = _r(3, n, gen=torch.Generator().manual_seed(n))
        ours, expected = x.clone().requires_grad_(), x.clone().requires_grad_()
        (got,) = torch.autograd.grad(compiled(ours), ours)
        (want,) = torch.autograd.grad(fn(expected), expected)
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=lambda m, n=n: f"size {n}: {m}")
    stats = compile_stats()
    assert stats.runs >= 8 and stats.fallbacks == 0, stats
    assert "aten.slice_backward.default" not in stats.aten_fallback_ops, stats.aten_fallback_ops
