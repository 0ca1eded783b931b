// Cast and CastLike between every pair of float32/float64/float16/bfloat16, the integer types
// and bool. Conversions follow numpy's astype: float -> int truncates toward zero (NaN -> 0 and
// saturation at the int64 range instead of UB), any non-zero -> true, bool -> 0/1; 16-bit floats
// go through float32 with round-to-nearest-even.
#include <cstring>

#include "providers/cpu/elementwise/cast_string.h"
#include "providers/cpu/elementwise/elementwise_type_sets.h"

namespace tob::ew {

namespace {

// One value between non-16-bit types.
template <typename D, typename S>
inline D CastScalar(S s) {
  if constexpr (std::is_same_v<D, S>) return s;
  else if constexpr (std::is_same_v<D, bool>) return s != S(0);
  else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<S>) return FloatToInt<D>(s);
  else return static_cast<D>(s);
}

template <typename S, typename D>
void CastSpan(const S* src, D* dst, int64_t n) {
  if constexpr (std::is_same_v<S, D>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(S));
  } else if constexpr (kIs16BitFloat<S> && std::is_same_v<D, float>) {
    ToFloat(src, dst, n);
  } else if constexpr (std::is_same_v<S, float> && kIs16BitFloat<D>) {
    FromFloat(src, dst, n);
  } else if constexpr (kIs16BitFloat<S> || kIs16BitFloat<D>) {
    float buf[kHalfChunk];
    for (int64_t c = 0; c < n; c += kHalfChunk) {
      int64_t m = std::min(kHalfChunk, n - c);
      if constexpr (kIs16BitFloat<S>) ToFloat(src + c, buf, m);
      else
        for (int64_t i = 0; i < m; ++i) buf[i] = CastScalar<float>(src[c + i]);
      if constexpr (kIs16BitFloat<D>) FromFloat(buf, dst + c, m);
      else
        for (int64_t i = 0; i < m; ++i) dst[c + i] = CastScalar<D>(buf[i]);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = CastScalar<D>(src[i]);
  }
}

Status RunCast(const KernelContext& ctx, const Tensor& x, Tensor& y) {
  if (y.numel() != x.numel())
    return ctx.Fail("output ", ShapeToString(y.shape()), " does not match input ", ShapeToString(x.shape()));
  if (y.dtype() == DType::kString) return CastToStrings(ctx, x, y);
  if (x.dtype() == DType::kString) return CastFromStrings(ctx, x, y);
  bool known = false;
  Dispatch(AllList{}, x.dtype(), [&]<typename S>() {
    known = Dispatch(AllList{}, y.dtype(), [&]<typename D>() {
      const S* src = x.data<S>();
      D* dst = y.data<D>();
      ParallelFor(ctx.thread_pool(), x.numel(), kCheapGrain,
                  [&](int64_t begin, int64_t end) { CastSpan<S, D>(src + begin, dst + begin, end - begin); });
    });
  });
  if (!known) return ctx.Fail("cannot cast ", DTypeName(x.dtype()), " to ", DTypeName(y.dtype()));
  return Status::OK();
}

bool Castable(DType t) {
  return DispatchDType<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                       uint64_t, bool, std::string>(t, []<typename T>() {});
}

class CastKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t to = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("to", &to));
    DType dtype = DTypeFromOnnx(static_cast<int32_t>(to));
    if (!Castable(dtype))
      return NotImplemented(node.Describe(), ": Cast to element type ", to, " (", DTypeName(dtype),
                            ") is not supported");
    return MakeKernel<CastKernel>(node);
  }
  Status Compute(KernelContext& ctx) const override { return RunCast(ctx, *ctx.input(0), *ctx.output(0)); }
};

// CastLike(x, like): the output already has like's element type (from the shape function).
class CastLikeKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<CastLikeKernel>(node); }
  Status Compute(KernelContext& ctx) const override {
    if (ctx.output(0)->dtype() != ctx.input(1)->dtype())
      return ctx.Fail("output type ", DTypeName(ctx.output(0)->dtype()), " differs from target_type's ",
                      DTypeName(ctx.input(1)->dtype()));
    return RunCast(ctx, *ctx.input(0), *ctx.output(0));
  }
};

// BitCast: the input's bytes under another element type of the same width (checked by the shape
// function; checked again here because the kernel copies bytes).
class BitCastKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<BitCastKernel>(node); }
  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    if (x.nbytes() != y.nbytes())
      return ctx.Fail("input ", DTypeName(x.dtype()), ShapeToString(x.shape()), " and output ", DTypeName(y.dtype()),
                      ShapeToString(y.shape()), " differ in size");
    if (x.nbytes() > 0 && !y.SharesDataWith(x)) std::memcpy(y.raw_data(), x.raw_data(), x.nbytes());
    return Status::OK();
  }
};

}  // namespace
}  // namespace tob::ew

namespace tob {

void RegisterCpuCastKernels(KernelRegistry& registry) {
  using namespace ew;  // the kernels above
  std::vector<DType> all = AllTypes();
  std::vector<DType> all_no_bf16 = all;
  std::erase(all_no_bf16, DType::kBFloat16);
  // Strings cast to and from every other type (cast_string.h).
  std::vector<DType> with_string = AllTypesAndString();
  std::vector<DType> with_string_no_bf16 = with_string;
  std::erase(with_string_no_bf16, DType::kBFloat16);
  registry.Register(Def("Cast").Versions(6, 12).Constraint("T1", {0}, with_string_no_bf16).Kernel<CastKernel>());
  registry.Register(Def("Cast").Versions(13).Constraint("T1", {0}, with_string).Kernel<CastKernel>());
  registry.Register(Def("CastLike")
                        .Versions(15)
                        .Constraint("T1", {0}, with_string)
                        .Constraint("T2", {1}, with_string)
                        .Kernel<CastLikeKernel>());
  registry.Register(Def("BitCast").Versions(26).Constraint("T1", {0}, all).Kernel<BitCastKernel>());
}

}  // namespace tob
