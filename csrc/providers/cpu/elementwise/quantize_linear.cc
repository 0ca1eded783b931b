// QuantizeLinear (10-25), DequantizeLinear (10-25) and DynamicQuantizeLinear (11): per-tensor,
// per-axis and blocked scales (ops/quantize_attributes.h), every quantized type of onnx 1.23
// (int8/uint8, int16/uint16, int4/uint4, int2/uint2, the float8 types, float4e2m1), scales of
// float32/float16/bfloat16 (and int32 / float8e8m0 where the opset allows them). The arithmetic is
// math/quantize_math.h's; low-precision values go through lowp:: (core/low_precision.h). Work is
// split in blocks of lowp::kBlock elements, so threads never share a byte of a packed output.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/float_convert.h"
#include "framework/kernel_registry.h"
#include "math/quantize_math.h"
#include "ops/quantize_attributes.h"
#include "providers/cpu/elementwise/low_precision_convert.h"

namespace tob {

namespace {

// Which scale / zero-point element each element of x uses, walked element by element.
class ParamCursor {
 public:
  ParamCursor(const Shape& x, const QuantLayout& layout, int64_t first)
      : kind_(layout.kind), block_(layout.block_size) {
    if (kind_ != QuantLayout::Kind::kPerTensor) {
      for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) {
        if (d < layout.axis) outer_ *= x[d];
        else if (d > layout.axis) inner_ *= x[d];
      }
      axis_len_ = x[layout.axis];
      if (block_ > 0) blocks_ = (axis_len_ + block_ - 1) / block_;
      if (inner_ > 0 && axis_len_ > 0) {
        i_ = first % inner_;
        a_ = (first / inner_) % axis_len_;
        o_ = first / (inner_ * axis_len_);
      }
    }
  }
  int64_t index() const {
    switch (kind_) {
      case QuantLayout::Kind::kPerTensor: return 0;
      case QuantLayout::Kind::kPerAxis: return a_;
      case QuantLayout::Kind::kBlocked: return (o_ * blocks_ + a_ / block_) * inner_ + i_;
    }
    return 0;
  }
  void Next() {
    if (kind_ == QuantLayout::Kind::kPerTensor) return;
    if (++i_ == inner_) {
      i_ = 0;
      if (++a_ == axis_len_) {
        a_ = 0;
        ++o_;
      }
    }
  }

 private:
  QuantLayout::Kind kind_;
  int64_t block_, blocks_ = 1, outer_ = 1, inner_ = 1, axis_len_ = 1;
  int64_t i_ = 0, a_ = 0, o_ = 0;
};

// Elements [begin, begin + n) of a tensor of any type the quantization ops read, as doubles
// (exact: the values of int32 and of every float type fit).
void ReadAsDouble(const Tensor& t, int64_t begin, int64_t n, double* out) {
  const DType dt = t.dtype();
  if (IsLowPrecision(dt)) {
    float f[lowp::kBlock];
    int32_t v[lowp::kBlock];
    for (int64_t c = 0; c < n; c += lowp::kBlock) {
      const int64_t m = std::min(lowp::kBlock, n - c);
      if (lowp::IsIntegerLowPrecision(dt)) {
        lowp::DecodeToInt(dt, t.raw_data(), begin + c, m, v);
        for (int64_t i = 0; i < m; ++i) out[c + i] = v[i];
      } else {
        lowp::DecodeToFloat(dt, t.raw_data(), begin + c, m, f);
        for (int64_t i = 0; i < m; ++i) out[c + i] = f[i];
      }
    }
    return;
  }
  const bool known = DispatchDType<float, double, Float16, BFloat16, int8_t, uint8_t, int16_t, uint16_t, int32_t>(
      dt, [&]<typename T>() {
        const T* src = t.data<T>() + begin;
        for (int64_t i = 0; i < n; ++i) {
          if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) out[i] = static_cast<float>(src[i]);
          else out[i] = static_cast<double>(src[i]);
        }
      });
  TOB_ENFORCE(known, "ReadAsDouble on ", DTypeName(dt));
}

