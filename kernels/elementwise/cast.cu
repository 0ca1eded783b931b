// Cast: one kernel per (from, to) pair, each element through CastElement (kernels/elementwise_ops.h).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/elementwise/cast.h"
#include "kernels/elementwise/elementwise_ops.h"
#include "kernels/launch_config.h"

namespace tob::cuda {
namespace {

template <typename From, typename To>
__global__ void CastKernel(const From* __restrict__ src, To* __restrict__ dst, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    dst[i] = CastElement<To>(src[i]);
}

template <typename Fn>
bool DispatchCastType(ElementType type, Fn&& fn) {
  return DispatchElementType<float, double, Float16, BFloat16, int8_t, uint8_t, int16_t, int32_t, int64_t, bool>(
      type, static_cast<Fn&&>(fn));
}

}  // namespace

bool CastSupported(ElementType from, ElementType to) {
  int matched = 0;
  auto count = [&matched]<typename T>() { ++matched; };
  return DispatchCastType(from, count) && DispatchCastType(to, count);
}

cudaError_t launch_cast(ElementType from, ElementType to, const void* src, void* dst, int64_t n, cudaStream_t stream) {
  if (!CastSupported(from, to)) return cudaErrorNotSupported;
  if (n == 0) return cudaSuccess;
  if (from == to) {
    size_t element_size = 0;
    DispatchCastType(from, [&]<typename T>() { element_size = sizeof(T); });
    return cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * element_size, cudaMemcpyDeviceToDevice, stream);
  }
  DispatchCastType(from, [&]<typename From>() {
    DispatchCastType(to, [&]<typename To>() {
      CastKernel<From, To>
          <<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(static_cast<const From*>(src), static_cast<To*>(dst), n);
    });
  });
  return cudaGetLastError();
}

}  // namespace tob::cuda
