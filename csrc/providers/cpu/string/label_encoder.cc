// ai.onnx.ml LabelEncoder (opsets 2 and 4): each element looked up among the keys; the value at
// the same position, or the default. Keys and values come from keys_* / values_* attributes
// (strings, int64s, floats) or, from opset 4, from tensor attributes of any of these types.
// Float keys match by value, and NaN matches NaN (opset 4).
#include <cmath>
#include <map>
#include <string>
#include <unordered_map>

#include "framework/kernel_registry.h"

namespace tob {

namespace {

constexpr const char* kOnnxMlDomain = "ai.onnx.ml";

// A key of any type, as the lookup compares it: strings as bytes, integers as int64, floats as
// double (NaN as one key).
struct Key {
  int kind = 0;  // 0 string, 1 integer, 2 float
  std::string s;
  int64_t i = 0;
  double f = 0;
  bool operator<(const Key& o) const {
    if (kind != o.kind) return kind < o.kind;
    if (kind == 0) return s < o.s;
    if (kind == 1) return i < o.i;
    const bool na = std::isnan(f), nb = std::isnan(o.f);
    if (na || nb) return !na && nb;
    return f < o.f;
  }
};

Key KeyAt(const Tensor& t, int64_t index) {
  Key k;
  if (t.dtype() == DType::kString) {
    k.s = t.data<std::string>()[index];
  } else if (IsFloatingPoint(t.dtype())) {
    k.kind = 2;
    k.f = t.ElementAsDouble(index);
  } else {
    k.kind = 1;
    k.i = t.ElementAsInt64(index);
  }
  return k;
}

// The named attribute as a tensor: a list attribute becomes a 1-D tensor; nullopt when absent.
StatusOr<std::optional<Tensor>> ListAttr(const Node& node, const std::string& base) {
  if (node.FindAttribute(base + "_strings")) {
    std::vector<std::string> v;
    TOB_RETURN_IF_ERROR(node.GetAttr(base + "_strings", &v));
    return std::optional<Tensor>(Tensor::FromVector<std::string>(v, {static_cast<int64_t>(v.size())}));
  }
  if (node.FindAttribute(base + "_int64s")) {
    std::vector<int64_t> v;
    TOB_RETURN_IF_ERROR(node.GetAttr(base + "_int64s", &v));
    return std::optional<Tensor>(Tensor::FromVector<int64_t>(v, {static_cast<int64_t>(v.size())}));
  }
  if (node.FindAttribute(base + "_floats")) {
    std::vector<float> v;
    TOB_RETURN_IF_ERROR(node.GetAttr(base + "_floats", &v));
    return std::optional<Tensor>(Tensor::FromVector<float>(v, {static_cast<int64_t>(v.size())}));
  }
  if (node.FindAttribute(base + "_tensor")) {
    Tensor t;
    TOB_RETURN_IF_ERROR(node.GetAttr(base + "_tensor", &t));
    return std::optional<Tensor>(t);
  }
  return std::optional<Tensor>();
}

// The default for output type `dtype`: default_tensor, else default_string / default_int64 /
// default_float with the spec's defaults ("_Unused", -1, -0.0).
StatusOr<Tensor> DefaultValue(const Node& node, DType dtype) {
  if (node.FindAttribute("default_tensor")) {
    Tensor t;
    TOB_RETURN_IF_ERROR(node.GetAttr("default_tensor", &t));
    if (t.dtype() != dtype || t.numel() != 1)
      return InvalidModel(node.Describe(), ": default_tensor must hold one ", DTypeName(dtype), " value, got ",
                          DTypeName(t.dtype()), ShapeToString(t.shape()));
    return t.Reshaped({});
  }
  if (dtype == DType::kString) {
    std::string s;
    TOB_RETURN_IF_ERROR(node.GetAttr("default_string", &s, std::string("_Unused")));
    return Tensor::FromVector<std::string>({s}, {});
  }
  if (dtype == DType::kInt64) {
    int64_t v = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("default_int64", &v, int64_t{-1}));
    return Tensor::FromVector<int64_t>({v}, {});
  }
  if (dtype == DType::kFloat32) {
    float v = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("default_float", &v, -0.0f));
    return Tensor::FromVector<float>({v}, {});
  }
  // Opset 4's other value types: -1 for integers, -0.0 for floats (the spec's defaults).
  if (dtype == DType::kInt32) return Tensor::FromVector<int32_t>({-1}, {});
  if (dtype == DType::kInt16) return Tensor::FromVector<int16_t>({-1}, {});
  if (dtype == DType::kFloat64) return Tensor::FromVector<double>({-0.0}, {});
  return InvalidModel(node.Describe(), ": values of type ", DTypeName(dtype), " are not supported");
}

class LabelEncoderKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(std::optional<Tensor> keys, ListAttr(node, "keys"));
    TOB_ASSIGN_OR_RETURN(std::optional<Tensor> values, ListAttr(node, "values"));
    if (!keys || !values) return InvalidModel(node.Describe(), ": needs keys_* and values_* attributes");
    if (keys->numel() != values->numel())
      return InvalidModel(node.Describe(), ": ", keys->numel(), " keys but ", values->numel(), " values");
    for (const Tensor* t : {&*keys, &*values}) {
      const DType d = t->dtype();
      if (d != DType::kString && d != DType::kInt64 && d != DType::kFloat32 && d != DType::kInt32 &&
          d != DType::kInt16 && d != DType::kFloat64)
        return InvalidModel(node.Describe(), ": ", t == &*keys ? "keys" : "values", " of type ", DTypeName(d),
                            " (LabelEncoder takes string, int64, int32, int16, float and double)");
    }
    const Value* x = node.input(0);
    const DType key_type = keys->dtype();
    if (x != nullptr && x->type().dtype != DType::kUndefined && x->type().dtype != key_type)
      return InvalidModel(node.Describe(), ": X is ", DTypeName(x->type().dtype), " but the keys are ",
                          DTypeName(key_type));
    TOB_ASSIGN_OR_RETURN(Tensor fallback, DefaultValue(node, values->dtype()));
    auto k = std::unique_ptr<LabelEncoderKernel>(new LabelEncoderKernel(node));
    for (int64_t i = 0; i < keys->numel(); ++i) k->index_.emplace(KeyAt(*keys, i), i);
    k->key_type_ = key_type;
    k->values_ = *values;
    k->default_ = fallback;
    return std::unique_ptr<OpKernel>(std::move(k));
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    if (x.dtype() != key_type_) return ctx.Fail("X is ", DTypeName(x.dtype()), ", the keys are ", DTypeName(key_type_));
    if (y.dtype() != values_.dtype())
      return ctx.Fail("output is ", DTypeName(y.dtype()), ", the values are ", DTypeName(values_.dtype()));
    const bool ok = DispatchDType<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t,
                                  uint16_t, uint32_t, uint64_t, bool, std::string>(y.dtype(), [&]<typename T>() {
      const T* values = values_.data<T>();
      const T fallback = default_.data<T>()[0];
      T* out = y.data<T>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        auto it = index_.find(KeyAt(x, i));
        out[i] = it == index_.end() ? fallback : values[it->second];
      }
    });
    return ok ? Status::OK() : ctx.Fail("values of type ", DTypeName(y.dtype()), " are not supported");
  }

 private:
  using OpKernel::OpKernel;
  std::map<Key, int64_t> index_;
  DType key_type_ = DType::kUndefined;
  Tensor values_, default_;
};

}  // namespace

void RegisterCpuLabelEncoderKernels(KernelRegistry& registry) {
  const std::vector<DType> v2{DType::kString, DType::kInt64, DType::kFloat32};
  const std::vector<DType> v4{DType::kString, DType::kInt64, DType::kFloat32,
                              DType::kInt32,  DType::kInt16, DType::kFloat64};
  registry.Register(
      Def("LabelEncoder").Domain(kOnnxMlDomain).Versions(2, 3).Constraint("T1", {0}, v2).Kernel<LabelEncoderKernel>());
  registry.Register(
      Def("LabelEncoder").Domain(kOnnxMlDomain).Versions(4).Constraint("T1", {0}, v4).Kernel<LabelEncoderKernel>());
}

}  // namespace tob
