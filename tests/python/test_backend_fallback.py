"""The fallback policy: each failure class, each ORTMODULE_FALLBACK_POLICY flag, and retry."""

import warnings

import pytest
import torch

import torch_ort_backend as tob
from torch_ort_backend.backend import compile_stats, ort_backend


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    for var in ("ORTMODULE_FALLBACK_POLICY", "ORTMODULE_FALLBACK_RETRY"):
        monkeypatch.delenv(var, raising=False)
    torch._dynamo.reset()
    compile_stats().reset()
    yield
    torch._dynamo.reset()


def _raises(cls, fn, *args):
    """Runs fn and checks it raised cls: directly (a run-time failure) or as the inner exception of
    dynamo's BackendCompilerFailed (a compile-time failure; dynamo wraps what backends raise)."""
    with pytest.raises(Exception) as info:
        fn(*args)
    err = info.value
    inner = getattr(err, "inner_exception", err)
    assert isinstance(inner, cls), f"expected {cls.__name__}, got {type(err).__name__}: {err}"
    return inner


def _compile(fn, policy=None, retry=None):
    opts = {}
    if policy is not None:
        opts["fallback_policy"] = policy
    if retry is not None:
        opts["fallback_retry"] = retry
    return torch.compile(fn, backend=ort_backend, options=opts or None)


def int_matmul(a, b):
    # The engine has no integer MatMul kernel: the exported model is rejected at session creation.
    return (a @ b) + 1


def complex_fn(x):
    return (x * 2).abs()


def meta_fn(x):
    return x.relu() + 1


CASES = {
    "FALLBACK_UNSUPPORTED_ONNX_MODEL": (int_matmul, lambda: (torch.randint(-5, 5, (3, 4)), torch.randint(-5, 5, (4, 2))),
                                        tob.UnsupportedOnnxModelError),
    "FALLBACK_UNSUPPORTED_DATA": (complex_fn, lambda: (torch.randn(5, dtype=torch.complex64),), tob.UnsupportedDataError),
    "FALLBACK_UNSUPPORTED_DEVICE": (meta_fn, lambda: (torch.empty(4, device="meta"),), tob.UnsupportedDeviceError),
}


