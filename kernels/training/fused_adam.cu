// FusedAdam's CUDA kernel. Each launch carries a table of up to kMaxTensors tensors and
// kMaxBlocks chunks of kChunkElements in its kernel parameters (under the classic 4 KiB limit),
// so a param group of any size runs in a few launches with no device-side metadata to upload.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/half.h"
#include "kernels/training/fused_adam.h"
#include "training/adam_math.h"

namespace tob::cuda {
namespace {

constexpr int kMaxTensors = 36;
constexpr int kMaxBlocks = 320;
constexpr int64_t kChunkElements = 65536;
constexpr int kThreads = 512;
// Elements per thread and iteration on the vector path: one 16-byte load of each moment.
constexpr int kIlp = 4;

template <typename T>
struct AdamLaunchTable {
  T* params[kMaxTensors];
  const T* grads[kMaxTensors];
  float* exp_avgs[kMaxTensors];
  float* exp_avg_sqs[kMaxTensors];
  int64_t numels[kMaxTensors];
  int32_t block_tensor[kMaxBlocks];
  int32_t block_chunk[kMaxBlocks];
};

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <typename T>
__device__ __forceinline__ void UpdateOne(const training::AdamScalars& s, T& p, T g, float& m, float& v) {
  float pf = static_cast<float>(p);
  training::AdamUpdate(s, pf, static_cast<float>(g), m, v);
  p = T(pf);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) FusedAdamKernel(AdamLaunchTable<T> table, training::AdamScalars s) {
  const int t = table.block_tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(table.block_chunk[blockIdx.x]) * kChunkElements;
  const int64_t end = min(begin + kChunkElements, table.numels[t]);
  T* __restrict__ p = table.params[t];
  const T* __restrict__ g = table.grads[t];
  float* __restrict__ m = table.exp_avgs[t];
  float* __restrict__ v = table.exp_avg_sqs[t];

  const bool vector_ok = reinterpret_cast<uintptr_t>(p) % (sizeof(T) * kIlp) == 0 &&
                         reinterpret_cast<uintptr_t>(g) % (sizeof(T) * kIlp) == 0 &&
                         reinterpret_cast<uintptr_t>(m) % (sizeof(float) * kIlp) == 0 &&
                         reinterpret_cast<uintptr_t>(v) % (sizeof(float) * kIlp) == 0;
  int64_t scalar_begin = begin;
  if (vector_ok) {
    const int64_t vector_end = begin + (end - begin) / kIlp * kIlp;
    for (int64_t i = begin + static_cast<int64_t>(threadIdx.x) * kIlp; i < vector_end;
         i += static_cast<int64_t>(blockDim.x) * kIlp) {
      Pack<T, kIlp> pp = *reinterpret_cast<const Pack<T, kIlp>*>(p + i);
      const Pack<T, kIlp> gp = *reinterpret_cast<const Pack<T, kIlp>*>(g + i);
      Pack<float, kIlp> mp = *reinterpret_cast<const Pack<float, kIlp>*>(m + i);
      Pack<float, kIlp> vp = *reinterpret_cast<const Pack<float, kIlp>*>(v + i);
#pragma unroll
      for (int k = 0; k < kIlp; ++k) UpdateOne(s, pp.v[k], gp.v[k], mp.v[k], vp.v[k]);
      *reinterpret_cast<Pack<T, kIlp>*>(p + i) = pp;
      *reinterpret_cast<Pack<float, kIlp>*>(m + i) = mp;
      *reinterpret_cast<Pack<float, kIlp>*>(v + i) = vp;
    }
    scalar_begin = vector_end;
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < end; i += blockDim.x) {
    T pi = p[i];
    float mi = m[i], vi = v[i];
    UpdateOne(s, pi, g[i], mi, vi);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

template <typename T>
cudaError_t LaunchAll(void* const* params, const void* const* grads, float* const* exp_avgs, float* const* exp_avg_sqs,
                      const int64_t* numels, int num_tensors, const training::AdamScalars& s, cudaStream_t stream) {
  int last = -1;
  for (int t = 0; t < num_tensors; ++t) {
    if (numels[t] < 0) return cudaErrorInvalidValue;
    if (numels[t] > 0) last = t;
  }
  AdamLaunchTable<T> table;
  int num_slots = 0, num_blocks = 0;
  for (int t = 0; t <= last; ++t) {
    if (numels[t] == 0) continue;
    table.params[num_slots] = static_cast<T*>(params[t]);
    table.grads[num_slots] = static_cast<const T*>(grads[t]);
    table.exp_avgs[num_slots] = exp_avgs[t];
    table.exp_avg_sqs[num_slots] = exp_avg_sqs[t];
    table.numels[num_slots] = numels[t];
    ++num_slots;
    const int64_t chunks = (numels[t] + kChunkElements - 1) / kChunkElements;
    for (int64_t c = 0; c < chunks; ++c) {
      table.block_tensor[num_blocks] = num_slots - 1;
      table.block_chunk[num_blocks] = static_cast<int32_t>(c);
      ++num_blocks;
      const bool tensor_done = c == chunks - 1;
      if (num_blocks == kMaxBlocks || (tensor_done && (num_slots == kMaxTensors || t == last))) {
        FusedAdamKernel<T><<<num_blocks, kThreads, 0, stream>>>(table, s);
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return err;
        num_blocks = 0;
        if (tensor_done) {
          num_slots = 0;
        } else {  // the tensor goes on in the next launch: it becomes that launch's first slot
          table.params[0] = table.params[num_slots - 1];
          table.grads[0] = table.grads[num_slots - 1];
          table.exp_avgs[0] = table.exp_avgs[num_slots - 1];
          table.exp_avg_sqs[0] = table.exp_avg_sqs[num_slots - 1];
          table.numels[0] = table.numels[num_slots - 1];
          num_slots = 1;
        }
      }
    }
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t launch_fused_adam(int32_t dtype, void* const* params, const void* const* grads, float* const* exp_avgs,
                              float* const* exp_avg_sqs, const int64_t* numels, int num_tensors,
                              const training::AdamScalars& scalars, cudaStream_t stream) {
  switch (dtype) {
    case 1: return LaunchAll<float>(params, grads, exp_avgs, exp_avg_sqs, numels, num_tensors, scalars, stream);
    case 10: return LaunchAll<Float16>(params, grads, exp_avgs, exp_avg_sqs, numels, num_tensors, scalars, stream);
    case 16: return LaunchAll<BFloat16>(params, grads, exp_avgs, exp_avg_sqs, numels, num_tensors, scalars, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace tob::cuda
