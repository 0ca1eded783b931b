// Routes the engine's intra-op parallelism to torch's intra-op pool. This header includes no
// torch header.
#pragma once

namespace tob {

// When enabled, every engine ThreadPool whose size equals torch's intra-op thread count
// (at::get_num_threads(), the engine's default under torch.compile) runs its ParallelFor through
// at::parallel_for; other sizes keep their own workers.
void UseTorchIntraOpPool(bool enable);

}  // namespace tob
