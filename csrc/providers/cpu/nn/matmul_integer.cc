// MatMulInteger (10) and QLinearMatMul (10, 21): numpy matmul of int8/uint8 operands (1-D
// operands, broadcast batch dims) on the integer GEMM (qgemm.h), exact int32 sums. Zero points
// (and QLinearMatMul's scales) are per tensor, per row of A ([M] for a 2-D A, [..., M, 1]) or per
// column of B ([N] for a 2-D B, [..., 1, N]). QLinearMatMul requantizes each sum as onnx's
// reference does (math/quantize_math.h): multiplier (a_scale * b_scale) / y_scale in the scales'
// type, sum * multiplier + y_zero_point in float64, rounded half to even, saturated.
#include <algorithm>
#include <vector>

#include "framework/kernel_registry.h"
#include "math/quantize_math.h"
#include "providers/cpu/nn/qgemm.h"

namespace tob {

namespace {

struct MatMulDims {
  int64_t M, N, K;
  Shape a_batch, b_batch, out_batch;      // batch dims, the operands' aligned to the output's rank
  std::vector<int64_t> a_index, b_index;  // per output batch: the operands' batch index
};

StatusOr<MatMulDims> ResolveDims(const KernelContext& ctx, const Shape& as, const Shape& bs) {
  if (as.empty() || bs.empty()) return ctx.Fail("operands must have rank >= 1");
  MatMulDims d;
  const bool a_vector = as.size() == 1, b_vector = bs.size() == 1;
  d.M = a_vector ? 1 : as[as.size() - 2];
  d.K = as.back();
  d.N = b_vector ? 1 : bs.back();
  const int64_t kb = b_vector ? bs[0] : bs[bs.size() - 2];
  if (d.K != kb) return ctx.Fail("inner dimensions do not match: ", ShapeToString(as), " x ", ShapeToString(bs));
  d.a_batch = a_vector ? Shape{} : Shape(as.begin(), as.end() - 2);
  d.b_batch = b_vector ? Shape{} : Shape(bs.begin(), bs.end() - 2);
  const size_t rank = std::max(d.a_batch.size(), d.b_batch.size());
  d.a_batch.insert(d.a_batch.begin(), rank - d.a_batch.size(), 1);
  d.b_batch.insert(d.b_batch.begin(), rank - d.b_batch.size(), 1);
  d.out_batch.resize(rank);
  for (size_t i = 0; i < rank; ++i) {
    if (d.a_batch[i] != d.b_batch[i] && d.a_batch[i] != 1 && d.b_batch[i] != 1)
      return ctx.Fail("batch dims of ", ShapeToString(as), " and ", ShapeToString(bs), " do not broadcast");
    d.out_batch[i] = (d.a_batch[i] == 0 || d.b_batch[i] == 0) ? 0 : std::max(d.a_batch[i], d.b_batch[i]);
  }
  const int64_t batch = NumElements(d.out_batch);
  std::vector<int64_t> index(rank, 0);
  for (int64_t i = 0; i < batch; ++i) {
    int64_t ai = 0, bi = 0;
    for (size_t k = 0; k < rank; ++k) {
      ai = ai * d.a_batch[k] + (d.a_batch[k] == 1 ? 0 : index[k]);
      bi = bi * d.b_batch[k] + (d.b_batch[k] == 1 ? 0 : index[k]);
    }
    d.a_index.push_back(ai);
    d.b_index.push_back(bi);
    for (int64_t k = static_cast<int64_t>(rank) - 1; k >= 0 && ++index[k] == d.out_batch[k]; --k) index[k] = 0;
  }
  return d;
}

// A zero point or scale of one operand: one value, or one per row of A / column of B, possibly
// per batch. `Offset(batch index of the operand)` gives where that batch's values start.
struct PerIndexParam {
  const Tensor* t = nullptr;
  bool per_index = false;
  std::vector<int64_t> batch_stride;  // per operand batch dim (0 where the parameter's dim is 1)