@pytest.mark.parametrize("flag", sorted(CASES))
def test_default_policy_falls_back_with_one_warning(flag):
    """By default each class runs the graph in eager, with exactly one warning naming the cause."""
    fn, make, _ = CASES[flag]
    f = _compile(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            args = make()
            out = f(*args)
            if out.device.type != "meta":
                torch.testing.assert_close(out, fn(*args))
    ours = [w for w in caught if issubclass(w.category, tob.FallbackWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    assert flag in str(ours[0].message)
    assert compile_stats().fallbacks >= 1


@pytest.mark.parametrize("flag", sorted(CASES))
def test_disable_reraises_the_specific_class(flag):
    fn, make, cls = CASES[flag]
    f = _compile(fn, policy="FALLBACK_DISABLE")
    _raises(cls, f, *make())


@pytest.mark.parametrize("flag", sorted(CASES))
def test_policy_without_the_flag_reraises(flag):
    """A policy naming only other classes does not cover this one: the error is raised."""
    fn, make, cls = CASES[flag]
    others = "|".join(f for f in CASES if f != flag)
    f = _compile(fn, policy=others)
    _raises(cls, f, *make())


def test_policy_from_environment(monkeypatch):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")
    f = _compile(complex_fn)
    err = _raises(tob.UnsupportedDataError, f, torch.randn(3, dtype=torch.complex64))
    assert "complex64" in str(err)


def test_force_torch_forward_never_exports():
    f = _compile(lambda x: x.sin() * 2, policy="FALLBACK_FORCE_TORCH_FORWARD")
    x = torch.randn(6)
    torch.testing.assert_close(f(x), x.sin() * 2)
    assert compile_stats().exports == 0 and compile_stats().runs == 0


def test_force_torch_backward_exports_only_the_forward():
    lin = torch.nn.Linear(4, 3)
    f = _compile(lin, policy="FALLBACK_FORCE_TORCH_BACKWARD")
    x = torch.randn(2, 4)
    f(x).sum().backward()
    ref = torch.nn.Linear(4, 3)
    ref.load_state_dict(lin.state_dict())
    g = lin.weight.grad.clone()
    ref(x).sum().backward()
    torch.testing.assert_close(g, ref.weight.grad)
    assert compile_stats().exports == 1  # forward only
    assert compile_stats().runs == 1  # the forward ran on the engine, the backward in torch


class _FlakyOnce:
    """Makes the engine fail every run during the first call of each compiled graph (a run-time
    failure of the ONNX model), on both run paths: the fast one, and the checked one that reruns a
    failed fast call. `attempts` counts engine runs tried."""

    def __init__(self, monkeypatch):
        from torch_ort_backend import compiled_graph

        self.attempts = 0
        self.first_call_of = set()  # graphs whose first call has begun
        cls = compiled_graph.CompiledGraph
        original_call, original_fast, original_checked = cls.__call__, cls._run_fast, cls._run_engine

        def call(graph, *args):
            graph._flaky_failing = id(graph) not in self.first_call_of
            self.first_call_of.add(id(graph))
            try:
                return original_call(graph, *args)
            finally:
                graph._flaky_failing = False

        def failing(original):
            def run(graph, args):
                self.attempts += 1
                if graph._flaky_failing:
                    raise tob.UnsupportedOnnxModelError("injected run failure")
                return original(graph, args)
            return run

        original_make_lean_run = cls._make_lean_run

        def make_lean_run(graph):
            # lean_call.py's regions run the graph through lean_run, a closure that calls the engine
            # without _run_fast where it applies: its engine runs fail and count the same way
            original_make_lean_run(graph)
            if graph.lean_run == graph.run_list:
                return
            closure = graph.lean_run

            def lean_run(args):
                self.attempts += 1
                if getattr(graph, "_flaky_failing", False):
                    return graph._run_checked(args, tob.UnsupportedOnnxModelError("injected run failure"))
                return closure(args)
            graph.lean_run = lean_run

        monkeypatch.setattr(cls, "__call__", call)
        monkeypatch.setattr(cls, "_run_fast", failing(original_fast))
        monkeypatch.setattr(cls, "_run_engine", failing(original_checked))
        monkeypatch.setattr(cls, "_make_lean_run", make_lean_run)


def test_without_retry_a_failed_graph_stays_eager(monkeypatch):
    flaky = _FlakyOnce(monkeypatch)
    f = _compile(lambda x: x.cos() + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            x = torch.randn(4)
            torch.testing.assert_close(f(x), x.cos() + 1)
    # The first call's fast run failed and its checked rerun failed too: eager from then on.
    assert flaky.attempts == 2
    assert compile_stats().runs == 0 and compile_stats().fallbacks == 1


def test_retry_goes_back_to_the_engine(monkeypatch):
    flaky = _FlakyOnce(monkeypatch)
    f = _compile(lambda x: x.cos() + 1, retry=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            x = torch.randn(4)
            torch.testing.assert_close(f(x), x.cos() + 1)
    # Call 1: two failed attempts, then eager; calls 2 and 3 run on the engine again.
    assert flaky.attempts == 4 and compile_stats().runs == 2


def test_bad_initialization_follows_its_flag(monkeypatch):
    """An engine that cannot be loaded is a BadInitializationError: raised by default (the flag is not
    in onnxruntime-training's default policy), run in eager when FALLBACK_BAD_INITIALIZATION is set."""
    import builtins

    from torch_ort_backend import _engine  # noqa: F401  (loaded for real before the import fails)

    real_import = builtins.__import__

    def broken_engine(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "_engine" and level == 1 and globals and globals.get("__name__") == "torch_ort_backend.compiled_graph":
            raise ImportError("libtob.so: cannot open shared object file (simulated)")
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", broken_engine)
    err = _raises(tob.BadInitializationError, _compile(lambda x: x * 3), torch.randn(4))
    assert "could not be loaded" in str(err)
    torch._dynamo.reset()
    f = _compile(lambda x: x * 3, policy="FALLBACK_BAD_INITIALIZATION")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = torch.randn(4)
        torch.testing.assert_close(f(x), x * 3)
    assert any("FALLBACK_BAD_INITIALIZATION" in str(w.message) for w in caught)
