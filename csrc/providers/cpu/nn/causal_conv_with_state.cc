// CausalConvWithState (ai.onnx 27): a causal depthwise 1-D convolution that carries state. Per
// (batch, channel), the sequence [past_state (k - 1 values, zeros when omitted) | input (L)] is
// convolved with the channel's k weights without padding, giving L outputs; the bias is added
// and, with activation "silu" (alias "swish"), y * sigmoid(y) applied. present_state is the last
// k - 1 values of that sequence, so a call on the next chunk (or one decode step) continues where
// this one stopped; it includes past values when L < k - 1. Sums and the activation are float32
// for every type (16-bit types are rounded once when stored).
#include <cmath>
#include <memory>

#include "framework/kernel_registry.h"
#include "ops/nn_recurrent_state_attributes.h"
#include "providers/cpu/elementwise/elementwise_loops.h"

namespace tob::cpu {
namespace {

class CausalConvWithStateKernel final : public OpKernel {
 public:
  CausalConvWithStateKernel(const Node& node, bool silu) : OpKernel(node), silu_(silu) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(bool silu, ReadCausalConvSilu(node));
    return MakeKernel<CausalConvWithStateKernel>(node, silu);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const int64_t batch = x.shape()[0], channels = x.shape()[1], length = x.shape()[2];
    const int64_t taps = ctx.input(1)->shape()[2];
    const int64_t carry = taps - 1;
    const Tensor* bias = ctx.input(2);
    const Tensor* past = ctx.input(3);
    Tensor* present = ctx.num_outputs() > 1 ? ctx.output(1) : nullptr;
    bool known = ew::Dispatch(ew::TypeList<float, Float16, BFloat16>{}, x.dtype(), [&]<typename T>() {
      const T* xs = x.data<T>();
      const T* w = ctx.input(1)->data<T>();
      const T* b = bias != nullptr ? bias->data<T>() : nullptr;
      const T* p = past != nullptr ? past->data<T>() : nullptr;
      T* y = ctx.output(0)->data<T>();
      T* state = present != nullptr ? present->data<T>() : nullptr;
      ParallelFor(ctx.thread_pool(), batch * channels, 16, [&](int64_t begin, int64_t end) {
        for (int64_t bc = begin; bc < end; ++bc) {
          const int64_t c = bc % channels;
          const T* xc = xs + bc * length;
          const T* pc = p != nullptr ? p + bc * carry : nullptr;
          // Position i of [past | input].
          auto at = [&](int64_t i) -> float {
            if (i >= carry) return static_cast<float>(xc[i - carry]);
            return pc != nullptr ? static_cast<float>(pc[i]) : 0.0f;
          };
          const T* wc = w + c * taps;
          const float bias_c = b != nullptr ? static_cast<float>(b[c]) : 0.0f;
          T* yc = y + bc * length;
          for (int64_t t = 0; t < length; ++t) {
            float acc = 0.0f;
            for (int64_t j = 0; j < taps; ++j) acc += static_cast<float>(wc[j]) * at(t + j);
            acc += bias_c;
            if (silu_) acc = acc / (1.0f + std::exp(-acc));
            yc[t] = static_cast<T>(acc);
          }
          if (state != nullptr)
            for (int64_t i = 0; i < carry; ++i) state[bc * carry + i] = static_cast<T>(at(length + i));
        }
      });
    });
    if (!known) return ctx.Fail("dtype ", DTypeName(x.dtype()), " is not supported");
    return Status::OK();
  }

 private:
  bool silu_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuCausalConvWithStateKernels(KernelRegistry& registry) {
  registry.Register(Def("CausalConvWithState")
                        .Versions(27)
                        .Constraint("T", {0, 1, 2, 3}, {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
                        .Kernel<cpu::CausalConvWithStateKernel>());
}

}  // namespace tob
