#include "providers/cuda/cuda_common.h"

namespace tob {

Status CudaCallError(const char* call, cudaError_t error) {
  std::string message = StrCat(call, " failed: ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
  if (error == cudaErrorMemoryAllocation) return Status(StatusCode::kOutOfMemory, std::move(message));
  return RuntimeError(std::move(message));
}

Status CublasCallError(const char* call, cublasStatus_t status) {
  std::string message =
      StrCat(call, " failed: ", cublasGetStatusName(status), " (", cublasGetStatusString(status), ")");
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return Status(StatusCode::kOutOfMemory, std::move(message));
  return RuntimeError(std::move(message));
}

CudaDeviceGuard::CudaDeviceGuard(int device) {
  int current = -1;
  status_ = CheckCuda("cudaGetDevice", cudaGetDevice(&current));
  if (!status_.ok() || current == device) return;
  status_ = CheckCuda("cudaSetDevice", cudaSetDevice(device));
  if (status_.ok()) previous_ = current;
}

CudaDeviceGuard::~CudaDeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

}  // namespace tob
