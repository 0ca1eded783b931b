"""Options of the "ort" backend and their ORTMODULE_* variables: parsed and validated in one place."""

import pytest
import torch

from torch_ort_backend.fallback import DEFAULT_POLICY, FallbackPolicy, parse_policy
from torch_ort_backend.options import MAX_OPSET, MIN_OPSET, resolve


def test_defaults_without_options_or_environment():
    """No options and an empty environment give the documented defaults."""
    o = resolve(None, environ={})
    assert o.opset == 18 and o.fallback_policy == DEFAULT_POLICY and not o.fallback_retry
    assert o.log_level == "WARNING" and not o.save_onnx


def test_environment_overrides_options():
    """As in onnxruntime-training, an ORTMODULE_* variable wins over what the code passes."""
    o = resolve({"opset": 17, "log_level": "ERROR"},
                environ={"ORTMODULE_ONNX_OPSET_VERSION": "19", "ORTMODULE_LOG_LEVEL": "info"})
    assert o.opset == 19 and o.log_level == "INFO"


@pytest.mark.parametrize("value", ["11", "22", "abc", "17.5"])
def test_opset_out_of_range_names_the_variable(value):
    """An opset outside the supported range is an error naming the variable and the range."""
    with pytest.raises(ValueError, match=rf"ORTMODULE_ONNX_OPSET_VERSION.*\[{MIN_OPSET}, {MAX_OPSET}\]"):
        resolve(None, environ={"ORTMODULE_ONNX_OPSET_VERSION": value})


def test_unknown_option_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown option 'opsett'.*opset"):
        resolve({"opsett": 17}, environ={})


def test_bad_log_level_and_bool():
    with pytest.raises(ValueError, match=r"ORTMODULE_LOG_LEVEL must be one of VERBOSE, INFO"):
        resolve(None, environ={"ORTMODULE_LOG_LEVEL": "LOUD"})
    with pytest.raises(ValueError, match=r"ORTMODULE_FALLBACK_RETRY must be a boolean"):
        resolve(None, environ={"ORTMODULE_FALLBACK_RETRY": "maybe"})


def test_save_onnx_needs_a_prefix():
    with pytest.raises(ValueError, match="save_onnx.*onnx_prefix"):
        resolve({"save_onnx": True}, environ={})


def test_fallback_policy_strings_follow_onnxruntime_training():
    """'|'-separated flag names, with or without the _FallbackPolicy. prefix; unknown flags rejected."""
    p = parse_policy("FALLBACK_UNSUPPORTED_DEVICE|_FallbackPolicy.FALLBACK_UNSUPPORTED_DATA")
    assert p == FallbackPolicy.FALLBACK_UNSUPPORTED_DEVICE | FallbackPolicy.FALLBACK_UNSUPPORTED_DATA
    assert parse_policy("FALLBACK_DISABLE") == FallbackPolicy.FALLBACK_DISABLE
    with pytest.raises(ValueError, match="unknown flag 'FALLBACK_SOMETIMES'.*FALLBACK_DISABLE"):
        parse_policy("FALLBACK_DISABLE|FALLBACK_SOMETIMES")
    with pytest.raises(ValueError):
        parse_policy(0)


def test_compile_options_are_validated_at_compile_time():
    """torch.compile(..., options=...) reaches the backend; a bad value fails the compile."""
    from torch_ort_backend.backend import ort_backend

    f = torch.compile(lambda x: x * 2, backend=ort_backend, options={"opset": 3})
    with pytest.raises(Exception, match=r"option 'opset' must be in \[12, 21\], got 3"):
        f(torch.randn(3))


def test_prefer_torch_kernels_takes_aten_op_names():
    assert resolve({"prefer_torch_kernels": "convolution_backward, aten.gelu_backward"}, environ={}).prefer_torch_kernels \
        == ("convolution_backward", "gelu_backward")
    assert resolve({"prefer_torch_kernels": []}, environ={}).prefer_torch_kernels == ()
    assert resolve({}, environ={}).prefer_torch_kernels is None  # the converters choose per shape
    assert resolve({"prefer_torch_kernels": None}, environ={}).prefer_torch_kernels is None
    with pytest.raises(ValueError, match="not_an_op is not an ATen op"):
        resolve({"prefer_torch_kernels": ["not_an_op"]}, environ={})
