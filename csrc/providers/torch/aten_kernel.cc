// com.microsoft ATen: one torch operator called through torch's dispatcher (boxed), inputs viewed
// and outputs adopted without copies. Create resolves the operator and turns its schema into a
// plan (which node inputs feed which argument, and how each is decoded) once; Compute only
// decodes, calls and adopts. The node contract is in docs/architecture.md, "ATen nodes".
#include "providers/torch/aten_kernel.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/core/InferenceMode.h>

#include <optional>
#include <string>
#include <vector>

#include "providers/torch/aten_op_policy.h"
#include "providers/torch/aten_tensor_bridge.h"

namespace tob {

namespace {

// How one schema argument is read from the node's inputs.
enum class ArgKind {
  kTensor,
  kTensorList,          // Tensor[]: tensor_list_lengths inputs, none omitted
  kOptionalTensorList,  // Tensor?[] / List[Optional[Tensor]]: "" entries are None
  kInt,
  kIntList,
  kFloat,
  kFloatList,
  kBool,
  kBoolList,
  kScalar,
  kString,
  kDevice,     // never an input: the provider's device
  kGenerator,  // never an input: torch's default generator
};

struct ArgPlan {
  ArgKind kind;
  bool optional = false;
  int first_input = 0;      // index of the node input (or of the first, for tensor lists)
  int count = 1;            // inputs it occupies (a tensor list: its length, maybe 0)
  int fixed_size = 0;       // N of int[N] / bool[N]: a single value is repeated N times
  size_t schema_index = 0;  // into schema.arguments(), for the default value
};

const char* KindName(ArgKind k) {
  switch (k) {
    case ArgKind::kTensor: return "Tensor";
    case ArgKind::kTensorList: return "Tensor[]";
    case ArgKind::kOptionalTensorList: return "Tensor?[]";
    case ArgKind::kInt: return "int";
    case ArgKind::kIntList: return "int[]";
    case ArgKind::kFloat: return "float";
    case ArgKind::kFloatList: return "float[]";
    case ArgKind::kBool: return "bool";
    case ArgKind::kBoolList: return "bool[]";
    case ArgKind::kScalar: return "Scalar";
    case ArgKind::kString: return "str";
    case ArgKind::kDevice: return "Device";
    case ArgKind::kGenerator: return "Generator";
  }
  return "?";
}

bool IsIntLike(c10::TypeKind k) {
  return k == c10::TypeKind::IntType || k == c10::TypeKind::SymIntType || k == c10::TypeKind::ScalarTypeType ||
         k == c10::TypeKind::LayoutType || k == c10::TypeKind::MemoryFormatType;
}

// The decoding kind of a schema type; nullopt for types the node contract cannot carry.
std::optional<ArgKind> KindOf(const c10::TypePtr& type, bool* optional) {
  c10::TypePtr t = type;
  *optional = false;
  if (t->kind() == c10::TypeKind::OptionalType) {
    *optional = true;
    t = t->castRaw<c10::OptionalType>()->getElementType();
  }
  const c10::TypeKind k = t->kind();
  if (k == c10::TypeKind::TensorType) return ArgKind::kTensor;
  if (IsIntLike(k)) return ArgKind::kInt;
  if (k == c10::TypeKind::FloatType || k == c10::TypeKind::SymFloatType) return ArgKind::kFloat;
  if (k == c10::TypeKind::BoolType || k == c10::TypeKind::SymBoolType) return ArgKind::kBool;
  if (k == c10::TypeKind::NumberType) return ArgKind::kScalar;
  // `Any` is carried as a string: the process-group name of torch's functional collectives.
  if (k == c10::TypeKind::StringType || k == c10::TypeKind::AnyType) return ArgKind::kString;
  if (k == c10::TypeKind::DeviceObjType) return ArgKind::kDevice;
  if (k == c10::TypeKind::GeneratorType) return ArgKind::kGenerator;
  if (k == c10::TypeKind::ListType && !*optional) {
    const c10::TypePtr& elem = t->castRaw<c10::ListType>()->getElementType();
    if (elem->kind() == c10::TypeKind::TensorType) return ArgKind::kTensorList;
    if (elem->kind() == c10::TypeKind::OptionalType &&
        elem->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType)
      return ArgKind::kOptionalTensorList;
  }
  if (k == c10::TypeKind::ListType) {
    const c10::TypeKind e = t->castRaw<c10::ListType>()->getElementType()->kind();
    if (IsIntLike(e)) return ArgKind::kIntList;
    if (e == c10::TypeKind::FloatType || e == c10::TypeKind::SymFloatType) return ArgKind::kFloatList;
    if (e == c10::TypeKind::BoolType || e == c10::TypeKind::SymBoolType) return ArgKind::kBoolList;
  }
  return std::nullopt;
}

// How the schema's returns map to node outputs: one output each, a Tensor[] return flattened.
enum class ReturnKind { kTensor, kTensorList, kInt, kFloat, kBool, kScalar };

std::optional<ReturnKind> ReturnKindOf(const c10::TypePtr& type) {
  c10::TypePtr t = type;
  if (t->kind() == c10::TypeKind::OptionalType) t = t->castRaw<c10::OptionalType>()->getElementType();
  const c10::TypeKind k = t->kind();
  if (k == c10::TypeKind::TensorType) return ReturnKind::kTensor;
  if (k == c10::TypeKind::ListType &&
      t->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::TensorType)
    return ReturnKind::kTensorList;
  if (IsIntLike(k)) return ReturnKind::kInt;
  if (k == c10::TypeKind::FloatType || k == c10::TypeKind::SymFloatType) return ReturnKind::kFloat;
  if (k == c10::TypeKind::BoolType || k == c10::TypeKind::SymBoolType) return ReturnKind::kBool;
  if (k == c10::TypeKind::NumberType) return ReturnKind::kScalar;
  return std::nullopt;
}

struct ReturnPlan {
  ReturnKind kind;
  int first_output = 0;
  int count = 1;
};

std::string QualifiedName(const std::string& op) { return op.find("::") == std::string::npos ? "aten::" + op : op; }

class AtenKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, bool unsafe_ops_allowed);
  Status Compute(KernelContext& ctx) const override;

