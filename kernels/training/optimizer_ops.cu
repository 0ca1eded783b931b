// The optimizer ops' CUDA kernels: grid-stride loops over one tensor calling the shared
// per-element functions of training/optimizer_math.h and adam_math.h, and a block reduction of
// squares per fixed chunk for the norms.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/half.h"
#include "kernels/launch_config.h"
#include "kernels/training/optimizer_ops.h"
#include "training/optimizer_math.h"

namespace tob::cuda {
namespace {

__device__ __forceinline__ int64_t FirstIndex() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t Stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

template <typename Fn>
bool DispatchStorage(ElementType type, Fn&& fn) {
  return DispatchElementType<float, Float16, BFloat16>(type, static_cast<Fn&&>(fn));
}

__global__ void SgdKernel(float eta, const float* w, const float* g, float* nw, float* ng, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const float gi = g[i];
    if (ng) ng[i] = -eta * gi;
    if (nw) nw[i] = training::SgdUpdate(eta, w[i], gi);
  }
}

template <typename G, typename M>
__global__ void AdamKernel(training::AdamScalars s, const float* w, const G* g, const float* m1, const float* m2,
                           float* nw, G* ng, float* nm1, float* nm2, M* nmixed, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const float old_w = w[i];
    float p = old_w, m = m1[i], v = m2[i];
    training::AdamUpdate(s, p, static_cast<float>(g[i]), m, v);
    if (ng) ng[i] = G(p - old_w);
    if (nm1) nm1[i] = m;
    if (nm2) nm2[i] = v;
    if (nw) nw[i] = p;
    if (nmixed) nmixed[i] = M(p);
  }
}

template <typename G>
__global__ void LambDirectionKernel(training::LambScalars s, const float* w, const G* g, const float* m1,
                                    const float* m2, float* d, float* nm1, float* nm2, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    float m = m1[i], v = m2[i];
    d[i] = training::LambDirection(s, w[i], static_cast<float>(g[i]), m, v);
    if (nm1) nm1[i] = m;
    if (nm2) nm2[i] = v;
  }
}

template <typename G, typename M>
__global__ void LambApplyKernel(float ratio, const float* w, const float* d, float* nw, G* ng, M* nmixed, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    float delta;
    const float updated = training::LambApply(ratio, w[i], d[i], &delta);
    if (ng) ng[i] = G(delta);
    if (nw) nw[i] = updated;
    if (nmixed) nmixed[i] = M(updated);
  }
}

template <typename V>
__global__ void AccumulateKernel(const float* sum, const V* value, float* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += Stride())
    out[i] = training::AccumulateGradient(sum[i], static_cast<float>(value[i]));
}

// One block per chunk: each thread sums its strided elements, then a fixed tree over the block.
template <typename T>
__global__ void SquareSumKernel(const T* x, int64_t n, double* partials) {
  __shared__ double lane_sums[kThreadsPerBlock];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kSquareSumChunk;
  const int64_t end = begin + kSquareSumChunk < n ? begin + kSquareSumChunk : n;
  double sum = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = static_cast<float>(x[i]);
    sum += v * v;
  }
  lane_sums[threadIdx.x] = sum;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) lane_sums[threadIdx.x] += lane_sums[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = lane_sums[0];
}

}  // namespace

cudaError_t launch_sgd_optimizer(float eta, const float* w, const float* g, float* nw, float* ng, int64_t n,
                                 cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  SgdKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(eta, w, g, nw, ng, n);
  return cudaGetLastError();
}

cudaError_t launch_adam_optimizer(const training::AdamScalars& s, ElementType grad_type, const float* w, const void* g,
                                  const float* m1, const float* m2, float* nw, void* ng, float* nm1, float* nm2,
                                  ElementType mixed_type, void* nmixed, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  bool launched = false;
  DispatchStorage(grad_type, [&]<typename G>() {
    auto launch = [&]<typename M>() {
      AdamKernel<G, M><<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
          s, w, static_cast<const G*>(g), m1, m2, nw, static_cast<G*>(ng), nm1, nm2, static_cast<M*>(nmixed), n);
      launched = true;
    };
    if (nmixed == nullptr) launch.template operator()<Float16>();
    else DispatchElementType<Float16, BFloat16>(mixed_type, launch);
  });
  return launched ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t launch_lamb_direction(const training::LambScalars& s, ElementType grad_type, const float* w, const void* g,
                                  const float* m1, const float* m2, float* direction, float* nm1, float* nm2, int64_t n,
                                  cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool known = DispatchStorage(grad_type, [&]<typename G>() {
    LambDirectionKernel<G>
        <<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(s, w, static_cast<const G*>(g), m1, m2, direction, nm1, nm2, n);
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t launch_lamb_apply(float ratio, const float* w, const float* direction, float* nw, ElementType grad_type,
                              void* ng, ElementType mixed_type, void* nmixed, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  bool launched = false;
  DispatchStorage(grad_type, [&]<typename G>() {
    auto launch = [&]<typename M>() {
      LambApplyKernel<G, M><<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(ratio, w, direction, nw, static_cast<G*>(ng),
                                                                           static_cast<M*>(nmixed), n);
      launched = true;
    };
    if (nmixed == nullptr) launch.template operator()<Float16>();
    else DispatchElementType<Float16, BFloat16>(mixed_type, launch);
  });
  return launched ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t launch_accumulate(const float* sum, ElementType value_type, const void* value, float* out, int64_t n,
                              cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool known = DispatchStorage(value_type, [&]<typename V>() {
    AccumulateKernel<V><<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(sum, static_cast<const V*>(value), out, n);
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t launch_square_sum_partials(ElementType type, const void* x, int64_t n, double* partials,
                                       cudaStream_t stream) {
  const int64_t blocks = SquareSumPartialCount(n);
  if (blocks == 0) return cudaSuccess;
  const bool known = DispatchStorage(type, [&]<typename T>() {
    SquareSumKernel<T>
        <<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0, stream>>>(static_cast<const T*>(x), n, partials);
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace tob::cuda
