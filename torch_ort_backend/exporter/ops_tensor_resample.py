"""Resampling ops (the engine's tensor family, csrc/ops/tensor_resample_schemas.cc): grid_sampler_2d
to GridSample (opset 16+; below, the op stays an ATen node).

Upsampling has no converter here: AOTAutograd decomposes upsample_nearest2d / upsample_bilinear2d
(CompositeImplicitAutograd) into aten._unsafe_index before the exporter sees them, so a Resize
converter would never fire; emitting Resize would need those ops kept whole before autograd."""

from __future__ import annotations

import torch

from .registry import converter

aten = torch.ops.aten

_GRID_MODES = {0: ("bilinear", "linear"), 1: ("nearest", "nearest"), 2: ("bicubic", "cubic")}
_GRID_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


@converter(aten.grid_sampler_2d.default)
def grid_sampler_2d(ctx, node, a):
    if ctx.opset < 16 or a.interpolation_mode not in _GRID_MODES or a.padding_mode not in _GRID_PADDING:
        return None
    # Opset 16 names the modes bilinear / bicubic, opset 20 linear / cubic.
    old_name, new_name = _GRID_MODES[a.interpolation_mode]
    return ctx.op("GridSample", a.input, a.grid, mode=new_name if ctx.opset >= 20 else old_name,
                  padding_mode=_GRID_PADDING[a.padding_mode], align_corners=int(bool(a.align_corners)))
