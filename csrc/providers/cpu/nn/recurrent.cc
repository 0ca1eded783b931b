// RNN, GRU and LSTM (opsets 7, 14, 22) on the CPU: forward, reverse and bidirectional, layout 0
// ([seq, batch, ...]) and 1 ([batch, seq, ...]), sequence_lens, initial states, LSTM peepholes
// and input_forget, GRU's linear_before_reset, the cell clip and the spec's activation list.
//
// Per direction, the input projection of every time step is one GEMM ([seq * batch, input] x
// W^T) before the loop; each step is one GEMM of the previous hidden state with R^T (GRU without
// linear_before_reset: two, the second on r * h_prev), then the gate arithmetic of
// math/recurrent_math.h per element, threaded over the batch. float16 / bfloat16 run in float32
// (inputs widened once, outputs rounded once), double in double.
//
// sequence_lens: batch row b runs its first len_b steps (a reverse direction runs them from
// len_b - 1 down to 0); Y is zero at the steps past len_b and Y_h / Y_c hold the state after the
// last step run (the initial state when len_b is 0).
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "framework/kernel_registry.h"
#include "math/recurrent_math.h"
#include "ops/nn_recurrent_attributes.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/gemm.h"

namespace tob::cpu {
namespace {

struct Geometry {
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1, layout = 0;
  // Row of X (and of the input projection) holding step s of batch row b.
  int64_t XRow(int64_t s, int64_t b) const { return layout == 0 ? s * batch + b : b * seq + s; }
  int64_t YOffset(int64_t s, int64_t d, int64_t b) const {
    return (layout == 0 ? (s * dirs + d) * batch + b : (b * seq + s) * dirs + d) * hidden;
  }
  int64_t StateOffset(int64_t d, int64_t b) const { return (layout == 0 ? d * batch + b : b * dirs + d) * hidden; }
};

// The operands in the compute type C; absent optional inputs and unread outputs are nullptr.
template <typename C>
struct Operands {
  const C* x = nullptr;
  const C* w = nullptr;
  const C* r = nullptr;
  const C* bias = nullptr;
  const int32_t* lens = nullptr;
  const C* h0 = nullptr;
  const C* c0 = nullptr;
  const C* peephole = nullptr;
  C* y = nullptr;
  C* yh = nullptr;
  C* yc = nullptr;
};

// Batch row b's time index at step t, or -1 when its sequence has ended.
inline int64_t TimeIndex(const Geometry& g, const int32_t* lens, bool reverse, int64_t t, int64_t b) {
  const int64_t len = lens != nullptr ? lens[b] : g.seq;
  if (t >= len) return -1;
  return reverse ? len - 1 - t : t;
}

template <typename C>
class DirectionRunner {
 public:
  DirectionRunner(const KernelContext& ctx, const RecurrentAttributes& a, const Geometry& g, const Operands<C>& in,
                  int64_t d)
      : ctx_(ctx), a_(a), g_(g), in_(in), d_(d), reverse_(a.reverse || d == 1), gh_(a.gates() * g.hidden) {}