// A whole small tensor (scale, zero point) as doubles, in scratch memory.
StatusOr<Tensor> ParamsAsDouble(const KernelContext& ctx, const Tensor& t) {
  TOB_ASSIGN_OR_RETURN(Tensor out, ctx.AllocateScratch(DType::kFloat64, {t.numel()}));
  ReadAsDouble(t, 0, t.numel(), out.data<double>());
  return out;
}

// numpy's type for x / scale (onnx's reference divides numpy arrays): the wider float type,
// float32 for float16 with bfloat16, float64 when an int32 takes part.
QuantPrecision DivisionPrecision(DType x, DType scale) {
  auto of = [](DType t) {
    switch (t) {
      case DType::kFloat16: return QuantPrecision::kFloat16;
      case DType::kBFloat16: return QuantPrecision::kBFloat16;
      case DType::kInt32: return QuantPrecision::kFloat64;
      default: return QuantPrecision::kFloat32;  // float32, and float8e8m0 (powers of two)
    }
  };
  if (scale == DType::kFloat8E8M0) return of(x);
  const QuantPrecision a = of(x), b = of(scale);
  if (a == b) return a;
  if (a == QuantPrecision::kFloat64 || b == QuantPrecision::kFloat64) return QuantPrecision::kFloat64;
  return QuantPrecision::kFloat32;
}

StatusOr<QuantLayout> LayoutOf(const KernelContext& ctx, const Tensor& x, const Tensor& scale, const Tensor* zp,
                               const QuantAttributes& attrs) {
  auto layout = ResolveQuantLayout(x.shape(), scale.shape(), zp != nullptr ? &zp->shape() : nullptr, attrs,
                                   ctx.node().Describe());
  if (!layout.ok()) return ctx.Fail(layout.status().message());
  return layout;
}

// Writes one block of quantized integers (already saturated) into y's elements [begin, begin + n).
void StoreIntegers(Tensor& y, int64_t begin, const int64_t* v, int64_t n) {
  const DType t = y.dtype();
  if (IsPackedDType(t)) {
    auto* bytes = static_cast<uint8_t*>(y.raw_data());
    const int bits = DTypeBits(t);
    for (int64_t i = 0; i < n; ++i) StorePackedCode(bytes, begin + i, bits, IntegerToCode(v[i], bits));
    return;
  }
  DispatchDType<int8_t, uint8_t, int16_t, uint16_t, int32_t>(t, [&]<typename T>() {
    T* dst = y.data<T>() + begin;
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(v[i]);
  });
}

