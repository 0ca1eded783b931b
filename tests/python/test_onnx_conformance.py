"""The onnx package's backend node tests, run through onnx.backend.test.BackendTest against
torch_ort_backend.onnx_backend.

The include list is derived from the kernel registry (torch_ort_backend.testing.conformance):
every test whose model's nodes all have a registered CPU kernel for their (domain, op, opset,
input dtypes) is included, and every included test must pass. Nothing here names ops by hand;
tools/run_node_tests.py --summary reports the counts for the whole suite.
"""

import re
import warnings

import onnx.backend.test

import torch_ort_backend.onnx_backend as engine_backend
from torch_ort_backend.testing.conformance import all_tests, supported_tests

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    backend_test = onnx.backend.test.BackendTest(engine_backend, __name__)

_SUPPORTED = supported_tests("node")
# One anchored alternation instead of one pattern per test keeps BackendTest's filtering linear.
backend_test.include("^(" + "|".join(re.escape(name) for name in _SUPPORTED) + ")_cpu$")


def _included_only(cases: dict) -> dict:
    """BackendTest generates every test for every device and marks the others skipped; we keep
    only what the registry claims on the CPU, so the report has no thousands of skips to read."""
    for cls in cases.values():
        for attr in list(vars(cls)):
            if attr.startswith("test_") and getattr(getattr(cls, attr), "__unittest_skip__", False):
                delattr(cls, attr)
    return cases


globals().update(_included_only(backend_test.test_cases))


def test_registry_claims_a_real_share_of_the_suite():
    # Guards the derivation itself: an empty or near-empty include list would make this file vacuous.
    assert len(_SUPPORTED) > 0.3 * len(all_tests("node")), f"only {len(_SUPPORTED)} node tests claimed"
