// FusedElementwise (ai.tob): a fused group of elementwise nodes (optimizer/elementwise_fusion.cc)
// run as one loop over memory. The output is walked in blocks of kBlock elements; every
// instruction of the program computes its block into a stack register, so each input is read
// once and each output written once, instead of a full tensor per node.
//
// Numerics: each instruction is the unfused kernel's per-element math on float32 (the same
// functors of math/elementwise_math.h and the same vector_math arrays), one instruction at a time
// with its result stored as float32, so nothing is contracted across ops: the results equal the
// unfused graph's bit for bit. 16-bit registers follow the unfused 16-bit kernels, which widen
// their operands to float32, compute there and round the result once: a float16/bfloat16 input is
// widened as its block is loaded (exact), a 16-bit instruction's float32 result is rounded to its
// type and kept widened (core/float_convert.h's rounding, the one the kernels and Cast use), and a
// 16-bit output is narrowed as it is stored (exact, its values being representable). A Cast is
// that rounding alone (none to float32).
//
// Broadcasting: a register holds kBlock values or one repeated value (stride 0). An input broadcast
// along the inner dim (a scalar, a row's factor) stays one value through every instruction that
// reads only such values, so a per-row computation is done once per row run, not per element.
#include <cstring>

#include "core/float_convert.h"
#include "ops/fused_elementwise_program.h"
#include "providers/cpu/elementwise/elementwise_type_sets.h"
#include "providers/cpu/elementwise/vector_math.h"

namespace tob::ew {

namespace {

inline constexpr int64_t kBlock = 512;

// One register's values over the current block: p[i * stride], stride 0 or 1.
struct Operand {
  const float* p = nullptr;
  int64_t stride = 0;
};

template <typename Op>
Operand Binary(Operand a, Operand b, float* dst, int64_t n) {
  if (a.stride == 0 && b.stride == 0) {
    dst[0] = Op{}(a.p[0], b.p[0]);
    return {dst, 0};
  }
  BinaryComputeLoop(a.p, a.stride, b.p, b.stride, dst, n, Op{});
  return {dst, 1};
}

template <typename Op>
Operand UnaryMap(Operand x, float* dst, int64_t n) {
  const int64_t m = x.stride != 0 ? n : 1;
  const Op op{};
  for (int64_t i = 0; i < m; ++i) dst[i] = op(x.p[i]);
  return {dst, x.stride};
}

Operand UnaryArray(void (*fn)(const float*, float*, int64_t), Operand x, float* dst, int64_t n) {
  fn(x.p, dst, x.stride != 0 ? n : 1);
  return {dst, x.stride};
}

// Rounds r's values to t (float16 or bfloat16) into dst, widened back to float32: what storing
// them in a tensor of type t and reading them again gives.
Operand RoundTo(DType t, Operand r, float* dst, int64_t n) {
  const int64_t m = r.stride != 0 ? n : 1;
  alignas(64) uint16_t bits[kBlock];
  if (t == DType::kBFloat16) {
    FromFloat(r.p, reinterpret_cast<BFloat16*>(bits), m);
    ToFloat(reinterpret_cast<const BFloat16*>(bits), dst, m);
  } else {
    FromFloat(r.p, reinterpret_cast<Float16*>(bits), m);
    ToFloat(reinterpret_cast<const Float16*>(bits), dst, m);
  }
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
    if (t == DType::kBFloat16) FromFloat(r.p, reinterpret_cast<BFloat16*>(y16), n);
    else FromFloat(r.p, reinterpret_cast<Float16*>(y16), n);
    return;
  }
  uint16_t v = 0;
  if (t == DType::kBFloat16) FromFloat(r.p, reinterpret_cast<BFloat16*>(&v), 1);
  else FromFloat(r.p, reinterpret_cast<Float16*>(&v), 1);
  for (int64_t i = 0; i < n; ++i) y16[i] = v;
}

Operand Select(const uint8_t* c, int64_t sc, Operand x, Operand y, float* dst, int64_t n) {
  if (sc == 0 && x.stride == 0 && y.stride == 0) {
    dst[0] = c[0] != 0 ? x.p[0] : y.p[0];
    return {dst, 0};
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = c[i * sc] != 0 ? x.p[i * x.stride] : y.p[i * y.stride];
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
      float* dst = scratch[k];
      const Operand a = reg[ins.src[0]];
      const Operand b = ins.arity > 1 ? reg[ins.src[1]] : Operand{};
      Operand r;
      switch (ins.code) {
        case FusedOpCode::kAdd: r = Binary<AddOp>(a, b, dst, n); break;
        case FusedOpCode::kSub: r = Binary<SubOp>(a, b, dst, n); break;
        case FusedOpCode::kMul: r = Binary<MulOp>(a, b, dst, n); break;
        case FusedOpCode::kDiv: r = Binary<DivOp>(a, b, dst, n); break;
        case FusedOpCode::kPow: r = Binary<PowOp>(a, b, dst, n); break;
        case FusedOpCode::kNeg: r = UnaryMap<NegOp>(a, dst, n); break;
        case FusedOpCode::kAbs: r = UnaryMap<AbsOp>(a, dst, n); break;
        case FusedOpCode::kReciprocal: r = UnaryMap<ReciprocalOp>(a, dst, n); break;
        case FusedOpCode::kRelu: r = UnaryMap<ReluOp>(a, dst, n); break;
        case FusedOpCode::kSqrt: r = UnaryArray(SqrtArray, a, dst, n); break;
        case FusedOpCode::kExp: r = UnaryArray(ExpArray, a, dst, n); break;
        case FusedOpCode::kLog: r = UnaryArray(LogArray, a, dst, n); break;
        case FusedOpCode::kTanh: r = UnaryArray(TanhArray, a, dst, n); break;
        case FusedOpCode::kSigmoid: r = UnaryArray(SigmoidArray, a, dst, n); break;
        case FusedOpCode::kErf: r = UnaryArray(ErfArray, a, dst, n); break;
        case FusedOpCode::kGelu: r = UnaryArray(GeluArray, a, dst, n); break;
        case FusedOpCode::kGeluTanh: r = UnaryArray(GeluTanhArray, a, dst, n); break;
        case FusedOpCode::kWhere: {
          const int c = ins.src[0];
          r = Select(cond[c], stride[c], b, reg[ins.src[2]], dst, n);
          break;
        }
        case FusedOpCode::kCast: r = a; break;  // the rounding below is the whole of it
      }
      const DType t = program_.types[num_inputs + k];
      if (t != DType::kFloat32) r = RoundTo(t, r, dst, n);
      reg[num_inputs + k] = r;
    }
    for (size_t o = 0; o < program_.outputs.size(); ++o) {
      const int r = program_.outputs[o];
      const DType t = program_.types[r];
      Store(t, reg[r], static_cast<char*>(out[o]) + o_off * static_cast<int64_t>(DTypeSize(t)), n);
    }
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