  int64_t Offset(const Shape& operand_batch, int64_t batch_index) const {
    if (!per_index || batch_stride.empty()) return 0;
    int64_t offset = 0;
    for (int64_t k = static_cast<int64_t>(operand_batch.size()) - 1; k >= 0; --k) {
      offset += (batch_index % operand_batch[k]) * batch_stride[k];
      batch_index /= operand_batch[k];
    }
    return offset;
  }
};

// `param` for operand `name` of original shape `shape` (batch dims `batch`, aligned to the output's
// rank): a single value, or per row (is_a: length M) / per column (length N).
StatusOr<PerIndexParam> ResolveParam(const KernelContext& ctx, const Tensor* param, const char* what,
                                     const Shape& shape, const Shape& batch, bool is_a, int64_t len) {
  PerIndexParam p;
  p.t = param;
  if (param == nullptr || param->numel() == 1) return p;
  const Shape& ps = param->shape();
  const auto fail = [&]() {
    return ctx.Fail(what, " has shape ", ShapeToString(ps), "; expected one value or one per ", is_a ? "row" : "column",
                    " of ", is_a ? "A " : "B ", ShapeToString(shape), " (",
                    is_a ? "[M] or [..., M, 1]" : "[N] or [..., 1, N]", ")");
  };
  p.per_index = true;
  if (ps.size() == 1) {
    if (ps[0] != len) return fail();
    return p;
  }
  if (ps.size() != shape.size() || shape.size() < 2) return fail();
  const Shape last = is_a ? Shape{len, 1} : Shape{1, len};
  if (ps[ps.size() - 2] != last[0] || ps.back() != last[1]) return fail();
  // Batch dims: each 1 (shared) or the operand's own.
  const size_t pb = ps.size() - 2, offset = batch.size() - pb;
  p.batch_stride.assign(batch.size(), 0);
  int64_t stride = len;
  for (int64_t k = static_cast<int64_t>(pb) - 1; k >= 0; --k) {
    if (ps[k] != 1 && ps[k] != batch[offset + k]) return fail();
    p.batch_stride[offset + k] = ps[k] == 1 ? 0 : stride;
    stride *= ps[k];
  }
  return p;
}

// The int32 zero points of one batch, one per row/column (len values).
void ZeroPointsOf(const PerIndexParam& p, const Shape& batch, int64_t batch_index, int64_t len, int32_t* out) {
  if (p.t == nullptr) {
    std::fill(out, out + len, 0);
    return;
  }
  const int64_t offset = p.Offset(batch, batch_index);
  for (int64_t i = 0; i < len; ++i) out[i] = static_cast<int32_t>(p.t->ElementAsInt64(p.per_index ? offset + i : 0));
}

struct Operands {
  MatMulDims dims;
  PerIndexParam za, zb;
};

// C[batch] = the exact int32 products; `c_of(i)` is batch i's output (N-strided rows).
template <typename OutFn>
Status RunProducts(const KernelContext& ctx, const Tensor& A, const Tensor& B, const Operands& ops, OutFn&& c_of) {
  const MatMulDims& d = ops.dims;
  const int64_t batch = NumElements(d.out_batch);
  if (batch == 0 || d.M == 0 || d.N == 0) return Status::OK();
  TOB_ASSIGN_OR_RETURN(
      Tensor work, ctx.AllocateScratch(DType::kUInt8, {static_cast<int64_t>(qgemm::WorkspaceBytes(d.M, d.N, d.K))}));
  std::vector<int32_t> za(static_cast<size_t>(d.M)), zb(static_cast<size_t>(d.N));
  const auto* a = A.data<uint8_t>();
  const auto* b = B.data<uint8_t>();
  for (int64_t i = 0; i < batch; ++i) {
    ZeroPointsOf(ops.za, d.a_batch, d.a_index[i], d.M, za.data());
    ZeroPointsOf(ops.zb, d.b_batch, d.b_index[i], d.N, zb.data());
    qgemm::Operand qa{a + d.a_index[i] * d.M * d.K, d.K, A.dtype() == DType::kInt8, za.data(), true};
    qgemm::Operand qb{b + d.b_index[i] * d.K * d.N, d.N, B.dtype() == DType::kInt8, zb.data(), true};
    qgemm::Run(d.M, d.N, d.K, qa, qb, c_of(i), d.N, work.raw_data(), ctx.thread_pool());
  }
  return Status::OK();
}

StatusOr<Operands> Prepare(const KernelContext& ctx, const Tensor& A, const Tensor& B, const Tensor* za,
                           const Tensor* zb) {
  Operands ops;
  TOB_ASSIGN_OR_RETURN(ops.dims, ResolveDims(ctx, A.shape(), B.shape()));
  if (za != nullptr && za->dtype() != A.dtype())
    return ctx.Fail("a_zero_point is ", DTypeName(za->dtype()), ", A is ", DTypeName(A.dtype()));
  if (zb != nullptr && zb->dtype() != B.dtype())
    return ctx.Fail("b_zero_point is ", DTypeName(zb->dtype()), ", B is ", DTypeName(B.dtype()));
  TOB_ASSIGN_OR_RETURN(ops.za, ResolveParam(ctx, za, "a_zero_point", A.shape(), ops.dims.a_batch, true, ops.dims.M));
  TOB_ASSIGN_OR_RETURN(ops.zb, ResolveParam(ctx, zb, "b_zero_point", B.shape(), ops.dims.b_batch, false, ops.dims.N));
  return ops;
}

class MatMulIntegerKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<MatMulIntegerKernel>(node); }
  Status Compute(KernelContext& ctx) const override {
    const Tensor& A = *ctx.input(0);
    const Tensor& B = *ctx.input(1);
    TOB_ASSIGN_OR_RETURN(Operands ops, Prepare(ctx, A, B, ctx.input(2), ctx.input(3)));
    int32_t* y = ctx.output(0)->data<int32_t>();
    const int64_t mn = ops.dims.M * ops.dims.N;
    return RunProducts(ctx, A, B, ops, [&](int64_t i) { return y + i * mn; });
  }
};

