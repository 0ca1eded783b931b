// The engine's intra-op work on torch's intra-op pool (see SetExternalParallelRuntime).
//
// Under torch.compile the engine runs between eager torch ops (autograd glue, the optimizer
// step). torch's OpenMP workers spin for a while after each of those ops; an engine pool of its
// own would then share two cores with two spinning threads, and both would run at half speed.
// Handing our ParallelFor to at::parallel_for keeps one set of threads in the process, hot
// between the engine's nodes and torch's ops alike.
#include "providers/torch/torch_parallel.h"

#include <ATen/Parallel.h>

#include "framework/thread_pool.h"

namespace tob {

namespace {

int TorchNumThreads() { return at::get_num_threads(); }

void TorchParallelFor(int64_t n, int64_t min_grain, const std::function<void(int64_t, int64_t)>& fn) {
  at::parallel_for(0, n, min_grain, [&fn](int64_t begin, int64_t end) { fn(begin, end); });
}

const ExternalParallelRuntime kTorchRuntime{&TorchNumThreads, &TorchParallelFor};

}  // namespace

void UseTorchIntraOpPool(bool enable) { SetExternalParallelRuntime(enable ? &kTorchRuntime : nullptr); }

}  // namespace tob