class QuantizeLinearKernel final : public OpKernel {
 public:
  QuantizeLinearKernel(const Node& node, QuantAttributes attrs) : OpKernel(node), attrs_(attrs) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, int opset) {
    TOB_ASSIGN_OR_RETURN(QuantAttributes attrs, QuantAttributes::Read(node, opset, true));
    return MakeKernel<QuantizeLinearKernel>(node, attrs);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& scale = *ctx.input(1);
    const Tensor* zp = ctx.input(2);
    Tensor& y = *ctx.output(0);
    if (zp != nullptr && zp->dtype() != y.dtype())
      return ctx.Fail("the zero point's type ", DTypeName(zp->dtype()), " differs from the output's ",
                      DTypeName(y.dtype()));
    TOB_ASSIGN_OR_RETURN(QuantLayout layout, LayoutOf(ctx, x, scale, zp, attrs_));
    const QuantPrecision p = attrs_.precision == DType::kFloat16    ? QuantPrecision::kFloat16
                             : attrs_.precision == DType::kBFloat16 ? QuantPrecision::kBFloat16
                             : attrs_.precision == DType::kFloat32  ? QuantPrecision::kFloat32
                                                                    : DivisionPrecision(x.dtype(), scale.dtype());
    TOB_ASSIGN_OR_RETURN(Tensor scales, ParamsAsDouble(ctx, scale));
    for (int64_t i = 0; i < scales.numel(); ++i)
      scales.data<double>()[i] = RoundToPrecision(scales.data<double>()[i], p);
    Tensor zps;
    if (zp != nullptr) {
      TOB_ASSIGN_OR_RETURN(zps, ParamsAsDouble(ctx, *zp));
    }
    const double* s = scales.data<double>();
    const double* z = zp != nullptr ? zps.data<double>() : nullptr;
    const DType out = y.dtype();
    int64_t lo = 0, hi = 0;
    const bool integer = QuantizedIntegerRange(out, &lo, &hi);
    lowp::CastOptions cast;
    cast.saturate = attrs_.saturate;
    const int64_t n = x.numel(), blocks = (n + lowp::kBlock - 1) / lowp::kBlock;
    ParallelFor(ctx.thread_pool(), blocks, 1, [&](int64_t b0, int64_t b1) {
      double xv[lowp::kBlock];
      int64_t iv[lowp::kBlock];
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t begin = b * lowp::kBlock, m = std::min(lowp::kBlock, n - begin);
        ReadAsDouble(x, begin, m, xv);
        ParamCursor cursor(x.shape(), layout, begin);
        for (int64_t i = 0; i < m; ++i, cursor.Next()) {
          const int64_t k = cursor.index();
          const double q = QuantizeQuotient(RoundToPrecision(xv[i], p), s[k], p);
          const double zero = z != nullptr ? z[k] : 0.0;
          if (integer) iv[i] = QuantizeToInteger(q, zero, lo, hi);
          else if (out == DType::kFloat4E2M1) xv[i] = RoundToPrecision(q + zero, p);
          else xv[i] = q + zero;  // float8: one rounding, in Encode
        }
        if (integer) StoreIntegers(y, begin, iv, m);
        else lowp::Encode(xv, m, out, y.raw_data(), begin, cast);
      }
    });
    return Status::OK();
  }

 private:
  QuantAttributes attrs_;
};

class DequantizeLinearKernel final : public OpKernel {
 public:
  DequantizeLinearKernel(const Node& node, QuantAttributes attrs) : OpKernel(node), attrs_(attrs) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, int opset) {
    TOB_ASSIGN_OR_RETURN(QuantAttributes attrs, QuantAttributes::Read(node, opset, false));
    return MakeKernel<DequantizeLinearKernel>(node, attrs);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& scale = *ctx.input(1);
    const Tensor* zp = ctx.input(2);
    Tensor& y = *ctx.output(0);
    if (zp != nullptr && zp->dtype() != x.dtype())
      return ctx.Fail("the zero point's type ", DTypeName(zp->dtype()), " differs from x's ", DTypeName(x.dtype()));
    TOB_ASSIGN_OR_RETURN(QuantLayout layout, LayoutOf(ctx, x, scale, zp, attrs_));
    TOB_ASSIGN_OR_RETURN(Tensor scales, ParamsAsDouble(ctx, scale));
    Tensor zps;
    if (zp != nullptr) {
      TOB_ASSIGN_OR_RETURN(zps, ParamsAsDouble(ctx, *zp));
    }
    const double* s = scales.data<double>();
    const double* z = zp != nullptr ? zps.data<double>() : nullptr;
    const int64_t n = x.numel(), blocks = (n + lowp::kBlock - 1) / lowp::kBlock;
    const DType out = y.dtype();
    ParallelFor(ctx.thread_pool(), blocks, 1, [&](int64_t b0, int64_t b1) {
      double xv[lowp::kBlock];
      float yv[lowp::kBlock];
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t begin = b * lowp::kBlock, m = std::min(lowp::kBlock, n - begin);
        ReadAsDouble(x, begin, m, xv);
        ParamCursor cursor(x.shape(), layout, begin);
        for (int64_t i = 0; i < m; ++i, cursor.Next()) {
          const int64_t k = cursor.index();
          // x - zero point is exact in double (integers and float8/float4 values), then float32.
          const float d = static_cast<float>(z != nullptr ? xv[i] - z[k] : xv[i]);
          yv[i] = d * static_cast<float>(s[k]);
        }
        if (out == DType::kFloat32) std::memcpy(y.data<float>() + begin, yv, sizeof(float) * m);
        else if (out == DType::kFloat16) FromFloat(yv, y.data<Float16>() + begin, m);
        else FromFloat(yv, y.data<BFloat16>() + begin, m);
      }
    });
    return Status::OK();
  }

 private:
  QuantAttributes attrs_;
};