 private:
  AtenKernel(const Node& node, c10::OperatorHandle op, std::string label)
      : OpKernel(node), op_(std::move(op)), label_(std::move(label)) {}

  Status PlanArguments(const Node& node, const std::vector<int64_t>& list_lengths);
  Status PlanReturns(const Node& node);
  Status PushArgument(const KernelContext& ctx, const ArgPlan& arg, torch::jit::Stack& stack) const;
  Status AdoptReturns(KernelContext& ctx, torch::jit::Stack& stack) const;
  template <typename... Args>
  Status ArgError(const KernelContext& ctx, const ArgPlan& arg, Args&&... args) const {
    const c10::Argument& a = op_.schema().arguments()[arg.schema_index];
    return ctx.Fail(label_, " argument '", a.name(), "' (", a.type()->str(), "): ", std::forward<Args>(args)...);
  }

  c10::OperatorHandle op_;
  std::string label_;  // "aten::native_layer_norm" or "aten::add.Tensor", in every message
  std::vector<ArgPlan> args_;
  std::vector<ReturnPlan> returns_;
};

StatusOr<std::unique_ptr<OpKernel>> AtenKernel::Create(const Node& node, bool unsafe_ops_allowed) {
  std::string op, overload;
  TOB_RETURN_IF_ERROR(node.GetAttr("operator", &op));
  TOB_RETURN_IF_ERROR(node.GetAttr("overload_name", &overload, std::string()));
  if (overload == "default") overload.clear();
  std::vector<int64_t> list_lengths;
  TOB_RETURN_IF_ERROR(node.GetAttr("tensor_list_lengths", &list_lengths, std::vector<int64_t>{}));
  const std::string name = QualifiedName(op);
  const std::string label = overload.empty() ? name : name + "." + overload;
  std::optional<c10::OperatorHandle> handle;
  try {
    handle = c10::Dispatcher::singleton().findSchema({name, overload});
  } catch (const std::exception& e) {
    return NotImplemented(node.Describe(), ": looking up torch operator ", label, " failed: ", e.what());
  }
  if (!handle)
    return NotImplemented(node.Describe(), ": torch has no operator ", label,
                          " (is the library that defines it loaded?)");
  std::unique_ptr<AtenKernel> kernel(new AtenKernel(node, *handle, label));
  TOB_RETURN_IF_ERROR(kernel->PlanArguments(node, list_lengths));
  TOB_RETURN_IF_ERROR(kernel->PlanReturns(node));
  if (!unsafe_ops_allowed) {
    const std::string why = AtenOpRefusal(name, overload);
    if (!why.empty())
      return PermissionDenied(node.Describe(), " calls torch operator ", label,
                              ", which this session does not allow: ", why,
                              ". Without SessionOptions.allow_unsafe_aten_ops, ATen nodes run only the pure tensor "
                              "operators of the aten namespace (docs/security.md); set it to True only for a model "
                              "you trust as you trust code");
  }
  return std::unique_ptr<OpKernel>(std::move(kernel));
}

