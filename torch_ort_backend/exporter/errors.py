"""Export errors (the classes live in torch_ort_backend.errors, shared with the fallback policy)."""

from ..errors import UnsupportedDataError, UnsupportedTorchModelError

ExportError = UnsupportedTorchModelError

__all__ = ["ExportError", "UnsupportedDataError", "UnsupportedTorchModelError"]
