"""onnx.backend.base.Backend over the engine, so the onnx package's backend test suite (and any
tool that speaks that interface) runs models on it."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from ._engine import C
from .session import InferenceSession, SessionOptions


class EngineRep(BackendRep):
    def __init__(self, session: InferenceSession) -> None:
        self._session = session
        self._input_names = [i.name for i in session.get_inputs()]

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        if isinstance(inputs, dict):
            feed = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            if len(inputs) > len(self._input_names):
                raise ValueError(
                    f"got {len(inputs)} inputs but the model takes {len(self._input_names)}: {self._input_names}"
                )
            feed = dict(zip(self._input_names, inputs))
        return tuple(self._session.run(None, feed))


class EngineBackend(Backend):
    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper().startswith("CPU") or (device.upper().startswith("CUDA") and C.built_with_cuda)

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> EngineRep:
        super().prepare(model, device, **kwargs)
        options = SessionOptions()
        for key, value in kwargs.items():
            setattr(options, key, value)
        return EngineRep(InferenceSession(model, options))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple] | None = None, **kwargs: Any) -> tuple:
        raise NotImplementedError("run_node is not supported: the engine runs whole models")


backend = EngineBackend
prepare = EngineBackend.prepare
run_model = EngineBackend.run_model
supports_device = EngineBackend.supports_device