Status AtenKernel::PlanArguments(const Node& node, const std::vector<int64_t>& list_lengths) {
  const c10::FunctionSchema& schema = op_.schema();
  const int n_inputs = static_cast<int>(node.inputs().size());
  size_t next_list = 0;
  int next_input = 0;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::Argument& a = schema.arguments()[i];
    if (a.alias_info() != nullptr && a.alias_info()->isWrite())
      return InvalidModel(node.Describe(), ": ", label_, " mutates its argument '", a.name(), "' (", schema,
                          "); ATen nodes run functional operators only");
    ArgPlan plan;
    plan.schema_index = i;
    std::optional<ArgKind> kind = KindOf(a.type(), &plan.optional);
    if (!kind)
      return NotImplemented(node.Describe(), ": ", label_, " argument '", a.name(), "' has type ", a.type()->str(),
                            ", which ATen nodes cannot carry");
    plan.kind = *kind;
    if (a.N() && (plan.kind == ArgKind::kIntList || plan.kind == ArgKind::kBoolList)) plan.fixed_size = *a.N();
    plan.first_input = next_input;
    if (plan.kind == ArgKind::kDevice || plan.kind == ArgKind::kGenerator) {
      // The slot is kept (and must be empty) so inputs stay positional, one per argument.
      if (next_input < n_inputs && node.input(next_input) != nullptr)
        return InvalidModel(node.Describe(), ": ", label_, " argument '", a.name(), "' (", KindName(plan.kind),
                            ") cannot be given as an input: leave input ", next_input, " empty");
    } else if (plan.kind == ArgKind::kTensorList || plan.kind == ArgKind::kOptionalTensorList) {
      if (next_list >= list_lengths.size())
        return InvalidModel(node.Describe(), ": ", label_, " argument '", a.name(),
                            "' is a tensor list but "
                            "attribute tensor_list_lengths has ",
                            list_lengths.size(),
                            " entries; it needs one per "
                            "Tensor[] argument, in schema order");
      plan.count = static_cast<int>(list_lengths[next_list++]);
    }
    next_input += plan.count;
    args_.push_back(plan);
  }
  if (next_list != list_lengths.size())
    return InvalidModel(node.Describe(), ": tensor_list_lengths has ", list_lengths.size(), " entries but ", label_,
                        " has ", next_list, " tensor-list arguments");
  if (n_inputs > next_input)
    return InvalidModel(node.Describe(), ": ", n_inputs, " inputs but ", label_, " takes ", next_input, " (", schema,
                        ")");
  for (const ArgPlan& p : args_) {
    const bool listed = p.kind == ArgKind::kTensorList || p.kind == ArgKind::kOptionalTensorList;
    if (listed && p.count > 0 && p.first_input + p.count > n_inputs)
      return InvalidModel(node.Describe(), ": tensor list argument '", schema.arguments()[p.schema_index].name(),
                          "' needs inputs ", p.first_input, "..", p.first_input + p.count - 1, " but the node has ",
                          n_inputs, " inputs");
  }
  return Status::OK();
}

