"""The embedding case's rules for full-shape values (embedding_sparsity.py, "Island" and "Scores / Probs"):
ops that keep tokens apart, followed through the dims that hold batch and token, and attention, whose
padded keys the run-time check (padding_check.py) must find masked."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from .token_ops import dims_arg, index_dims, norm_dim, reshape_dim, same, scalar_number, tensor_value, value
from .token_states import Attention, Declined, Island, Probs, Region, Scores, Several


class IslandRules:
    """Mixed into embedding_sparsity._Builder (which provides state, dense, attentions, B, S, g and
    _dense_form)."""

    # ---- island rules: full-shape ops that keep tokens apart, and attention ----
    def _island_state(self, a: Any) -> Any:
        st = self.state.get(a) if isinstance(a, torch.fx.Node) else None
        if isinstance(st, Region):
            return Island(0, 1) if not st.flat else None
        return st

    def _island(self, node: torch.fx.Node, key: str | None) -> bool:
        if key is None:
            return False
        tainted = [a for a in node.all_input_nodes if a in self.state]
        states = {a: self._island_state(a) for a in tainted}
        if any(s is None or isinstance(s, Several) for s in states.values()):
            return False
        v = tensor_value(node)
        if key == "sdpa":
            out = self._sdpa(node, states)
        elif v is None:
            return False
        elif any(isinstance(s, Scores) for s in states.values()):
            out = self._scores_op(node, key, states)
        elif any(isinstance(s, Probs) for s in states.values()):
            out = self._probs_op(node, key, states, v)
        else:
            out = self._island_op(node, key, states, v)
        if out is None:
            return False
        self.dense[node] = self.g.node_copy(node, self._dense_form)
        self.state[node] = out
        return True

    def _island_op(self, node: torch.fx.Node, key: str, states: dict, v: torch.Tensor) -> Any:
        rank = v.dim()
        x = node.args[0] if node.args else None
        sx = states.get(x)
        if key in ("identity", "cast", "unary", "dropout", "add", "sub", "mul", "div", "pow", "where", "masked_fill"):
            if key == "dropout" and dims_arg(node, 3, "inplace") is True:
                return None
            maps = set()
            for a, s in states.items():
                if not isinstance(s, Island):
                    return None
                r = tensor_value(a).dim()
                maps.add((s.bdim + rank - r, s.tdim + rank - r))
            return self._island_if_tokens(v, maps.pop()) if len(maps) == 1 else None
        if not isinstance(sx, Island) or len(states) != 1:
            if key == "cat":
                return self._island_cat(node, states, v)
            if key == "matmul":
                return self._matmul(node, states, v)
            return None
        xv = tensor_value(x)
        if key in ("transpose", "permute"):
            if key == "transpose":
                d0, d1 = norm_dim(dims_arg(node, 1, "dim0"), rank), norm_dim(dims_arg(node, 2, "dim1"), rank)
                perm = list(range(rank))
                perm[d0], perm[d1] = perm[d1], perm[d0]
            else:
                perm = node.args[1] if len(node.args) == 2 and isinstance(node.args[1], (list, tuple)) else \
                    list(node.args[1:]) if len(node.args) > 1 else node.kwargs.get("dims")
                perm = [norm_dim(p, rank) for p in perm]
            return self._island_if_tokens(v, (perm.index(sx.bdim), perm.index(sx.tdim)))
        if key in ("reshape", "flatten", "unsqueeze", "squeeze", "expand"):
            if key == "expand":
                shift = rank - xv.dim()
                return self._island_if_tokens(v, (sx.bdim + shift, sx.tdim + shift))
            b, t = reshape_dim(xv.shape, v.shape, sx.bdim), reshape_dim(xv.shape, v.shape, sx.tdim)
            return None if b is None or t is None else self._island_if_tokens(v, (b, t))
        if key == "getitem":
            dims = index_dims(node.args[1], xv.dim())
            if dims is None:
                return None
            where, whole = dims
            if not (whole[sx.bdim] and whole[sx.tdim]) or where[sx.bdim] is None or where[sx.tdim] is None:
                return None
            return self._island_if_tokens(v, (where[sx.bdim], where[sx.tdim]))
        if key in ("softmax", "log_softmax"):
            d = dims_arg(node, 1, "dim")
            if not isinstance(d, int) or norm_dim(d, rank) in (sx.bdim, sx.tdim):
                return None
            return sx
        if key in ("linear", "matmul"):
            if any(isinstance(a, torch.fx.Node) and a in self.state for a in node.args[1:]):
                return None
            if max(sx.bdim, sx.tdim) >= xv.dim() - 1 or rank != xv.dim():
                return None
            return self._island_if_tokens(v, (sx.bdim, sx.tdim))
        if key == "cat":
            return self._island_cat(node, states, v)
        return None

    def _island_if_tokens(self, v: torch.Tensor, dims: tuple[int, int]) -> Island | None:
        b, t = dims
        if not (0 <= b < v.dim() and 0 <= t < v.dim()) or b == t:
            return None
        if not (same(v.shape[b], self.B) and same(v.shape[t], self.S)):
            return None
        return Island(b, t)

    def _island_cat(self, node: torch.fx.Node, states: dict, v: torch.Tensor) -> Any:
        """cat along a non-token dim of tensors with one token layout; HF's KV cache cats an empty 1-D
        tensor (which torch.cat skips) with the keys, which leaves them as they are."""
        tensors = node.args[0]
        dim = dims_arg(node, 1, "dim")
        dim = 0 if dim is None else dim
        if not isinstance(tensors, (list, tuple)):
            return None
        tainted = [t for t in tensors if t in states]
        clean = [t for t in tensors if t not in states]
        sts = {states[t] for t in tainted}
        if len(sts) != 1 or not isinstance(next(iter(sts)), Island):
            return None
        st = next(iter(sts))
        empty = all(tensor_value(t) is not None and tuple(tensor_value(t).shape) == (0,) for t in clean)
        if empty and len(tainted) == 1:
            return self._island_if_tokens(v, (st.bdim, st.tdim))
        if norm_dim(dim, v.dim()) in (st.bdim, st.tdim):
            return None
        return self._island_if_tokens(v, (st.bdim, st.tdim))

    def _matmul(self, node: torch.fx.Node, states: dict, v: torch.Tensor) -> Any:
        a, b = node.args[0], node.args[1]
        sa, sb = states.get(a), states.get(b)
        ra, rb = tensor_value(a).dim(), tensor_value(b).dim()
        if ra != rb or ra < 3 or v.dim() != ra:
            return None
        if isinstance(sa, Island) and isinstance(sb, Island):
            # q [.., Sq, d] @ k^T [.., d, Sk]: the scores of an attention
            if sa.tdim != ra - 2 or sb.tdim != rb - 1 or sa.bdim != sb.bdim or sa.bdim >= ra - 2:
                return None
            if not (same(v.shape[ra - 2], self.S) and same(v.shape[ra - 1], self.S)):
                return None
            self.attentions.append(Attention("eager", node.name, ra, sa.bdim, ra - 2, ra - 1, v.dtype))
            return Scores(sa.bdim, ra - 2, ra - 1, len(self.attentions) - 1)
        if isinstance(sa, Probs) and isinstance(sb, Island):
            if sb.tdim != rb - 2 or sb.bdim != sa.bdim or sa.kdim != ra - 1 or sa.qdim != ra - 2:
                return None
            return self._island_if_tokens(v, (sa.bdim, ra - 2))
        return None

    def _scores_op(self, node: torch.fx.Node, key: str, states: dict) -> Any:
        """An op on attention scores before the softmax: only ops that are non-decreasing in the score
        (padding_check.py evaluates the chain at +L and -L), and the softmax over the keys."""
        if len(states) != 1:
            return None
        (x, st), = states.items()
        if not isinstance(st, Scores):
            return None
        att = self.attentions[st.attention]
        rank = att.rank
        v = tensor_value(node)
        if v is None or v.dim() != rank:
            return None
        if key in ("softmax",):
            d = dims_arg(node, 1, "dim")
            if node.args[0] is not x or not isinstance(d, int) or norm_dim(d, rank) != st.kdim:
                return None
            return Probs(st.bdim, st.qdim, st.kdim)
        position = None
        if key in ("identity", "cast") and node.args[0] is x and node.target != "type_as":
            position = 0
        elif key == "add" and len(node.args) == 2:
            position = node.args.index(x)
        elif key == "sub" and len(node.args) == 2 and node.args[0] is x:
            position = 0
        elif key in ("mul", "div") and len(node.args) == 2:
            position = node.args.index(x)
            if key == "div" and position != 0:
                return None
            other = node.args[1 - position]
            number = scalar_number(other)
            if number is not None:
                if number < 0 or (key == "div" and number <= 0):
                    return None
            elif scalar_node(other):  # a number only known at run time: the probe checks its sign
                att.positive.append((other, key == "div"))
            else:
                return None
        elif key == "where" and len(node.args) == 3 and node.args[0] is not x and x in node.args[1:]:
            position = node.args.index(x, 1)
        elif key == "masked_fill" and node.args[0] is x and len(node.args) == 3:
            position = 0
        if position is None or node.kwargs:
            return None
        att.chain.append((node, position))
        return st

    def _probs_op(self, node: torch.fx.Node, key: str, states: dict, v: torch.Tensor) -> Any:
        if key == "matmul":
            return self._matmul(node, states, v)
        x = node.args[0] if node.args else None
        st = states.get(x)
        if len(states) != 1 or not isinstance(st, Probs) or v.dim() != tensor_value(x).dim():
            return None
        if key in ("identity", "cast") and node.target != "type_as":
            return st
        if key == "dropout" and dims_arg(node, 3, "inplace") is not True:
            return st  # dropout keeps a zero probability zero
        return None

    def _sdpa(self, node: torch.fx.Node, states: dict) -> Any:
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
        a = dict(zip(names, node.args))
        a.update(node.kwargs)
        q, k, v = a.get("query"), a.get("key"), a.get("value")
        mask, causal, scale = a.get("attn_mask"), a.get("is_causal", False), a.get("scale")
        sq, sk, sv = states.get(q), states.get(k), states.get(v)
        if not all(isinstance(s, Island) for s in (sq, sk, sv)) or (isinstance(mask, torch.fx.Node) and
                                                                     mask in states):
            return None
        rank = tensor_value(q).dim()
        if any(s.tdim != rank - 2 or s.bdim != sq.bdim for s in (sq, sk, sv)) or sq.bdim >= rank - 2:
            return None
        if not isinstance(causal, bool):
            return None
        if scale is not None and not scalar_node(scale) and (scalar_number(scale) is None or scale <= 0):
            return None
        if mask is None and not causal:
            raise Declined(f"{node.name}: scaled_dot_product_attention without a mask lets every query read "
                           f"the padded keys")
        out = tensor_value(node)
        if out is None:  # made by attention_fusion.py after dynamo traced: the query's sizes but the last
            qv, vv = tensor_value(q), tensor_value(v)
            if vv is None:
                return None
            out = _Like((*qv.shape[:-1], vv.shape[-1]), qv.dtype)
        att = Attention("sdpa", node.name, rank, sq.bdim, rank - 2, rank - 1, out.dtype,
                        mask=mask if isinstance(mask, torch.fx.Node) else None, is_causal=causal, scale=scale)
        if isinstance(scale, torch.fx.Node):
            att.positive.append((scale, True))
        self.attentions.append(att)
        return self._island_if_tokens(out, (sq.bdim, rank - 2))


class _Like:
    """The sizes and dtype of a value that has no fake value (a node made after dynamo traced)."""

    def __init__(self, shape: tuple, dtype: torch.dtype) -> None:
        self.shape, self.dtype = shape, dtype

    def dim(self) -> int:
        return len(self.shape)


def scalar_node(node: Any) -> bool:
    """A clean node holding one number: a 1-element tensor, or a float / int dynamo traced as symbolic."""
    if not isinstance(node, torch.fx.Node):
        return False
    v = value(node)
    if isinstance(v, torch.Tensor):
        return v.numel() == 1
    return isinstance(v, (int, float, torch.SymInt, torch.SymFloat)) and not isinstance(v, bool)


__all__ = ["IslandRules", "scalar_node"]
