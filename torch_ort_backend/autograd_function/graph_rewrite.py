"""The backend's pass over TorchDynamo's graph before AOTAutograd: activation checkpointing.

TorchDynamo turns ``torch.utils.checkpoint.checkpoint(fn, *args)`` into a tag_activation_checkpoint
call of fn's traced body (and ``CheckpointFunction.apply`` written out reaches capture.py as any
Function does). onnxruntime-training refused checkpointing unless ORTMODULE_ALLOW_AUTOGRAD_CHECKPOINT
was set, and so do we: with it, the checkpointed body runs as a PythonOp of torch's
CheckpointFunction (forward without saving activations, backward recomputing them in eager PyTorch)
instead of being optimized and memory-planned by the engine.
"""

from __future__ import annotations

import contextlib
import operator

import torch
import torch.fx

from ..errors import UnsupportedTorchModelError
from . import custom_ops
from .capture import CHECKPOINT_FUNCTION
from .probe import probe
from .registry import encode_constants, register_function, registered_functions


class AutogradCheckpointError(UnsupportedTorchModelError):
    """The model uses activation checkpointing and ORTMODULE_ALLOW_AUTOGRAD_CHECKPOINT is not set."""


def _refusal(where: str) -> AutogradCheckpointError:
    return AutogradCheckpointError(
        f"the model uses activation checkpointing ({where}). As in onnxruntime-training it is refused by "
        f"default: a checkpointed function can only run as a PythonOp, whose forward and recomputing "
        f"backward run in eager PyTorch outside the engine's optimizer and memory planner. Set "
        f"ORTMODULE_ALLOW_AUTOGRAD_CHECKPOINT=1 (or the option allow_autograd_checkpoint=True) to run it "
        f"that way, or remove the checkpoint and let the engine plan the activations' memory.")


def _checkpoint_hops() -> tuple:
    hop = torch.ops.higher_order
    return tuple(getattr(hop, name) for name in ("tag_activation_checkpoint", "wrap_activation_checkpoint")
                 if hasattr(hop, name))


def prepare_graph(gm: torch.fx.GraphModule, opts) -> torch.fx.GraphModule:
    """Refuses or rewrites activation checkpointing (see the module docstring); other graphs pass
    through unchanged."""
    hops = _checkpoint_hops()
    python_op = custom_ops.python_op()
    checkpoint_names = {name for name, cls in registered_functions().items()
                        if f"{cls.__module__}.{cls.__qualname__}" == CHECKPOINT_FUNCTION}
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in hops:
            if not opts.allow_autograd_checkpoint:
                raise _refusal("torch.utils.checkpoint.checkpoint")
            _rewrite_checkpoint(gm, node, python_op)
            changed = True
        elif node.target is python_op and node.args[0] in checkpoint_names and not opts.allow_autograd_checkpoint:
            raise _refusal(f"{CHECKPOINT_FUNCTION}.apply")
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return gm


def _rewrite_checkpoint(gm: torch.fx.GraphModule, node: torch.fx.Node, python_op) -> None:
    from torch.utils.checkpoint import CheckpointFunction

    body_node, *operands = node.args
    body = getattr(gm, body_node.target)
    fakes = []
    for a in operands:
        value = a.meta.get("example_value") if isinstance(a, torch.fx.Node) else None
        if not isinstance(value, torch.Tensor):
            raise UnsupportedTorchModelError(
                f"checkpointed region '{node.name}' takes a non-tensor input {a!r}; a PythonOp of "
                f"CheckpointFunction passes tensors only")
        fakes.append(value)
    preserve = bool(node.kwargs.get("preserve_rng_state", True))
    constants = [body, preserve]
    requires = [torch.is_grad_enabled() and f.requires_grad for f in fakes]
    name = register_function(CheckpointFunction)
    convention = "cc" + "d" * len(operands)
    constant_args = encode_constants(constants)
    fake_mode = torch._guards.detect_fake_mode(fakes)
    with fake_mode if fake_mode is not None else contextlib.nullcontext():
        result = probe(CheckpointFunction, name, convention, constant_args, constants, fakes, requires)
    with gm.graph.inserting_before(node):
        call = gm.graph.call_function(
            python_op, (name, convention, constant_args, list(operands), [int(r) for r in requires],
                        list(result.non_differentiable), [i for _, i in result.inplace]))
    for user in list(node.users):
        if user.target is not operator.getitem:
            raise UnsupportedTorchModelError(f"checkpointed region '{node.name}' is used by {user.format_node()}")
        user.args = (call, user.args[1] + 1)  # output 0 of python_op is the context
    gm.graph.erase_node(node)