Status AtenKernel::PlanReturns(const Node& node) {
  const c10::FunctionSchema& schema = op_.schema();
  const int n_outputs = static_cast<int>(node.outputs().size());
  const int n_returns = static_cast<int>(schema.returns().size());
  int list_returns = 0;
  for (const c10::Argument& r : schema.returns()) {
    std::optional<ReturnKind> kind = ReturnKindOf(r.type());
    if (!kind)
      return NotImplemented(node.Describe(), ": ", label_, " returns a ", r.type()->str(),
                            ", which ATen nodes cannot carry");
    list_returns += *kind == ReturnKind::kTensorList;
  }
  if (list_returns > 1) return NotImplemented(node.Describe(), ": ", label_, " returns more than one tensor list");
  // A Tensor[] return takes whatever outputs the other returns leave; without one, trailing
  // returns nobody needs may be left out.
  const int list_count = n_outputs - (n_returns - list_returns);
  if (list_returns == 1 ? list_count < 0 : n_outputs > n_returns)
    return InvalidModel(node.Describe(), ": ", n_outputs, " outputs but ", label_, " returns ", n_returns,
                        list_returns ? " values, one a tensor list (" : " values (", schema, ")");
  int next = 0;
  for (const c10::Argument& r : schema.returns()) {
    if (next >= n_outputs && list_returns == 0) break;
    ReturnPlan plan{*ReturnKindOf(r.type()), next, 1};
    if (plan.kind == ReturnKind::kTensorList) plan.count = list_count;
    next += plan.count;
    returns_.push_back(plan);
  }
  return Status::OK();
}

// ---- decoding inputs into IValues ----

bool IsIntegral(DType t) { return IsSignedInteger(t) || IsUnsignedInteger(t); }

int64_t IntAt(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kInt64 ? t.data<int64_t>()[i] : t.ElementAsInt64(i);
}

double DoubleAt(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kFloat64 ? t.data<double>()[i] : t.ElementAsDouble(i);
}

