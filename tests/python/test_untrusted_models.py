"""What a model file from elsewhere can and cannot make this process do (docs/security.md).

Each refusal is shown on a crafted file that would do harm if it ran, with an assertion on the side
effect (a file opened, a custom operator or a Function called) and a positive control: the same file
with the explicit opt-in does it, so the refusal is what stopped it. Also: graphs of our own exporter
keep every operator they need (the internal path opts in), the allow-list's explicit entries name real
torch operators, and onnx's external-data loader stays inside the model's directory.
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import sys

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper

import torch_ort_backend as tob
from aten_model_builder import ModelBuilder, randn
from ortmodule_helpers import assert_engine_ran, fresh_state
from python_op_harness import compile_ort, python_op_nodes
from torch_ort_backend import onnx_backend
from torch_ort_backend._engine import C
from torch_ort_backend.autograd_function import qualified_name, register_function as registered_name

pytestmark = pytest.mark.skipif(not getattr(C, "built_with_torch", False), reason="built without the torch provider")

aten = torch.ops.aten
MS_OPSETS = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]


@pytest.fixture
def strict(monkeypatch):
    yield from fresh_state(monkeypatch)


def unsafe_options() -> tob.SessionOptions:
    options = tob.SessionOptions()
    options.allow_unsafe_aten_ops = True
    return options


class FileWatch:
    """inotify on one file: did anything open or read it (atime is unreliable under relatime)?"""

    IN_ACCESS, IN_OPEN = 0x1, 0x20

    def __init__(self, path: str) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK)
        if self.fd < 0 or libc.inotify_add_watch(self.fd, path.encode(), self.IN_ACCESS | self.IN_OPEN) < 0:
            pytest.skip(f"inotify unavailable: errno {ctypes.get_errno()}")

    def touched(self) -> bool:
        try:
            return len(os.read(self.fd, 4096)) > 0
        except BlockingIOError:
            return False

    def close(self) -> None:
        os.close(self.fd)


# ---- ATen nodes ----

def from_file_model(path: str, numel: int) -> ModelBuilder:
    b = ModelBuilder()
    b.aten(aten.from_file.default, (path,), {"shared": False, "size": numel, "dtype": torch.float32},
           outputs=["content"])
    return b


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify (the proof that nothing was read) is Linux's")
def test_file_reading_op_is_refused_and_the_file_is_never_opened(tmp_path):
    secret = randn(8, seed=1)
    path = tmp_path / "secret.bin"
    path.write_bytes(secret.numpy().tobytes())
    b = from_file_model(str(path), 8)
    model = b.model({"content": secret})
    watch = FileWatch(str(path))
    try:
        for load in (lambda: tob.InferenceSession(model), lambda: onnx_backend.prepare(model),
                     lambda: tob.InferenceSession(model.SerializeToString())):
            with pytest.raises(tob.OpNotAllowedError,
                               match=r"aten::from_file.*it reads a file.*allow_unsafe_aten_ops") as info:
                load()
            assert isinstance(info.value, PermissionError)
        assert not watch.touched(), "the refused model opened the file"
        # Positive control: with the opt-in the same file does read it.
        (content,) = tob.InferenceSession(model, unsafe_options()).run(None, {})
        assert watch.touched()
        np.testing.assert_array_equal(content, secret.numpy())
    finally:
        watch.close()


CUSTOM_CALLS: list[torch.Tensor] = []
_LIB = torch.library.Library("tob_untrusted_test", "FRAGMENT")
_LIB.define("record(Tensor x) -> Tensor")
_LIB.impl("record", lambda x: CUSTOM_CALLS.append(x.clone()) or x * 2, "CPU")


def custom_op_model() -> onnx.ModelProto:
    node = helper.make_node("ATen", ["x"], ["y"], domain="com.microsoft", name="custom",
                            operator="tob_untrusted_test::record")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    return helper.make_model(graph, opset_imports=MS_OPSETS)


def test_custom_namespace_op_is_refused_and_never_called():
    CUSTOM_CALLS.clear()
    model = custom_op_model()
    with pytest.raises(tob.OpNotAllowedError,
                       match=r"node 'custom' calls torch operator tob_untrusted_test::record.*'tob_untrusted_test' "
                             r"namespace, not 'aten'.*allow_unsafe_aten_ops"):
        tob.InferenceSession(model)
    assert CUSTOM_CALLS == []
    x = randn(3, seed=2)
    (y,) = tob.InferenceSession(model, unsafe_options()).run(None, {"x": x})  # positive control
    assert len(CUSTOM_CALLS) == 1
    torch.testing.assert_close(y, x * 2)


def test_subgraphs_are_no_escape_hatch():
    """The custom-namespace operator above, hidden in a Loop body inside an If branch: the session's
    allow-list holds there too (the nested sessions build their kernels with the session's options),
    so it is refused when the session is created, naming the node, and never called; with the
    opt-in it runs, once per iteration of the branch taken."""
    CUSTOM_CALLS.clear()
    f = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("ATen", ["v_in"], ["v_out"], domain="com.microsoft", name="hidden",
                          operator="tob_untrusted_test::record"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("v_in", f, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", f, [3])])
    trips = helper.make_tensor("trips", TensorProto.INT64, [], [2])
    then_branch = helper.make_graph([helper.make_node("Loop", ["trips", "", "x"], ["looped"], body=body)],
                                    "then_branch", [], [helper.make_tensor_value_info("looped", f, [3])],
                                    initializer=[trips])
    else_branch = helper.make_graph([helper.make_node("Neg", ["x"], ["negated"])], "else_branch", [],
                                    [helper.make_tensor_value_info("negated", f, [3])])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", f, [3])],
        [helper.make_tensor_value_info("y", f, [3])])
    model = helper.make_model(graph, opset_imports=MS_OPSETS)
    for load in (lambda: tob.InferenceSession(model), lambda: onnx_backend.prepare(model)):
        with pytest.raises(tob.OpNotAllowedError,
                           match=r"node 'hidden' calls torch operator tob_untrusted_test::record.*allow_unsafe_aten_ops"):
            load()
    assert CUSTOM_CALLS == []
    x = randn(3, seed=3)
    sess = tob.InferenceSession(model, unsafe_options())  # positive control
    (y,) = sess.run(None, {"c": torch.tensor(True), "x": x})
    assert len(CUSTOM_CALLS) == 2
    torch.testing.assert_close(y, x * 4)


@pytest.mark.parametrize("op, why", [
    ("empty", "uninitialised memory"),
    ("max_pool2d_with_indices_backward", "'indices'"),
    ("native_layer_norm_backward", "'mean' / 'rstd'"),
    ("_copy_from", "writes into its argument 'dst'"),
    ("save_this_op_does_not_exist_but_print", None),
])
def test_refusals_name_the_operator_and_why(op, why):
    if why is None:  # an operator torch does not have: unknown, in every session
        assert C.aten_op_refusal(f"aten::{op}") == "torch has no such operator"
        return
    assert why in C.aten_op_refusal(f"aten::{op}")


def test_allow_list_rule_reads_torchs_tags():
    assert C.aten_op_refusal("aten::add", "Tensor") == ""  # core, pointwise
    assert C.aten_op_refusal("aten::logsumexp") == ""  # reduction
    assert C.aten_op_refusal("aten::native_dropout") == ""  # nondeterministic_seeded (torch's generator)
    assert C.aten_op_refusal("aten::convolution_backward") == ""  # core
    assert C.aten_op_refusal("aten::index_add") == ""  # explicit entry
    untagged = C.aten_op_refusal("aten::_print")
    assert "does not tag it as a tensor computation" in untagged, untagged
    assert "'prims' namespace" in C.aten_op_refusal("prims::iota")


def test_explicit_entries_name_torch_operators():
    names = [name for name, _, _ in C.aten_policy_entries()]
    assert len(names) == len(set(names)), "an operator is listed twice"
    for name, allowed, reason in C.aten_policy_entries():
        assert name.startswith("aten::") and reason
        assert torch._C._dispatch_has_kernel(name) or hasattr(aten, name[len("aten::"):]), name


# The operators the test suite's compiled graphs emit as ATen nodes (recorded on 2026-05 by wrapping
# encode_aten_call while running test_compile_models, test_ortmodule*, test_exporter_ops, test_demo,
# test_hf_trainer, test_python_op*, test_backend_* and test_fp16_optimizer): a loaded copy of such a graph
# runs by default unless the operator is refused for a reason the message gives.
EXPORTER_ATEN_OPS = {
    "_scaled_dot_product_flash_attention_for_cpu": True,
    "_scaled_dot_product_flash_attention_for_cpu_backward": False,  # logsumexp unchecked
    "avg_pool2d_backward": True,
    "convolution_backward": True,
    "index.Tensor": True,
    "index_add": True,
    "index_put": True,
    "scatter_add": True,
    "slice_backward": True,
    "_transformer_encoder_layer_fwd": False,  # a fused layer of many inputs, on neither list
}


@pytest.mark.parametrize("op, allowed", sorted(EXPORTER_ATEN_OPS.items()))
def test_exporter_ops_in_loaded_models(op, allowed):
    name, _, overload = op.partition(".")
    why = C.aten_op_refusal(f"aten::{name}", overload)
    assert (why == "") == allowed, why


def pooling_block(x):
    return F.adaptive_max_pool2d(x, 3).square().sum()


def test_our_own_graphs_keep_every_op_and_a_loaded_copy_is_refused(strict, tmp_path):
    """Adaptive max pooling's backward is an ATen node (adaptive_max_pool2d_backward: torch does not
    check its indices) that loaded models may not call; the backend's own graph runs it, and the
    same graph saved and loaded is refused until the user opts in. (Attention's backward, the
    earlier example, now runs as the engine's FlashAttentionGrad.)"""
    x = randn(2, 3, 8, 7, seed=3).requires_grad_()
    compiled = compile_ort(pooling_block, save_onnx=True, onnx_prefix="pool", save_path=str(tmp_path))
    loss = compiled(x)
    loss.backward()
    assert_engine_ran(2)
    assert tob.compile_stats().aten_fallback_ops["aten.adaptive_max_pool2d_backward.default"]
    ref_input = x.detach().double().requires_grad_()
    ref = pooling_block(ref_input)
    ref.backward()
    torch.testing.assert_close(loss.double(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad.double(), ref_input.grad, rtol=1e-5, atol=1e-6)
    (saved,) = tmp_path.glob("pool_backward_*_exported.onnx")
    with pytest.raises(tob.OpNotAllowedError, match=r"adaptive_max_pool2d_backward"):
        tob.InferenceSession(str(saved))
    tob.InferenceSession(str(saved), unsafe_options())


# ---- PythonOp nodes ----

class Recorder(torch.autograd.Function):
    """Counts its calls: a crafted node that reaches it would show."""

    forward_calls = 0
    backward_calls = 0

    @staticmethod
    def forward(ctx, x):
        Recorder.forward_calls += 1
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        Recorder.backward_calls += 1
        return grad * 3


def python_op_model(func_name: str, grad_context: bool = False) -> onnx.ModelProto:
    if grad_context:
        node = helper.make_node("PythonOpGrad", ["ctx", "x"], ["dx"], domain="com.microsoft", name="crafted",
                                func_name=func_name, input_requires_grads=[1])
        inputs = [helper.make_tensor_value_info("ctx", TensorProto.INT64, []),
                  helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])]
        outputs = [helper.make_tensor_value_info("dx", TensorProto.FLOAT, [4])]
    else:
        node = helper.make_node("PythonOp", ["x"], ["ctx", "y"], domain="com.microsoft", name="crafted",
                                func_name=func_name, input_convention="d", constant_args="[]")
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])]
        outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])]
    return helper.make_model(helper.make_graph([node], "g", inputs, outputs), opset_imports=MS_OPSETS)


