// ai.tob FusedElementwise: the schema and the program reader (ops/fused_elementwise_program.h).
// The node's outputs all have the broadcast shape of its inputs: every node of the fused group had
// that one shape (optimizer/elementwise_fusion.cc only fuses nodes of one output shape, and each
// input of the group broadcasts onto it); each output has its register's type.
#include <algorithm>
#include <iterator>

#include "core/domain.h"
#include "ops/elementwise_schema_utils.h"
#include "ops/fused_elementwise_program.h"

namespace tob {

namespace {

struct OpEntry {
  const char* name;
  FusedOpCode code;
  int arity;
  bool expensive;
};

constexpr OpEntry kOps[] = {
    {"Add", FusedOpCode::kAdd, 2, false},          {"Sub", FusedOpCode::kSub, 2, false},
    {"Mul", FusedOpCode::kMul, 2, false},          {"Div", FusedOpCode::kDiv, 2, false},
    {"Pow", FusedOpCode::kPow, 2, true},           {"Neg", FusedOpCode::kNeg, 1, false},
    {"Abs", FusedOpCode::kAbs, 1, false},          {"Reciprocal", FusedOpCode::kReciprocal, 1, false},
    {"Sqrt", FusedOpCode::kSqrt, 1, false},        {"Exp", FusedOpCode::kExp, 1, true},
    {"Log", FusedOpCode::kLog, 1, true},           {"Tanh", FusedOpCode::kTanh, 1, true},
    {"Sigmoid", FusedOpCode::kSigmoid, 1, true},   {"Erf", FusedOpCode::kErf, 1, true},
    {"Relu", FusedOpCode::kRelu, 1, false},        {"Gelu", FusedOpCode::kGelu, 1, true},
    {"GeluTanh", FusedOpCode::kGeluTanh, 1, true}, {"Where", FusedOpCode::kWhere, 3, false},
    {"Cast", FusedOpCode::kCast, 1, false},        {"TanhGrad", FusedOpCode::kTanhGrad, 2, false},
};

constexpr bool TableFollowsTheEnum() {
  for (int i = 0; i < static_cast<int>(std::size(kOps)); ++i)
    if (static_cast<int>(kOps[i].code) != i) return false;
  return true;
}
static_assert(TableFollowsTheEnum(), "kOps is indexed by FusedOpCode");

const OpEntry& Entry(FusedOpCode code) { return kOps[static_cast<int>(code)]; }

const OpEntry* FindEntry(const std::string& name) {
  for (const OpEntry& e : kOps)
    if (name == e.name) return &e;
  return nullptr;
}

Status InferFusedElementwise(InferenceContext& ctx) {
  TOB_ASSIGN_OR_RETURN(FusedProgram program, ReadFusedProgram(ctx.node()));
  if (program.num_inputs != ctx.num_inputs())
    return ctx.Fail("the program reads ", program.num_inputs, " inputs, the node has ", ctx.num_inputs());
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.Fail("input ", i, " is missing");
    const DType expected = program.types[i];
    if (ctx.input_type(i)->dtype != expected)
      return ctx.Fail("input ", i, " has type ", DTypeName(ctx.input_type(i)->dtype), ", expected ",
                      DTypeName(expected));
  }
  TOB_ASSIGN_OR_RETURN(std::optional<Dims> dims, BroadcastAll(ctx, 0));
  for (int o = 0; o < ctx.num_outputs(); ++o) ctx.set_output(o, ValueType(program.types[program.outputs[o]], dims));
  return Status::OK();
}

}  // namespace