Status AtenKernel::PushArgument(const KernelContext& ctx, const ArgPlan& arg, torch::jit::Stack& stack) const {
  const c10::Argument& schema_arg = op_.schema().arguments()[arg.schema_index];
  if (arg.kind == ArgKind::kDevice) {
    stack.emplace_back(c10::Device(c10::kCPU));
    return Status::OK();
  }
  if (arg.kind == ArgKind::kGenerator) {
    if (!arg.optional) return ArgError(ctx, arg, "a Generator cannot be passed to an ATen node");
    stack.emplace_back();
    return Status::OK();
  }
  if (arg.kind == ArgKind::kTensorList || arg.kind == ArgKind::kOptionalTensorList) {
    if (arg.kind == ArgKind::kTensorList) {
      c10::List<at::Tensor> list;
      list.reserve(arg.count);
      for (int i = 0; i < arg.count; ++i) {
        const Tensor* t = ctx.input(arg.first_input + i);
        if (t == nullptr) return ArgError(ctx, arg, "element ", i, " (input ", arg.first_input + i, ") is empty");
        StatusOr<at::Tensor> view = TorchView(*t);
        if (!view.ok()) return ArgError(ctx, arg, "element ", i, ": ", view.status().message());
        list.push_back(std::move(view).value());
      }
      stack.emplace_back(std::move(list));
    } else {
      c10::List<std::optional<at::Tensor>> list;
      list.reserve(arg.count);
      for (int i = 0; i < arg.count; ++i) {
        const Tensor* t = ctx.input(arg.first_input + i);
        if (t == nullptr) {
          list.push_back(std::nullopt);
          continue;
        }
        StatusOr<at::Tensor> view = TorchView(*t);
        if (!view.ok()) return ArgError(ctx, arg, "element ", i, ": ", view.status().message());
        list.push_back(std::move(view).value());
      }
      stack.emplace_back(std::move(list));
    }
    return Status::OK();
  }

  const Tensor* t = ctx.input(arg.first_input);
  if (t == nullptr) {
    // Beyond the node's inputs: a trailing argument left to its default. Inside: "" is None.
    const bool trailing = arg.first_input >= ctx.num_inputs();
    const std::optional<c10::IValue>& dflt = schema_arg.default_value();
    if (arg.optional && !trailing) stack.emplace_back();
    else if (dflt) stack.push_back(*dflt);
    else if (arg.optional) stack.emplace_back();
    else return ArgError(ctx, arg, "required, but input ", arg.first_input, " is missing");
    return Status::OK();
  }
  if (arg.kind == ArgKind::kTensor) {
    StatusOr<at::Tensor> view = TorchView(*t);
    if (!view.ok()) return ArgError(ctx, arg, view.status().message());
    stack.emplace_back(std::move(view).value());
    return Status::OK();
  }
  if (t->device().type != DeviceType::kCPU) return ArgError(ctx, arg, "must be a host tensor");
  const int64_t n = t->numel();
  const DType dt = t->dtype();
  auto is_scalar = [&] { return n == 1 && t->rank() <= 1; };
  switch (arg.kind) {
    case ArgKind::kInt:
      if (!IsIntegral(dt) || !is_scalar())
        return ArgError(ctx, arg, "expected a 0-d int64 tensor, got ", DTypeName(dt), ShapeToString(t->shape()));
      stack.emplace_back(IntAt(*t, 0));
      return Status::OK();
    case ArgKind::kFloat:
      if (!(IsFloatingPoint(dt) || IsIntegral(dt)) || !is_scalar())
        return ArgError(ctx, arg, "expected a 0-d float64 tensor, got ", DTypeName(dt), ShapeToString(t->shape()));
      stack.emplace_back(DoubleAt(*t, 0));
      return Status::OK();
    case ArgKind::kBool:
      if (dt != DType::kBool || !is_scalar())
        return ArgError(ctx, arg, "expected a 0-d bool tensor, got ", DTypeName(dt), ShapeToString(t->shape()));
      stack.emplace_back(t->data<bool>()[0]);
      return Status::OK();
    case ArgKind::kScalar:
      if (!is_scalar()) return ArgError(ctx, arg, "expected a 0-d tensor, got shape ", ShapeToString(t->shape()));
      if (dt == DType::kBool) stack.emplace_back(c10::Scalar(t->data<bool>()[0]));
      else if (IsIntegral(dt)) stack.emplace_back(c10::Scalar(IntAt(*t, 0)));
      else if (IsFloatingPoint(dt)) stack.emplace_back(c10::Scalar(DoubleAt(*t, 0)));
      else return ArgError(ctx, arg, "dtype ", DTypeName(dt), " is not a Scalar");
      return Status::OK();
    case ArgKind::kString:
      if ((dt != DType::kUInt8 && dt != DType::kInt8) || t->rank() != 1)
        return ArgError(ctx, arg, "expected a 1-D uint8 tensor of UTF-8 bytes, got ", DTypeName(dt),
                        ShapeToString(t->shape()));
      stack.emplace_back(std::string(static_cast<const char*>(t->raw_data()), static_cast<size_t>(n)));
      return Status::OK();
    default: break;
  }
  if (t->rank() > 1) return ArgError(ctx, arg, "expected a 1-D tensor, got shape ", ShapeToString(t->shape()));
  // int[N] and bool[N] take a single value for all N (torch's "kernel_size=3" means 3, 3). Other
  // lengths go to torch as they are: some ops give an empty int[2] a meaning (avg_pool2d's
  // stride=[] is the kernel size), and the op checks the rest.
  const int64_t len = (arg.fixed_size > 1 && n == 1) ? arg.fixed_size : n;
  auto at = [&](int64_t i) { return n == 1 ? 0 : i; };
  switch (arg.kind) {
    case ArgKind::kIntList: {
      if (!IsIntegral(dt)) return ArgError(ctx, arg, "expected int64 values, got ", DTypeName(dt));
      c10::List<int64_t> list;
      list.reserve(len);
      for (int64_t i = 0; i < len; ++i) list.push_back(IntAt(*t, at(i)));
      stack.emplace_back(std::move(list));
      return Status::OK();
    }
    case ArgKind::kFloatList: {
      if (!IsFloatingPoint(dt) && !IsIntegral(dt))
        return ArgError(ctx, arg, "expected float64 values, got ", DTypeName(dt));
      c10::List<double> list;
      list.reserve(len);
      for (int64_t i = 0; i < len; ++i) list.push_back(DoubleAt(*t, at(i)));
      stack.emplace_back(std::move(list));
      return Status::OK();
    }
    case ArgKind::kBoolList: {
      if (dt != DType::kBool) return ArgError(ctx, arg, "expected bool values, got ", DTypeName(dt));
      c10::List<bool> list;
      list.reserve(len);
      for (int64_t i = 0; i < len; ++i) list.push_back(t->data<bool>()[at(i)]);
      stack.emplace_back(std::move(list));
      return Status::OK();
    }
    default: return ArgError(ctx, arg, "unexpected argument kind ", KindName(arg.kind));
  }
}

