"""Running scripts written for onnxruntime-training unchanged.

``python -m torch_ort_backend.compat script.py [args]`` runs `script.py` with the module names of
onnxruntime-training (and of the torch-ort package) resolved to ours, for that process only: an
import hook maps each name below to our module; the installed onnxruntime package, if any, is never
modified, and names outside the table (``onnxruntime.InferenceSession``) stay onnxruntime's own.
Where onnxruntime is not installed at all, ``onnxruntime`` itself resolves to our engine's
InferenceSession API.

    from torch_ort_backend import compat
    with compat.onnxruntime_training_names():
        import onnxruntime.training.optim as optim   # torch_ort_backend.optim
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import sys
from typing import Iterator

# onnxruntime-training's module name -> ours.
ALIASES: dict[str, str] = {
    "onnxruntime.training": "torch_ort_backend.compat.training",
    "onnxruntime.training.optim": "torch_ort_backend.optim",
    "onnxruntime.training.optim.lr_scheduler": "torch_ort_backend.optim.lr_scheduler",
    "onnxruntime.training.optim.config": "torch_ort_backend.optim.config",
    "onnxruntime.training.optim.fp16_optimizer": "torch_ort_backend.optim.fp16_optimizer",
    "onnxruntime.training.optim.fused_adam": "torch_ort_backend.optim.fused_adam",
    "onnxruntime.training.amp": "torch_ort_backend.amp",
    "onnxruntime.training.amp.loss_scaler": "torch_ort_backend.amp.loss_scaler",
    "onnxruntime.training.ortmodule": "torch_ort_backend.ortmodule",
    "onnxruntime.training.orttrainer": "torch_ort_backend.trainer.trainer",
    "onnxruntime.training.orttrainer_options": "torch_ort_backend.trainer.options",
    "onnxruntime.capi.ort_trainer": "torch_ort_backend.capi.ort_trainer",
    "torch_ort": "torch_ort_backend.compat.training",
}
# Served only where the real package cannot be imported (onnxruntime not installed).
FALLBACK_ALIASES: dict[str, str] = {
    "onnxruntime": "torch_ort_backend",
    "onnxruntime.capi": "torch_ort_backend.capi",
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec):  # the default: a fresh module, replaced in exec_module
        return None

    def exec_module(self, module) -> None:
        # importlib returns whatever sys.modules holds under the name after exec_module: our module
        # itself, so `onnxruntime.training.optim is torch_ort_backend.optim`.
        sys.modules[module.__name__] = importlib.import_module(self.target)


class AliasFinder(importlib.abc.MetaPathFinder):
    def __init__(self, aliases: dict[str, str], fallbacks: dict[str, str]) -> None:
        self.aliases = aliases
        self.fallbacks = fallbacks
        self._probing: set[str] = set()

    def find_spec(self, fullname: str, path=None, target=None):
        alias = self.aliases.get(fullname)
        if alias is None and fullname in self.fallbacks and fullname not in self._probing:
            if not self._real_exists(fullname):
                alias = self.fallbacks[fullname]
        if alias is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(alias), is_package=True)

    def _real_exists(self, fullname: str) -> bool:
        self._probing.add(fullname)
        try:
            return importlib.util.find_spec(fullname) is not None
        except (ImportError, ValueError):
            return False
        finally:
            self._probing.discard(fullname)


def install() -> AliasFinder:
    """Installs the import hook (first on sys.meta_path); returns it for uninstall()."""
    finder = AliasFinder(ALIASES, FALLBACK_ALIASES)
    sys.meta_path.insert(0, finder)
    return finder


def uninstall(finder: AliasFinder) -> None:
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)
    for name in [n for n in sys.modules if n in ALIASES or n in FALLBACK_ALIASES]:
        module = sys.modules[name]
        if module.__name__ != name:  # one of ours, under an alias
            del sys.modules[name]
            parent, _, child = name.rpartition(".")
            if parent in sys.modules and getattr(sys.modules[parent], child, None) is module:
                delattr(sys.modules[parent], child)


@contextlib.contextmanager
def onnxruntime_training_names() -> Iterator[None]:
    finder = install()
    try:
        yield
    finally:
        uninstall(finder)
