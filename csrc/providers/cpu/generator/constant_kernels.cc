// Constant (the tensor its attributes describe) and ConstantOfShape (one value, a shape given at
// run time).
#include <cstring>
#include <memory>

#include "framework/kernel_registry.h"
#include "providers/cpu/generator/fill.h"

namespace tob::cpu {
namespace {

class ConstantKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    Tensor value;
    if (node.FindAttribute("sparse_value") != nullptr)
      return NotImplemented(node.Describe(), ": Constant with 'sparse_value' is not supported");
    if (node.FindAttribute("value") != nullptr) {
      TOB_RETURN_IF_ERROR(node.GetAttr("value", &value));
      if (value.dtype() == DType::kUndefined)
        return NotImplemented(node.Describe(), ": Constant of dtype ", DTypeName(value.dtype()), " is not supported");
    } else if (node.FindAttribute("value_string") != nullptr) {
      std::string text;
      TOB_RETURN_IF_ERROR(node.GetAttr("value_string", &text));
      value = Tensor::FromVector<std::string>({text}, {});
    } else if (node.FindAttribute("value_strings") != nullptr) {
      std::vector<std::string> texts;
      TOB_RETURN_IF_ERROR(node.GetAttr("value_strings", &texts));
      value = Tensor::FromVector<std::string>(texts, {static_cast<int64_t>(texts.size())});
    } else if (node.FindAttribute("value_float") != nullptr) {
      float f = 0;
      TOB_RETURN_IF_ERROR(node.GetAttr("value_float", &f));
      value = Tensor::FromVector<float>({f}, {});
    } else if (node.FindAttribute("value_floats") != nullptr) {
      std::vector<float> fs;
      TOB_RETURN_IF_ERROR(node.GetAttr("value_floats", &fs));
      value = Tensor::FromVector<float>(fs, {static_cast<int64_t>(fs.size())});
    } else if (node.FindAttribute("value_int") != nullptr) {
      int64_t i = 0;
      TOB_RETURN_IF_ERROR(node.GetAttr("value_int", &i));
      value = Tensor::FromVector<int64_t>({i}, {});
    } else if (node.FindAttribute("value_ints") != nullptr) {
      std::vector<int64_t> is;
      TOB_RETURN_IF_ERROR(node.GetAttr("value_ints", &is));
      value = Tensor::FromVector<int64_t>(is, {static_cast<int64_t>(is.size())});
    } else {
      return InvalidModel(node.Describe(), ": needs one of value, value_float(s), value_int(s)");
    }
    return MakeKernel<ConstantKernel>(node, std::move(value));
  }

  ConstantKernel(const Node& node, Tensor value) : OpKernel(node), value_(std::move(value)) {}

  Status Compute(KernelContext& ctx) const override {
    Tensor& out = *ctx.output(0);
    if (out.dtype() != value_.dtype() || out.shape() != value_.shape())
      return ctx.Fail("output was allocated as ", DTypeName(out.dtype()), ShapeToString(out.shape()),
                      ", the constant is ", DTypeName(value_.dtype()), ShapeToString(value_.shape()));
    CopyTensorData(value_, out);
    return Status::OK();
  }

 private:
  Tensor value_;
};

class ConstantOfShapeKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    DType dtype = DType::kFloat32;
    uint64_t bytes = 0;
    if (node.FindAttribute("value") != nullptr) {
      Tensor value;
      TOB_RETURN_IF_ERROR(node.GetAttr("value", &value));
      if (value.numel() != 1)
        return InvalidModel(node.Describe(), ": attribute 'value' must hold one element, got ", value.numel());
      if (DTypeSize(value.dtype()) == 0 || DTypeSize(value.dtype()) > sizeof(bytes))
        return NotImplemented(node.Describe(), ": value of dtype ", DTypeName(value.dtype()), " is not supported");
      dtype = value.dtype();
      std::memcpy(&bytes, value.raw_data(), DTypeSize(dtype));
    }
    return MakeKernel<ConstantOfShapeKernel>(node, dtype, bytes);
  }

  ConstantOfShapeKernel(const Node& node, DType dtype, uint64_t bytes) : OpKernel(node), dtype_(dtype), bytes_(bytes) {}

  Status Compute(KernelContext& ctx) const override {
    Tensor& out = *ctx.output(0);
    if (out.dtype() != dtype_)
      return ctx.Fail("output was allocated as ", DTypeName(out.dtype()), ", expected ", DTypeName(dtype_));
    FillElements(out.raw_data(), out.numel(), &bytes_, DTypeSize(dtype_), ctx.thread_pool());
    return Status::OK();
  }

 private:
  DType dtype_;
  uint64_t bytes_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuConstantKernels(KernelRegistry& registry) {
  using namespace cpu;  // the kernels above
  registry.Register(Def("Constant").Versions(1).Kernel<ConstantKernel>());
  registry.Register(
      Def("ConstantOfShape").Versions(9).Constraint("T1", {0}, {DType::kInt64}).Kernel<ConstantOfShapeKernel>());
}

}  // namespace tob
