// Per-device CUDA state: one stream and one cuBLAS handle bound to it, created on first use and
// kept for the life of the process. Kernels and copies of a device all go through its stream.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/status.h"
#include "framework/kernel.h"
#include "providers/cuda/cuda_allocator.h"

namespace tob {

class CudaDeviceContext {
 public:
  // kInvalidArgument for a device index that does not exist; the failing call otherwise.
  static StatusOr<CudaDeviceContext*> Get(int device);

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  CudaAllocator& allocator() const { return *allocator_; }
  Status Synchronize() const;

 private:
  CudaDeviceContext(int device, cudaStream_t stream, cublasHandle_t cublas);

  int device_;
  cudaStream_t stream_;
  cublasHandle_t cublas_;
  std::shared_ptr<CudaAllocator> allocator_;
};

// The context of the CUDA device every input and output of `ctx` lives on, with that device made
// current for the calling thread; an error naming the first tensor that is elsewhere (a kernel
// must never hand a host pointer to the GPU).
StatusOr<CudaDeviceContext*> KernelDeviceContext(KernelContext& ctx);

}  // namespace tob
