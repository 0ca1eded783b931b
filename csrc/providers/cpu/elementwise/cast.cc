// Cast and CastLike between every pair of float32/float64/float16/bfloat16, the integer types,
// bool and the low-precision types (float8, float8e8m0, float4e2m1, the packed 4-/2-bit integers).
// Conversions follow numpy's astype: float -> int truncates toward zero (NaN -> 0 and saturation
// at the int64 range instead of UB), any non-zero -> true, bool -> 0/1; 16-bit floats go through
// float32 with round-to-nearest-even. The low-precision types follow onnx's rules
// (core/low_precision.h): 'saturate' for float8 and float8e8m0 targets, 'round_mode' for
// float8e8m0 targets; decoding them is exact.
#include <cstring>

#include "providers/cpu/elementwise/cast_string.h"
#include "providers/cpu/elementwise/elementwise_type_sets.h"
#include "providers/cpu/elementwise/low_precision_convert.h"

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

// Casts with a low-precision source or target, by blocks of lowp::kBlock elements (so the
// threads never share a byte of a packed tensor): the source decoded exactly into a float32 or
// int32 block unless it is a standard type, then encoded into the target's code or cast by the
// standard path.
Status RunLowPrecisionCast(const KernelContext& ctx, const Tensor& x, Tensor& y, const lowp::CastOptions& opts) {
  const DType from = x.dtype(), to = y.dtype();
  const int64_t n = x.numel();
  if (from == to) {  // the same codes: the bytes as they are
    if (x.nbytes() > 0 && !y.SharesDataWith(x)) std::memcpy(y.raw_data(), x.raw_data(), x.nbytes());
    return Status::OK();
  }
  bool known = true;
  const int64_t blocks = (n + lowp::kBlock - 1) / lowp::kBlock;
  if (!IsLowPrecision(from)) {  // a standard source into a low-precision target
    known = Dispatch(AllList{}, from, [&]<typename S>() {
      const S* src = x.data<S>();
      ParallelFor(ctx.thread_pool(), blocks, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t begin = b * lowp::kBlock, m = std::min(lowp::kBlock, n - begin);
          lowp::Encode(src + begin, m, to, y.raw_data(), begin, opts);
        }
      });
    });
    if (!known) return ctx.Fail("cannot cast ", DTypeName(from), " to ", DTypeName(to));
    return Status::OK();
  }
  if (!IsLowPrecision(to) && !Dispatch(AllList{}, to, []<typename D>() {}))
    return ctx.Fail("cannot cast ", DTypeName(from), " to ", DTypeName(to));
  const bool int_source = lowp::IsIntegerLowPrecision(from);
  auto convert_block = [&]<typename B>(B* buf, int64_t begin, int64_t m) {
    if (IsLowPrecision(to)) lowp::Encode(buf, m, to, y.raw_data(), begin, opts);
    else Dispatch(AllList{}, to, [&]<typename D>() { CastSpan<B, D>(buf, y.data<D>() + begin, m); });
  };
  ParallelFor(ctx.thread_pool(), blocks, 1, [&](int64_t b0, int64_t b1) {
    float fbuf[lowp::kBlock];
    int32_t ibuf[lowp::kBlock];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t begin = b * lowp::kBlock, m = std::min(lowp::kBlock, n - begin);
      if (int_source) {
        lowp::DecodeToInt(from, x.raw_data(), begin, m, ibuf);
        convert_block(ibuf, begin, m);
      } else {
        lowp::DecodeToFloat(from, x.raw_data(), begin, m, fbuf);
        convert_block(fbuf, begin, m);
      }
    }
  });
  return Status::OK();
}

Status RunCast(const KernelContext& ctx, const Tensor& x, Tensor& y, const lowp::CastOptions& opts) {
  if (y.numel() != x.numel())
    return ctx.Fail("output ", ShapeToString(y.shape()), " does not match input ", ShapeToString(x.shape()));
  if (y.dtype() == DType::kString) return CastToStrings(ctx, x, y);
  if (x.dtype() == DType::kString) return CastFromStrings(ctx, x, y);
  if (IsLowPrecision(x.dtype()) || IsLowPrecision(y.dtype())) return RunLowPrecisionCast(ctx, x, y, opts);
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
  return IsLowPrecision(t) ||
         DispatchDType<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                       uint64_t, bool, std::string>(t, []<typename T>() {});
}

