// MatMul (numpy semantics, batched with broadcasting) and Gemm on cuBLAS (cuda_blas.h).
#include <vector>

#include "framework/kernel_registry.h"
#include "kernels/elementwise/elementwise.h"
#include "ops/gemm_attributes.h"
#include "providers/cuda/cuda_blas.h"
#include "providers/cuda/cuda_broadcast.h"
#include "providers/cuda/cuda_common.h"
#include "providers/cuda/cuda_device_context.h"

namespace tob {

namespace {

// Strides (in matrices) of a batch shape right-aligned over `out`, 0 along broadcast dims.
std::vector<int64_t> BatchStrides(const Shape& out, const Shape& in) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t stride = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t i = in.size() - 1 - k, o = out.size() - 1 - k;
    strides[o] = in[i] == 1 ? 0 : stride;
    stride *= in[i];
  }
  return strides;
}

class CudaMatMulKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<CudaMatMulKernel>(node); }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(CudaDeviceContext * dev, KernelDeviceContext(ctx));
    const Tensor& a = *ctx.input(0);
    const Tensor& b = *ctx.input(1);
    Tensor& y = *ctx.output(0);
    if (a.rank() == 0 || b.rank() == 0) return ctx.Fail("MatMul inputs must have rank >= 1");
    if (a.dtype() != b.dtype() || y.dtype() != a.dtype())
      return ctx.Fail("inputs and output must share one dtype, got ", DTypeName(a.dtype()), ", ", DTypeName(b.dtype()),
                      " -> ", DTypeName(y.dtype()));
    // A vector operand is a 1 x K (left) or K x 1 (right) matrix with the same bytes.
    const Shape sa = a.rank() == 1 ? Shape{1, a.dim(0)} : a.shape();
    const Shape sb = b.rank() == 1 ? Shape{b.dim(0), 1} : b.shape();
    const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
    if (sb[sb.size() - 2] != k)
      return ctx.Fail("inner dimensions differ: ", ShapeToString(a.shape()), " x ", ShapeToString(b.shape()));
    const Shape batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
    Shape batch(std::max(batch_a.size(), batch_b.size()), 1);
    for (size_t i = 0; i < batch.size(); ++i) {
      const int64_t da = i < batch_a.size() ? batch_a[batch_a.size() - 1 - i] : 1;
      const int64_t db = i < batch_b.size() ? batch_b[batch_b.size() - 1 - i] : 1;
      if (da != db && da != 1 && db != 1)
        return ctx.Fail("batch dimensions do not broadcast: ", ShapeToString(a.shape()), " x ",
                        ShapeToString(b.shape()));
      batch[batch.size() - 1 - i] = da == 1 ? db : da;
    }
    const int64_t batches = NumElements(batch);
    if (y.numel() != batches * m * n)
      return ctx.Fail("output ", ShapeToString(y.shape()), " does not hold the product of ", ShapeToString(a.shape()),
                      " x ", ShapeToString(b.shape()));
    if (y.numel() == 0) return Status::OK();
    if (k == 0) {  // an empty sum
      TOB_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(y.raw_data(), 0, y.nbytes(), dev->stream()));
      return Status::OK();
    }

    RowMajorGemmArgs g;
    g.m = m;
    g.n = n;
    g.k = k;
    g.stride_c = m * n;
    const int64_t batches_a = NumElements(batch_a), batches_b = NumElements(batch_b);
    if (batches_b == 1) {
      // One right-hand matrix (the weights of a linear layer): stack A's batch into the rows.
      g.m = batches * m;
      return Run(ctx, dev, g, a.raw_data(), b.raw_data(), y.raw_data());
    }
    if ((batches_a == 1 || batches_a == batches) && batches_b == batches) {
      g.batch = batches;
      g.stride_a = batches_a == 1 ? 0 : m * k;
      g.stride_b = k * n;
      return Run(ctx, dev, g, a.raw_data(), b.raw_data(), y.raw_data());
    }
    // Partial broadcasting ([2,1,..] x [1,3,..]): one GEMM per output matrix.
    const std::vector<int64_t> str_a = BatchStrides(batch, batch_a), str_b = BatchStrides(batch, batch_b);
    const size_t esize = DTypeSize(a.dtype());
    for (int64_t i = 0; i < batches; ++i) {
      int64_t rem = i, ia = 0, ib = 0;
      for (size_t d = batch.size(); d-- > 0;) {
        const int64_t coord = rem % batch[d];
        rem /= batch[d];
        ia += coord * str_a[d];
        ib += coord * str_b[d];
      }
      TOB_RETURN_IF_ERROR(Run(ctx, dev, g, static_cast<const char*>(a.raw_data()) + ia * m * k * esize,
                              static_cast<const char*>(b.raw_data()) + ib * k * n * esize,
                              static_cast<char*>(y.raw_data()) + i * m * n * esize));
    }
    return Status::OK();
  }

 private:
  static Status Run(KernelContext& ctx, CudaDeviceContext* dev, const RowMajorGemmArgs& g, const void* a, const void* b,
                    void* c) {
    Status st = RowMajorGemm(dev->cublas(), ctx.input(0)->dtype(), g, a, b, c);
    return st.ok() ? st : ctx.Fail(st.message());
  }
};

