"""Scaled dot-product attention: torch's fused CPU kernel and its backward
(aten._scaled_dot_product_flash_attention_for_cpu[_backward], what F.scaled_dot_product_attention
becomes under AOTAutograd on CPU) mapped to the engine's FlashAttention / FlashAttentionGrad
(com.microsoft, csrc/providers/cpu/training/flash_attention.cc), which have the same semantics:
scale defaulting to 1/sqrt(head size), the causal mask aligned top-left (also when the query and
key lengths differ), an additive float or boolean mask broadcast over [batch, heads, q_seq, kv_seq],
K/V with fewer heads than Q (enable_gqa), output and row logsumexp.

Anything the engine op cannot reproduce exactly declines and stays an ATen node running torch's
kernel: dropout (our kernel cannot replay torch's generator stream, so the numbers would differ
from the ones the user asked for), dtypes without a native kernel, unknown ranks, and a
non-constant dropout probability or scale. float16 / bfloat16 attention computes in float32 and
keeps its logsumexp in float32, as torch's kernel does."""

from __future__ import annotations

import torch

from .context import MS_DOMAIN, Val
from .engine_ops import engine_has
from .registry import converter

aten = torch.ops.aten


def _flash_attributes(a, query: Val, key: Val, value: Val, mask: Val | None) -> dict | None:
    """FlashAttention's attributes for one call, or None when it must stay on torch's kernel."""
    if isinstance(a.dropout_p, Val) or a.dropout_p != 0 or not isinstance(a.is_causal, bool):
        return None
    if a.scale is not None and not isinstance(a.scale, (int, float)):
        return None
    if not engine_has(MS_DOMAIN, "FlashAttention", query.dtype):
        return None
    if any(v.dtype != query.dtype or v.shape is None or len(v.shape) != 4 for v in (key, value, query)):
        return None
    # a float32 mask beside 16-bit Q/K/V is what autocast makes of an additive mask: torch's kernel
    # accepts it, and the engine's adds it in float32, where it computes 16-bit attention anyway
    widened = mask is not None and mask.dtype == torch.float32 and query.dtype in (torch.float16, torch.bfloat16)
    if mask is not None and (mask.shape is None or not 1 <= len(mask.shape) <= 4
                             or (mask.dtype not in (torch.bool, query.dtype) and not widened)):
        return None
    return {"is_causal": int(a.is_causal), "scale": None if a.scale is None else float(a.scale)}


def _lse_dtype(query: Val) -> torch.dtype:
    return torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype


@converter(aten._scaled_dot_product_flash_attention_for_cpu.default)
def flash_attention_for_cpu(ctx, node, a):
    attrs = _flash_attributes(a, a.query, a.key, a.value, a.attn_mask)
    if attrs is None:
        return None
    y, lse = ctx.op("FlashAttention", a.query, a.key, a.value, a.attn_mask, outputs=2, domain=MS_DOMAIN,
                    dtypes=[a.query.dtype, _lse_dtype(a.query)], **attrs)
    return y, lse


@converter(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def flash_attention_for_cpu_backward(ctx, node, a):
    attrs = _flash_attributes(a, a.query, a.key, a.value, a.attn_mask)
    if attrs is None or a.logsumexp.dtype != _lse_dtype(a.query) or a.grad_out.dtype != a.query.dtype:
        return None
    dq, dk, dv = ctx.op("FlashAttentionGrad", a.grad_out, a.query, a.key, a.value, a.out, a.logsumexp, a.attn_mask,
                        outputs=3, domain=MS_DOMAIN, dtypes=[a.query.dtype, a.key.dtype, a.value.dtype], **attrs)
    return dq, dk, dv