def test_python_op_with_guessed_names_and_contexts_calls_nothing(strict):
    # This process compiles Recorder, so it is registered here, under a name of its own.
    # (Compiling also runs the forward to learn its outputs: calls are counted after it.)
    x = randn(4, seed=6).requires_grad_()
    compiled = compile_ort(lambda t: Recorder.apply(t).sum())
    compiled(x).backward()
    assert_engine_ran(2)
    assert python_op_nodes() == {("PythonOp", qualified_name(Recorder)): 1, ("PythonOpGrad", qualified_name(Recorder)): 1}
    private = registered_name(Recorder)  # the private name it already has (registration is idempotent)
    torch.testing.assert_close(x.grad, torch.full((4,), 3.0))
    forward_before, backward_before = Recorder.forward_calls, Recorder.backward_calls
    alive = compiled(randn(4, seed=7).requires_grad_())  # a live forward ctx while this output lives
    assert Recorder.forward_calls == forward_before + 1, "the engine did not run the PythonOp"
    forward_before += 1

    public = qualified_name(Recorder)
    guesses = [public, f"{public}#2", f"{public}@{'0' * 32}", f"{public}@{secrets.token_hex(16)}",
               private.split("@")[0] + "@", "os.system", "builtins.eval"]
    feeds = {"x": np.ones(4, np.float32)}
    for name in guesses:
        with pytest.raises(tob.KernelError, match=r"node 'crafted'.*not registered in this process"):
            tob.InferenceSession(python_op_model(name)).run(None, feeds)
    # PythonOpGrad with guessed ctx ids (ids are 63 random bits; these were the old sequential ones).
    for ctx_id in [*range(0, 64), 2**62 + 1]:
        with pytest.raises(tob.KernelError, match=r"node 'crafted'"):
            tob.InferenceSession(python_op_model(public, grad_context=True)).run(
                None, {"ctx": np.array(ctx_id, np.int64), "x": np.ones(4, np.float32)})
    assert (Recorder.forward_calls, Recorder.backward_calls) == (forward_before, backward_before), \
        "a crafted node called Recorder"
    del alive

    # Positive control: registered for loaded models, the same crafted forward runs it.
    assert tob.register_autograd_function(Recorder) == public
    (y,) = tob.InferenceSession(python_op_model(public)).run(None, feeds)
    assert Recorder.forward_calls == forward_before + 1
    np.testing.assert_allclose(y, np.full(4, 3.0, np.float32))


