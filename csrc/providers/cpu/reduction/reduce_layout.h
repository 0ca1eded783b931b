// Turns "reduce these axes of this shape" into (outer, reduce, inner) problems the loops run:
// size-1 dims are dropped and adjacent dims of the same kind (kept / reduced) merged. When the
// reduced dims still form several blocks, they are reduced one block per pass, each pass reading
// the previous one's (much smaller) output; an op that cannot be split into passes instead reads
// the input permuted to [kept..., reduced...].
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "framework/thread_pool.h"
#include "providers/cpu/reduction/reduce_driver.h"

namespace tob::cpu {

struct ReducePlan {
  // Run in order: pass k + 1 reduces the output of pass k; the last pass gives the outputs.
  std::vector<ReduceExtent> passes;
  // Input elements combined into each output (the Mean divisor).
  int64_t count = 1;
  // The same reduction as a single pass over the input viewed as `dims` and permuted by `perm`
  // (output dim k = input dim perm[k]); set only when there are several passes.
  ReduceExtent permuted;
  Shape dims;
  std::vector<int64_t> perm;
};

// Normalises (possibly negative) axes against `rank` into a mask; an error message naming the
// bad axis when one is out of range or repeated.
Status ReducedAxesMask(const std::vector<int64_t>& axes, int64_t rank, std::vector<bool>* mask);

ReducePlan PlanReduce(const Shape& shape, const std::vector<bool>& reduced);

// dst = src viewed as `dims`, permuted by `perm`.
template <typename T>
void PermuteCopy(const T* src, T* dst, const Shape& dims, const std::vector<int64_t>& perm, ThreadPool* pool) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  std::vector<int64_t> src_strides = ContiguousStrides(dims);
  Shape out_dims(rank);
  std::vector<int64_t> strides(rank);  // source stride of each output dim
  for (int64_t k = 0; k < rank; ++k) {
    out_dims[k] = dims[perm[k]];
    strides[k] = src_strides[perm[k]];
  }
  const int64_t row_len = out_dims.back(), row_stride = strides.back();
  const int64_t rows = NumElements(out_dims) / std::max<int64_t>(1, row_len);
  ParallelFor(pool, rows, std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(1, row_len)),
              [&](int64_t begin, int64_t end) {
                for (int64_t row = begin; row < end; ++row) {
                  int64_t offset = 0;
                  for (int64_t k = rank - 2, rest = row; k >= 0; --k) {
                    offset += (rest % out_dims[k]) * strides[k];
                    rest /= out_dims[k];
                  }
                  const T* s = src + offset;
                  T* d = dst + row * row_len;
                  for (int64_t j = 0; j < row_len; ++j) d[j] = s[j * row_stride];
                }
              });
}

}  // namespace tob::cpu
