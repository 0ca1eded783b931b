// FusedElementwise (ai.tob): a fused group of elementwise nodes (optimizer/elementwise_fusion.cc)
// run as one loop over memory. The output is walked in blocks of kBlock elements; every
// instruction of the program computes its block into a stack register, so each input is read
// once and each output written once, instead of a full tensor per node.
//
// Numerics: each instruction is the unfused kernel's per-element math on float32 (the same
// functors of math/elementwise_math.h and math/activation_grad_math.h and the same vector_math
// arrays), one instruction at a time
// with its result stored as float32, so nothing is contracted across ops: the results equal the
// unfused graph's bit for bit. 16-bit registers follow the unfused 16-bit kernels, which widen
// their operands to float32, compute there and round the result once: a float16/bfloat16 input is
// widened as its block is loaded (exact), a 16-bit instruction's float32 result is rounded to its
// type and kept widened (core/float_convert.h's rounding, the one the kernels and Cast use, as
// round_16bit.h computes it without a 16-bit buffer: for bfloat16 inside the instruction's own
// loop, while the value is in a register), and a 16-bit output is narrowed as it is stored (exact,
// its values being representable). A Cast is that rounding alone (none to float32).
//
// Broadcasting: a register holds kBlock values or one repeated value (stride 0). An input broadcast
// along the inner dim (a scalar, a row's factor) stays one value through every instruction that
// reads only such values, so a per-row computation is done once per row run, not per element.
#include <cstring>
#include <type_traits>

#include "core/float_convert.h"
#include "math/activation_grad_math.h"
#include "ops/fused_elementwise_program.h"
#include "providers/cpu/elementwise/elementwise_type_sets.h"
#include "providers/cpu/elementwise/round_16bit.h"
#include "providers/cpu/elementwise/vector_math.h"

