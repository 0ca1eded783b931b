// Filling tensors with one repeated element, whatever its dtype: generators work on element
// bytes, so one routine serves every type of the same size.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/tensor.h"
#include "framework/thread_pool.h"

namespace tob::cpu {

// Elements per task when a fill is split over the pool (fills are memory bound).
inline constexpr int64_t kFillGrain = 1 << 18;

template <typename W>
void FillWords(void* dst, int64_t n, const void* value, ThreadPool* pool) {
  W word;
  std::memcpy(&word, value, sizeof(W));
  W* out = static_cast<W*>(dst);
  ParallelFor(pool, n, kFillGrain, [&](int64_t begin, int64_t end) { std::fill(out + begin, out + end, word); });
}

// Writes the `elem_size` bytes at `value` into each of the n elements at dst.
inline void FillElements(void* dst, int64_t n, const void* value, size_t elem_size, ThreadPool* pool) {
  switch (elem_size) {
    case 1: return FillWords<uint8_t>(dst, n, value, pool);
    case 2: return FillWords<uint16_t>(dst, n, value, pool);
    case 4: return FillWords<uint32_t>(dst, n, value, pool);
    case 8: return FillWords<uint64_t>(dst, n, value, pool);
    default:
      for (int64_t i = 0; i < n; ++i) std::memcpy(static_cast<char*>(dst) + i * elem_size, value, elem_size);
  }
}

// The bytes of the number `v` as one element of `dtype` (8 bytes are enough for every dtype).
inline bool ElementBytes(DType dtype, double v, uint64_t* bytes) {
  *bytes = 0;
  return DispatchDType<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                       uint64_t, bool>(dtype, [&]<typename T>() {
    T value;
    if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) value = T(static_cast<float>(v));
    else value = static_cast<T>(v);
    std::memcpy(bytes, &value, sizeof(T));
  });
}

}  // namespace tob::cpu