// 'saturate' (0 or 1) and 'round_mode' ("up", "down", "nearest"), onnx's defaults when absent.
StatusOr<lowp::CastOptions> ReadCastOptions(const Node& node) {
  lowp::CastOptions o;
  int64_t saturate = 1;
  TOB_RETURN_IF_ERROR(node.GetAttr("saturate", &saturate, int64_t{1}));
  if (saturate != 0 && saturate != 1)
    return InvalidModel(node.Describe(), ": attribute 'saturate' must be 0 or 1, got ", saturate);
  o.saturate = saturate == 1;
  std::string mode = "up";
  TOB_RETURN_IF_ERROR(node.GetAttr("round_mode", &mode, std::string("up")));
  if (mode == "up") o.e8m0 = E8M0Rounding::kUp;
  else if (mode == "down") o.e8m0 = E8M0Rounding::kDown;
  else if (mode == "nearest") o.e8m0 = E8M0Rounding::kNearest;
  else return InvalidModel(node.Describe(), ": attribute 'round_mode' must be up, down or nearest, got '", mode, "'");
  return o;
}

class CastKernel final : public OpKernel {
 public:
  CastKernel(const Node& node, lowp::CastOptions opts) : OpKernel(node), opts_(opts) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t to = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("to", &to));
    DType dtype = DTypeFromOnnx(static_cast<int32_t>(to));
    if (!Castable(dtype))
      return NotImplemented(node.Describe(), ": Cast to element type ", to, " (", DTypeName(dtype),
                            ") is not supported");
    TOB_ASSIGN_OR_RETURN(lowp::CastOptions opts, ReadCastOptions(node));
    return MakeKernel<CastKernel>(node, opts);
  }
  Status Compute(KernelContext& ctx) const override { return RunCast(ctx, *ctx.input(0), *ctx.output(0), opts_); }

 private:
  lowp::CastOptions opts_;
};

// CastLike(x, like): the output already has like's element type (from the shape function).
class CastLikeKernel final : public OpKernel {
 public:
  CastLikeKernel(const Node& node, lowp::CastOptions opts) : OpKernel(node), opts_(opts) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(lowp::CastOptions opts, ReadCastOptions(node));
    return MakeKernel<CastLikeKernel>(node, opts);
  }
  Status Compute(KernelContext& ctx) const override {
    if (ctx.output(0)->dtype() != ctx.input(1)->dtype())
      return ctx.Fail("output type ", DTypeName(ctx.output(0)->dtype()), " differs from target_type's ",
                      DTypeName(ctx.input(1)->dtype()));
    return RunCast(ctx, *ctx.input(0), *ctx.output(0), opts_);
  }

 private:
  lowp::CastOptions opts_;
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
  // Strings cast to and from every standard type (cast_string.h).
  std::vector<DType> with_string = AllTypesAndString();
  std::vector<DType> with_string_no_bf16 = with_string;
  std::erase(with_string_no_bf16, DType::kBFloat16);
  registry.Register(Def("Cast").Versions(6, 12).Constraint("T1", {0}, with_string_no_bf16).Kernel<CastKernel>());
  // From opset 19 on, each version that added low-precision types gets its own def.
  const std::vector<int> low_precision_steps{19, 21, 23, 24, 25};
  registry.Register(Def("Cast").Versions(13, 18).Constraint("T1", {0}, with_string).Kernel<CastKernel>());
  registry.Register(Def("CastLike")
                        .Versions(15, 18)
                        .Constraint("T1", {0}, with_string)
                        .Constraint("T2", {1}, with_string)
                        .Kernel<CastLikeKernel>());
  for (size_t i = 0; i < low_precision_steps.size(); ++i) {
    const int since = low_precision_steps[i];
    const int end = i + 1 < low_precision_steps.size() ? low_precision_steps[i + 1] - 1 : kMaxOpset;
    const std::vector<DType> types = With(with_string, LowPrecisionTypesAt(since));
    registry.Register(Def("Cast").Versions(since, end).Constraint("T1", {0}, types).Kernel<CastKernel>());
    registry.Register(Def("CastLike")
                          .Versions(since, end)
                          .Constraint("T1", {0}, types)
                          .Constraint("T2", {1}, types)
                          .Kernel<CastLikeKernel>());
  }
  registry.Register(Def("BitCast").Versions(26).Constraint("T1", {0}, all).Kernel<BitCastKernel>());
}

}  // namespace tob