class CudaGemmKernel final : public OpKernel {
 public:
  CudaGemmKernel(const Node& node, float alpha, float beta, bool trans_a, bool trans_b)
      : OpKernel(node), alpha_(alpha), beta_(beta), trans_a_(trans_a), trans_b_(trans_b) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(GemmAttributes a, ParseGemmAttributes(node));
    return MakeKernel<CudaGemmKernel>(node, a.alpha, a.beta, a.trans_a, a.trans_b);
  }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(CudaDeviceContext * dev, KernelDeviceContext(ctx));
    const Tensor& a = *ctx.input(0);
    const Tensor& b = *ctx.input(1);
    const Tensor* c = ctx.input(2);
    Tensor& y = *ctx.output(0);
    if (a.rank() != 2 || b.rank() != 2)
      return ctx.Fail("A and B must be 2-D, got ", ShapeToString(a.shape()), " and ", ShapeToString(b.shape()));
    if (a.dtype() != b.dtype() || y.dtype() != a.dtype() || (c && c->defined() && c->dtype() != a.dtype()))
      return ctx.Fail("A, B, C and Y must share one dtype");
    const int64_t m = trans_a_ ? a.dim(1) : a.dim(0), k = trans_a_ ? a.dim(0) : a.dim(1);
    const int64_t kb = trans_b_ ? b.dim(1) : b.dim(0), n = trans_b_ ? b.dim(0) : b.dim(1);
    if (k != kb) return ctx.Fail("op(A) is ", m, " x ", k, " but op(B) is ", kb, " x ", n);
    if (y.shape() != Shape{m, n}) return ctx.Fail("output ", ShapeToString(y.shape()), " is not ", m, " x ", n);
    if (y.numel() == 0) return Status::OK();

    RowMajorGemmArgs g;
    g.trans_a = trans_a_;
    g.trans_b = trans_b_;
    g.m = m;
    g.n = n;
    g.k = k;
    g.alpha = alpha_;
    g.beta = 0.0;
    if (c != nullptr && c->defined() && beta_ != 0.f) {
      // Y starts as C broadcast to M x N; cuBLAS then adds alpha * op(A) op(B) to beta * Y.
      if (c->shape() == y.shape()) {
        TOB_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(y.raw_data(), c->raw_data(), y.nbytes(), cudaMemcpyDeviceToDevice, dev->stream()));
      } else {
        auto idx = MakeBroadcastIndexing(y.shape(), c->shape(), c->shape());
        if (!idx.ok()) return ctx.Fail("C ", ShapeToString(c->shape()), " does not broadcast to ", m, " x ", n);
        TOB_RETURN_IF_ERROR(CheckCuda(
            "launch_broadcast_copy", cuda::launch_broadcast_copy(static_cast<int>(DTypeSize(y.dtype())), c->raw_data(),
                                                                 y.raw_data(), y.numel(), idx.value(), dev->stream())));
      }
      g.beta = beta_;
    }
    Status st = RowMajorGemm(dev->cublas(), a.dtype(), g, a.raw_data(), b.raw_data(), y.raw_data());
    return st.ok() ? st : ctx.Fail(st.message());
  }

 private:
  float alpha_, beta_;
  bool trans_a_, trans_b_;
};

}  // namespace

void RegisterCudaGemmKernels(KernelRegistry& registry) {
  const std::vector<DType> floats = {DType::kFloat32, DType::kFloat16, DType::kFloat64};
  const std::vector<DType> floats_bf16 = {DType::kFloat32, DType::kFloat16, DType::kFloat64, DType::kBFloat16};
  // bfloat16 joined both ops' type sets at opset 13.
  registry.Register(
      Def("MatMul").Versions(1, 12).Provider(kCudaProvider).Constraint("T", {0, 1}, floats).Kernel<CudaMatMulKernel>());
  registry.Register(Def("MatMul")
                        .Versions(13)
                        .Provider(kCudaProvider)
                        .Constraint("T", {0, 1}, floats_bf16)
                        .Kernel<CudaMatMulKernel>());
  // C is required before opset 11 and optional after; the kernel takes both forms.
  registry.Register(
      Def("Gemm").Versions(7, 12).Provider(kCudaProvider).Constraint("T", {0, 1, 2}, floats).Kernel<CudaGemmKernel>());
  registry.Register(Def("Gemm")
                        .Versions(13)
                        .Provider(kCudaProvider)
                        .Constraint("T", {0, 1, 2}, floats_bf16)
                        .Kernel<CudaGemmKernel>());
}

}  // namespace tob
