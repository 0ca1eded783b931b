"""Tensor (data movement) ops: shape, layout, slicing, concatenation, indexing, padding, copies.
Creation ops are in ops_generator.py, CumSum in ops_reduction.py (the engine's families)."""

from __future__ import annotations

import sys

import numpy as np
import torch

from .context import Val
from .registry import converter

aten = torch.ops.aten
INT64_MAX = 2**63 - 1


def out_meta(node):
    return node.meta["val"]


def _axes(ctx, dims) -> Val:
    return ctx.const(np.asarray(dims, dtype=np.int64), torch.int64)


def _norm_dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


def _sizes(ctx, node, sizes) -> Val:
    """The target shape: constant when the output's shape is static, else built from SymInt values."""
    mv = out_meta(node)
    if all(isinstance(s, int) for s in mv.shape):
        return ctx.ints([int(s) for s in mv.shape])
    return ctx.ints(list(sizes))


@converter(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def view(ctx, node, a):
    return ctx.op("Reshape", a.self, _sizes(ctx, node, a.size))


@converter(aten.clone.default, aten.alias.default, aten.detach.default, aten.lift_fresh_copy.default,
           aten.contiguous.default)
def identity(ctx, node, a):
    return ctx.op("Identity", a.self)


@converter(aten.t.default)
def t(ctx, node, a):
    if a.self.rank < 2:
        return ctx.op("Identity", a.self)
    return ctx.op("Transpose", a.self, perm=[1, 0])


@converter(aten.transpose.int)
def transpose(ctx, node, a):
    r = a.self.rank
    perm = list(range(r))
    d0, d1 = _norm_dim(a.dim0, r), _norm_dim(a.dim1, r)
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return ctx.op("Transpose", a.self, perm=perm)


@converter(aten.permute.default)
def permute(ctx, node, a):
    r = a.self.rank
    return ctx.op("Transpose", a.self, perm=[_norm_dim(d, r) for d in a.dims])


@converter(aten.expand.default)
def expand(ctx, node, a):
    size = list(a.size)
    lead = len(size) - a.self.rank
    fixed = [1 if (isinstance(s, int) and s == -1 and i >= lead) else s for i, s in enumerate(size)]
    mv = out_meta(node)
    if all(isinstance(s, int) for s in mv.shape):
        fixed = [int(s) for s in mv.shape]
    return ctx.op("Expand", a.self, ctx.ints(fixed))


@converter(aten.unsqueeze.default)
def unsqueeze(ctx, node, a):
    d = _norm_dim(a.dim, a.self.rank + 1)
    return ctx.op("Unsqueeze", a.self, _axes(ctx, [d]))


@converter(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def squeeze(ctx, node, a):
    shape = a.self.shape
    if shape is None:
        return None
    r = len(shape)
    dims = getattr(a, "dim", None)
    if dims is None:
        dims = list(range(r))
    elif isinstance(dims, int):
        dims = [dims]
    dims = [_norm_dim(d, r) for d in dims] if r else []
    if any(not isinstance(shape[d], int) for d in dims):
        return None  # whether a symbolic dim is 1 is unknown here
    keep = [d for d in dims if shape[d] == 1]
    if not keep:
        return ctx.op("Identity", a.self)
    return ctx.op("Squeeze", a.self, _axes(ctx, keep))


@converter(aten.slice.Tensor)
def slice_(ctx, node, a):
    r = a.self.rank
    d = _norm_dim(a.dim, r)
    start = 0 if a.start is None else a.start
    end = INT64_MAX if a.end is None or (isinstance(a.end, int) and a.end >= sys.maxsize) else a.end
    if isinstance(start, int) and start == 0 and isinstance(end, int) and end == INT64_MAX and a.step == 1:
        return ctx.op("Identity", a.self)
    return ctx.op("Slice", a.self, ctx.ints([start]), ctx.ints([end]), _axes(ctx, [d]), ctx.ints([a.step]))


@converter(aten.select.int)
def select(ctx, node, a):
    d = _norm_dim(a.dim, a.self.rank)
    idx = a.index if isinstance(a.index, Val) else ctx.scalar(a.index, torch.int64)
    return ctx.op("Gather", a.self, ctx.cast(idx, torch.int64), axis=d)


@converter(aten.cat.default)
def cat(ctx, node, a):
    parts = [t for t in a.tensors if not (t.shape is not None and len(t.shape) == 1 and t.shape[0] == 0)]
    if not parts:
        return None
    rank = len(out_meta(node).shape)
    dt = out_meta(node).dtype
    return ctx.op("Concat", *[ctx.cast(p, dt) for p in parts], axis=_norm_dim(a.dim, rank))


def _split_outputs(ctx, node, x: Val, sizes: list[int], dim: int):
    outs = ctx.op("Split", x, ctx.ints(sizes), outputs=len(sizes), axis=dim)
    return outs if isinstance(outs, list) else [outs]


@converter(aten.split.Tensor, aten.split_with_sizes.default)
def split(ctx, node, a):
    metas = out_meta(node)
    d = _norm_dim(a.dim, a.self.rank)
    sizes = [m.shape[d] for m in metas]
    if not all(isinstance(s, int) for s in sizes):
        return None
    if len(sizes) == 1:
        return [ctx.op("Identity", a.self)]
    return _split_outputs(ctx, node, a.self, [int(s) for s in sizes], d)


@converter(aten.unbind.int)
def unbind(ctx, node, a):
    metas = out_meta(node)
    d = _norm_dim(a.dim, a.self.rank)
    if len(metas) == 1:
        return [ctx.op("Squeeze", a.self, _axes(ctx, [d]))]
    parts = _split_outputs(ctx, node, a.self, [1] * len(metas), d)
    return [ctx.op("Squeeze", p, _axes(ctx, [d])) for p in parts]


@converter(aten.index_select.default)
def index_select(ctx, node, a):
    return ctx.op("Gather", a.self, a.index, axis=_norm_dim(a.dim, a.self.rank))


@converter(aten.nonzero.default)
def nonzero(ctx, node, a):
    """torch's [count, rank] indices are ONNX NonZero's [rank, count], transposed; the count is the
    data-dependent size the trace named (u0)."""
    from .engine_ops import engine_has

    if not engine_has("", "NonZero", a.self.dtype):
        return None
    indices = ctx.op("NonZero", a.self, dtype=torch.int64)
    return ctx.op("Transpose", indices, perm=[1, 0], dtype=torch.int64)


_ZEROS = {aten.zeros.default, aten.new_zeros.default, aten.zeros_like.default}


@converter(aten.index_add.default)
def index_add(ctx, node, a):
    """self + (source's slices added at index along dim): the engine's GatherGrad is exactly the sum
    into zeros (repeated indices accumulate, in a fixed order), so index_select's gradient (zeros
    then index_add, e.g. the compute optimizer's selected rows) needs no Add."""
    from .._engine import MS_DOMAIN
    from .engine_ops import engine_has

    index, source = a.index, a.source
    if a.alpha != 1 or index.shape is None or len(index.shape) != 1 or a.self.shape is None:
        return None
    if not engine_has(MS_DOMAIN, "GatherGrad", source.dtype) or source.dtype != a.self.dtype:
        return None
    added = ctx.op("GatherGrad", ctx.shape_of(a.self), index, source, axis=_norm_dim(a.dim, a.self.rank),
                   domain=MS_DOMAIN)
    base = node.args[0]
    if isinstance(base, torch.fx.Node) and base.target in _ZEROS:
        return added
    return ctx.op("Add", a.self, added)


@converter(aten.gather.default)
def gather(ctx, node, a):
    if a.sparse_grad:
        return None
    return ctx.op("GatherElements", a.self, a.index, axis=_norm_dim(a.dim, a.self.rank))


@converter(aten.index.Tensor)
def index(ctx, node, a):
    idx = list(a.indices)
    given = [i for i, t in enumerate(idx) if t is not None]
    if len(given) != 1 or idx[given[0]].dtype not in (torch.int64, torch.int32):
        return None
    return ctx.op("Gather", a.self, idx[given[0]], axis=given[0])


@converter(aten.constant_pad_nd.default)
def constant_pad(ctx, node, a):
    pad = list(a.pad)
    if not all(isinstance(p, int) for p in pad):
        return None
    r = a.self.rank
    begins, ends = [0] * r, [0] * r
    for i in range(len(pad) // 2):
        d = r - 1 - i
        begins[d], ends[d] = pad[2 * i], pad[2 * i + 1]
    x = a.self
    if any(p < 0 for p in begins + ends):  # negative padding crops (the gradient of a padding)
        axes = [d for d in range(r) if begins[d] < 0 or ends[d] < 0]
        starts = [max(-begins[d], 0) for d in axes]
        stops = [(ends[d] if ends[d] < 0 else INT64_MAX) for d in axes]  # a negative stop counts from the end
        x = ctx.op("Slice", x, ctx.ints(starts), ctx.ints(stops), _axes(ctx, axes))
        begins, ends = [max(b, 0) for b in begins], [max(e, 0) for e in ends]
        if not any(begins + ends):
            return x
    dt = a.self.dtype
    return ctx.op("Pad", x, ctx.ints(begins + ends), ctx.scalar(a.value, dt), mode="constant")


@converter(aten.repeat.default)
def repeat(ctx, node, a):
    reps = list(a.repeats)
    if len(reps) != a.self.rank:
        return None
    return ctx.op("Tile", a.self, ctx.ints(reps))


@converter(aten.copy.default)
def copy(ctx, node, a):
    dst = a.self
    src = ctx.cast(a.src, dst.dtype)
    if src.shape == dst.shape:
        return ctx.op("Identity", src)
    return ctx.op("Expand", src, ctx.shape_of(dst))


@converter(aten.sym_size.int)
def sym_size(ctx, node, a):
    d = _norm_dim(a.dim, a.self.rank)
    size = a.self.shape[d]
    if isinstance(size, int):
        return ctx.scalar(size, torch.int64)
    return ctx.op("Squeeze", ctx.op("Shape", a.self, dtype=torch.int64, start=d, end=d + 1), _axes(ctx, [0]))


@converter(aten.sym_numel.default)
def sym_numel(ctx, node, a):
    return ctx.op("ReduceProd", ctx.op("Shape", a.self, dtype=torch.int64), keepdims=0)



@converter(torch.ops.prims.convert_element_type.default)
def convert_element_type(ctx, node, a):
    return ctx.cast(a.a, a.dtype) if a.a.dtype != a.dtype else ctx.op("Identity", a.a)


def _clamped_pads(ctx, size, start, end):
    """The zeros before and after a unit-step slice [start, end) of an axis of `size`, any of them
    symbolic, clamped as torch's slicing does (0 <= start <= stop <= size): Min / Max in the graph."""
    def val(x):
        return ctx.as_val(x, torch.int64)

    begin = start if isinstance(start, int) and start == 0 else ctx.op("Min", val(start), val(size))
    if isinstance(end, int) and end >= INT64_MAX // 2:
        return begin, 0  # to the axis's end: stop = size >= begin
    stop = ctx.op("Max", ctx.op("Min", val(end), val(size)), val(begin))
    return begin, ctx.op("Sub", val(size), stop)


@converter(aten.slice_backward.default)
def slice_backward(ctx, node, a):
    """Gradient of a unit-step slice: the gradient padded with zeros back to the input's size."""
    if a.step != 1:
        return None
    sizes = list(a.input_sizes)
    r = len(sizes)
    d = _norm_dim(a.dim, r)
    size, start, end = sizes[d], a.start, a.end
    if isinstance(size, int):
        # torch clamps: a start before the first element to it, an end past the last to it, and a
        # backwards range is empty
        if isinstance(start, int) and start < 0:
            start += size
        if isinstance(end, int) and end < 0:
            end += size
        if isinstance(start, int) and isinstance(end, int):
            start = min(max(start, 0), size)
            end = min(max(end, start), size)
            after = size - end
        else:  # a symbolic bound on a static axis: clamped in the graph
            start, after = _clamped_pads(ctx, size, start, end)
    else:
        if any(isinstance(b, int) and b < 0 for b in (start, end)):
            return None  # counted from a symbolic end: which side it clamps to is not known here
        start, after = _clamped_pads(ctx, size, start, end)
    begins, ends = [0] * r, [0] * r
    begins[d], ends[d] = start, after
    g = a.grad_output
    return ctx.op("Pad", g, ctx.ints(begins + ends), ctx.scalar(0, g.dtype), mode="constant")


@converter(aten.select_backward.default)
def select_backward(ctx, node, a):
    """Gradient of select: the gradient re-inserted at `index` along `dim`, zeros elsewhere."""
    sizes = list(a.input_sizes)
    r = len(sizes)
    d = _norm_dim(a.dim, r)
    size, index = sizes[d], a.index
    if not isinstance(index, int):
        return None
    if index < 0:
        if not isinstance(size, int):
            return None
        index += size
    after = size - index - 1 if isinstance(size, int) else ctx.op("Sub", ctx.as_val(size, torch.int64),
                                                                   ctx.scalar(index + 1, torch.int64))
    g = ctx.op("Unsqueeze", a.grad_output, _axes(ctx, [d]))
    begins, ends = [0] * r, [0] * r
    begins[d], ends[d] = index, after
    return ctx.op("Pad", g, ctx.ints(begins + ends), ctx.scalar(0, g.dtype), mode="constant")


@converter(aten.stack.default)
def stack(ctx, node, a):
    rank = len(out_meta(node).shape)
    d = _norm_dim(a.dim, rank)
    dt = out_meta(node).dtype
    parts = [ctx.op("Unsqueeze", ctx.cast(t, dt), _axes(ctx, [d])) for t in a.tensors]
    return parts[0] if len(parts) == 1 else ctx.op("Concat", *parts, axis=d)


@converter(aten.flip.default)
def flip(ctx, node, a):
    r = a.self.rank
    dims = [_norm_dim(d, r) for d in a.dims]
    if not dims:
        return ctx.op("Identity", a.self)
    n = len(dims)
    return ctx.op("Slice", a.self, ctx.ints([-1] * n), ctx.ints([-INT64_MAX] * n), _axes(ctx, dims),
                  ctx.ints([-1] * n))


@converter(aten.scatter.src, aten.scatter.value)
def scatter(ctx, node, a):
    src = a.src if hasattr(a, "src") and a.src is not None else None
    if src is None:
        if isinstance(getattr(a, "value", None), Val):
            return None
        src = ctx.op("Expand", ctx.scalar(a.value, a.self.dtype), ctx.shape_of(a.index))
    return ctx.op("ScatterElements", a.self, a.index, ctx.cast(src, a.self.dtype),
                  axis=_norm_dim(a.dim, a.self.rank))
