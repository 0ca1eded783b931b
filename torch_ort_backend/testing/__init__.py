"""Test utilities shipped with the package: the ONNX conformance selection (conformance.py) and
the models the tests, benchmarks and examples share (models.py, transformer_lm.py)."""