QuantPrecision PrecisionOf(DType t) {
  return t == DType::kFloat16    ? QuantPrecision::kFloat16
         : t == DType::kBFloat16 ? QuantPrecision::kBFloat16
                                 : QuantPrecision::kFloat32;
}

// Values [offset, offset + len) of a per-index parameter (or its one value, repeated) as doubles.
void ParamValues(const PerIndexParam& p, const Shape& batch, int64_t batch_index, int64_t len, double* out) {
  const int64_t offset = p.Offset(batch, batch_index);
  for (int64_t i = 0; i < len; ++i) out[i] = p.t->ElementAsDouble(p.per_index ? offset + i : 0);
}

class QLinearMatMulKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<QLinearMatMulKernel>(node); }
  Status Compute(KernelContext& ctx) const override {
    const Tensor& A = *ctx.input(0);
    const Tensor& a_scale = *ctx.input(1);
    const Tensor& B = *ctx.input(3);
    const Tensor& b_scale = *ctx.input(4);
    const Tensor& y_scale = *ctx.input(6);
    const Tensor& y_zp = *ctx.input(7);
    Tensor& Y = *ctx.output(0);
    if (a_scale.dtype() != b_scale.dtype() || a_scale.dtype() != y_scale.dtype())
      return ctx.Fail("the scales must share one type, got ", DTypeName(a_scale.dtype()), ", ",
                      DTypeName(b_scale.dtype()), " and ", DTypeName(y_scale.dtype()));
    if (y_scale.numel() != 1 || y_zp.numel() != 1)
      return ctx.Fail("y_scale and y_zero_point must hold one value, got ", ShapeToString(y_scale.shape()), " and ",
                      ShapeToString(y_zp.shape()));
    TOB_ASSIGN_OR_RETURN(Operands ops, Prepare(ctx, A, B, ctx.input(2), ctx.input(5)));
    const MatMulDims& d = ops.dims;
    auto fits = [](const Tensor& scale, const Tensor& zp) {
      return scale.shape() == zp.shape() || (scale.numel() == 1 && zp.numel() == 1);
    };
    if (!fits(a_scale, *ctx.input(2)) || !fits(b_scale, *ctx.input(5)))
      return ctx.Fail("each scale must have its zero point's shape: a_scale ", ShapeToString(a_scale.shape()), " vs ",
                      ShapeToString(ctx.input(2)->shape()), ", b_scale ", ShapeToString(b_scale.shape()), " vs ",
                      ShapeToString(ctx.input(5)->shape()));
    PerIndexParam as = ops.za, bs = ops.zb;
    as.t = &a_scale;
    bs.t = &b_scale;
    const int64_t batch = NumElements(d.out_batch), mn = d.M * d.N;
    if (batch == 0 || mn == 0) return Status::OK();
    TOB_ASSIGN_OR_RETURN(Tensor acc, ctx.AllocateScratch(DType::kInt32, {batch * mn}));
    TOB_RETURN_IF_ERROR(RunProducts(ctx, A, B, ops, [&](int64_t i) { return acc.data<int32_t>() + i * mn; }));
    const QuantPrecision p = PrecisionOf(y_scale.dtype());
    const double ys = y_scale.ElementAsDouble(0), yz = y_zp.ElementAsDouble(0);
    int64_t lo = 0, hi = 255;
    if (Y.dtype() == DType::kInt8) lo = -128, hi = 127;
    std::vector<double> a_vals(static_cast<size_t>(d.M)), b_vals(static_cast<size_t>(d.N));
    for (int64_t i = 0; i < batch; ++i) {
      ParamValues(as, d.a_batch, d.a_index[i], d.M, a_vals.data());
      ParamValues(bs, d.b_batch, d.b_index[i], d.N, b_vals.data());
      const int32_t* c = acc.data<int32_t>() + i * mn;
      ParallelFor(ctx.thread_pool(), d.M, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, d.N)),
                  [&](int64_t m0, int64_t m1) {
                    for (int64_t m = m0; m < m1; ++m)
                      for (int64_t n = 0; n < d.N; ++n) {
                        const double mult = RequantizeMultiplier(a_vals[m], b_vals[n], ys, p);
                        const int64_t v = Requantize(c[m * d.N + n], mult, yz, lo, hi);
                        const int64_t at = i * mn + m * d.N + n;
                        if (Y.dtype() == DType::kInt8) Y.data<int8_t>()[at] = static_cast<int8_t>(v);
                        else Y.data<uint8_t>()[at] = static_cast<uint8_t>(v);
                      }
                  });
    }
    return Status::OK();
  }
};

}  // namespace

void RegisterCpuMatMulIntegerKernels(KernelRegistry& registry) {
  const std::vector<DType> bytes{DType::kInt8, DType::kUInt8};
  registry.Register(Def("MatMulInteger")
                        .Versions(10)
                        .Constraint("T1", {0, 2}, bytes)
                        .Constraint("T2", {1, 3}, bytes)
                        .Kernel<MatMulIntegerKernel>());
  const std::vector<DType> f32{DType::kFloat32};
  const std::vector<DType> scales{DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  registry.Register(Def("QLinearMatMul")
                        .Versions(10, 20)
                        .Constraint("T1", {0, 2}, bytes)
                        .Constraint("T2", {3, 5}, bytes)
                        .Constraint("T3", {7}, bytes)
                        .Constraint("tensor(float)", {1, 4, 6}, f32)
                        .Kernel<QLinearMatMulKernel>());
  registry.Register(Def("QLinearMatMul")
                        .Versions(21)
                        .Constraint("T1", {0, 2}, bytes)
                        .Constraint("T2", {3, 5}, bytes)
                        .Constraint("T3", {7}, bytes)
                        .Constraint("TS", {1, 4, 6}, scales)
                        .Kernel<QLinearMatMulKernel>());
}

}  // namespace tob