def test_python_op_constants_cannot_name_objects_or_imports():
    name = tob.register_autograd_function(Recorder)
    calls = Recorder.forward_calls
    for constants in ([{"object": 1}], [{"object": secrets.token_hex(16)}], [{"import": "os.system"}],
                      [{"dtype": "save"}]):
        model = python_op_model(name)
        for a in model.graph.node[0].attribute:
            if a.name == "constant_args":
                a.s = json.dumps(constants).encode()
            if a.name == "input_convention":
                a.s = b"dc"
        with pytest.raises(tob.KernelError, match=r"node 'crafted'"):
            tob.InferenceSession(model).run(None, {"x": np.ones(4, np.float32)})
    assert Recorder.forward_calls == calls


# ---- files next to the model ----

def test_external_data_stays_inside_the_model_directory(tmp_path):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(4, dtype=np.float32).tobytes())
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "link.bin").symlink_to(secret)
    for location in ("../secret.bin", str(secret), "link.bin"):
        t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], data_location=TensorProto.EXTERNAL)
        t.external_data.add(key="location", value=location)
        graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [t])
        path = model_dir / "model.onnx"
        path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
        with pytest.raises(tob.InvalidModelError, match="(outside the directory|absolute path|symbolic link)"):
            tob.InferenceSession(str(path))