namespace tob::ew {

namespace {

inline constexpr int64_t kBlock = 512;
static_assert(kMaxBroadcastInputs >= kFusedMaxInputs, "the broadcast walk carries every input's offset");

// One register's values over the current block: p[i * stride], stride 0 or 1.
struct Operand {
  const float* p = nullptr;
  int64_t stride = 0;
};

// What an instruction does to each float32 result before keeping it: nothing (float32 and
// float16 registers; float16's rounding is a pass of its own, RoundRegisterToFloat16) or the
// bfloat16 rounding, applied in the instruction's own loop while the value is in a register.
struct KeepFloat {
  float operator()(float v) const { return v; }
};
struct RoundBFloat16 {
  float operator()(float v) const { return RoundToBFloat16(v); }
};

template <typename Op, typename Post>
Operand Binary(Operand a, Operand b, float* dst, int64_t n, Post post) {
  const Op op{};
  if (a.stride == 0 && b.stride == 0) {
    dst[0] = post(op(a.p[0], b.p[0]));
    return {dst, 0};
  }
  const float* ap = a.p;
  const float* bp = b.p;
  if (a.stride != 0 && b.stride != 0) {
    for (int64_t i = 0; i < n; ++i) dst[i] = post(op(ap[i], bp[i]));
  } else if (a.stride != 0) {
    const float bv = bp[0];
    for (int64_t i = 0; i < n; ++i) dst[i] = post(op(ap[i], bv));
  } else {
    const float av = ap[0];
    for (int64_t i = 0; i < n; ++i) dst[i] = post(op(av, bp[i]));
  }
  return {dst, 1};
}

template <typename Op, typename Post>
Operand UnaryMap(Operand x, float* dst, int64_t n, Post post) {
  const int64_t m = x.stride != 0 ? n : 1;
  const Op op{};
  for (int64_t i = 0; i < m; ++i) dst[i] = post(op(x.p[i]));
  return {dst, x.stride};
}

template <typename Post>
Operand UnaryArray(void (*fn)(const float*, float*, int64_t), Operand x, float* dst, int64_t n, Post post) {
  const int64_t m = x.stride != 0 ? n : 1;
  fn(x.p, dst, m);
  if constexpr (!std::is_same_v<Post, KeepFloat>) {
    for (int64_t i = 0; i < m; ++i) dst[i] = post(dst[i]);
  }
  return {dst, x.stride};
}

// A Cast: its operand's values, rounded by post (none to float32: the operand register itself).
template <typename Post>
Operand CastTo(Operand x, float* dst, int64_t n, Post post) {
  if constexpr (std::is_same_v<Post, KeepFloat>) {
    return x;
  } else {
    const int64_t m = x.stride != 0 ? n : 1;
    for (int64_t i = 0; i < m; ++i) dst[i] = post(x.p[i]);
    return {dst, x.stride};
  }
}

// Rounds r's values to float16 into dst, widened back to float32: what storing them in a float16
// tensor and reading them again gives.
Operand RoundRegisterToFloat16(Operand r, float* dst, int64_t n) {
  const int64_t m = r.stride != 0 ? n : 1;
  RoundToFloat16(r.p, dst, m);
  return {dst, r.stride};
}

// Widens m values of a float16/bfloat16 array into dst.
void Widen(DType t, const void* src, float* dst, int64_t m) {
  if (t == DType::kBFloat16) ToFloat(static_cast<const BFloat16*>(src), dst, m);
  else ToFloat(static_cast<const Float16*>(src), dst, m);
}

// Stores n values of r (stride 0: one repeated) into y of type t, y's values all representable.
void Store(DType t, Operand r, void* y, int64_t n) {
  if (t == DType::kFloat32) {
    float* yf = static_cast<float*>(y);
    if (r.stride != 0) {
      std::memcpy(yf, r.p, static_cast<size_t>(n) * sizeof(float));
    } else {
      const float v = r.p[0];
      for (int64_t i = 0; i < n; ++i) yf[i] = v;
    }
    return;
  }
  uint16_t* y16 = static_cast<uint16_t*>(y);
  if (r.stride != 0) {
    if (t == DType::kBFloat16) NarrowExactToBFloat16(r.p, y16, n);
    else FromFloat(r.p, reinterpret_cast<Float16*>(y16), n);
    return;
  }
  uint16_t v = 0;
  if (t == DType::kBFloat16) NarrowExactToBFloat16(r.p, &v, 1);
  else FromFloat(r.p, reinterpret_cast<Float16*>(&v), 1);
  for (int64_t i = 0; i < n; ++i) y16[i] = v;
}

template <typename Post>
Operand Select(const uint8_t* c, int64_t sc, Operand x, Operand y, float* dst, int64_t n, Post post) {
  if (sc == 0 && x.stride == 0 && y.stride == 0) {
    dst[0] = post(c[0] != 0 ? x.p[0] : y.p[0]);
    return {dst, 0};
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = post(c[i * sc] != 0 ? x.p[i * x.stride] : y.p[i * y.stride]);
  return {dst, 1};
}

class FusedElementwiseKernel final : public OpKernel {
 public:
  FusedElementwiseKernel(const Node& node, FusedProgram program) : OpKernel(node), program_(std::move(program)) {
    bool expensive = false;
    for (const FusedInstruction& ins : program_.code) expensive |= FusedOpIsExpensive(ins.code);
    grain_ = expensive ? kExpensiveGrain : kCheapGrain / 4;
  }

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(FusedProgram program, ReadFusedProgram(node));
    return MakeKernel<FusedElementwiseKernel>(node, std::move(program));
  }

  Status Compute(KernelContext& ctx) const override {
    const int num_inputs = program_.num_inputs;
    if (ctx.num_inputs() != num_inputs || ctx.num_outputs() != static_cast<int>(program_.outputs.size()))
      return ctx.Fail("the program has ", num_inputs, " inputs and ", program_.outputs.size(), " outputs, the node ",
                      ctx.num_inputs(), " and ", ctx.num_outputs());
    std::vector<const Shape*> shapes;
    std::array<const void*, kFusedMaxInputs> in{};
    for (int i = 0; i < num_inputs; ++i) {
      const Tensor* t = ctx.input(i);
      const DType expected = program_.types[i];
      if (t == nullptr || t->dtype() != expected)
        return ctx.Fail("input ", i, " must be ", DTypeName(expected), ", got ",
                        t == nullptr ? std::string("nothing") : std::string(DTypeName(t->dtype())));
      shapes.push_back(&t->shape());
      in[i] = t->raw_data();
    }
    const Shape& out_shape = ctx.output(0)->shape();
    std::array<void*, kFusedMaxInstructions> out{};
    for (int o = 0; o < ctx.num_outputs(); ++o) {
      Tensor& t = *ctx.output(o);
      const DType expected = program_.types[program_.outputs[o]];
      if (t.dtype() != expected || t.shape() != out_shape)
        return ctx.Fail("output ", o, " must be ", DTypeName(expected), " of shape ", ShapeToString(out_shape),
                        ", got ", DTypeName(t.dtype()), " ", ShapeToString(t.shape()));
      out[o] = t.raw_data();
    }
    const int64_t numel = ctx.output(0)->numel();
    if (numel == 0) return Status::OK();

    // Same shapes or single values only: one flat run, without a broadcast plan.
    bool flat = true;
    std::array<int64_t, kFusedMaxInputs> flat_stride{};
    for (int i = 0; i < num_inputs; ++i) {
      const bool full = *shapes[i] == out_shape;
      flat &= full || ctx.input(i)->numel() == 1;
      flat_stride[i] = full ? 1 : 0;
    }
    if (flat) {
      ParallelFor(ctx.thread_pool(), numel, grain_, [&](int64_t begin, int64_t end) {
        std::array<int64_t, kMaxBroadcastInputs> offsets{};
        for (int i = 0; i < num_inputs; ++i) offsets[i] = begin * flat_stride[i];
        RunSpan(in, offsets, flat_stride, out, begin, end - begin);
      });
      return Status::OK();
    }
    auto plan_or = MakeBroadcastPlan(shapes, out_shape);
    if (!plan_or.ok()) return ctx.Fail(plan_or.status().message());
    const BroadcastPlan& plan = plan_or.value();
    std::array<int64_t, kFusedMaxInputs> inner{};
    for (int i = 0; i < num_inputs; ++i) inner[i] = plan.inner_stride(i);
    ParallelFor(ctx.thread_pool(), plan.numel, grain_, [&](int64_t begin, int64_t end) {
      ForEachSpan(plan, begin, end, [&](int64_t o_off, const auto& in_off, int64_t count) {
        RunSpan(in, in_off, inner, out, o_off, count);
      });
    });
    return Status::OK();
  }

 private:
  // Output elements [o_off, o_off + count); input i's elements start at in_off[i] with stride[i].
  template <typename Offsets>
  void RunSpan(const std::array<const void*, kFusedMaxInputs>& in, const Offsets& in_off,
               const std::array<int64_t, kFusedMaxInputs>& stride, const std::array<void*, kFusedMaxInstructions>& out,
               int64_t o_off, int64_t count) const {
    alignas(64) float scratch[kFusedMaxInstructions][kBlock];
    alignas(64) float widened[kFusedMaxInputs][kBlock];  // 16-bit inputs' blocks, as float32
    for (int64_t done = 0; done < count; done += kBlock) {
      const int64_t n = std::min(kBlock, count - done);
      RunBlock(in, in_off, stride, done, scratch, widened, n, out, o_off + done);
    }
  }

  template <typename Offsets>
  void RunBlock(const std::array<const void*, kFusedMaxInputs>& in, const Offsets& in_off,
                const std::array<int64_t, kFusedMaxInputs>& stride, int64_t done, float (*scratch)[kBlock],
                float (*widened)[kBlock], int64_t n, const std::array<void*, kFusedMaxInstructions>& out,
                int64_t o_off) const {
    const int num_inputs = program_.num_inputs;
    std::array<Operand, kFusedMaxInputs + kFusedMaxInstructions> reg{};
    std::array<const uint8_t*, kFusedMaxInputs> cond{};
    for (int i = 0; i < num_inputs; ++i) {
      const int64_t at = in_off[i] + done * stride[i];
      const DType t = program_.types[i];
      if (program_.is_condition[i]) {
        cond[i] = static_cast<const uint8_t*>(in[i]) + at;
      } else if (t == DType::kFloat32) {
        reg[i] = {static_cast<const float*>(in[i]) + at, stride[i]};
      } else {
        Widen(t, static_cast<const uint16_t*>(in[i]) + at, widened[i], stride[i] != 0 ? n : 1);
        reg[i] = {widened[i], stride[i]};
      }
    }
    for (size_t k = 0; k < program_.code.size(); ++k) {
      const FusedInstruction& ins = program_.code[k];
      const DType t = program_.types[num_inputs + k];
      Operand r;
      if (t == DType::kBFloat16) {
        r = Execute(ins, reg, cond, stride, scratch[k], n, RoundBFloat16{});
      } else {
        r = Execute(ins, reg, cond, stride, scratch[k], n, KeepFloat{});
        if (t == DType::kFloat16) r = RoundRegisterToFloat16(r, scratch[k], n);
      }
      reg[num_inputs + k] = r;
    }
    for (size_t o = 0; o < program_.outputs.size(); ++o) {
      const int r = program_.outputs[o];
      const DType t = program_.types[r];
      Store(t, reg[r], static_cast<char*>(out[o]) + o_off * static_cast<int64_t>(DTypeSize(t)), n);
    }
  }

  // Instruction `ins` over the block's n values into dst, each result passed through post.
  template <typename Regs, typename Conds, typename Post>
  static Operand Execute(const FusedInstruction& ins, const Regs& reg, const Conds& cond,
                         const std::array<int64_t, kFusedMaxInputs>& stride, float* dst, int64_t n, Post post) {
    const Operand a = reg[ins.src[0]];
    const Operand b = ins.arity > 1 ? reg[ins.src[1]] : Operand{};
    switch (ins.code) {
      case FusedOpCode::kAdd: return Binary<AddOp>(a, b, dst, n, post);
      case FusedOpCode::kSub: return Binary<SubOp>(a, b, dst, n, post);
      case FusedOpCode::kMul: return Binary<MulOp>(a, b, dst, n, post);
      case FusedOpCode::kDiv: return Binary<DivOp>(a, b, dst, n, post);
      case FusedOpCode::kPow: return Binary<PowOp>(a, b, dst, n, post);
      case FusedOpCode::kNeg: return UnaryMap<NegOp>(a, dst, n, post);
      case FusedOpCode::kAbs: return UnaryMap<AbsOp>(a, dst, n, post);
      case FusedOpCode::kReciprocal: return UnaryMap<ReciprocalOp>(a, dst, n, post);
      case FusedOpCode::kRelu: return UnaryMap<ReluOp>(a, dst, n, post);
      case FusedOpCode::kSqrt: return UnaryArray(SqrtArray, a, dst, n, post);
      case FusedOpCode::kExp: return UnaryArray(ExpArray, a, dst, n, post);
      case FusedOpCode::kLog: return UnaryArray(LogArray, a, dst, n, post);
      case FusedOpCode::kTanh: return UnaryArray(TanhArray, a, dst, n, post);
      case FusedOpCode::kSigmoid: return UnaryArray(SigmoidArray, a, dst, n, post);
      case FusedOpCode::kErf: return UnaryArray(ErfArray, a, dst, n, post);
      case FusedOpCode::kGelu: return UnaryArray(GeluArray, a, dst, n, post);
      case FusedOpCode::kGeluTanh: return UnaryArray(GeluTanhArray, a, dst, n, post);
      case FusedOpCode::kWhere: {
        const int c = ins.src[0];
        return Select(cond[c], stride[c], b, reg[ins.src[2]], dst, n, post);
      }
      case FusedOpCode::kCast: return CastTo(a, dst, n, post);
      case FusedOpCode::kTanhGrad: return Binary<TanhGradOp>(a, b, dst, n, post);
    }
    return a;  // unreachable: ReadFusedProgram accepts only the codes above
  }

  FusedProgram program_;
  int64_t grain_ = kCheapGrain;
};

}  // namespace
}  // namespace tob::ew

namespace tob {

void RegisterCpuFusedElementwiseKernels(KernelRegistry& registry) {
  using namespace ew;  // the kernel above
  // Input types are checked by the schema and the kernel (the program's register types: float32,
  // float16, bfloat16 values, bool conditions).
  registry.Register(Def(kFusedElementwiseOp).Domain(kTobDomain).Versions(1).Kernel<FusedElementwiseKernel>());
}

}  // namespace tob
