// MatMul (numpy semantics: 1-D operands, broadcast batch dims), com.microsoft FusedMatMul (MatMul
// reading transposed operands in place, scaled by alpha) and Gemm.
#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "core/domain.h"
#include "framework/kernel_registry.h"
#include "ops/gemm_attributes.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/bf16_gemm.h"
#include "providers/cpu/nn/gemm.h"
#include "providers/cpu/nn/sgemm_packed.h"

namespace tob {

namespace {

// What a product reads: MatMul is Y = A @ B; com.microsoft FusedMatMul adds alpha and reads either
// operand with its last two axes swapped, in place (the GEMMs take transposed operands as they are).
struct ProductSpec {
  bool trans_a = false, trans_b = false;
  float alpha = 1.f;
};

// `batch` problems y[i] = alpha * op(a[i]) x op(b[i]), each operand a contiguous matrix (K x M
// when transposed): BLAS or our float32 GEMMs for float/double, the native kernel for bfloat16
// (MatMulKernel calls this with bfloat16 only where Bf16GemmAvailable()).
template <typename T>
Status RunGemms(const KernelContext& ctx, const ProductSpec& p, int64_t M, int64_t N, int64_t K, const T* const* a,
                const T* const* b, T* const* y, int64_t batch) {
  const int64_t lda = std::max<int64_t>(1, p.trans_a ? M : K), ldb = std::max<int64_t>(1, p.trans_b ? K : N);
  const int64_t ldy = std::max<int64_t>(1, N);
  if constexpr (std::is_same_v<T, BFloat16>)
    return BatchedGemmBf16(ctx, p.trans_a, p.trans_b, M, N, K, p.alpha, a, lda, b, ldb, 0.f, y, ldy, batch);
  else
    return BatchedGemm(p.trans_a, p.trans_b, M, N, K, T(p.alpha), a, lda, b, ldb, T(0), y, ldy, batch,
                       ctx.thread_pool());
}

// op(B) of a float32 constant B (2-D), packed once per session for sgemm_packed.h: nullopt where
// the CPU has no kernel for it or B is not such a constant.
std::optional<PackedSgemmB> PackConstantB(const Tensor& b, bool trans_b) {
  if (b.dtype() != DType::kFloat32 || b.rank() != 2 || !SgemmAvailable()) return std::nullopt;
  const int64_t N = trans_b ? b.dim(0) : b.dim(1), K = trans_b ? b.dim(1) : b.dim(0);
  return PackedSgemmB::Pack(trans_b, N, K, b.data<float>(), std::max<int64_t>(1, b.dim(1)), nullptr);
}

// Y = alpha * op(A) x op(B) for float/double (and bfloat16 on the native kernel), numpy batch
// broadcasting; a 1-D operand is a vector (its trans flag ignored). Shapes were checked by the shape
// function; K is re-checked so that a kernel driven without it cannot read out of bounds.
template <typename T>
Status MatMulTyped(const KernelContext& ctx, const Tensor& A, const Tensor& B, Tensor& Y, ProductSpec p) {
  const Shape& as = A.shape();
  const Shape& bs = B.shape();
  if (as.empty() || bs.empty()) return ctx.Fail("operands must have rank >= 1");
  const bool a_vector = as.size() == 1, b_vector = bs.size() == 1;
  p.trans_a = p.trans_a && !a_vector;
  p.trans_b = p.trans_b && !b_vector;
  const int64_t a_rows = a_vector ? 1 : as[as.size() - 2], a_cols = as.back();
  const int64_t b_rows = b_vector ? bs[0] : bs[bs.size() - 2], b_cols = b_vector ? 1 : bs.back();
  const int64_t M = p.trans_a ? a_cols : a_rows, K = p.trans_a ? a_rows : a_cols;
  const int64_t Kb = p.trans_b ? b_cols : b_rows, N = p.trans_b ? b_rows : b_cols;
  if (K != Kb)
    return ctx.Fail("inner dimensions do not match: ", ShapeToString(as), p.trans_a ? " (transposed)" : "", " x ",
                    ShapeToString(bs), p.trans_b ? " (transposed)" : "");
  if (Y.numel() == 0) return Status::OK();

  Shape a_batch = a_vector ? Shape{} : Shape(as.begin(), as.end() - 2);
  Shape b_batch = b_vector ? Shape{} : Shape(bs.begin(), bs.end() - 2);
  const T* a = A.data<T>();
  const T* b = B.data<T>();
  T* y = Y.data<T>();

  // B shared by every batch and A's rows contiguous across its batch: fold A's batch dims into M,
  // one large GEMM.
  if (!p.trans_a && NumElements(b_batch) == 1 && NumElements(a_batch) * M * N == Y.numel())
    return RunGemms<T>(ctx, p, NumElements(a_batch) * M, N, K, &a, &b, &y, 1);

  // General case: one GEMM per broadcast batch index.
  const size_t rank = std::max(a_batch.size(), b_batch.size());
  a_batch.insert(a_batch.begin(), rank - a_batch.size(), 1);
  b_batch.insert(b_batch.begin(), rank - b_batch.size(), 1);
  Shape out_batch(rank);
  for (size_t i = 0; i < rank; ++i) {
    if (a_batch[i] != b_batch[i] && a_batch[i] != 1 && b_batch[i] != 1)
      return ctx.Fail("batch dims of ", ShapeToString(as), " and ", ShapeToString(bs), " do not broadcast");
    out_batch[i] = std::max(a_batch[i], b_batch[i]);
    if (a_batch[i] == 0 || b_batch[i] == 0) out_batch[i] = 0;
  }
  const int64_t batch = NumElements(out_batch);
  if (batch * M * N != Y.numel()) return ctx.Fail("output has ", Y.numel(), " elements, expected ", batch * M * N);
  std::vector<int64_t> a_stride(rank, 0), b_stride(rank, 0);
  for (int64_t i = static_cast<int64_t>(rank) - 1, sa = M * K, sb = K * N; i >= 0; --i) {
    a_stride[i] = a_batch[i] == 1 ? 0 : sa;
    b_stride[i] = b_batch[i] == 1 ? 0 : sb;
    sa *= a_batch[i];
    sb *= b_batch[i];
  }
  std::vector<const T*> a_ptrs(batch), b_ptrs(batch);
  std::vector<T*> y_ptrs(batch);
  std::vector<int64_t> index(rank, 0);
  for (int64_t i = 0; i < batch; ++i) {
    int64_t ao = 0, bo = 0;
    for (size_t d = 0; d < rank; ++d) {
      ao += index[d] * a_stride[d];
      bo += index[d] * b_stride[d];
    }
    a_ptrs[i] = a + ao;
    b_ptrs[i] = b + bo;
    y_ptrs[i] = y + i * M * N;
    for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0 && ++index[d] == out_batch[d]; --d) index[d] = 0;
  }
  return RunGemms<T>(ctx, p, M, N, K, a_ptrs.data(), b_ptrs.data(), y_ptrs.data(), batch);
}

// MatMul, and com.microsoft FusedMatMul (its transposed operands read in place).
class MatMulKernel final : public OpKernel {
 public:
  MatMulKernel(const Node& node, ProductSpec spec) : OpKernel(node), spec_(spec) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    return MakeKernel<MatMulKernel>(node, ProductSpec{});
  }
  static StatusOr<std::unique_ptr<OpKernel>> CreateFused(const Node& node) {
    TOB_ASSIGN_OR_RETURN(FusedMatMulAttributes a, ParseFusedMatMulAttributes(node));
    return MakeKernel<MatMulKernel>(node, ProductSpec{a.trans_a, a.trans_b, a.alpha});
  }