  Status Run() {
    const int64_t H = g_.hidden, B = g_.batch, S = g_.seq, I = g_.input;
    ThreadPool* pool = ctx_.thread_pool();
    w_ = in_.w + d_ * gh_ * I;
    r_ = in_.r + d_ * gh_ * H;
    TOB_ASSIGN_OR_RETURN(Tensor xw, ctx_.AllocateScratch(DTypeOf<C>(), {std::max<int64_t>(S * B, 1), gh_}));
    TOB_ASSIGN_OR_RETURN(Tensor hr, ctx_.AllocateScratch(DTypeOf<C>(), {std::max<int64_t>(B, 1), gh_}));
    TOB_ASSIGN_OR_RETURN(Tensor hidden, ctx_.AllocateScratch(DTypeOf<C>(), {std::max<int64_t>(B, 1), H}));
    TOB_ASSIGN_OR_RETURN(Tensor cell, ctx_.AllocateScratch(DTypeOf<C>(), {std::max<int64_t>(B, 1), H}));
    TOB_ASSIGN_OR_RETURN(Tensor bias, ctx_.AllocateScratch(DTypeOf<C>(), {2 * gh_}));
    // GRU without linear_before_reset: r * h_prev, z and (r * h_prev) R_h^T per row.
    TOB_ASSIGN_OR_RETURN(Tensor gru, ctx_.AllocateScratch(DTypeOf<C>(), {std::max<int64_t>(B, 1), 3 * H}));
    xw_ = xw.data<C>();
    hr_ = hr.data<C>();
    h_ = hidden.data<C>();
    c_ = a_.op == RecurrentOp::kLstm ? cell.data<C>() : nullptr;
    gru_ = gru.data<C>();
    bias_ = bias.data<C>();
    if (in_.bias != nullptr) std::copy(in_.bias + d_ * 2 * gh_, in_.bias + (d_ + 1) * 2 * gh_, bias_);
    else std::fill(bias_, bias_ + 2 * gh_, C(0));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < H; ++j) {
        h_[b * H + j] = in_.h0 != nullptr ? in_.h0[g_.StateOffset(d_, b) + j] : C(0);
        if (c_ != nullptr) c_[b * H + j] = in_.c0 != nullptr ? in_.c0[g_.StateOffset(d_, b) + j] : C(0);
      }

    if (S * B > 0) TOB_RETURN_IF_ERROR(Gemm(false, true, S * B, gh_, I, C(1), in_.x, I, w_, I, C(0), xw_, gh_, pool));
    // GRU without linear_before_reset multiplies R_h by r * h_prev: the step GEMM covers z and r.
    const bool gru_split = a_.op == RecurrentOp::kGru && !a_.linear_before_reset;
    const int64_t step_cols = gru_split ? 2 * H : gh_;
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(gh_, 1));
    for (int64_t t = 0; t < S; ++t) {
      if (B > 0) TOB_RETURN_IF_ERROR(Gemm(false, true, B, step_cols, H, C(1), h_, H, r_, H, C(0), hr_, gh_, pool));
      switch (a_.op) {
        case RecurrentOp::kRnn: ParallelFor(pool, B, grain, [&](int64_t b0, int64_t b1) { RnnRows(t, b0, b1); }); break;
        case RecurrentOp::kLstm:
          ParallelFor(pool, B, grain, [&](int64_t b0, int64_t b1) { LstmRows(t, b0, b1); });
          break;
        case RecurrentOp::kGru:
          if (!gru_split) {
            ParallelFor(pool, B, grain, [&](int64_t b0, int64_t b1) { GruRows(t, b0, b1, nullptr); });
            break;
          }
          ParallelFor(pool, B, grain, [&](int64_t b0, int64_t b1) { GruResetRows(t, b0, b1); });
          if (B > 0)
            TOB_RETURN_IF_ERROR(
                Gemm(false, true, B, H, H, C(1), gru_ + 0, 3 * H, r_ + 2 * H * H, H, C(0), gru_ + 2 * H, 3 * H, pool));
          ParallelFor(pool, B, grain, [&](int64_t b0, int64_t b1) { GruRows(t, b0, b1, gru_); });
          break;
      }
    }
    for (int64_t b = 0; b < B; ++b) {
      if (in_.yh != nullptr) std::copy(h_ + b * H, h_ + (b + 1) * H, in_.yh + g_.StateOffset(d_, b));
      if (in_.yc != nullptr && c_ != nullptr) std::copy(c_ + b * H, c_ + (b + 1) * H, in_.yc + g_.StateOffset(d_, b));
    }
    return Status::OK();
  }

 private:
  C Clip() const { return static_cast<C>(a_.clip); }
  void WriteY(int64_t s, int64_t b, const C* h) const {
    if (in_.y != nullptr) std::copy(h, h + g_.hidden, in_.y + g_.YOffset(s, d_, b));
  }