// onnx's reference, in float32: scale = (max(0, max x) - min(0, min x)) / 255 (1 / 255 when the
// range is empty), zero point = rint(clamp(-min / scale, 0, 255)), y = clamp(rint(x / scale) +
// zero point, 0, 255). NaN elements take no part in the range and quantize to 0.
class DynamicQuantizeLinearKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    return MakeKernel<DynamicQuantizeLinearKernel>(node);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const float* xv = x.data<float>();
    const int64_t n = x.numel();
    float lo = 0.0f, hi = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(xv[i])) continue;
      lo = std::min(lo, xv[i]);
      hi = std::max(hi, xv[i]);
    }
    const float scale = (lo == hi ? 1.0f : hi - lo) / 255.0f;
    const float initial_zero_point = 0.0f - lo / scale;
    const float zero_point = std::rint(std::clamp(initial_zero_point, 0.0f, 255.0f));
    uint8_t* y = ctx.output(0)->data<uint8_t>();
    ParallelFor(ctx.thread_pool(), n, 4096, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        y[i] = static_cast<uint8_t>(QuantizeToInteger(static_cast<double>(xv[i] / scale), zero_point, 0, 255));
    });
    *ctx.output(1)->data<float>() = scale;
    *ctx.output(2)->data<uint8_t>() = static_cast<uint8_t>(zero_point);
    return Status::OK();
  }
};

template <typename K>
KernelFactory FactoryAt(int opset) {
  return [opset](const Node& node) { return K::Create(node, opset); };
}

}  // namespace

void RegisterCpuQuantizeKernels(KernelRegistry& registry) {
  const std::vector<DType> f32{DType::kFloat32};
  const std::vector<DType> floats{DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  // The opsets at which QuantizeLinear / DequantizeLinear changed (types or attributes); each
  // def's factory reads the attributes of its first opset.
  const std::vector<int> since{10, 13, 19, 21, 23, 24, 25};
  for (size_t i = 0; i < since.size(); ++i) {
    const int v = since[i];
    const int end = i + 1 < since.size() ? since[i + 1] - 1 : kMaxOpset;
    const std::vector<DType> quantized = QuantizedTypesAt(v);
    // QuantizeLinear: x (T1), y_scale (T1 up to 22, T2 from 23), y_zero_point (the output type).
    std::vector<DType> x_types =
        v < 19 ? std::vector<DType>{DType::kFloat32, DType::kInt32}
               : std::vector<DType>{DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32};
    std::vector<DType> scale_types = v < 19 ? f32 : x_types;
    if (v >= 24) scale_types.push_back(DType::kFloat8E8M0);
    registry.Register(Def("QuantizeLinear")
                          .Versions(v, end)
                          .Constraint("T1", {0}, x_types)
                          .Constraint("T2", {1}, scale_types)
                          .Constraint("T3", {2}, quantized)
                          .Factory(FactoryAt<QuantizeLinearKernel>(v)));
    // DequantizeLinear: x and x_zero_point (T1: the quantized types and int32), x_scale (T2).
    std::vector<DType> dq_types = quantized;
    dq_types.push_back(DType::kInt32);
    std::vector<DType> dq_scales = v < 19 ? f32 : floats;
    if (v >= 24) dq_scales.push_back(DType::kFloat8E8M0);
    registry.Register(Def("DequantizeLinear")
                          .Versions(v, end)
                          .Constraint("T1", {0, 2}, dq_types)
                          .Constraint("T2", {1}, dq_scales)
                          .Factory(FactoryAt<DequantizeLinearKernel>(v)));
  }
  registry.Register(
      Def("DynamicQuantizeLinear").Versions(11).Constraint("T1", {0}, f32).Kernel<DynamicQuantizeLinearKernel>());
}

}  // namespace tob
