"""ONNX models for the benchmarks, each with a torch eager twin that holds the same weights.

Graphs are built by hand with onnx.helper (opset 17, IR version 10): torch.onnx.export needs
onnxscript, which this environment does not have, and a hand-built graph says exactly which ops
the engine is asked to run.

    mlp()                 3 Linear layers 1024-4096-4096-1024 with GELU, batch 64
    transformer_layer()   one BERT-base-like torch.nn.TransformerEncoderLayer, batch 8, seq 128
    light_resnet50()      the onnx package's light ResNet-50; its eager twin is
                          torch_graph_runner.TorchGraphRunner (the same graph, op by op)

Each builder returns a BenchModel: the ModelProto, the feeds (torch tensors), and a callable that
runs the eager twin on those feeds.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 10


@dataclass
class BenchModel:
    name: str
    description: str
    model: onnx.ModelProto
    feeds: dict[str, torch.Tensor]
    eager: Callable[[dict[str, torch.Tensor]], list[torch.Tensor]]
    eager_label: str = "torch eager"
    notes: list[str] = field(default_factory=list)


class _GraphBuilder:
    """Collects nodes and initializers; names every value uniquely."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def _name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def const(self, hint: str, array: np.ndarray) -> str:
        name = self._name(hint)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str | None = None, **attrs) -> str:
        out = self._name(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self._name(op_type), **attrs))
        return out

    def linear(self, x: str, layer: torch.nn.Linear, hint: str) -> str:
        """x @ W^T + b, with W^T stored as a contiguous [in, out] initializer."""
        w = self.const(f"{hint}.weight_t", layer.weight.detach().t().contiguous().numpy())
        y = self.op("MatMul", [x, w], f"{hint}.matmul")
        if layer.bias is None:
            return y
        b = self.const(f"{hint}.bias", layer.bias.detach().numpy())
        return self.op("Add", [y, b], f"{hint}.out")

    def gelu(self, x: str) -> str:
        """Exact (erf) GELU, 0.5 * x * (1 + erf(x / sqrt(2))): opset 17 has no Gelu op."""
        inv_sqrt2 = self.const("inv_sqrt2", np.array(1.0 / math.sqrt(2.0), dtype=np.float32))
        one = self.const("one", np.array(1.0, dtype=np.float32))
        half = self.const("half", np.array(0.5, dtype=np.float32))
        e = self.op("Erf", [self.op("Mul", [x, inv_sqrt2])])
        return self.op("Mul", [self.op("Mul", [x, half]), self.op("Add", [e, one])], "gelu")

    def model(self, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tob-bench")
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model)
        return model


def _rename_output(builder: _GraphBuilder, value: str, name: str) -> None:
    """Makes the last node that produced `value` write `name` instead (for a readable output)."""
    for node in reversed(builder.nodes):
        if value in node.output:
            node.output[list(node.output).index(value)] = name
            return
    raise KeyError(value)


# ---------------------------------------------------------------- (a) MLP

def mlp(batch: int = 64, sizes: tuple[int, ...] = (1024, 4096, 4096, 1024), seed: int = 0) -> BenchModel:
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(torch.nn.GELU())
    module = torch.nn.Sequential(*layers).eval()

    b = _GraphBuilder()
    x = "x"
    for layer in module:
        x = b.linear(x, layer, "fc") if isinstance(layer, torch.nn.Linear) else b.gelu(x)
    _rename_output(b, x, "y")
    model = b.model(
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, sizes[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, sizes[-1]])],
    )
    feeds = {"x": torch.randn(batch, sizes[0])}
    shape = "-".join(str(s) for s in sizes)
    return BenchModel("mlp", f"MLP {shape}, GELU, batch {batch}", model, feeds, lambda f: [module(f["x"])])


# ---------------------------------------------------------------- (b) transformer encoder layer

