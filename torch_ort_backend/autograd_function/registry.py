"""The process-local tables behind PythonOp nodes: which torch.autograd.Function a name means, which
Python objects a node's constant arguments refer to, and how those constants are written into a node.

Security rule (docs/security.md): a PythonOp node (an ONNX file loaded from disk included) names its
Function and its objects; both are looked up here and nowhere else. Nothing is imported, and no
attribute of the file is evaluated. Two kinds of names:

- A Function this process compiles is registered under its qualified name plus a random token
  (``pkg.mod.Fn@3f9c...``, 128 bits from ``secrets``), which only the graphs this process exported
  (and files it saved them to) carry: a model made elsewhere cannot guess it.
- A Function the user registers with ``torch_ort_backend.register_autograd_function`` for models
  saved elsewhere is registered under its plain qualified name. A node naming ``pkg.mod.Fn@token``
  that this process did not make resolves to that registration, never to a compiled one.

Object references in constants and ctx ids are random tokens in the same way.
"""

from __future__ import annotations

import itertools
import json
import secrets
import threading
from typing import Any

import torch

from ..errors import UnsupportedTorchModelError

_LOCK = threading.Lock()
_FUNCTIONS: dict[str, type] = {}  # name in nodes -> Function class: private and public names
_PRIVATE_NAMES: dict[type, str] = {}  # Function class -> its name in this process's own graphs
_PUBLIC_NAMES: dict[type, str] = {}  # Function class -> the name loaded models may use
_OBJECTS: dict[str, Any] = {}  # object token (in a node's constant_args) -> the object, kept alive
_OBJECT_TOKENS: dict[int, str] = {}  # id(object) -> its token
_TOKEN_SEPARATOR = "@"  # never part of a qualified name


class PythonOpError(RuntimeError):
    """A PythonOp or PythonOpGrad node that cannot run: an unknown Function or object, a context that
    no longer exists, a backward that returned the wrong gradients."""


def qualified_name(fn_cls: type) -> str:
    """module + qualname: two Functions with the same class name in different modules differ."""
    return f"{fn_cls.__module__}.{fn_cls.__qualname__}"


def _check_function(fn_cls: type) -> None:
    if not (isinstance(fn_cls, type) and issubclass(fn_cls, torch.autograd.Function)):
        raise TypeError(f"expected a torch.autograd.Function subclass, got {fn_cls!r}")


def register_function(fn_cls: type) -> str:
    """Registers a Function this process compiles and returns the name its PythonOp nodes carry:
    the qualified name and a random token, so only graphs this process exported can call it."""
    _check_function(fn_cls)
    with _LOCK:
        name = _PRIVATE_NAMES.get(fn_cls)
        if name is None:
            name = f"{qualified_name(fn_cls)}{_TOKEN_SEPARATOR}{secrets.token_hex(16)}"
            _FUNCTIONS[name] = fn_cls
            _PRIVATE_NAMES[fn_cls] = name
        return name


def register_function_for_loaded_models(fn_cls: type) -> str:
    """Lets PythonOp nodes of any model (one saved by another process included) call `fn_cls`, and
    returns the name they use: its qualified name, or that name with a "#k" suffix when another
    class of the same qualified name (one defined in a function body, a re-executed notebook cell)
    was registered first."""
    _check_function(fn_cls)
    with _LOCK:
        name = _PUBLIC_NAMES.get(fn_cls)
        if name is not None:
            return name
        base = qualified_name(fn_cls)
        name = base
        for k in itertools.count(2):
            if name not in _FUNCTIONS:
                break
            name = f"{base}#{k}"
        _FUNCTIONS[name] = fn_cls
        _PUBLIC_NAMES[fn_cls] = name
        return name


def resolve_function(name: str) -> type:
    """The Function a node's func_name means in this process; PythonOpError otherwise (never an
    import). A private name this process did not make falls back to the public registration of its
    qualified name (a model saved by another process), never to another private one."""
    with _LOCK:
        fn_cls = _FUNCTIONS.get(name)
        if fn_cls is None and _TOKEN_SEPARATOR in name:
            public = name.split(_TOKEN_SEPARATOR, 1)[0]
            candidate = _FUNCTIONS.get(public)
            if candidate is not None and _PUBLIC_NAMES.get(candidate) == public:
                fn_cls = candidate
    if fn_cls is None:
        raise PythonOpError(
            f"PythonOp names the autograd.Function '{name}', which is not registered in this process. "
            f"A PythonOp node runs only a Function of a graph this process compiled, or one registered for "
            f"loaded models with torch_ort_backend.register_autograd_function(cls); nothing is imported "
            f"by name (docs/security.md).")
    return fn_cls