  Status PrePack(int input_index, const Tensor& constant, bool* packed) override {
    if (input_index == 1) packed_b_ = PackConstantB(constant, spec_.trans_b);
    *packed = input_index == 1 && packed_b_.has_value();
    return Status::OK();
  }
  size_t PrePackedBytes() const override { return packed_b_ ? packed_b_->bytes() : 0; }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& a = *ctx.input(0);
    const Tensor& b = *ctx.input(1);
    Tensor& y = *ctx.output(0);
    // B packed at session initialisation: A's batch dims fold into M (rows of a transposed A are
    // not contiguous across its batch: a 2-D one only), one GEMM on the panels.
    if (packed_b_ && a.dtype() == DType::kFloat32 && (!spec_.trans_a || a.rank() == 2)) {
      const int64_t K = packed_b_->K(), N = packed_b_->N();
      if (b.shape() == (spec_.trans_b ? Shape{N, K} : Shape{K, N})) {
        if (a.rank() == 0 || (spec_.trans_a ? a.dim(0) : a.shape().back()) != K)
          return ctx.Fail("inner dimensions do not match: ", ShapeToString(a.shape()), " x ", ShapeToString(b.shape()));
        if (y.numel() == 0) return Status::OK();
        const int64_t rows = y.numel() / N;
        if (a.numel() != rows * K) return ctx.Fail("output has ", y.numel(), " elements, expected ", a.numel() / K * N);
        const int64_t lda = std::max<int64_t>(1, spec_.trans_a ? rows : K);
        SgemmPackedB(spec_.trans_a, rows, spec_.alpha, a.data<float>(), lda, *packed_b_, 0.f, y.data<float>(), N,
                     ctx.thread_pool());
        return Status::OK();
      }
    }
    return DispatchFloat(ctx, a.dtype(), [&]<typename T>() -> Status {
      if constexpr (std::is_same_v<T, BFloat16>) {
        if (Bf16GemmAvailable()) return MatMulTyped<BFloat16>(ctx, a, b, y, spec_);
      }
      if constexpr (kIs16BitFloat<T>) {
        TOB_ASSIGN_OR_RETURN(Tensor af, ToFloatScratch(ctx, a));
        TOB_ASSIGN_OR_RETURN(Tensor bf, ToFloatScratch(ctx, b));
        TOB_ASSIGN_OR_RETURN(Tensor yf, ctx.AllocateScratch(DType::kFloat32, y.shape()));
        TOB_RETURN_IF_ERROR(MatMulTyped<float>(ctx, af, bf, yf, spec_));
        return FromFloatScratch(ctx, yf, &y);
      } else {
        return MatMulTyped<T>(ctx, a, b, y, spec_);
      }
    });
  }

 private:
  ProductSpec spec_;
  std::optional<PackedSgemmB> packed_b_;  // set once by PrePack, read-only afterwards
};

