// The program of an ai.tob FusedElementwise node: what optimizer/elementwise_fusion.cc writes and
// providers/cpu/elementwise/fused_elementwise.cc runs. One node replaces a connected group of
// elementwise nodes of one output shape (float32, float16, bfloat16 and the Casts between them), so
// the group reads its inputs and writes its outputs once instead of a full tensor per node.
//
// Attributes:
//   ops       strings, one per instruction: the ONNX op it computes ("Mul", "Sigmoid", "Where",
//             "Cast"; "GeluTanh" and com.microsoft's "TanhGrad" besides).
//   operands  ints, 3 per instruction: registers read (-1 past the op's arity). Registers
//             0..num_inputs-1 are the node's inputs; num_inputs + k is instruction k's result.
//   outputs   ints, one per node output: the register it holds.
//   types     ints, optional: the ONNX element type of every register (inputs, then instructions):
//             float32, float16 or bfloat16, bool for Where's conditions. Absent: every register is
//             float32 except the conditions (bool). A Cast's target is its register's type.
// Every instruction computes in float32, as the unfused 16-bit kernels do: its operands widened
// (exactly), the op's float32 math, the result rounded once to its register's type (to nearest
// even). So a register of a 16-bit type always holds a value that type can represent, and the
// fused node's outputs equal the unfused graph's bit for bit.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"

namespace tob {

inline constexpr const char* kTobDomain = "ai.tob";
inline constexpr const char* kFusedElementwiseOp = "FusedElementwise";
// Bounds that keep the kernel's registers on the stack (32 x 2 KiB of float32 blocks) and its
// broadcast walk small. 12 inputs: GPT-2's GELU backward under autocast (15 instructions with
// TanhGrad) reads 9; at 8 it was cut into a 3- and a 12-instruction node, the first's bfloat16
// result written out and read back. 32 instructions: a program ElementwiseRematerialization wrote
// (GPT-2's GELU gradient with the GELU's tanh recomputed in it: 18); ElementwiseFusion's groups
// stay within kFusedGroupMaxInstructions.
inline constexpr int kFusedMaxInputs = 12;
inline constexpr int kFusedMaxInstructions = 32;
inline constexpr int kFusedGroupMaxInstructions = 16;

enum class FusedOpCode : int {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,  // binary, numpy broadcasting
  kNeg,
  kAbs,
  kReciprocal,
  kSqrt,
  kExp,
  kLog,
  kTanh,
  kSigmoid,
  kErf,
  kRelu,
  kGelu,
  kGeluTanh,  // unary
  kWhere,     // Where(bool condition, x, y)
  kCast,      // Cast between float32, float16 and bfloat16: the target is the result register's type
  kTanhGrad,  // com.microsoft TanhGrad(dY, Y) = dY (1 - Y^2): binary, its operands of one shape
};

struct FusedInstruction {
  FusedOpCode code;
  int arity;
  std::array<int, 3> src;
};

struct FusedProgram {
  int num_inputs = 0;
  std::vector<FusedInstruction> code;
  std::vector<int> outputs;
  // Registers read as Where's condition (bool inputs).
  std::vector<bool> is_condition;
  // Every register's type (inputs, then instructions): float32, float16 or bfloat16; bool for the
  // conditions.
  std::vector<DType> types;
};

// The register types a fused program can hold besides the bool conditions.
inline bool IsFusedFloatType(DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; }

// The instruction computing `node` (its types are the pass's to check); nullopt when it has none.
// Gelu with approximate="tanh" is the instruction "GeluTanh" (a name no ONNX op has); a Cast is one
// only when its target is float32, float16 or bfloat16; "TanhGrad" is com.microsoft's (GPT-2's GELU
// backward), never an op of the default domain.
std::optional<FusedOpCode> FusedOpCodeOf(const Node& node);
int FusedOpArity(FusedOpCode code);
const char* FusedOpName(FusedOpCode code);
// Whether the instruction calls a vectorised transcendental (sets the kernel's thread grain).
bool FusedOpIsExpensive(FusedOpCode code);

// Reads and checks a FusedElementwise node's program (arity, registers defined before use, Where
// conditions only on inputs, register types: every operand of an instruction other than Cast of
// its result's type); InvalidModel naming the node and the instruction otherwise.
StatusOr<FusedProgram> ReadFusedProgram(const Node& node);

// A FusedElementwise node's program attributes: its instructions `ops`, their `operands` (three per
// instruction, -1 past its arity) and the registers it `outputs`; `types` (one per input, then one per
// instruction, DType values) is written only where some register is not float32 or a bool condition
// (the attribute's default).
AttributeMap FusedProgramAttributes(std::vector<std::string> ops, std::vector<int64_t> operands,
                                    std::vector<int64_t> outputs, std::vector<int64_t> types = {});

}  // namespace tob
