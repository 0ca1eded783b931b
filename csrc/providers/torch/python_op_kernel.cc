// com.microsoft PythonOp / PythonOpGrad: a torch.autograd.Function's forward and backward, called
// back in Python through the dispatcher ops tob::python_op / tob::python_op_grad, which
// torch_ort_backend.autograd_function defines and whose Python kernels look the Function up in
// the process's own registry (never by importing a name). Node contract (docs/architecture.md,
// "PythonOp nodes"): each non-tensor argument of the op is the node attribute of the same name,
// the schema default when absent; tensor arguments take the inputs in order, the one tensor-list
// argument all inputs the single tensors leave ("" is None in a Tensor?[]); the outputs are the
// op's returned tensor list, adopted without copies.
#include "providers/torch/python_op_kernel.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>

#include <climits>
#include <optional>
#include <string>
#include <vector>

#include "providers/torch/aten_tensor_bridge.h"

namespace tob {

namespace {

const char* DispatcherOpOf(const std::string& op_type) {
  if (op_type == "PythonOp") return "tob::python_op";
  if (op_type == "PythonOpGrad") return "tob::python_op_grad";
  return nullptr;
}

enum class TensorArg { kNone, kTensor, kTensorList, kOptionalTensorList };

struct ArgPlan {
  TensorArg tensor = TensorArg::kNone;
  bool optional = false;
  int first_input = 0;
  c10::IValue value;  // the bound attribute (or default) of a non-tensor argument
};

TensorArg TensorKindOf(const c10::TypePtr& type, bool* optional) {
  c10::TypePtr t = type;
  *optional = t->kind() == c10::TypeKind::OptionalType;
  if (*optional) t = t->castRaw<c10::OptionalType>()->getElementType();
  if (t->kind() == c10::TypeKind::TensorType) return TensorArg::kTensor;
  if (t->kind() != c10::TypeKind::ListType) return TensorArg::kNone;
  const c10::TypePtr& elem = t->castRaw<c10::ListType>()->getElementType();
  if (elem->kind() == c10::TypeKind::TensorType) return TensorArg::kTensorList;
  if (elem->kind() == c10::TypeKind::OptionalType &&
      elem->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType)
    return TensorArg::kOptionalTensorList;
  return TensorArg::kNone;
}

bool IsIntKind(c10::TypeKind k) { return k == c10::TypeKind::IntType || k == c10::TypeKind::SymIntType; }

// The IValue of a non-tensor argument from the node attribute of the same name.
Status BindAttribute(const Node& node, const std::string& label, const c10::Argument& arg, c10::IValue* out) {
  const Attribute* attr = node.FindAttribute(arg.name());
  if (attr == nullptr) {
    if (!arg.default_value())
      return InvalidModel(node.Describe(), ": ", label, " needs attribute '", arg.name(), "' (", arg.type()->str(),
                          ")");
    *out = *arg.default_value();
    return Status::OK();
  }
  auto mismatch = [&] {
    return InvalidModel(node.Describe(), ": attribute '", arg.name(), "' is ", AttrTypeName(attr->type), " but ", label,
                        " takes a ", arg.type()->str());
  };
  const c10::TypeKind k = arg.type()->kind();
  if (k == c10::TypeKind::StringType) {
    if (attr->type != AttrType::kString) return mismatch();
    *out = attr->s;
  } else if (IsIntKind(k) || k == c10::TypeKind::BoolType) {
    if (attr->type != AttrType::kInt) return mismatch();
    *out = k == c10::TypeKind::BoolType ? c10::IValue(attr->i != 0) : c10::IValue(attr->i);
  } else if (k == c10::TypeKind::FloatType) {
    if (attr->type != AttrType::kFloat) return mismatch();
    *out = static_cast<double>(attr->f);
  } else if (k == c10::TypeKind::ListType &&
             IsIntKind(arg.type()->castRaw<c10::ListType>()->getElementType()->kind())) {
    if (attr->type != AttrType::kInts) return mismatch();
    *out = c10::List<int64_t>(attr->ints);
  } else {
    return NotImplemented(node.Describe(), ": ", label, " argument '", arg.name(), "' has type ", arg.type()->str(),
                          ", which a node attribute cannot carry");
  }
  return Status::OK();
}

class PythonOpKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node);
  Status Compute(KernelContext& ctx) const override;