std::optional<FusedOpCode> FusedOpCodeOf(const Node& node) {
  const std::string& domain = node.domain();
  if (domain == kMicrosoftDomain) {
    if (node.op_type() == "Gelu") return FusedOpCode::kGelu;
    if (node.op_type() == "TanhGrad") return FusedOpCode::kTanhGrad;
    return std::nullopt;
  }
  if (!domain.empty()) return std::nullopt;
  const OpEntry* e = FindEntry(node.op_type());
  if (e == nullptr) return std::nullopt;
  if (e->code == FusedOpCode::kCast) {
    int64_t to = 0;
    if (!node.GetAttr("to", &to).ok() || !IsFusedFloatType(DTypeFromOnnx(static_cast<int32_t>(to))))
      return std::nullopt;
    return e->code;
  }
  // Opset <= 6 arithmetic with broadcast=1 aligns B the legacy way, not numpy's.
  if (node.FindAttribute("broadcast") != nullptr) return std::nullopt;
  if (e->code == FusedOpCode::kGeluTanh || e->code == FusedOpCode::kTanhGrad) return std::nullopt;
  if (e->code == FusedOpCode::kGelu) {
    std::string approximate;
    if (!node.GetAttr("approximate", &approximate, std::string("none")).ok()) return std::nullopt;
    if (approximate == "tanh") return FusedOpCode::kGeluTanh;
    if (approximate != "none") return std::nullopt;
  }
  return e->code;
}

int FusedOpArity(FusedOpCode code) { return Entry(code).arity; }
const char* FusedOpName(FusedOpCode code) { return Entry(code).name; }
bool FusedOpIsExpensive(FusedOpCode code) { return Entry(code).expensive; }

namespace {

// The program's register types: `types` when the node has it, else float32 everywhere but the
// conditions; then every instruction's operands are checked against its result's type.
Status ReadRegisterTypes(const Node& node, bool typed, const std::vector<int64_t>& types, int registers,
                         FusedProgram* p) {
  auto fail = [&](auto&&... args) { return InvalidModel(node.Describe(), ": ", args...); };
  if (typed && static_cast<int>(types.size()) != registers)
    return fail("'types' must hold one element type per register (", registers, "), got ", types.size());
  p->types.resize(registers);
  for (int r = 0; r < registers; ++r) {
    const bool condition = r < p->num_inputs && p->is_condition[r];
    const DType want_default = condition ? DType::kBool : DType::kFloat32;
    const DType t = typed ? DTypeFromOnnx(static_cast<int32_t>(types[r])) : want_default;
    if (condition ? t != DType::kBool : !IsFusedFloatType(t))
      return fail("register ", r, " has type ", typed ? types[r] : 0, " (", DTypeName(t), "), expected ",
                  condition ? "bool (a Where condition)" : "float32, float16 or bfloat16");
    p->types[r] = t;
  }
  for (size_t k = 0; k < p->code.size(); ++k) {
    const FusedInstruction& ins = p->code[k];
    if (ins.code == FusedOpCode::kCast) continue;  // any float type to any
    const DType result = p->types[p->num_inputs + k];
    for (int j = ins.code == FusedOpCode::kWhere ? 1 : 0; j < ins.arity; ++j)
      if (p->types[ins.src[j]] != result)
        return fail("instruction ", k, " (", FusedOpName(ins.code), ") computes ", DTypeName(result), " but operand ",
                    j, " (register ", ins.src[j], ") is ", DTypeName(p->types[ins.src[j]]));
  }
  return Status::OK();
}

}  // namespace

AttributeMap FusedProgramAttributes(std::vector<std::string> ops, std::vector<int64_t> operands,
                                    std::vector<int64_t> outputs, std::vector<int64_t> types) {
  AttributeMap attrs;
  attrs["ops"] = Attribute::Strings(std::move(ops));
  attrs["operands"] = Attribute::Ints(std::move(operands));
  attrs["outputs"] = Attribute::Ints(std::move(outputs));
  const bool all_float32 = std::all_of(types.begin(), types.end(), [](int64_t t) {
    return t == static_cast<int64_t>(DType::kFloat32) || t == static_cast<int64_t>(DType::kBool);
  });
  if (!all_float32) attrs["types"] = Attribute::Ints(std::move(types));
  return attrs;
}