  void RnnRows(int64_t t, int64_t b0, int64_t b1) {
    const int64_t H = g_.hidden;
    const rnn::Activation& f = a_.activation(d_, 0);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t s = TimeIndex(g_, in_.lens, reverse_, t, b);
      if (s < 0) continue;
      const C* xw = xw_ + g_.XRow(s, b) * gh_;
      const C* hr = hr_ + b * gh_;
      C* h = h_ + b * H;
      for (int64_t j = 0; j < H; ++j) h[j] = rnn::RnnCell(f, Clip(), xw[j] + hr[j] + bias_[j] + bias_[gh_ + j]);
      WriteY(s, b, h);
    }
  }

  // W, R and B hold the gates in the order i, o, f, c; P in the order i, o, f.
  void LstmRows(int64_t t, int64_t b0, int64_t b1) {
    const int64_t H = g_.hidden;
    const rnn::Activation &f = a_.activation(d_, 0), &g = a_.activation(d_, 1), &hact = a_.activation(d_, 2);
    const C* p = in_.peephole != nullptr ? in_.peephole + d_ * 3 * H : nullptr;
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t s = TimeIndex(g_, in_.lens, reverse_, t, b);
      if (s < 0) continue;
      const C* xw = xw_ + g_.XRow(s, b) * gh_;
      const C* hr = hr_ + b * gh_;
      C* h = h_ + b * H;
      C* c = c_ + b * H;
      for (int64_t j = 0; j < H; ++j) {
        auto pre = [&](int64_t gate) {
          const int64_t k = gate * H + j;
          return xw[k] + hr[k] + bias_[k] + bias_[gh_ + k];
        };
        const rnn::LstmPre<C> gates{pre(0), pre(1), pre(2), pre(3)};
        const C pi = p != nullptr ? p[j] : C(0), po = p != nullptr ? p[H + j] : C(0);
        const C pf = p != nullptr ? p[2 * H + j] : C(0);
        C c_new;
        h[j] = rnn::LstmCell(f, g, hact, Clip(), gates, pi, po, pf, c[j], a_.input_forget, &c_new);
        c[j] = c_new;
      }
      WriteY(s, b, h);
    }
  }

  // GRU without linear_before_reset, phase 1: z into gru_[b][H..2H), r * h_prev into gru_[b][0..H).
  void GruResetRows(int64_t t, int64_t b0, int64_t b1) {
    const int64_t H = g_.hidden;
    const rnn::Activation& f = a_.activation(d_, 0);
    for (int64_t b = b0; b < b1; ++b) {
      C* row = gru_ + b * 3 * H;
      const int64_t s = TimeIndex(g_, in_.lens, reverse_, t, b);
      if (s < 0) {
        std::fill(row, row + H, C(0));
        continue;
      }
      const C* xw = xw_ + g_.XRow(s, b) * gh_;
      const C* hr = hr_ + b * gh_;
      const C* h = h_ + b * H;
      for (int64_t j = 0; j < H; ++j) {
        const C z = rnn::GruGate(f, Clip(), xw[j] + hr[j] + bias_[j] + bias_[gh_ + j]);
        const int64_t k = H + j;
        const C r = rnn::GruGate(f, Clip(), xw[k] + hr[k] + bias_[k] + bias_[gh_ + k]);
        row[j] = r * h[j];
        row[H + j] = z;
      }
    }
  }

  // W, R and B hold the gates in the order z, r, h. `split`: phase 2 of the variant without
  // linear_before_reset (z and (r * h_prev) R_h^T in gru_); nullptr: linear_before_reset.
  void GruRows(int64_t t, int64_t b0, int64_t b1, const C* split) {
    const int64_t H = g_.hidden;
    const rnn::Activation &f = a_.activation(d_, 0), &g = a_.activation(d_, 1);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t s = TimeIndex(g_, in_.lens, reverse_, t, b);
      if (s < 0) continue;
      const C* xw = xw_ + g_.XRow(s, b) * gh_;
      const C* hr = hr_ + b * gh_;
      C* h = h_ + b * H;
      for (int64_t j = 0; j < H; ++j) {
        const int64_t kh = 2 * H + j;
        C z, pre_h;
        if (split != nullptr) {
          z = split[b * 3 * H + H + j];
          pre_h = xw[kh] + bias_[kh] + split[b * 3 * H + 2 * H + j] + bias_[gh_ + kh];
        } else {
          z = rnn::GruGate(f, Clip(), xw[j] + hr[j] + bias_[j] + bias_[gh_ + j]);
          const int64_t kr = H + j;
          const C r = rnn::GruGate(f, Clip(), xw[kr] + hr[kr] + bias_[kr] + bias_[gh_ + kr]);
          pre_h = xw[kh] + bias_[kh] + r * (hr[kh] + bias_[gh_ + kh]);
        }
        h[j] = rnn::GruOutput(g, Clip(), z, pre_h, h[j]);
      }
      WriteY(s, b, h);
    }
  }

  const KernelContext& ctx_;
  const RecurrentAttributes& a_;
  const Geometry& g_;
  const Operands<C>& in_;
  const int64_t d_;
  const bool reverse_;
  const int64_t gh_;  // gates * hidden
  const C* w_ = nullptr;
  const C* r_ = nullptr;
  C* xw_ = nullptr;
  C* hr_ = nullptr;
  C* h_ = nullptr;
  C* c_ = nullptr;
  C* gru_ = nullptr;
  C* bias_ = nullptr;  // Wb then Rb of this direction (zeros without B)
};

