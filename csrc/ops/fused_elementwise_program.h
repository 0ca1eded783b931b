// The program of an ai.tob FusedElementwise node: what optimizer/elementwise_fusion.cc writes and
// providers/cpu/elementwise/fused_elementwise.cc runs. One node replaces a connected group of
// float32 elementwise nodes of one output shape, so the group reads its inputs and writes its
// outputs once instead of a full tensor per node.
//
// Attributes:
//   ops       strings, one per instruction: the ONNX op it computes ("Mul", "Sigmoid", "Where").
//   operands  ints, 3 per instruction: registers read (-1 past the op's arity). Registers
//             0..num_inputs-1 are the node's inputs; num_inputs + k is instruction k's result.
//   outputs   ints, one per node output: the register it holds.
// Every register is float32 except inputs read only as Where's condition (bool).
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
// Bounds that keep the kernel's registers on the stack and its broadcast walk small.
inline constexpr int kFusedMaxInputs = 8;
inline constexpr int kFusedMaxInstructions = 16;

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
};

// The instruction computing `node` on float32; nullopt when it has none. Gelu with
// approximate="tanh" is the instruction "GeluTanh" (a name no ONNX op has).
std::optional<FusedOpCode> FusedOpCodeOf(const Node& node);
int FusedOpArity(FusedOpCode code);
const char* FusedOpName(FusedOpCode code);
// Whether the instruction calls a vectorised transcendental (sets the kernel's thread grain).
bool FusedOpIsExpensive(FusedOpCode code);

// Reads and checks a FusedElementwise node's program (arity, registers defined before use, Where
// conditions only on inputs); InvalidModel naming the node and the instruction otherwise.
StatusOr<FusedProgram> ReadFusedProgram(const Node& node);

}  // namespace tob
