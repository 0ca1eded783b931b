"""One family vocabulary (docs/architecture.md, "Adding an operator"): every kernel the engine
registers, the torch provider's included, names its family, and the exporter's converter modules
are named by those families, so the file of each piece of an op follows from its family."""

import pkgutil

import torch_ort_backend.exporter as exporter
from torch_ort_backend._engine import C

FAMILIES = {"elementwise", "tensor", "nn", "reduction", "signal", "runtime", "controlflow", "generator", "aten", "python",
            "training", "string", "sequence", "ml"}


def test_every_kernel_names_a_known_family():
    kernels = C.registered_kernels()
    unknown = {(k["domain"], k["op_type"], k["family"]) for k in kernels if k["family"] not in FAMILIES}
    assert not unknown
    by_op = {(k["domain"], k["op_type"]): k["family"] for k in kernels}
    # Spot checks of ops whose family once differed between the exporter and the engine.
    assert by_op[("", "CumSum")] == "reduction"
    assert by_op[("", "Trilu")] == "generator"
    assert by_op[(C.MICROSOFT_DOMAIN, "ATen")] == "aten"
    assert by_op[(C.MICROSOFT_DOMAIN, "PythonOp")] == "python"
    assert by_op[(C.MICROSOFT_DOMAIN, "SoftmaxGrad_13")] == "training"
    assert by_op[("", "DFT")] == "signal"
    assert by_op[("ai.onnx.ml", "LabelEncoder")] == "string"
    assert by_op[("", "SequenceAt")] == "sequence"
    assert by_op[("", "ReverseSequence")] == "tensor"
    assert by_op[("ai.onnx.ml", "TreeEnsemble")] == "ml"
    assert by_op[("ai.onnx.preview.training", "Adam")] == "training"


def test_converter_modules_are_named_by_family():
    modules = [m.name for m in pkgutil.iter_modules(exporter.__path__) if m.name.startswith("ops_")]
    # ops_symbolic holds the SymInt arithmetic of dynamic shapes, which no engine family owns.
    families = {name[len("ops_"):].split("_")[0] for name in modules if name != "ops_symbolic"}
    assert families <= FAMILIES, families - FAMILIES
    assert {"elementwise", "tensor", "nn", "reduction", "generator", "python", "training"} <= families