class GemmKernel final : public OpKernel {
 public:
  GemmKernel(const Node& node, float alpha, float beta, bool trans_a, bool trans_b)
      : OpKernel(node), alpha_(alpha), beta_(beta), trans_a_(trans_a), trans_b_(trans_b) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(GemmAttributes a, ParseGemmAttributes(node));
    return MakeKernel<GemmKernel>(node, a.alpha, a.beta, a.trans_a, a.trans_b);
  }

  Status PrePack(int input_index, const Tensor& constant, bool* packed) override {
    if (input_index == 1) packed_b_ = PackConstantB(constant, trans_b_);
    *packed = input_index == 1 && packed_b_.has_value();
    return Status::OK();
  }
  size_t PrePackedBytes() const override { return packed_b_ ? packed_b_->bytes() : 0; }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& a = *ctx.input(0);
    const Tensor& b = *ctx.input(1);
    const Tensor* c = ctx.input(2);
    Tensor& y = *ctx.output(0);
    if (a.rank() != 2 || b.rank() != 2) return ctx.Fail("A and B must be 2-D");
    const int64_t M = trans_a_ ? a.dim(1) : a.dim(0), K = trans_a_ ? a.dim(0) : a.dim(1);
    const int64_t Kb = trans_b_ ? b.dim(1) : b.dim(0), N = trans_b_ ? b.dim(0) : b.dim(1);
    if (K != Kb) return ctx.Fail("inner dimensions do not match: K = ", K, " vs ", Kb);
    if (y.rank() != 2 || y.dim(0) != M || y.dim(1) != N)  // (no Shape{M, N}: a run allocates nothing here)
      return ctx.Fail("output shape ", ShapeToString(y.shape()), " is not [M, N]");
    const bool use_c = c != nullptr && beta_ != 0.f;
    if (packed_b_ && a.dtype() == DType::kFloat32 && packed_b_->K() == K && packed_b_->N() == N) {
      if (use_c) TOB_RETURN_IF_ERROR(BroadcastC<float>(ctx, *c, M, N, y.data<float>()));
      SgemmPackedB(trans_a_, M, alpha_, a.data<float>(), std::max<int64_t>(1, a.dim(1)), *packed_b_,
                   use_c ? beta_ : 0.f, y.data<float>(), std::max<int64_t>(1, N), ctx.thread_pool());
      return Status::OK();
    }
    return DispatchFloat(ctx, a.dtype(), [&]<typename T>() -> Status {
      if (use_c) TOB_RETURN_IF_ERROR(BroadcastC<T>(ctx, *c, M, N, y.data<T>()));
      return GemmAnyFloat<T>(ctx, trans_a_, trans_b_, M, N, K, alpha_, a.data<T>(), std::max<int64_t>(1, a.dim(1)),
                             b.data<T>(), std::max<int64_t>(1, b.dim(1)), use_c ? beta_ : 0.f, y.data<T>(),
                             std::max<int64_t>(1, N));
    });
  }

 private:
  // Y = C broadcast to [M, N] (C is a scalar, [N], [1, N], [M, 1] or [M, N]).
  template <typename T>
  static Status BroadcastC(const KernelContext& ctx, const Tensor& c, int64_t M, int64_t N, T* y) {
    const Shape& cs = c.shape();
    if (cs.size() > 2) return ctx.Fail("C must have rank <= 2");
    const int64_t rows = cs.size() == 2 ? cs[0] : 1;
    const int64_t cols = cs.empty() ? 1 : cs.back();
    if ((rows != 1 && rows != M) || (cols != 1 && cols != N))
      return ctx.Fail("C of shape ", ShapeToString(cs), " does not broadcast to [", M, ", ", N, "]");
    const T* cp = c.data<T>();
    auto fill_rows = [&](int64_t begin, int64_t end) {
      for (int64_t m = begin; m < end; ++m) {
        const T* src = cp + (rows == 1 ? 0 : m * cols);
        T* dst = y + m * N;
        if (cols == N) std::memcpy(dst, src, sizeof(T) * N);
        else std::fill(dst, dst + N, src[0]);
      }
    };
    // std::ref: the std::function ParallelFor takes holds a reference (no heap copy of the closure).
    ParallelFor(ctx.thread_pool(), M, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, N)), std::ref(fill_rows));
    return Status::OK();
  }

  float alpha_, beta_;
  bool trans_a_, trans_b_;
  std::optional<PackedSgemmB> packed_b_;  // op(B) of a constant B, set once by PrePack
};

}  // namespace

void RegisterCpuMatMulKernels(KernelRegistry& registry) {
  registry.Register(Def("MatMul").Versions(1).Constraint("T", {0, 1}, FloatTypes()).Kernel<MatMulKernel>());
  // onnxruntime's contrib op; MatMulTransposeFusion folds batched Transposes into it.
  registry.Register(Def("FusedMatMul")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T", {0, 1}, FloatTypes())
                        .Factory(&MatMulKernel::CreateFused));
  // C always broadcasts one way to [M, N]: that covers opsets < 7 (whose 'broadcast' = 0 only
  // allowed an exact [M, N]) too. C is optional from opset 11 (checked by the shape function).
  registry.Register(Def("Gemm").Versions(1).Constraint("T", {0, 1, 2}, FloatTypes()).Kernel<GemmKernel>());
}

}  // namespace tob