class RecurrentKernel final : public OpKernel {
 public:
  RecurrentKernel(const Node& node, RecurrentAttributes a) : OpKernel(node), a_(std::move(a)) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(RecurrentAttributes a, RecurrentAttributes::Read(node));
    return MakeKernel<RecurrentKernel>(node, std::move(a));
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& r = *ctx.input(2);
    Geometry g;
    g.layout = a_.layout;
    g.seq = x.dim(a_.layout == 0 ? 0 : 1);
    g.batch = x.dim(a_.layout == 0 ? 1 : 0);
    g.input = x.dim(2);
    g.hidden = r.dim(2);
    g.dirs = a_.num_directions;
    const Tensor* lens = Optional(ctx, 4);
    if (lens != nullptr)
      for (int64_t b = 0; b < g.batch; ++b) {
        const int32_t len = lens->data<int32_t>()[b];
        if (len < 0 || len > g.seq)
          return ctx.Fail("sequence_lens[", b, "] = ", len, " is outside [0, ", g.seq, "] (the sequence length)");
      }
    switch (x.dtype()) {
      case DType::kFloat32: return RunDirect<float>(ctx, g);
      case DType::kFloat64: return RunDirect<double>(ctx, g);
      case DType::kFloat16:
      case DType::kBFloat16: return RunInFloat(ctx, g);
      default: return ctx.Fail("dtype ", DTypeName(x.dtype()), " is not supported");
    }
  }

 private:
  static const Tensor* Optional(const KernelContext& ctx, int i) {
    const Tensor* t = ctx.input(i);
    return t != nullptr && t->defined() ? t : nullptr;
  }
  bool HasInput(const KernelContext& ctx, int i) const { return Optional(ctx, i) != nullptr; }
  static constexpr int kLens = 4;
  // Input index of each compute-type operand: X, W, R, B, initial_h, initial_c, P.
  static constexpr int kFloatInputs[] = {0, 1, 2, 3, 5, 6, 7};

  template <typename C>
  Status RunAll(const KernelContext& ctx, const Geometry& g, Operands<C>& ops) const {
    if (ops.y != nullptr && ops.lens != nullptr)  // steps past a row's length stay zero
      std::fill(ops.y, ops.y + g.seq * g.dirs * g.batch * g.hidden, C(0));
    for (int64_t d = 0; d < g.dirs; ++d) TOB_RETURN_IF_ERROR(DirectionRunner<C>(ctx, a_, g, ops, d).Run());
    return Status::OK();
  }

  template <typename C>
  Status RunDirect(KernelContext& ctx, const Geometry& g) const {
    Operands<C> ops;
    const C* in[7] = {};
    for (int k = 0; k < 7; ++k) {
      const Tensor* t = Optional(ctx, kFloatInputs[k]);
      in[k] = t != nullptr ? t->data<C>() : nullptr;
    }
    Assign(ops, in, ctx);
    ops.y = ctx.output(0) != nullptr ? ctx.output(0)->data<C>() : nullptr;
    ops.yh = ctx.output(1) != nullptr ? ctx.output(1)->data<C>() : nullptr;
    ops.yc = ctx.output(2) != nullptr ? ctx.output(2)->data<C>() : nullptr;
    return RunAll(ctx, g, ops);
  }

  template <typename C>
  void Assign(Operands<C>& ops, const C* const* in, const KernelContext& ctx) const {
    ops.x = in[0];
    ops.w = in[1];
    ops.r = in[2];
    ops.bias = in[3];
    ops.h0 = in[4];
    ops.c0 = a_.op == RecurrentOp::kLstm ? in[5] : nullptr;
    ops.peephole = a_.op == RecurrentOp::kLstm ? in[6] : nullptr;
    const Tensor* lens = Optional(ctx, kLens);
    ops.lens = lens != nullptr ? lens->data<int32_t>() : nullptr;
  }

  // float16 / bfloat16: every operand widened to float32 scratch once, outputs rounded once.
  Status RunInFloat(KernelContext& ctx, const Geometry& g) const {
    std::vector<Tensor> widened(7);
    const float* in[7] = {};
    for (int k = 0; k < 7; ++k) {
      const Tensor* t = Optional(ctx, kFloatInputs[k]);
      if (t == nullptr) continue;
      TOB_ASSIGN_OR_RETURN(widened[k], ToFloatScratch(ctx, *t));
      in[k] = widened[k].data<float>();
    }
    Operands<float> ops;
    Assign(ops, in, ctx);
    std::vector<Tensor> outs(3);
    float** targets[3] = {&ops.y, &ops.yh, &ops.yc};
    for (int o = 0; o < 3; ++o) {
      Tensor* out = ctx.output(o);
      if (out == nullptr) continue;
      TOB_ASSIGN_OR_RETURN(outs[o], ctx.AllocateScratch(DType::kFloat32, out->shape()));
      *targets[o] = outs[o].data<float>();
    }
    TOB_RETURN_IF_ERROR(RunAll(ctx, g, ops));
    for (int o = 0; o < 3; ++o)
      if (ctx.output(o) != nullptr) TOB_RETURN_IF_ERROR(FromFloatScratch(ctx, outs[o], ctx.output(o)));
    return Status::OK();
  }

  RecurrentAttributes a_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuRecurrentKernels(KernelRegistry& registry) {
  const std::vector<DType> f3{DType::kFloat32, DType::kFloat64, DType::kFloat16};
  const std::vector<DType> f4{DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};
  for (const char* op : {"RNN", "GRU", "LSTM"}) {
    const std::vector<int> float_inputs =
        std::string(op) == "LSTM" ? std::vector<int>{0, 1, 2, 3, 5, 6, 7} : std::vector<int>{0, 1, 2, 3, 5};
    registry.Register(Def(op)
                          .Versions(7, 21)
                          .Constraint("T", float_inputs, f3)
                          .Constraint("T1", {4}, {DType::kInt32})
                          .SkipsUnusedOutputs()
                          .Kernel<cpu::RecurrentKernel>());
    registry.Register(Def(op)
                          .Versions(22)
                          .Constraint("T", float_inputs, f4)
                          .Constraint("T1", {4}, {DType::kInt32})
                          .SkipsUnusedOutputs()
                          .Kernel<cpu::RecurrentKernel>());
  }
}

}  // namespace tob
