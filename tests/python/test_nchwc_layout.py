"""The NchwcLayout pass end to end (docs/architecture.md "The blocked layout (NCHWc)"): onnx's light
ResNet-50 with random weights runs with its 3-channel stem as an ai.tob NchwcConvNchwInput (NCHW
image in, blocked out), the stem's MaxPool as an NchwcMaxPool and every other conv as an NchwcConv
on activations blocked by 16 channels, no reorder in and one out, and its logits match
onnxruntime's within float32 tolerance; TOB_NCHWC=0 (read when a session is created) leaves the
convs alone."""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest
import torch

import torch_ort_backend as tob

ort = pytest.importorskip("onnxruntime")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import onnx_models  # noqa: E402

LOGITS = "r174"  # the Gemm's output, before the Softmax (a peaked softmax would hide errors)


@pytest.fixture(scope="module")
def resnet50():
    model = onnx_models._materialize_random_weights(onnx.load(onnx_models.light_resnet50_path()), seed=3)
    assert any(n.output[0] == LOGITS and n.op_type in ("Gemm", "FC") for n in model.graph.node)
    model.graph.output.append(onnx.helper.make_tensor_value_info(LOGITS, onnx.TensorProto.FLOAT, [1, 1000]))
    x = np.random.default_rng(7).uniform(0.0, 1.0, (1, 3, 224, 224)).astype(np.float32)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    theirs = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    expected = theirs.run([LOGITS], {"gpu_0/data_0": x})[0]
    return model, x, expected


def _run(model, x, tmp_path, name):
    opts = tob.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.optimized_model_filepath = str(tmp_path / f"{name}.onnx")
    sess = tob.InferenceSession(model.SerializeToString(), opts)
    outs = sess.run(None, {"gpu_0/data_0": torch.from_numpy(x)})
    ops = [n.op_type for n in onnx.load(opts.optimized_model_filepath).graph.node]
    return np.asarray(outs[1]), ops


def _blocked_tile_available() -> bool:
    # The pass runs only where the CPU has AVX-512 (providers/cpu/nn/conv_nchwc.h).
    with open("/proc/cpuinfo") as f:
        return "avx512f" in f.read()


@pytest.mark.skipif(not _blocked_tile_available(), reason="the NchwcLayout pass needs AVX-512F")
def test_resnet50_blocked_matches_onnxruntime(resnet50, tmp_path, monkeypatch):
    model, x, expected = resnet50
    monkeypatch.delenv("TOB_NCHWC", raising=False)
    logits, ops = _run(model, x, tmp_path, "on")
    assert ops.count("NchwcConv") == 52, ops
    assert ops.count("NchwcConvNchwInput") == 1, ops  # the stem (3 input channels) reads the image
    assert ops.count("NchwcMaxPool") == 1, ops
    assert ops.count("Conv") + ops.count("FusedConv") + ops.count("MaxPool") == 0, ops
    # Nothing enters the layout by a reorder; one leaves before the final AveragePool.
    assert ops.count("ReorderToNchwc") == 0 and ops.count("ReorderFromNchwc") == 1, ops
    assert np.abs(expected).max() > 1.0  # logits that a wrong kernel would change
    np.testing.assert_allclose(logits, expected, rtol=1e-3, atol=1e-3 * np.abs(expected).max())


def test_resnet50_switch_off_keeps_nchw(resnet50, tmp_path, monkeypatch):
    model, x, expected = resnet50
    monkeypatch.setenv("TOB_NCHWC", "0")
    logits, ops = _run(model, x, tmp_path, "off")
    assert not {"NchwcConv", "NchwcConvNchwInput", "NchwcMaxPool", "ReorderToNchwc"} & set(ops), ops
    np.testing.assert_allclose(logits, expected, rtol=1e-3, atol=1e-3 * np.abs(expected).max())