 private:
  PythonOpKernel(const Node& node, c10::OperatorHandle op, std::string label)
      : OpKernel(node), op_(std::move(op)), label_(std::move(label)) {}

  Status Plan(const Node& node);
  Status PushTensors(const KernelContext& ctx, const ArgPlan& arg, torch::jit::Stack& stack) const;

  c10::OperatorHandle op_;
  std::string label_;  // "tob::python_op (Function pkg.mod.Fn)", in every message
  std::vector<ArgPlan> args_;
  int list_count_ = 0;  // inputs the tensor-list argument takes
};

StatusOr<std::unique_ptr<OpKernel>> PythonOpKernel::Create(const Node& node) {
  const char* name = DispatcherOpOf(node.op_type());
  if (name == nullptr) return InvalidModel(node.Describe(), ": not a PythonOp or PythonOpGrad node");
  std::string func_name;
  TOB_RETURN_IF_ERROR(node.GetAttr("func_name", &func_name));
  std::optional<c10::OperatorHandle> handle;
  try {
    handle = c10::Dispatcher::singleton().findSchema({name, ""});
  } catch (const std::exception& e) {
    return NotImplemented(node.Describe(), ": looking up torch operator ", name, " failed: ", e.what());
  }
  if (!handle)
    return NotImplemented(node.Describe(), ": torch has no operator ", name,
                          "; it is defined by "
                          "torch_ort_backend.autograd_function, which must be imported in this process");
  std::unique_ptr<PythonOpKernel> kernel(
      new PythonOpKernel(node, *handle, std::string(name) + " (Function " + func_name + ")"));
  TOB_RETURN_IF_ERROR(kernel->Plan(node));
  return std::unique_ptr<OpKernel>(std::move(kernel));
}

Status PythonOpKernel::Plan(const Node& node) {
  const c10::FunctionSchema& schema = op_.schema();
  const int n_inputs = static_cast<int>(node.inputs().size());
  int singles = 0, lists = 0;
  for (const c10::Argument& a : schema.arguments()) {
    bool optional = false;
    const TensorArg kind = TensorKindOf(a.type(), &optional);
    singles += kind == TensorArg::kTensor;
    lists += kind == TensorArg::kTensorList || kind == TensorArg::kOptionalTensorList;
  }
  if (lists > 1) return NotImplemented(node.Describe(), ": ", label_, " has more than one tensor-list argument");
  if (n_inputs < singles || (lists == 0 && n_inputs > singles))
    return InvalidModel(node.Describe(), ": ", n_inputs, " inputs, but ", label_, " takes ", singles,
                        lists ? " tensors and a tensor list (" : " tensors (", schema, ")");
  list_count_ = n_inputs - singles;
  if (schema.returns().size() != 1 || schema.returns()[0].type()->kind() != c10::TypeKind::ListType)
    return NotImplemented(node.Describe(), ": ", label_, " does not return one tensor list");
  int next_input = 0;
  for (const c10::Argument& a : schema.arguments()) {
    ArgPlan plan;
    plan.tensor = TensorKindOf(a.type(), &plan.optional);
    plan.first_input = next_input;
    if (plan.tensor == TensorArg::kTensor) {
      if (!plan.optional && node.input(next_input) == nullptr)
        return InvalidModel(node.Describe(), ": input ", next_input, " ('", a.name(), "') is required");
      next_input += 1;
    } else if (plan.tensor != TensorArg::kNone) {
      if (plan.tensor == TensorArg::kTensorList)
        for (int i = 0; i < list_count_; ++i)
          if (node.input(next_input + i) == nullptr)
            return InvalidModel(node.Describe(), ": input ", next_input + i, " (element ", i, " of '", a.name(),
                                "') is empty; only a Tensor?[] may hold None");
      next_input += list_count_;
    } else {
      TOB_RETURN_IF_ERROR(BindAttribute(node, label_, a, &plan.value));
    }
    args_.push_back(std::move(plan));
  }
  return Status::OK();
}

