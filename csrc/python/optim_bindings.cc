// The multi-tensor optimizer entry points of torch_ort_backend._C (used by
// torch_ort_backend.optim). Tensors arrive as lists of data_ptr integers with their element
// counts and one dtype code: the Python side has checked device, layout, dtype and sparsity and
// keeps the tensors alive for the call, so no per-tensor DLPack round trip is paid. The math runs
// without the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "framework/thread_pool.h"
#include "python/status_exceptions.h"
#include "training/multi_tensor_adam.h"
#include "training/multi_tensor_ops.h"

#ifdef TOB_WITH_CUDA
#include "kernels/training/fused_adam.h"
#endif

namespace py = pybind11;

namespace tob::python {

namespace {

// The pool of the requested size stays alive between steps (ThreadPool::Shared only hands out
// pools that someone holds).
ThreadPool* PoolFor(int num_threads) {
  static std::mutex mu;
  static std::shared_ptr<ThreadPool> held;
  if (num_threads <= 1) return nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (!held || held->num_threads() != num_threads) held = ThreadPool::Shared(num_threads);
  return held.get();
}

template <typename T>
std::vector<T> AsPointers(const std::vector<uintptr_t>& addresses) {
  std::vector<T> out(addresses.size());
  for (size_t i = 0; i < addresses.size(); ++i) out[i] = reinterpret_cast<T>(addresses[i]);
  return out;
}

training::AdamHyperParams MakeHyperParams(double lr, double beta1, double beta2, double eps, double weight_decay,
                                          bool bias_correction, int mode, double grad_scale) {
  training::AdamHyperParams h;
  h.lr = lr;
  h.beta1 = beta1;
  h.beta2 = beta2;
  h.eps = eps;
  h.weight_decay = weight_decay;
  h.bias_correction = bias_correction;
  h.mode = static_cast<training::AdamWMode>(mode);
  h.grad_scale = grad_scale;
  return h;
}

void MultiTensorAdamCpu(int dtype, const std::vector<uintptr_t>& params, const std::vector<uintptr_t>& grads,
                        const std::vector<uintptr_t>& exp_avgs, const std::vector<uintptr_t>& exp_avg_sqs,
                        const std::vector<int64_t>& numels, double lr, double beta1, double beta2, double eps,
                        double weight_decay, int64_t step, bool bias_correction, int mode, double grad_scale,
                        int num_threads) {
  auto p = AsPointers<void*>(params);
  auto g = AsPointers<const void*>(grads);
  auto m = AsPointers<float*>(exp_avgs);
  auto v = AsPointers<float*>(exp_avg_sqs);
  training::AdamTensorLists lists{p, g, m, v, numels};
  training::AdamHyperParams h = MakeHyperParams(lr, beta1, beta2, eps, weight_decay, bias_correction, mode, grad_scale);
  Status s;
  {
    py::gil_scoped_release release;
    s = training::MultiTensorAdam(DTypeFromOnnx(dtype), lists, h, step, PoolFor(num_threads));
  }
  Check(s);
}

#ifdef TOB_WITH_CUDA
void MultiTensorAdamCuda(int dtype, const std::vector<uintptr_t>& params, const std::vector<uintptr_t>& grads,
                         const std::vector<uintptr_t>& exp_avgs, const std::vector<uintptr_t>& exp_avg_sqs,
                         const std::vector<int64_t>& numels, double lr, double beta1, double beta2, double eps,
                         double weight_decay, int64_t step, bool bias_correction, int mode, double grad_scale,
                         uintptr_t stream) {
  const size_t n = numels.size();
  if (params.size() != n || grads.size() != n || exp_avgs.size() != n || exp_avg_sqs.size() != n)
    Check(InvalidArgument("multi_tensor_adam_cuda: the tensor lists must have one length"));
  training::AdamHyperParams h = MakeHyperParams(lr, beta1, beta2, eps, weight_decay, bias_correction, mode, grad_scale);
  Check(training::CheckAdamHyperParams(h, step));
  auto p = AsPointers<void*>(params);
  auto g = AsPointers<const void*>(grads);
  auto m = AsPointers<float*>(exp_avgs);
  auto v = AsPointers<float*>(exp_avg_sqs);
  cudaError_t err;
  {
    py::gil_scoped_release release;
    err = cuda::launch_fused_adam(dtype, p.data(), g.data(), m.data(), v.data(), numels.data(), static_cast<int>(n),
                                  training::MakeAdamScalars(h, step), reinterpret_cast<cudaStream_t>(stream));
  }
  if (err == cudaErrorInvalidValue)
    Check(InvalidArgument("multi_tensor_adam_cuda: parameters must be float32, float16 or bfloat16 (ONNX code ", dtype,
                          ") with non-negative sizes"));
  if (err != cudaSuccess) Check(RuntimeError("multi_tensor_adam_cuda: ", cudaGetErrorString(err)));
}
#endif

py::tuple MultiTensorL2Norm(int dtype, const std::vector<uintptr_t>& tensors, const std::vector<int64_t>& numels,
                            int num_threads) {
  auto t = AsPointers<const void*>(tensors);
  StatusOr<training::L2NormResult> r = Status::OK();
  {
    py::gil_scoped_release release;
    r = training::MultiTensorL2Norm(DTypeFromOnnx(dtype), t, numels, PoolFor(num_threads));
  }
  training::L2NormResult result = Unwrap(std::move(r));
  return py::make_tuple(result.total, result.per_tensor);
}

bool MultiTensorScale(int src_dtype, const std::vector<uintptr_t>& srcs, int dst_dtype,
                      const std::vector<uintptr_t>& dsts, const std::vector<int64_t>& numels, double scale,
                      int num_threads) {
  auto s = AsPointers<const void*>(srcs);
  auto d = AsPointers<void*>(dsts);
  StatusOr<bool> r = Status::OK();
  {
    py::gil_scoped_release release;
    r = training::MultiTensorScale(DTypeFromOnnx(src_dtype), s, DTypeFromOnnx(dst_dtype), d, numels,
                                   static_cast<float>(scale), PoolFor(num_threads));
  }
  return Unwrap(std::move(r));
}

bool MultiTensorHasNonFinite(int dtype, const std::vector<uintptr_t>& tensors, const std::vector<int64_t>& numels,
                             int num_threads) {
  auto t = AsPointers<const void*>(tensors);
  StatusOr<bool> r = Status::OK();
  {
    py::gil_scoped_release release;
    r = training::MultiTensorHasNonFinite(DTypeFromOnnx(dtype), t, numels, PoolFor(num_threads));
  }
  return Unwrap(std::move(r));
}

}  // namespace

void RegisterOptimBindings(py::module_& m) {
  // Test hook (tests/python/test_status_exceptions.py): fails the way this file's bindings fail.
  m.def("_raise_status_from_optim_binding", [](int code, const std::string& message) {
    if (code < 0) throw InternalError(message);
    Check(Status(static_cast<StatusCode>(code), message));
  });
  m.def("multi_tensor_adam", &MultiTensorAdamCpu, py::arg("dtype"), py::arg("params"), py::arg("grads"),
        py::arg("exp_avgs"), py::arg("exp_avg_sqs"), py::arg("numels"), py::arg("lr"), py::arg("beta1"),
        py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"), py::arg("step"), py::arg("bias_correction"),
        py::arg("mode"), py::arg("grad_scale") = 1.0, py::arg("num_threads") = 1,
        "One Adam step over contiguous CPU buffers given by address (FusedAdam's CPU path).");
#ifdef TOB_WITH_CUDA
  m.def("multi_tensor_adam_cuda", &MultiTensorAdamCuda, py::arg("dtype"), py::arg("params"), py::arg("grads"),
        py::arg("exp_avgs"), py::arg("exp_avg_sqs"), py::arg("numels"), py::arg("lr"), py::arg("beta1"),
        py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"), py::arg("step"), py::arg("bias_correction"),
        py::arg("mode"), py::arg("grad_scale") = 1.0, py::arg("stream") = 0,
        "One Adam step over contiguous CUDA buffers, launched on `stream` (a cudaStream_t as an integer).");
#endif
  m.def("multi_tensor_l2_norm", &MultiTensorL2Norm, py::arg("dtype"), py::arg("tensors"), py::arg("numels"),
        py::arg("num_threads") = 1, "(total L2 norm, [per-tensor L2 norms]), squares summed in float64.");
  m.def("multi_tensor_scale", &MultiTensorScale, py::arg("src_dtype"), py::arg("srcs"), py::arg("dst_dtype"),
        py::arg("dsts"), py::arg("numels"), py::arg("scale"), py::arg("num_threads") = 1,
        "dst = src * scale in float32; returns whether any scaled value is inf or NaN.");
  m.def("multi_tensor_has_non_finite", &MultiTensorHasNonFinite, py::arg("dtype"), py::arg("tensors"),
        py::arg("numels"), py::arg("num_threads") = 1, "Whether any element is inf or NaN.");
}

}  // namespace tob::python
