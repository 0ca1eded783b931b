"""The embedding case of the compute optimizer: the per-token layers of a model run over the valid
(non-padding) tokens only; onnxruntime-training's PaddingElimination, written for TorchDynamo's graph.

A padded batch of token ids [B, S] is embedded into [B, S, H], and every layer that treats each
token on its own (linear, layer norm, activations, residual sums, the MLP, the vocabulary projection)
spends the padding's share of its time on rows nobody reads. The pass rebuilds dynamo's graph so
that those layers work on the valid rows only:

    valid = ids.view(-1) != padding_idx  (and/or  attention_mask.view(-1) != 0)
    rows  = nonzero(valid).view(-1)                         # n valid tokens, a data-dependent size
    h     = embedding(ids.view(-1).index_select(0, rows))   # [n, H] instead of [B, S, H]

Every value that depends on the embedded tokens gets one of these states as the graph is walked in
order (``_Builder``):

- **Region** (per token, compressed): the logical value is [B, S, *f] ("grid") or [B*S, *f]
  ("flat"); the rewritten graph holds only its valid rows, [n, *f]. Row-wise ops (token_ops.py)
  keep it compressed; a token-shaped operand that does not depend on the tokens (position
  embeddings, rotary tables) is gathered at the valid rows.
- **Island** (full shape, exact at valid tokens): where an op mixes tokens (attention), the region
  is restored to its padded shape (``restore``: zeros at padded rows, the valid rows scattered back)
  and the op runs on the full tensor. The state tracks which dims hold batch and token, through
  transposes, reshapes (heads), rotary arithmetic and GQA's repeat. An island value that comes back
  with its token dims leading is gathered at the valid rows again and re-enters the region (the
  attention output before its projection).
- **Scores / Probs**: inside an attention, q @ k^T has a query and a key token dim. The scores may
  be scaled and masked (add a mask, where, masked_fill, casts), then softmax over the keys gives
  probabilities, and probs @ v is an island value again. SDPA is one op with the same meaning.

Why that is the dense run's arithmetic (the proof, with the run-time part in padding_check.py):

1. A region value's valid rows are computed by the same ops from the same inputs as in the dense
   graph. Its padded rows do not exist.
2. An island value at a valid token equals the dense value there, because every island op keeps
   tokens apart (each output token reads the same input token), except attention: output row q
   reads every key k. With the restored zeros at padded keys, that row equals the dense one iff the
   probability of every padded key is exactly 0 for every valid query, in both runs. The pass
   cannot prove that statically (the mask is data); padding_check.py checks it on the actual mask
   before each call: the scores chain evaluated at +L and -L, L = sqrt(finfo.max), must leave every
   [valid query, padded key] below finfo.min / 2 and give every valid query a key above
   finfo.min / 4, so exp() of the difference underflows to exactly 0 for any score below L.
3. Values leave the region for: an island (2), a cross-entropy whose labels at padded rows are the
   ignore index (checked at run time: the rows it then skips add nothing to the loss or its
   count), an ``index_select`` of valid rows (the label case's selection; checked), or a graph
   output, restored with zeros at padded rows. Any other reader of a per-token value (a mean over
   the sequence, a cumsum, a token picked by position, a convolution over tokens) makes the pass
   decline for the whole graph: it is not known to keep padded tokens out.
4. Gradients: AOTAutograd differentiates the rewritten graph. In the dense run the gradient reaching
   a padded row is exactly zero (its loss rows are ignored, its keys have probability 0, everything
   else is row-wise), so every parameter gradient is a sum over valid rows, which is what the
   rewritten graph computes. A gradient the user sends into the padded rows of a returned tensor
   (a loss on padded logits outside the graph) is dropped by the restore's backward: the padded
   rows of returned per-token outputs hold 0 and take no gradient.

Where validity comes from: the embedding's ``padding_idx`` (as in onnxruntime-training) and the
``[B, S]`` graph input from which every attention mask is computed (the attention mask; GPT-2's
embedding has no padding_idx). A token is padding if either marks it. The choice only decides how
much is saved, never the numbers: the run-time check verifies points 2 and 3 for whatever set is
called valid, and a call whose check fails runs the dense graph (padding_check.py).
"""

