#include "providers/cuda/cuda_device_context.h"

#include <map>
#include <memory>
#include <mutex>

#include "providers/cuda/cuda_common.h"
#include "providers/cuda/cuda_provider.h"

namespace tob {

namespace {

Status MakeCurrent(int device) {
  int current = -1;
  TOB_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
  if (current != device) TOB_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  return Status::OK();
}

}  // namespace

CudaDeviceContext::CudaDeviceContext(int device, cudaStream_t stream, cublasHandle_t cublas)
    : device_(device), stream_(stream), cublas_(cublas), allocator_(CudaAllocator::ForDevice(device)) {}

StatusOr<CudaDeviceContext*> CudaDeviceContext::Get(int device) {
  static std::mutex mu;
  // Never destroyed: destroying streams and handles from static destructors races the driver.
  static auto* contexts = new std::map<int, std::unique_ptr<CudaDeviceContext>>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = contexts->find(device); it != contexts->end()) return it->second.get();

  const int count = CudaDeviceCount();
  if (device < 0 || device >= count)
    return InvalidArgument("CUDA device ", device, " does not exist (", count, " visible)");
  CudaDeviceGuard guard(device);
  TOB_RETURN_IF_ERROR(guard.status());
  // A blocking stream: it waits for work on the legacy default stream, which is where PyTorch
  // produces the tensors it hands us by default.
  cudaStream_t stream = nullptr;
  TOB_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamDefault));
  cublasHandle_t cublas = nullptr;
  if (Status st = CheckCublas("cublasCreate", cublasCreate(&cublas)); !st.ok()) {
    (void)cudaStreamDestroy(stream);
    return st;
  }
  if (Status st = CheckCublas("cublasSetStream", cublasSetStream(cublas, stream)); !st.ok()) {
    (void)cublasDestroy(cublas);
    (void)cudaStreamDestroy(stream);
    return st;
  }
  auto* context = new CudaDeviceContext(device, stream, cublas);
  contexts->emplace(device, std::unique_ptr<CudaDeviceContext>(context));
  return context;
}

Status CudaDeviceContext::Synchronize() const {
  TOB_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return Status::OK();
}

StatusOr<CudaDeviceContext*> KernelDeviceContext(KernelContext& ctx) {
  int device = -1;
  auto check = [&](const Tensor* t, const char* kind, int index) -> Status {
    if (t == nullptr || !t->defined()) return Status::OK();
    const Device d = t->device();
    if (d.type != DeviceType::kCUDA || (device >= 0 && d.index != device))
      return ctx.Fail(kind, " ", index, " is on ", d.ToString(), ", expected ",
                      device >= 0 ? StrCat("cuda:", device) : std::string("a CUDA device"));
    device = d.index;
    return Status::OK();
  };
  for (int i = 0; i < ctx.num_outputs(); ++i) TOB_RETURN_IF_ERROR(check(ctx.output(i), "output", i));
  for (int i = 0; i < ctx.num_inputs(); ++i) TOB_RETURN_IF_ERROR(check(ctx.input(i), "input", i));
  if (device < 0) return ctx.Fail("has no tensor on a CUDA device");
  TOB_ASSIGN_OR_RETURN(CudaDeviceContext * context, CudaDeviceContext::Get(device));
  TOB_RETURN_IF_ERROR(MakeCurrent(device));
  return context;
}

}  // namespace tob
