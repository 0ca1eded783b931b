// Host-side helpers shared by the CUDA provider: CUDA / cuBLAS errors as Status values, a device
// guard, and the DType <-> kernels/ ElementType mapping.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/element_type.h"

namespace tob {

// "cudaMalloc(&p, 1024) failed: cudaErrorMemoryAllocation (out of memory)"; kOutOfMemory for
// allocation failures, kRuntimeError otherwise.
Status CudaCallError(const char* call, cudaError_t error);
Status CublasCallError(const char* call, cublasStatus_t status);

inline Status CheckCuda(const char* call, cudaError_t error) {
  return error == cudaSuccess ? Status::OK() : CudaCallError(call, error);
}
inline Status CheckCublas(const char* call, cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? Status::OK() : CublasCallError(call, status);
}

}  // namespace tob

// Every CUDA runtime and cuBLAS call goes through one of these: the Status names the call.
#define TOB_CUDA_RETURN_IF_ERROR(expr) TOB_RETURN_IF_ERROR(::tob::CheckCuda(#expr, (expr)))
#define TOB_CUBLAS_RETURN_IF_ERROR(expr) TOB_RETURN_IF_ERROR(::tob::CheckCublas(#expr, (expr)))

namespace tob {

// Makes `device` current for the scope (kernels launch into streams of the current device) and
// restores the previous device. Check status() before relying on it.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;
  const Status& status() const { return status_; }

 private:
  int previous_ = -1;
  Status status_;
};

inline cuda::ElementType ToElementType(DType t) { return static_cast<cuda::ElementType>(t); }

#define TOB_SAME_CODE_(name)                                                                \
  static_assert(static_cast<int>(cuda::ElementType::name) == static_cast<int>(DType::name), \
                "kernels/element_type.h disagrees with core/dtype.h on " #name);
TOB_SAME_CODE_(kFloat32)
TOB_SAME_CODE_(kFloat64)
TOB_SAME_CODE_(kFloat16)
TOB_SAME_CODE_(kBFloat16)
TOB_SAME_CODE_(kInt8)
TOB_SAME_CODE_(kUInt8)
TOB_SAME_CODE_(kInt16)
TOB_SAME_CODE_(kInt32)
TOB_SAME_CODE_(kInt64)
TOB_SAME_CODE_(kBool)
#undef TOB_SAME_CODE_

}  // namespace tob