StatusOr<FusedProgram> ReadFusedProgram(const Node& node) {
  std::vector<std::string> ops;
  std::vector<int64_t> operands, outputs, types;
  TOB_RETURN_IF_ERROR(node.GetAttr("ops", &ops));
  TOB_RETURN_IF_ERROR(node.GetAttr("operands", &operands));
  TOB_RETURN_IF_ERROR(node.GetAttr("outputs", &outputs));
  const bool typed = node.FindAttribute("types") != nullptr;
  if (typed) TOB_RETURN_IF_ERROR(node.GetAttr("types", &types));
  auto fail = [&](auto&&... args) { return InvalidModel(node.Describe(), ": ", args...); };
  FusedProgram p;
  p.num_inputs = static_cast<int>(node.inputs().size());
  if (p.num_inputs < 1 || p.num_inputs > kFusedMaxInputs)
    return fail("expected 1 to ", kFusedMaxInputs, " inputs, got ", p.num_inputs);
  if (ops.empty() || static_cast<int>(ops.size()) > kFusedMaxInstructions)
    return fail("expected 1 to ", kFusedMaxInstructions, " instructions in 'ops', got ", ops.size());
  if (operands.size() != 3 * ops.size())
    return fail("'operands' must hold 3 registers per instruction (", 3 * ops.size(), "), got ", operands.size());
  if (outputs.size() != node.outputs().size())
    return fail("'outputs' names ", outputs.size(), " registers for ", node.outputs().size(), " outputs");
  p.is_condition.assign(p.num_inputs, false);
  std::vector<bool> read_as_float(p.num_inputs, false);
  for (size_t k = 0; k < ops.size(); ++k) {
    const OpEntry* e = FindEntry(ops[k]);
    if (e == nullptr) return fail("instruction ", k, ": '", ops[k], "' is not a fusible elementwise op");
    FusedInstruction ins{e->code, e->arity, {-1, -1, -1}};
    const int defined = p.num_inputs + static_cast<int>(k);
    for (int j = 0; j < 3; ++j) {
      const int64_t r = operands[3 * k + j];
      if (j >= e->arity) {
        if (r != -1)
          return fail("instruction ", k, " (", ops[k], ") reads ", e->arity, " registers, operand ", j, " is ", r);
        continue;
      }
      if (r < 0 || r >= defined)
        return fail("instruction ", k, " (", ops[k], ") reads register ", r, ", defined are 0..", defined - 1);
      const bool condition = e->code == FusedOpCode::kWhere && j == 0;
      if (condition && r >= p.num_inputs)
        return fail("instruction ", k, " (Where) must read its condition from an input, got register ", r);
      if (r < p.num_inputs) (condition ? p.is_condition : read_as_float)[r] = true;
      ins.src[j] = static_cast<int>(r);
    }
    p.code.push_back(ins);
  }
  for (int i = 0; i < p.num_inputs; ++i)
    if (p.is_condition[i] && read_as_float[i])
      return fail("input ", i, " is read both as a bool condition and as a float operand");
  const int registers = p.num_inputs + static_cast<int>(ops.size());
  TOB_RETURN_IF_ERROR(ReadRegisterTypes(node, typed, types, registers, &p));
  for (int64_t r : outputs) {
    if (r < p.num_inputs || r >= registers)
      return fail("output register ", r, " is not an instruction's result (", p.num_inputs, "..", registers - 1, ")");
    p.outputs.push_back(static_cast<int>(r));
  }
  return p;
}

void RegisterFusedElementwiseSchemas(OpSchemaRegistry& registry) {
  OpSchema s;
  s.domain = kTobDomain;
  s.op_type = kFusedElementwiseOp;
  s.min_inputs = 1;
  s.max_inputs = kFusedMaxInputs;
  s.min_outputs = 1;
  s.max_outputs = kFusedMaxInstructions;
  s.infer = InferFusedElementwise;
  registry.Register(std::move(s));
}

}  // namespace tob
