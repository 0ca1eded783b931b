"""The engine's intra-op work runs on torch's intra-op pool in a torch process (no second pool of
threads spinning against torch's OpenMP workers on the same cores), a default session follows
torch.set_num_threads, and the results are those of the engine's own workers. Each check runs in a fresh interpreter so that no pool from another test exists.
"""

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import os, torch
    import torch_ort_backend as tob
    from torch_ort_backend._engine import C
    from onnx import TensorProto, helper

    torch.set_num_threads(2)
    def threads():
        return len(os.listdir("/proc/self/task"))

    node = helper.make_node("MatMul", ["A", "B"], ["C"])
    graph = helper.make_graph([node], "mm",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [384, 256]),
         helper.make_tensor_value_info("B", TensorProto.FLOAT, [256, 320])],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, [384, 320])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    g = torch.Generator().manual_seed(7)
    a = torch.rand(384, 256, generator=g) + 0.1
    b = torch.rand(256, 320, generator=g) - 0.6
    want = (a.double() @ b.double()).float()

    (torch.rand(1 << 20) + 1).log()  # starts torch's OpenMP workers
    base = threads()
    feeds = {"A": a, "B": b}
    opts = tob.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = tob.InferenceSession(model, opts)
    default = tob.InferenceSession(model)  # intra_op_num_threads 0: follows torch
    shared = [s.run(None, feeds)[0] for s in (sess, default) for _ in range(3)]
    with_torch_pool = threads()
    assert default._session.num_threads() == 2

    torch.set_num_threads(1)  # the default session follows; the 2-thread one needs its own pool now
    assert default._session.num_threads() == 1
    followed = [default.run(None, feeds)[0] for _ in range(3)]
    after_follow = threads()
    own_two = [sess.run(None, feeds)[0] for _ in range(3)]
    with_own_two = threads()

    torch.set_num_threads(2)
    C.use_torch_intra_op_pool(False)
    own = [sess.run(None, feeds)[0] for _ in range(3)]
    for out in shared + followed + own_two + own:
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(shared[0], own[0], rtol=0, atol=0)
    print(base, with_torch_pool, after_follow, with_own_two)
    """
)


def test_engine_uses_torchs_pool_follows_its_size_and_matches_its_own_workers():
    # Bitwise equal both ways: the engine splits a GEMM into the same tiles on either pool.
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    base, with_torch_pool, after_follow, with_own_two = map(int, result.stdout.split()[-4:])
    assert with_torch_pool == base, "the engine started threads of its own under torch"
    assert after_follow == base, "a default session follows torch.set_num_threads on torch's pool"
    assert with_own_two == base + 1, "an explicit 2-thread session off torch's size: the caller plus one worker"



def test_pool_switch_rejects_a_non_bool_naming_the_function():
    from torch_ort_backend._engine import C

    with pytest.raises(TypeError, match="use_torch_intra_op_pool"):
        C.use_torch_intra_op_pool("no")
