"""ORTTrainer's model description: `{'inputs': [(name, shape)], 'outputs': [(name, shape, is_loss)]}`.

A dimension is an int (static) or a string (dynamic: every dimension with the same string has the
same size, and a new size reuses the compiled graph). Validated once, with errors that name the
entry at fault.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

Dim = int | str


@dataclass(frozen=True)
class IODesc:
    name: str
    shape: tuple[Dim, ...]
    is_loss: bool = False


@dataclass(frozen=True)
class ModelDesc:
    inputs: tuple[IODesc, ...]
    outputs: tuple[IODesc, ...]

    @property
    def loss_index(self) -> int:
        return next(i for i, o in enumerate(self.outputs) if o.is_loss)

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.outputs]


def parse_model_desc(desc: Any) -> ModelDesc:
    if isinstance(desc, ModelDesc):
        return desc
    if not isinstance(desc, Mapping):
        raise ValueError(f"model_desc must be a dict with 'inputs' and 'outputs', got {type(desc).__name__}")
    unknown = set(desc) - {"inputs", "outputs"}
    if unknown:
        raise ValueError(f"model_desc has unknown keys {sorted(unknown)}; expected 'inputs' and 'outputs'")
    for key in ("inputs", "outputs"):
        if key not in desc or not isinstance(desc[key], Sequence) or isinstance(desc[key], str) or not desc[key]:
            raise ValueError(f"model_desc['{key}'] must be a non-empty list of tuples")
    inputs = tuple(_entry(e, f"model_desc['inputs'][{i}]", with_loss=False) for i, e in enumerate(desc["inputs"]))
    outputs = tuple(_entry(e, f"model_desc['outputs'][{i}]", with_loss=True) for i, e in enumerate(desc["outputs"]))
    for kind, entries in (("inputs", inputs), ("outputs", outputs)):
        seen: set[str] = set()
        for e in entries:
            if e.name in seen:
                raise ValueError(f"model_desc['{kind}'] names '{e.name}' twice")
            seen.add(e.name)
    losses = [o.name for o in outputs if o.is_loss]
    if len(losses) != 1:
        raise ValueError(f"model_desc['outputs'] must flag exactly one output as the loss (is_loss=True); "
                         f"found {losses or 'none'}")
    loss = outputs[[o.name for o in outputs].index(losses[0])]
    if loss.shape not in ((), (1,)):
        raise ValueError(f"the loss output '{loss.name}' must be a scalar (shape [] or [1]), got {list(loss.shape)}")
    return ModelDesc(inputs, outputs)


def _entry(entry: Any, where: str, with_loss: bool) -> IODesc:
    sizes = (2, 3) if with_loss else (2,)
    if not isinstance(entry, (tuple, list)) or len(entry) not in sizes:
        form = "(name, shape[, is_loss])" if with_loss else "(name, shape)"
        raise ValueError(f"{where} must be a tuple {form}, got {entry!r}")
    name, shape = entry[0], entry[1]
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: the name must be a non-empty string, got {name!r}")
    if not isinstance(shape, (list, tuple)):
        raise ValueError(f"{where} ('{name}'): the shape must be a list of ints and strings, got {shape!r}")
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, (int, str)) or (isinstance(d, int) and d < 0) or d == "":
            raise ValueError(f"{where} ('{name}'): dimension {d!r} must be an int >= 0 or a non-empty string")
    is_loss = entry[2] if len(entry) == 3 else False
    if not isinstance(is_loss, bool):
        raise ValueError(f"{where} ('{name}'): is_loss must be a bool, got {is_loss!r}")
    return IODesc(name, tuple(shape), is_loss)