Status PythonOpKernel::PushTensors(const KernelContext& ctx, const ArgPlan& arg, torch::jit::Stack& stack) const {
  auto view = [&](int input, at::Tensor* out) -> Status {
    StatusOr<at::Tensor> t = TorchView(*ctx.input(input));
    if (!t.ok()) return ctx.Fail(label_, " input ", input, ": ", t.status().message());
    *out = std::move(t).value();
    return Status::OK();
  };
  if (arg.tensor == TensorArg::kTensor) {
    if (ctx.input(arg.first_input) == nullptr) {
      stack.emplace_back();
      return Status::OK();
    }
    at::Tensor t;
    TOB_RETURN_IF_ERROR(view(arg.first_input, &t));
    stack.emplace_back(std::move(t));
  } else if (arg.tensor == TensorArg::kTensorList) {
    c10::List<at::Tensor> list;
    list.reserve(list_count_);
    for (int i = 0; i < list_count_; ++i) {
      at::Tensor t;
      TOB_RETURN_IF_ERROR(view(arg.first_input + i, &t));
      list.push_back(std::move(t));
    }
    stack.emplace_back(std::move(list));
  } else {
    c10::List<std::optional<at::Tensor>> list;
    list.reserve(list_count_);
    for (int i = 0; i < list_count_; ++i) {
      if (ctx.input(arg.first_input + i) == nullptr) {
        list.push_back(std::nullopt);
        continue;
      }
      at::Tensor t;
      TOB_RETURN_IF_ERROR(view(arg.first_input + i, &t));
      list.push_back(std::move(t));
    }
    stack.emplace_back(std::move(list));
  }
  return Status::OK();
}

Status PythonOpKernel::Compute(KernelContext& ctx) const {
  try {
    torch::jit::Stack stack;
    stack.reserve(args_.size());
    for (const ArgPlan& arg : args_) {
      if (arg.tensor == TensorArg::kNone) stack.push_back(arg.value);
      else TOB_RETURN_IF_ERROR(PushTensors(ctx, arg, stack));
    }
    // Straight to the backend kernel: no InferenceMode and no autograd key, so the Function runs
    // with autograd as eager code has it (its forward records its ctx; a checkpoint's backward
    // recomputes with grad), while the engine keeps owning the graph's own differentiation.
    op_.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &stack);
    if (stack.size() != 1 || !stack[0].isTensorList()) return ctx.Fail(label_, " did not return a tensor list");
    const c10::List<at::Tensor> results = stack[0].toTensorList();
    if (static_cast<int>(results.size()) != ctx.num_outputs())
      return ctx.Fail(label_, " returned ", results.size(), " tensors but the node has ", ctx.num_outputs(),
                      " outputs");
    for (int j = 0; j < ctx.num_outputs(); ++j) {
      StatusOr<Tensor> out = EngineTensorFromTorch(results.get(j));
      if (!out.ok()) return ctx.Fail(label_, " output ", j, ": ", out.status().message());
      *ctx.output(j) = std::move(out).value();
    }
    return Status::OK();
  } catch (const c10::Error& e) {
    return ctx.Fail(label_, " failed: ", e.what_without_backtrace());
  } catch (const std::exception& e) {
    return ctx.Fail(label_, " failed: ", e.what());
  }
}

}  // namespace

StatusOr<std::unique_ptr<OpKernel>> CreatePythonOpKernel(const Node& node) { return PythonOpKernel::Create(node); }

}  // namespace tob