// ---- adopting returns ----

StatusOr<Tensor> ScalarTensor(const c10::IValue& v, ReturnKind kind) {
  if (kind == ReturnKind::kInt) return Tensor::FromVector<int64_t>({v.toInt()}, {});
  if (kind == ReturnKind::kFloat) return Tensor::FromVector<double>({v.toDouble()}, {});
  if (kind == ReturnKind::kBool) return Tensor::FromVector<bool>({v.toBool()}, {});
  const c10::Scalar s = v.toScalar();
  if (s.isBoolean()) return Tensor::FromVector<bool>({s.toBool()}, {});
  if (s.isIntegral(/*includeBool=*/false)) return Tensor::FromVector<int64_t>({s.toLong()}, {});
  if (s.isFloatingPoint()) return Tensor::FromVector<double>({s.toDouble()}, {});
  return RuntimeError("a complex or symbolic Scalar cannot be returned");
}

Status AtenKernel::AdoptReturns(KernelContext& ctx, torch::jit::Stack& stack) const {
  const size_t n_returns = op_.schema().returns().size();
  if (stack.size() != n_returns)
    return ctx.Fail(label_, " left ", stack.size(), " values on the stack for ", n_returns, " returns");
  for (size_t r = 0; r < returns_.size(); ++r) {
    const ReturnPlan& plan = returns_[r];
    c10::IValue& v = stack[r];
    auto adopt = [&](const at::Tensor& t, int output) -> Status {
      StatusOr<Tensor> out = EngineTensorFromTorch(t);
      if (!out.ok()) return ctx.Fail(label_, " output ", output, ": ", out.status().message());
      *ctx.output(output) = std::move(out).value();
      return Status::OK();
    };
    if (plan.kind == ReturnKind::kTensor) {
      if (v.isNone()) continue;  // an optional return that is absent: the output stays undefined
      TOB_RETURN_IF_ERROR(adopt(v.toTensor(), plan.first_output));
    } else if (plan.kind == ReturnKind::kTensorList) {
      const c10::List<at::Tensor> list = v.toTensorList();
      if (static_cast<int>(list.size()) != plan.count)
        return ctx.Fail(label_, " returned ", list.size(), " tensors in its tensor list but the node has ", plan.count,
                        " outputs for it");
      for (int i = 0; i < plan.count; ++i) TOB_RETURN_IF_ERROR(adopt(list.get(i), plan.first_output + i));
    } else {
      StatusOr<Tensor> out = ScalarTensor(v, plan.kind);
      if (!out.ok()) return ctx.Fail(label_, " output ", plan.first_output, ": ", out.status().message());
      *ctx.output(plan.first_output) = std::move(out).value();
    }
  }
  return Status::OK();
}

Status AtenKernel::Compute(KernelContext& ctx) const {
  try {
    // No autograd here: the engine owns differentiation, and skipping the autograd and
    // view-tracking dispatch keys makes each call cheaper.
    c10::InferenceMode no_autograd;
    torch::jit::Stack stack;
    stack.reserve(args_.size());
    for (const ArgPlan& arg : args_) TOB_RETURN_IF_ERROR(PushArgument(ctx, arg, stack));
    op_.callBoxed(stack);
    return AdoptReturns(ctx, stack);
  } catch (const c10::Error& e) {
    return ctx.Fail("torch operator ", label_, " failed: ", e.what_without_backtrace());
  } catch (const std::exception& e) {
    return ctx.Fail("torch operator ", label_, " failed: ", e.what());
  }
}

}  // namespace

StatusOr<std::unique_ptr<OpKernel>> CreateAtenKernel(const Node& node, bool unsafe_ops_allowed) {
  return AtenKernel::Create(node, unsafe_ops_allowed);
}

}  // namespace tob
