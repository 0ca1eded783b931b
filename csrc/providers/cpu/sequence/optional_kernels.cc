// The optional ops: Optional wraps a value, OptionalHasElement asks whether there is one,
// OptionalGetElement takes it out (an error naming the node when there is none). An optional
// holding a value is that value itself (framework/runtime_value.h), so these kernels only look.
#include "framework/kernel_registry.h"

namespace tob {

namespace {

// With an input, that value; without one, an empty optional of the 'type' attribute's type.
class OptionalKernel final : public OpKernel {
 public:
  OptionalKernel(const Node& node, ValueType empty_type) : OpKernel(node), empty_type_(std::move(empty_type)) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    ValueType empty_type;
    if (node.input(0) == nullptr) {
      const Attribute* attr = node.FindAttribute("type");
      if (attr == nullptr || attr->type != AttrType::kTypeProto)
        return InvalidModel(node.Describe(), ": an Optional without an input needs a 'type' attribute (a type proto)");
      empty_type = attr->type_proto;
    }
    return MakeKernel<OptionalKernel>(node, std::move(empty_type));
  }
  Status Compute(KernelContext& ctx) const override {
    const RuntimeValue* in = ctx.input_value(0);
    *ctx.output_value(0) = in != nullptr ? *in : RuntimeValue::None(empty_type_);
    return Status::OK();
  }

 private:
  ValueType empty_type_;
};

class OptionalHasElementKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    return MakeKernel<OptionalHasElementKernel>(node);
  }
  Status Compute(KernelContext& ctx) const override {
    const RuntimeValue* in = ctx.input_value(0);
    *ctx.output_value(0) = Tensor::FromVector<bool>({in != nullptr && in->defined() && !in->is_none()}, {});
    return Status::OK();
  }
};

class OptionalGetElementKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    return MakeKernel<OptionalGetElementKernel>(node);
  }
  Status Compute(KernelContext& ctx) const override {
    const RuntimeValue* in = ctx.input_value(0);
    if (in == nullptr || in->is_none()) return ctx.Fail("the optional input has no value");
    *ctx.output_value(0) = *in;
    return Status::OK();
  }
};

}  // namespace

void RegisterCpuOptionalKernels(KernelRegistry& registry) {
  const std::vector<DType> types = AllTypesAndString();
  registry.Register(Def("Optional").Versions(15).Constraint("V", {0}, types).ValueKernel().Kernel<OptionalKernel>());
  registry.Register(Def("OptionalHasElement")
                        .Versions(15)
                        .Constraint("O", {0}, types)
                        .ValueKernel()
                        .Kernel<OptionalHasElementKernel>());
  registry.Register(Def("OptionalGetElement")
                        .Versions(15)
                        .Constraint("O", {0}, types)
                        .ValueKernel()
                        .Kernel<OptionalGetElementKernel>());
}

}  // namespace tob
