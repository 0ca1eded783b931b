"""The failure classes of the compile path. Each is one flag of the fallback policy
(torch_ort_backend.fallback): a failure of that class runs the graph in eager PyTorch instead of
failing, when the policy says so. Aliases give onnxruntime-training's names."""


class FallbackError(RuntimeError):
    """Base class: a failure the fallback policy may turn into running the graph in eager PyTorch."""

    flag_name = ""


class UnsupportedDeviceError(FallbackError):
    """Tensors on a device the engine has no provider for."""

    flag_name = "FALLBACK_UNSUPPORTED_DEVICE"


class UnsupportedDataError(FallbackError):
    """Inputs or outputs the engine cannot carry (dtype, layout, Python object)."""

    flag_name = "FALLBACK_UNSUPPORTED_DATA"


class UnsupportedTorchModelError(FallbackError):
    """The model or its FX graph cannot be exported (an op, an argument, a module kind)."""

    flag_name = "FALLBACK_UNSUPPORTED_TORCH_MODEL"


class UnsupportedOnnxModelError(FallbackError):
    """The engine rejected or failed to run the exported ONNX model."""

    flag_name = "FALLBACK_UNSUPPORTED_ONNX_MODEL"


class BadInitializationError(FallbackError):
    """The backend could not start (the engine would not load, an option was unusable)."""

    flag_name = "FALLBACK_BAD_INITIALIZATION"


# onnxruntime-training's names for the same classes.
ORTModuleFallbackException = FallbackError
ORTModuleDeviceException = UnsupportedDeviceError
ORTModuleIOError = UnsupportedDataError
ORTModuleTorchModelException = UnsupportedTorchModelError
ORTModuleONNXModelException = UnsupportedOnnxModelError
ORTModuleInitException = BadInitializationError