def registered_functions() -> dict[str, type]:
    with _LOCK:
        return dict(_FUNCTIONS)


# ---- objects ----
def object_id(obj: Any) -> str:
    """A random, stable token for `obj`, which is kept alive for the life of the process (a compiled
    graph may run it at any later step); a model made elsewhere cannot guess it."""
    with _LOCK:
        k = _OBJECT_TOKENS.get(id(obj))
        if k is None:
            k = secrets.token_hex(16)
            _OBJECTS[k] = obj
            _OBJECT_TOKENS[id(obj)] = k
        return k


def resolve_object(k: str) -> Any:
    with _LOCK:
        if k not in _OBJECTS:
            raise PythonOpError(
                f"PythonOp refers to Python object {k!r}, which does not exist in this process (objects are "
                f"passed by reference: a model saved with one runs only in the process that compiled it)")
        return _OBJECTS[k]


# ---- constant arguments ----
# A node's non-tensor arguments are one JSON list: JSON's null, booleans, numbers, strings and lists
# as themselves; a tuple as {"tuple": [...]}, a dtype as {"dtype": "float32"}, a device as
# {"device": "cpu"}, any other object as {"object": token}. Python's json keeps ints and floats apart
# and writes inf and nan.

def _encode(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, tuple):
        return {"tuple": [_encode(x) for x in v]}
    if isinstance(v, list):
        return [_encode(x) for x in v]
    if isinstance(v, torch.dtype):
        return {"dtype": str(v).removeprefix("torch.")}
    if isinstance(v, torch.device):
        return {"device": str(v)}
    if isinstance(v, torch.Tensor):
        raise UnsupportedTorchModelError("a tensor inside a constant argument cannot be carried by a PythonOp")
    return {"object": object_id(v)}


def _decode(v: Any) -> Any:
    if isinstance(v, list):
        return [_decode(x) for x in v]
    if not isinstance(v, dict):
        return v
    if len(v) != 1:
        raise PythonOpError(f"malformed PythonOp constant {v!r}")
    (tag, x), = v.items()
    if tag == "tuple" and isinstance(x, list):
        return tuple(_decode(e) for e in x)
    if tag == "dtype" and isinstance(x, str):
        dtype = getattr(torch, x, None)
        if not isinstance(dtype, torch.dtype):
            raise PythonOpError(f"PythonOp constant names an unknown dtype '{x}'")
        return dtype
    if tag == "device" and isinstance(x, str):
        return torch.device(x)
    if tag == "object" and isinstance(x, str):
        return resolve_object(x)
    raise PythonOpError(f"malformed PythonOp constant {v!r}")


def encode_constants(values: list[Any]) -> str:
    return json.dumps([_encode(v) for v in values], allow_nan=True, separators=(",", ":"))


def decode_constants(text: str) -> list[Any]:
    try:
        raw = json.loads(text) if text else []
    except ValueError as e:
        raise PythonOpError(f"PythonOp constant_args is not valid JSON: {e}") from None
    if not isinstance(raw, list):
        raise PythonOpError("PythonOp constant_args must be a JSON list")
    return [_decode(v) for v in raw]


def build_arguments(input_convention: str, tensors: list[Any], constants: list[Any]) -> list[Any]:
    """The Function's positional arguments: 'd' takes the next tensor, 'c' the next constant."""
    if input_convention.count("d") != len(tensors) or input_convention.count("c") != len(constants) or (
            set(input_convention) - {"c", "d"}):
        raise PythonOpError(
            f"PythonOp input_convention '{input_convention}' does not match its {len(tensors)} tensor inputs "
            f"and {len(constants)} constants")
    t, c = iter(tensors), iter(constants)
    return [next(t) if k == "d" else next(c) for k in input_convention]