def transformer_layer(
    batch: int = 8, seq: int = 128, d_model: int = 768, heads: int = 12, ffn: int = 3072, seed: int = 0
) -> BenchModel:
    """One post-LN encoder layer (BERT-base shapes), GELU, dropout 0, batch_first."""
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(
        d_model, heads, ffn, dropout=0.0, activation="gelu", batch_first=True, norm_first=False
    ).eval()
    head_dim = d_model // heads
    attn = layer.self_attn
    w_q, w_k, w_v = attn.in_proj_weight.detach().chunk(3)
    b_q, b_k, b_v = attn.in_proj_bias.detach().chunk(3)

    b = _GraphBuilder()

    def proj(x: str, w: torch.Tensor, bias: torch.Tensor, hint: str) -> str:
        lin = torch.nn.Linear(d_model, d_model)
        lin.weight.data, lin.bias.data = w.clone(), bias.clone()
        return b.linear(x, lin, hint)

    split_heads = b.const("split_heads_shape", np.array([0, 0, heads, head_dim], dtype=np.int64))
    merge_heads = b.const("merge_heads_shape", np.array([0, 0, d_model], dtype=np.int64))
    q = b.op("Transpose", [b.op("Reshape", [proj("x", w_q, b_q, "q"), split_heads])], perm=[0, 2, 1, 3])
    k = b.op("Transpose", [b.op("Reshape", [proj("x", w_k, b_k, "k"), split_heads])], perm=[0, 2, 3, 1])
    v = b.op("Transpose", [b.op("Reshape", [proj("x", w_v, b_v, "v"), split_heads])], perm=[0, 2, 1, 3])
    scale = b.const("attn_scale", np.array(1.0 / math.sqrt(head_dim), dtype=np.float32))
    scores = b.op("Mul", [b.op("MatMul", [q, k], "scores"), scale])
    probs = b.op("Softmax", [scores], "probs", axis=-1)
    ctx = b.op("Transpose", [b.op("MatMul", [probs, v], "context")], perm=[0, 2, 1, 3])
    ctx = b.op("Reshape", [ctx, merge_heads])
    attn_out = b.linear(ctx, attn.out_proj, "attn_out")

    def layer_norm(x: str, norm: torch.nn.LayerNorm, hint: str) -> str:
        gamma = b.const(f"{hint}.weight", norm.weight.detach().numpy())
        beta = b.const(f"{hint}.bias", norm.bias.detach().numpy())
        return b.op("LayerNormalization", [x, gamma, beta], hint, axis=-1, epsilon=norm.eps)

    h = layer_norm(b.op("Add", ["x", attn_out], "residual1"), layer.norm1, "norm1")
    f = b.linear(b.gelu(b.linear(h, layer.linear1, "ffn1")), layer.linear2, "ffn2")
    y = layer_norm(b.op("Add", [h, f], "residual2"), layer.norm2, "norm2")
    _rename_output(b, y, "y")
    model = b.model(
        "transformer_encoder_layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, d_model])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, d_model])],
    )
    feeds = {"x": torch.randn(batch, seq, d_model)}
    return BenchModel(
        "transformer",
        f"encoder layer d{d_model} h{heads} ffn{ffn}, batch {batch}, seq {seq}",
        model,
        feeds,
        lambda fd: [layer(fd["x"])],
        eager_label="torch eager (nn.TransformerEncoderLayer)",
    )


# ---------------------------------------------------------------- (c) light ResNet-50

def light_resnet50_path() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_resnet50.onnx")


def light_resnet50(random_weights: bool = False, seed: int = 0) -> BenchModel:
    """The onnx package's light ResNet-50 (opset 9, input gpu_0/data_0 1x3x224x224).

    As shipped, every weight is ConstantOfShape(0.02), so all 1000 outputs are 0.001 and an output
    comparison proves little. ``random_weights=True`` replaces each ConstantOfShape with a random
    initializer of the same shape (He-scaled convolutions, unit-variance batch norms): the same
    compute graph, with an output that a wrong kernel would change.
    """
    from torch_graph_runner import TorchGraphRunner

    model = onnx.load(light_resnet50_path())
    notes = []
    if random_weights:
        model = _materialize_random_weights(model, seed)
        notes.append("random weights in place of ConstantOfShape(0.02)")
    runner = TorchGraphRunner(model)
    torch.manual_seed(seed)
    feeds = {"gpu_0/data_0": torch.rand(1, 3, 224, 224)}
    name = "resnet50_light" + ("_rand" if random_weights else "")
    return BenchModel(
        name,
        "onnx light ResNet-50, 1x3x224x224" + (" (random weights)" if random_weights else ""),
        model,
        feeds,
        runner,
        eager_label="torch eager (torch_graph_runner)",
        notes=notes,
    )


def _materialize_random_weights(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    graph = model.graph
    shapes = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    kept_nodes, new_inits = [], {}
    for node in graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in shapes:
            kept_nodes.append(node)
            continue
        shape = tuple(int(d) for d in shapes[node.input[0]])
        new_inits[node.output[0]] = _random_weight(node.output[0], shape, rng)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(kept_nodes)
    used = {i for n in kept_nodes for i in n.input}
    inits = [t for t in graph.initializer if t.name in used]
    inits += [numpy_helper.from_array(a, name) for name, a in new_inits.items()]
    del out.graph.initializer[:]
    out.graph.initializer.extend(inits)
    # IR 3 lists every initializer as a graph input too; IR 4 lets weights be initializers only.
    out.ir_version = max(out.ir_version, 4)
    inputs = [i for i in graph.input if i.name not in shapes]
    del out.graph.input[:]
    out.graph.input.extend(inputs)
    onnx.checker.check_model(out)
    return out


def _random_weight(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if len(shape) == 4:  # conv weight [out, in, kh, kw]
        fan_in = shape[1] * shape[2] * shape[3]
        return (rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)).astype(np.float32)
    if len(shape) == 2:  # fc weight
        return (rng.standard_normal(shape) / math.sqrt(shape[1])).astype(np.float32)
    if name.endswith("_riv_0"):  # batch-norm running variance
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    if name.endswith("_s_0"):  # batch-norm scale
        return rng.uniform(0.5, 1.0, shape).astype(np.float32)
    return (rng.standard_normal(shape) * 0.1).astype(np.float32)  # biases, running means


def all_models(quick: bool = False) -> list[Callable[[], BenchModel]]:
    """Builders in benchmark order; ``quick`` shrinks the MLP and transformer for a smoke run."""
    if quick:
        return [
            lambda: mlp(batch=16, sizes=(256, 1024, 1024, 256)),
            lambda: transformer_layer(batch=2, seq=64),
            lambda: light_resnet50(random_weights=True),
        ]
    return [mlp, transformer_layer, lambda: light_resnet50(random_weights=True)]