from __future__ import annotations

import operator
from collections import Counter
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from .island_rules import IslandRules, scalar_node
from .label_sparsity import bound_cross_entropy
from .token_ops import as_dim_list, dims_arg, index_dims, norm_dim, op_key, same, static_sizes, tensor_value, value
from .token_states import Attention, Declined, Island, Plan, Region, Several


_TOKEN_IDS = (torch.int64, torch.int32)


def _input_nodes(node: torch.fx.Node) -> list[torch.fx.Node]:
    return list(node.all_input_nodes)


def _root_placeholder(node: Any) -> torch.fx.Node | None:
    while isinstance(node, torch.fx.Node) and node.op != "placeholder":
        if op_key(node) not in ("reshape", "cast", "identity") or not node.args:
            return None
        node = node.args[0]
    return node if isinstance(node, torch.fx.Node) else None


def _embedding_args(node: torch.fx.Node) -> tuple | None:
    """(ids, weight, padding_idx, max_norm, scale_grad_by_freq, sparse) of an F.embedding call."""
    names = ("input", "weight", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse")
    defaults = {"padding_idx": None, "max_norm": None, "norm_type": 2.0, "scale_grad_by_freq": False, "sparse": False}
    a = dict(zip(names, node.args))
    for k, v in node.kwargs.items():
        a[k] = v
    for k, v in defaults.items():
        a.setdefault(k, v)
    if "input" not in a or "weight" not in a:
        return None
    return a["input"], a["weight"], a["padding_idx"], a["max_norm"], a["scale_grad_by_freq"], a["sparse"]


def _primary_embedding(graph: torch.fx.Graph) -> tuple[torch.fx.Node, int | None] | None:
    """The token ids the pass compresses by: an embedding's [B, S] integer ids read from a graph input;
    one with a padding_idx first (it marks padding itself)."""
    found = []
    for node in graph.nodes:
        if op_key(node) != "embedding":
            continue
        args = _embedding_args(node)
        if args is None:
            continue
        ids, weight, pad = args[0], args[1], args[2]
        v = tensor_value(ids)
        if v is None or v.dim() != 2 or v.dtype not in _TOKEN_IDS or _root_placeholder(ids) is None:
            continue
        w = tensor_value(weight)
        if isinstance(pad, int) and pad < 0 and w is not None and isinstance(w.shape[0], int):
            pad += w.shape[0]
        found.append((ids, pad if isinstance(pad, int) and pad >= 0 else None))
    if not found:
        return None
    with_pad = [f for f in found if f[1] is not None]
    return (with_pad or found)[0]


class _Builder(IslandRules):
    """Walks the graph in order, building the rewritten one (module docstring)."""

    def __init__(self, gm: torch.fx.GraphModule, ids: torch.fx.Node, padding_idx: int | None) -> None:
        self.gm, self.src, self.g = gm, gm.graph, torch.fx.Graph()
        self.ids, self.padding_idx = ids, padding_idx
        shape = tensor_value(ids).shape
        self.B, self.S = shape[0], shape[1]
        self.N = self.B * self.S
        if same(self.S, 1):
            raise Declined("a sequence of one token has no padding to remove")
        self.dense: dict[torch.fx.Node, Any] = {}
        self.comp: dict[torch.fx.Node, torch.fx.Node] = {}
        self.state: dict[torch.fx.Node, Any] = {}
        self._restored: dict[torch.fx.Node, torch.fx.Node] = {}
        self._gathered: dict[tuple, torch.fx.Node] = {}
        self.attentions: list[Attention] = []
        self.losses: list[tuple[torch.fx.Node, int]] = []
        self.gathers: list[torch.fx.Node] = []
        self.entries: list[str] = []
        self.restored_outputs: list[str] = []
        self.moved = Counter()
        self.valid = self.rows = self.n = self._pos = None
        self._b = self._s = self._nn = None

    # ---- the walk ----
    def build(self) -> Plan | None:
        for node in self.src.nodes:
            if self.rows is None and node.op != "placeholder" and self.ids in self.dense:
                self._emit_rows()  # after every graph input: the mask input may come after the ids
            if node.op == "output":
                self._output(node)
                continue
            tainted = [a for a in _input_nodes(node) if a in self.state]
            if not tainted:
                if not self._entry(node):
                    self.dense[node] = self.g.node_copy(node, lambda a: self.dense[a])
                continue
            if not self._tainted(node):
                raise Declined(f"{node.name} ({_describe(node)}) reads per-token values and is not known to keep "
                               f"padded tokens out of valid ones")
        if not self.entries:
            return None
        mask = self._attention_mask_input()
        if self.padding_idx is None and mask is None:
            raise Declined("nothing marks padding: the embedding has no padding_idx and no [batch, sequence] input "
                           "feeds every attention mask")
        if mask is not None:
            with self.g.inserting_before(self.valid.next):
                flat = self.g.call_method("reshape", (self.dense[mask], -1))
                marked = self.g.call_function(operator.ne, (flat, 0))
                both = self.g.call_function(operator.and_, (self.valid, marked))
            self.valid.replace_all_uses_with(both, delete_user_cb=lambda u: u is not both)
        self.g.lint()
        return Plan(torch.fx.GraphModule(self.gm, self.g), self.ids, self.padding_idx, mask, self.attentions,
                    self.losses, self.gathers, self.entries, self.restored_outputs, self.moved)

    def _tainted(self, node: torch.fx.Node) -> bool:
        key = op_key(node)
        if key == "getitem" and isinstance(self.state.get(node.args[0]), Several):
            return self._element(node)
        return self._region(node, key) or self._island(node, key) or self._consumer(node, key)

    # ---- the valid rows ----
    def _emit_rows(self) -> None:
        ids = self.dense[self.ids]
        g = self.g
        flat = g.call_method("reshape", (ids, -1))
        if self.padding_idx is not None:
            self.valid = g.call_function(operator.ne, (flat, self.padding_idx))
        else:
            self.valid = g.call_function(torch.ones_like, (flat,), {"dtype": torch.bool})
        self.rows = g.call_method("view", (g.call_function(torch.nonzero, (self.valid,)), -1))
        self.n = g.call_method("size", (self.rows, 0))
        self._b = self.B if isinstance(self.B, int) else g.call_method("size", (ids, 0))
        self._s = self.S if isinstance(self.S, int) else g.call_method("size", (ids, 1))
        self._nn = self.N if isinstance(self.N, int) else g.call_method("numel", (ids,))

    def _positions(self) -> torch.fx.Node:
        """For each flat token, its row among the valid ones (cumsum of valid - 1)."""
        if self._pos is None:
            with self.g.inserting_before(self.n.next):
                count = self.g.call_function(torch.cumsum, (self.valid, 0))
                self._pos = self.g.call_function(operator.sub, (count, 1))
        return self._pos

    def _attention_mask_input(self) -> torch.fx.Node | None:
        """The [B, S] graph input every attention mask is computed from (module docstring)."""
        masks = [a.mask for a in self.attentions if a.kind == "sdpa" and a.mask is not None]
        for a in self.attentions:
            if a.kind == "eager":
                for node, pos in a.chain:
                    masks.extend(x for i, x in enumerate(node.args) if i != pos and isinstance(x, torch.fx.Node))
                    masks.extend(x for x in node.kwargs.values() if isinstance(x, torch.fx.Node))
        masks = [m for m in masks if not scalar_node(m)]  # not the scale
        if not masks:
            return None
        root = _root_placeholder(self.ids)
        candidates = []
        for p in self.src.nodes:
            v = tensor_value(p)
            if p.op != "placeholder" or p is root or v is None or v.dim() != 2:
                continue
            if same(v.shape[0], self.B) and same(v.shape[1], self.S) and not v.dtype.is_complex:
                candidates.append(p)
        feeding = [p for p in candidates if all(_depends_on(m, p) for m in masks)]
        return feeding[0] if len(feeding) == 1 else None

    # ---- forms of a value ----
    def _restore(self, a: torch.fx.Node) -> torch.fx.Node:
        """The padded form of a region value: zeros at padded rows, the valid rows scattered back."""
        if a not in self._restored:
            st: Region = self.state[a]
            g = self.g
            zeros = g.call_method("new_zeros", (self.comp[a], (self._nn, *st.feat)))
            filled = g.call_method("index_add", (zeros, 0, self.rows, self.comp[a]))
            self._restored[a] = filled if st.flat else g.call_method("view", (filled, (self._b, self._s, *st.feat)))
        return self._restored[a]

    def _dense_form(self, a: Any) -> Any:
        if isinstance(a, torch.fx.Node) and isinstance(self.state.get(a), Region):
            return self._restore(a)
        if isinstance(a, torch.fx.Node):
            return self.dense[a]
        return a

    def _gather(self, source: torch.fx.Node | None, dense: torch.fx.Node, shape: Any,
                flat: bool) -> torch.fx.Node | None:
        """The valid rows of a full-shape per-token value (its token dims leading, each of the token
        size or 1): [n, *trailing]. Kept per `source` node (None: not kept)."""
        key = (source, flat)
        if source is not None and key in self._gathered:
            return self._gathered[key]
        ntok = 1 if flat else 2
        trailing = static_sizes(shape[ntok:])
        if trailing is None or len(shape) < ntok:
            return None
        g = self.g
        tokens = (self._nn,) if flat else (self._b, self._s)
        sizes = (self.N,) if flat else (self.B, self.S)
        if any(not (same(s, t) or same(s, 1)) for s, t in zip(shape[:ntok], sizes)):
            return None
        x = dense
        if not all(same(s, t) for s, t in zip(shape[:ntok], sizes)):
            x = g.call_method("expand", (x, (*tokens, *([-1] * len(trailing)))))
        x = g.call_method("reshape", (x, (self._nn, *trailing)))
        out = g.call_function(torch.index_select, (x, 0, self.rows))
        if source is not None:
            self._gathered[key] = out
        return out

    def _compressed(self, a: torch.fx.Node) -> tuple[torch.fx.Node, Region] | None:
        """A tainted operand as a region value: its compressed node and logical state; an island value
        whose token dims lead is gathered at the valid rows."""
        st = self.state.get(a)
        if isinstance(st, Region):
            return self.comp[a], st
        if isinstance(st, Island) and (st.bdim, st.tdim) == (0, 1):
            v = tensor_value(a)
            if v is None:
                return None
            node = self._gather(a, self.dense[a], v.shape, flat=False)
            if node is None:
                return None
            return node, Region(False, tuple(v.shape[2:]))
        return None

    def _clean_operand(self, a: Any, rank: int, ntok: int) -> Any:
        """A clean operand of a row-wise op on a region value of `rank` logical dims: as is when it does
        not reach the token dims, squeezed when it broadcasts over them, gathered when it is per token.
        The sentinel ``_NO`` when none applies."""
        if not isinstance(a, torch.fx.Node):
            return a
        v = tensor_value(a)
        if v is None:
            return self.dense[a] if not isinstance(value(a), (list, tuple)) else _NO
        lead = rank - v.dim()
        if lead < 0:
            return _NO
        token_sizes = [v.shape[t - lead] if t - lead >= 0 else 1 for t in range(ntok)]
        if all(same(s, 1) for s in token_sizes):
            if v.dim() <= rank - ntok:
                return self.dense[a]
            trailing = static_sizes(v.shape[v.dim() - (rank - ntok):])
            return _NO if trailing is None else self.g.call_method("reshape", (self.dense[a], trailing))
        shape = (1,) * lead + tuple(v.shape)
        x = self.dense[a] if lead == 0 else self.g.call_method("reshape", (self.dense[a], shape))
        out = self._gather(a if lead == 0 else None, x, shape, flat=ntok == 1)
        return _NO if out is None else out

    # ---- entries ----
    def _entry(self, node: torch.fx.Node) -> bool:
        """An embedding of token-shaped ids ([B, S], or broadcast like position ids [1, S]) becomes
        the embedding of the valid tokens' ids."""
        if op_key(node) != "embedding" or self.rows is None:
            return False
        args = _embedding_args(node)
        if args is None:
            return False
        ids, weight, pad, max_norm, by_freq, sparse = args
        v = tensor_value(ids)
        if v is None or v.dim() != 2 or v.dtype not in _TOKEN_IDS or not isinstance(weight, torch.fx.Node):
            return False
        # max_norm renormalises the rows it looks up (fewer ids, other rows), and scale_grad_by_freq
        # divides by counts that include the padding: both would change the numbers.
        if max_norm is not None or by_freq is not False or sparse is not False:
            return False
        # ids broadcast over the batch (position ids [1, S]) stay clean: their embedding is gathered
        # where a region value reads it, since its own value has no batch dimension to compress.
        if not (same(v.shape[0], self.B) and same(v.shape[1], self.S)):
            return False
        selected = self._gather(ids, self.dense[ids], v.shape, flat=False)
        if selected is None:
            return False
        out = tensor_value(node)
        feat = static_sizes(out.shape[2:]) if out is not None else None
        if feat is None:
            return False
        self.comp[node] = self.g.call_function(F.embedding, (selected, self.dense[weight], pad))
        self.state[node] = Region(False, feat)
        self.entries.append(node.name)
        return True

    # ---- region rules: row-wise ops on compressed values ----
    def _out_region(self, node: torch.fx.Node, flat: bool) -> Region | None:
        v = tensor_value(node)
        if v is None:
            return None
        return self._region_of_shape(v.shape, flat)

    def _region_of_shape(self, shape: Any, flat: bool | None = None) -> Region | None:
        """A logical per-token shape as a region state (grid tried first unless `flat` says)."""
        if flat is not True and len(shape) >= 2 and same(shape[0], self.B) and same(shape[1], self.S):
            feat = static_sizes(shape[2:])
            return None if feat is None else Region(False, feat)
        if flat is not False and len(shape) >= 1 and same(shape[0], self.N):
            feat = static_sizes(shape[1:])
            return None if feat is None else Region(True, feat)
        return None

    def _emit(self, node: torch.fx.Node, args: tuple, kwargs: dict) -> torch.fx.Node:
        return self.g.create_node(node.op, node.target, args, kwargs)

    def _set_region(self, node: torch.fx.Node, comp: torch.fx.Node, st: Region) -> bool:
        self.comp[node], self.state[node] = comp, st
        if op_key(node) not in ("reshape", "flatten", "identity", "getitem", "cast", "size"):
            self.moved[_describe(node)] += 1
        return True

    def _region(self, node: torch.fx.Node, key: str | None) -> bool:
        if key is None:
            return False
        tainted = [a for a in _input_nodes(node) if a in self.state]
        forms = {}
        for a in tainted:
            c = self._compressed(a)
            if c is None:
                return False
            forms[a] = c
        first = forms[tainted[0]][1]
        if key in ("reshape", "flatten"):
            return self._region_layout(node, key, forms)
        if key in ("unary", "cast", "identity", "add", "sub", "mul", "div", "pow", "where", "masked_fill", "dropout"):
            return self._region_elementwise(node, key, forms)
        if key in ("linear", "matmul"):
            x = node.args[0]
            if x not in forms or len(forms) != 1 or not first.feat:
                return False
            out = self._out_region(node, first.flat)
            if out is None or any(isinstance(a, torch.fx.Node) and a in self.state for a in node.args[1:]):
                return False
            if key == "matmul" and (tensor_value(node.args[1]) is None or tensor_value(node.args[1]).dim() > 2):
                return False
            others = [self._dense_form(a) for a in node.args[1:]]
            return self._set_region(node, self._emit(node, (forms[x][0], *others), dict(node.kwargs)), out)
        if key == "addmm":
            bias, x, w = (list(node.args) + [None, None, None])[:3]
            bv = tensor_value(bias)
            if x not in forms or len(forms) != 1 or not first.flat or bv is None or bv.dim() > 1:
                return False
            out = self._out_region(node, True)
            if out is None:
                return False
            return self._set_region(node, self._emit(node, (self.dense[bias], forms[x][0], self.dense[w],
                                                            *node.args[3:]), dict(node.kwargs)), out)
        if key in ("layer_norm", "rms_norm"):
            x = node.args[0]
            shape = dims_arg(node, 1, "normalized_shape")
            shape = [shape] if isinstance(shape, int) else shape
            if x not in forms or len(forms) != 1 or not isinstance(shape, (list, tuple)) or len(shape) > len(first.feat):
                return False
            rest = tuple(self._dense_form(a) for a in node.args[1:])
            kwargs = {k: self._dense_form(v) for k, v in node.kwargs.items()}
            return self._set_region(node, self._emit(node, (forms[x][0], *rest), kwargs), first)
        if key in ("softmax", "log_softmax", "reduce", "split", "chunk", "transpose", "unsqueeze", "squeeze"):
            return self._region_dims(node, key, forms)
        if key == "getitem":
            return self._region_getitem(node, forms)
        if key == "cat":
            return self._region_cat(node, forms)
        if key == "size":
            return self._region_size(node, forms)
        return False

    def _feature_dim(self, d: Any, st: Region) -> int | None:
        """A logical dim of a region value as a dim of its compressed form (None for a token dim)."""
        if not isinstance(d, int) or isinstance(d, bool):
            return None
        d = norm_dim(d, st.rank)
        if d < st.ntok or d >= st.rank:
            return None
        return d - st.ntok + 1

    def _region_layout(self, node: torch.fx.Node, key: str, forms: dict) -> bool:
        x = node.args[0]
        if x not in forms or len(forms) != 1:
            return False
        comp, st = forms[x]
        v = tensor_value(node)
        if v is not None:
            out = self._region_of_shape(v.shape)
        elif key == "flatten":  # the label case's flatten(x, 0, -2), made after dynamo traced
            start, end = dims_arg(node, 1, "start_dim"), dims_arg(node, 2, "end_dim")
            if norm_dim(start or 0, st.rank) != 0 or norm_dim(end if end is not None else -1, st.rank) != st.rank - 2:
                return False
            out = Region(True, st.feat[-1:]) if (st.flat and len(st.feat) == 1) or (not st.flat and len(st.feat) == 1) \
                else None
        else:
            out = None
        if out is None:
            return False
        if out.feat == st.feat:
            return self._set_region(node, comp, out)
        return self._set_region(node, self.g.call_method("reshape", (comp, (self.n, *out.feat))), out)

    def _region_elementwise(self, node: torch.fx.Node, key: str, forms: dict) -> bool:
        states = [st for _, st in forms.values()]
        if any(st.flat != states[0].flat for st in states):
            return False
        v = tensor_value(node)
        out = self._out_region(node, states[0].flat) if v is not None else None
        if out is None or out.rank != states[0].rank or any(st.rank != out.rank for st in states):
            return False
        if key == "dropout" and (dims_arg(node, 3, "inplace") is True):
            return False
        if key == "cast":  # x.to(...), x.type_as(t): other tensors give a dtype or device, read whole
            if node.args[0] not in forms or len(forms) != 1:
                return False
            args = (forms[node.args[0]][0], *(self._dense_form(a) for a in node.args[1:]))
            kwargs = {k: self._dense_form(v_) for k, v_ in node.kwargs.items()}
            return self._set_region(node, self._emit(node, args, kwargs), out)

        def arg(a: Any) -> Any:
            if isinstance(a, torch.fx.Node):
                return forms[a][0] if a in forms else self._clean_operand(a, out.rank, out.ntok)
            return a

        args = tuple(arg(a) for a in node.args)
        kwargs = {k: arg(v_) for k, v_ in node.kwargs.items()}
        if any(a is _NO for a in args) or any(a is _NO for a in kwargs.values()):
            return False
        return self._set_region(node, self._emit(node, args, kwargs), out)

    def _region_dims(self, node: torch.fx.Node, key: str, forms: dict) -> bool:
        x = node.args[0]
        if x not in forms or len(forms) != 1:
            return False
        comp, st = forms[x]
        position, name = {"split": (2, "dim"), "chunk": (2, "dim"), "transpose": (1, "dim0")}.get(key, (1, "dim"))
        dims = dims_arg(node, position, name)
        if key == "reduce" and dims is None:
            return False
        if key == "split" or key == "chunk":
            dims = 0 if dims is None else dims
        listed = as_dim_list(dims) if key != "transpose" else as_dim_list([dims, dims_arg(node, 2, "dim1")])
        if listed is None:
            return False
        if key == "unsqueeze":  # its dim counts in the output's dims
            d = norm_dim(listed[0], st.rank + 1)
            mapped = [d - st.ntok + 1 if st.ntok <= d <= st.rank else None]
        else:
            mapped = [self._feature_dim(d, st) for d in listed]
        if any(m is None for m in mapped):
            return False
        args, kwargs = list(node.args), dict(node.kwargs)

        def put(pos: int, kw: str, val: Any) -> None:
            if len(args) > pos:
                args[pos] = val
            else:
                kwargs[kw] = val

        if key == "transpose":
            put(1, "dim0", mapped[0])
            put(2, "dim1", mapped[1])
        elif isinstance(dims, int):
            put(position, name, mapped[0])
        else:
            put(position, name, type(dims)(mapped))
        args[0] = comp
        emitted = self._emit(node, tuple(args), kwargs)
        v = value(node)
        if key in ("split", "chunk"):
            if not isinstance(v, (list, tuple)):
                return False
            items = tuple(self._region_of_shape(t.shape, st.flat) for t in v)
            if any(i is None for i in items):
                return False
            self.comp[node], self.state[node] = emitted, Several(items)
            return True
        out = self._out_region(node, st.flat)
        if out is None:
            return False
        return self._set_region(node, emitted, out)

    def _element(self, node: torch.fx.Node) -> bool:
        st = self.state[node.args[0]].items[node.args[1]]
        src = node.args[0]
        if isinstance(st, Region):
            return self._set_region(node, self.g.call_function(operator.getitem, (self.comp[src], node.args[1])), st)
        self.dense[node] = self.g.call_function(operator.getitem, (self.dense[src], node.args[1]))
        self.state[node] = st
        return True

    def _region_getitem(self, node: torch.fx.Node, forms: dict) -> bool:
        x, index = node.args[0], node.args[1]
        if x not in forms or len(forms) != 1:
            return False
        comp, st = forms[x]
        items = index if isinstance(index, tuple) else (index,)
        if any(it is None for it in items):
            return False
        dims = index_dims(index, st.rank)
        if dims is None:
            return False
        where, whole = dims
        if where[:st.ntok] != list(range(st.ntok)) or not all(whole[:st.ntok]):
            return False
        expanded = _expand_index(items, st.rank)
        out = self._out_region(node, st.flat)
        if out is None:
            return False
        return self._set_region(node, self.g.call_function(operator.getitem, (comp, (slice(None), *expanded[st.ntok:]))),
                                out)

    def _region_cat(self, node: torch.fx.Node, forms: dict) -> bool:
        tensors = node.args[0]
        dim = dims_arg(node, 1, "dim")
        dim = 0 if dim is None else dim
        if not isinstance(tensors, (list, tuple)) or any(t not in forms for t in tensors):
            return False
        states = [forms[t][1] for t in tensors]
        if any(s.flat != states[0].flat or s.rank != states[0].rank for s in states):
            return False
        mapped = self._feature_dim(dim, states[0])
        out = self._out_region(node, states[0].flat)
        if mapped is None or out is None:
            return False
        return self._set_region(node, self.g.call_function(torch.cat, ([forms[t][0] for t in tensors], mapped)), out)

    def _region_size(self, node: torch.fx.Node, forms: dict) -> bool:
        x = node.args[0]
        d = dims_arg(node, 1, "dim")
        if x not in forms or d is None:
            return False
        st = forms[x][1]
        d = norm_dim(d, st.rank)
        tokens = [self._nn] if st.flat else [self._b, self._s]
        self.dense[node] = tokens[d] if d < st.ntok else st.feat[d - st.ntok]
        return True

    # ---- readers that make a per-token value exact again ----
    def _consumer(self, node: torch.fx.Node, key: str | None) -> bool:
        if key == "cross_entropy":
            a = bound_cross_entropy(node.args, node.kwargs)
            if a is None or a["input"] not in self.state or any(
                    isinstance(a[k], torch.fx.Node) and a[k] in self.state for k in ("target", "weight")):
                return False
            st = self.state[a["input"]]
            tv = tensor_value(a["target"])
            if (not isinstance(st, Region) or not st.flat or len(st.feat) != 1 or tv is None or tv.dim() != 1
                    or not same(tv.shape[0], self.N) or a["reduction"] not in ("mean", "sum")
                    or not isinstance(a["ignore_index"], int) or a["size_average"] is not None
                    or a["reduce"] is not None):
                return False
            labels = self.g.call_function(torch.index_select, (self.dense[a["target"]], 0, self.rows))
            kwargs = {k: self._dense_form(v) for k, v in a.items() if k not in ("input", "target")}
            self.dense[node] = self.g.call_function(F.cross_entropy, (self.comp[a["input"]], labels), kwargs)
            self.losses.append((a["target"], a["ignore_index"]))
            self.moved["cross_entropy"] += 1
            return True
        if key == "index_select":
            x, dim, index = (list(node.args) + [None, None, None])[:3]
            st = self.state.get(x)
            if (not isinstance(st, Region) or not st.flat or dim != 0 or not isinstance(index, torch.fx.Node)
                    or index in self.state or node.kwargs):
                return False
            where = self.g.call_function(torch.index_select, (self._positions(), 0, self.dense[index]))
            self.dense[node] = self.g.call_function(torch.index_select, (self.comp[x], 0, where))
            self.gathers.append(index)
            return True
        return False

    def _output(self, node: torch.fx.Node) -> None:
        def out(a: torch.fx.Node) -> Any:
            st = self.state.get(a)
            if isinstance(st, Several):
                raise Declined(f"{a.name}: a tuple of per-token values is returned")
            if isinstance(st, Region):
                self.restored_outputs.append(a.name)
                return self._restore(a)
            return self.dense[a]

        self.g.output(torch.fx.node.map_arg(node.args[0], out))


class _No:
    def __repr__(self) -> str:
        return "<no form>"


_NO = _No()


def _expand_index(items: tuple, rank: int) -> list:
    consumed = sum(isinstance(it, (int, slice)) for it in items)
    out: list = []
    for it in items:
        if it is Ellipsis:
            out.extend([slice(None)] * (rank - consumed))
        else:
            out.append(it)
    out.extend([slice(None)] * (rank - len(out)))
    return out


def _depends_on(node: torch.fx.Node, root: torch.fx.Node) -> bool:
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n is root:
            return True
        if n in seen:
            continue
        seen.add(n)
        stack.extend(n.all_input_nodes)
    return False


def _describe(node: torch.fx.Node) -> str:
    target = node.target
    return target if isinstance(target, str) else getattr(target, "__name__", str(target))


def plan_embedding_sparsity(gm: torch.fx.GraphModule) -> Plan | None:
    """The rewritten graph and its run-time conditions, or None when the graph has no token embedding.
    Raises Declined (with the reason) when a reader of per-token values is not known to keep padding
    out: the graph is then compiled as it is."""
    primary = _primary_embedding(gm.graph)
    if primary is None:
        return None
    return _Builder(gm, *primary).build()


__all__ = ["Attention", "Declined", "Plan", "plan_embedding_sparsity"]
