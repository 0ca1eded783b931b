"""Test utilities shipped with the package (ONNX conformance selection)."""
