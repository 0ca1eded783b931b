// Launch geometry shared by the elementwise-style kernels: grid-stride loops over a capped grid.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tob::cuda {

inline constexpr int kThreadsPerBlock = 256;
// Enough blocks to fill any current GPU many times over; grid-stride loops cover the rest.
inline constexpr int64_t kMaxBlocks = int64_t{1} << 16;
// Bytes one thread moves per access in the vectorised paths (one 128-bit load or store).
inline constexpr int kVectorBytes = 16;

inline unsigned BlocksFor(int64_t work_items) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((work_items + kThreadsPerBlock - 1) / kThreadsPerBlock, 1, kMaxBlocks));
}

// Whether p can be read as kVectorBytes-aligned vectors.
inline bool VectorAligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kVectorBytes == 0; }

// N elements of T read or written as one aligned access.
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <typename T>
inline constexpr int kPackWidth = kVectorBytes / sizeof(T) > 0 ? static_cast<int>(kVectorBytes / sizeof(T)) : 1;

}  // namespace tob::cuda
