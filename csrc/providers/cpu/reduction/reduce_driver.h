// Splits an (outer, reduce, inner) reduction over the intra-op pool. Work is divided over outer
// rows (inner == 1), outer blocks (small inner) or outer x column tiles (wide inner); when that
// leaves threads idle and the reduced extent is long, the reduced extent itself is cut into
// chunks whose partial results are combined afterwards.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "framework/kernel.h"
#include "framework/thread_pool.h"
#include "providers/cpu/reduction/reduce_loops.h"

namespace tob::cpu {

struct ReduceExtent {
  int64_t outer = 1;
  int64_t reduce = 1;
  int64_t inner = 1;
  int64_t outputs() const { return outer * inner; }
};

// Elements one task should at least touch before it is worth handing to another thread.
inline constexpr int64_t kReduceGrain = 16384;
// With fewer independent outputs than this many per thread, long reductions are also cut along
// the reduced extent so that every thread gets about the same work.
inline constexpr int64_t kTasksPerThread = 4;

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline int64_t PoolThreads(const KernelContext& ctx) {
  return ctx.thread_pool() ? ctx.thread_pool()->num_threads() : 1;
}

// acc[o * inner + i] = Combine over r of Map(x[(o * reduce + r) * inner + i]), not finalized.
// `shift` (one per output) is read only by Map::kExpShifted.
template <Combine C, Map M, typename S, typename A>
Status ReduceToAcc(KernelContext& ctx, const S* x, ReduceExtent e, A* acc, const A* shift) {
  const int64_t outputs = e.outputs();
  if (outputs == 0) return Status::OK();
  const int64_t threads = PoolThreads(ctx);
  const int64_t total = outputs * e.reduce;
  ThreadPool* pool = ctx.thread_pool();

  if (e.inner == 1) {
    int64_t chunks = 1;
    if (threads > 1 && e.outer < kTasksPerThread * threads && total >= 2 * kReduceGrain)
      chunks = std::min(CeilDiv(kTasksPerThread * threads, e.outer), std::max<int64_t>(1, e.reduce / kReduceGrain));
    if (chunks <= 1) {
      int64_t grain = std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(1, e.reduce));
      ParallelFor(pool, e.outer, grain, [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o)
          acc[o] = ReduceContiguous<C, M, S, A>(x + o * e.reduce, e.reduce, ShiftAt<M>(shift, o));
      });
      return Status::OK();
    }
    TOB_ASSIGN_OR_RETURN(Tensor partial_tensor, ctx.AllocateScratch(DTypeOf<A>(), {e.outer * chunks}));
    A* partial = partial_tensor.data<A>();
    const int64_t chunk_len = CeilDiv(CeilDiv(e.reduce, chunks), 64) * 64;
    ParallelFor(pool, e.outer * chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        int64_t o = t / chunks, r0 = (t % chunks) * chunk_len;
        int64_t len = std::max<int64_t>(0, std::min(e.reduce, r0 + chunk_len) - r0);
        partial[t] = ReduceContiguous<C, M, S, A>(x + o * e.reduce + r0, len, ShiftAt<M>(shift, o));
      }
    });
    for (int64_t o = 0; o < e.outer; ++o) {
      A a = partial[o * chunks];
      for (int64_t c = 1; c < chunks; ++c) a = CombineOf<C, A>(a, partial[o * chunks + c]);
      acc[o] = a;
    }
    return Status::OK();
  }

  // inner > 1: a unit is one outer index (small inner, interleaved lanes) or one column tile of
  // one outer index (wide inner, accumulated rows).
  const bool interleaved = e.inner < kInterleaveLanes;
  const int64_t tiles = interleaved ? 1 : CeilDiv(e.inner, kColumnTile);
  const int64_t units = e.outer * tiles;
  const int64_t unit_width = interleaved ? e.inner : std::min(e.inner, kColumnTile);
  // Reduces rows [r0, r1) of one unit into dst (laid out like acc).
  auto run_unit = [&](int64_t unit, int64_t r0, int64_t r1, A* dst) {
    int64_t o = unit / tiles, i0 = (unit % tiles) * kColumnTile;
    int64_t rows = std::max<int64_t>(0, r1 - r0);
    const S* src = x + (o * e.reduce + r0) * e.inner + i0;
    A* out = dst + o * e.inner + i0;
    const A* unit_shift = M == Map::kExpShifted ? shift + o * e.inner + i0 : nullptr;
    if (interleaved) {
      ReduceInterleaved<C, M, S, A>(src, rows, e.inner, out, unit_shift);
      return;
    }
    int64_t width = std::min(kColumnTile, e.inner - i0);
    std::fill(out, out + width, IdentityOf<C, A>());
    AccumulateRows<C, M, S, A>(src, rows, e.inner, width, out, unit_shift);
  };
  int64_t chunks = 1;
  if (threads > 1 && units < kTasksPerThread * threads && total >= 2 * kReduceGrain)
    chunks =
        std::min(CeilDiv(kTasksPerThread * threads, units), std::max<int64_t>(1, e.reduce * unit_width / kReduceGrain));
  if (chunks <= 1) {
    int64_t grain = std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(1, e.reduce * unit_width));
    ParallelFor(pool, units, grain, [&](int64_t begin, int64_t end) {
      for (int64_t u = begin; u < end; ++u) run_unit(u, 0, e.reduce, acc);
    });
    return Status::OK();
  }
  TOB_ASSIGN_OR_RETURN(Tensor partial_tensor, ctx.AllocateScratch(DTypeOf<A>(), {chunks * outputs}));
  A* partial = partial_tensor.data<A>();
  const int64_t chunk_len = CeilDiv(e.reduce, chunks);
  ParallelFor(pool, units * chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      int64_t c = t % chunks, r0 = c * chunk_len;
      run_unit(t / chunks, r0, std::min(e.reduce, r0 + chunk_len), partial + c * outputs);
    }
  });
  for (int64_t c = 1; c < chunks; ++c) {
    const A* part = partial + c * outputs;
    for (int64_t k = 0; k < outputs; ++k) partial[k] = CombineOf<C, A>(partial[k], part[k]);
  }
  std::copy(partial, partial + outputs, acc);
  return Status::OK();
}

}  // namespace tob::cpu
