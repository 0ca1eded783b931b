// LinearAttention (ai.onnx 27): the linear-attention recurrence over one [d_k, d_v] state per
// key/value head, token by token, as onnx's reference runs it:
//
//   gated:  S <- exp(g_t) * S             (g_t per key dimension [H_kv * d_k], or per head [H_kv])
//   delta:  v_t <- beta_t * (v_t - S^T k_t)   (retrieval from the decayed state; beta per head or one)
//   write:  S <- S + k_t (x) v_t
//   read:   o_t = scale * q_t^T S         (each of the q_num_heads / kv_num_heads query heads of a
//                                          group reads its key/value head's state)
//
// "linear" is neither gated nor delta, "gated_delta" (the default) both. The state, the products
// and the outputs are float32 for every operand type (16-bit types are read into float32 and
// rounded once when stored), as the reference does. Each (batch, key/value head) pair is an
// independent recurrence, shared out over the thread pool; chunk_size is a tuning hint for
// chunk-parallel GPU kernels and changes nothing here. The output's 3-D packed layout is
// [B, T, H_q * d_v]; present_state has past_state's type (query's when there is none).
#include <algorithm>
#include <cmath>
#include <memory>

#include "framework/kernel_registry.h"
#include "ops/nn_recurrent_state_attributes.h"
#include "providers/cpu/elementwise/elementwise_loops.h"

namespace tob::cpu {
namespace {

using StateTypes = ew::TypeList<float, Float16, BFloat16>;

struct Geometry {
  int64_t batch = 0, seq = 0, q_heads = 0, kv_heads = 0, dk = 0, dv = 0;
  bool decay_per_key = false;  // decay [B, T, H_kv * d_k], else [B, T, H_kv]
  bool beta_per_head = false;  // beta [B, T, H_kv], else [B, T, 1]
  int64_t group() const { return q_heads / kv_heads; }
};

class LinearAttentionKernel final : public OpKernel {
 public:
  LinearAttentionKernel(const Node& node, LinearAttentionAttributes attrs) : OpKernel(node), attrs_(attrs) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(LinearAttentionAttributes attrs, LinearAttentionAttributes::Read(node));
    return MakeKernel<LinearAttentionKernel>(node, attrs);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& q = *ctx.input(0);
    const Tensor& v = *ctx.input(2);
    const Tensor* past = ctx.input(3);
    const Tensor* decay = ctx.input(4);
    const Tensor* beta = ctx.input(5);
    Geometry g;
    g.batch = q.shape()[0];
    g.seq = q.shape()[1];
    g.q_heads = attrs_.q_num_heads;
    g.kv_heads = attrs_.kv_num_heads;
    g.dk = q.shape()[2] / g.q_heads;
    g.dv = v.shape()[2] / g.kv_heads;
    g.decay_per_key = decay != nullptr && decay->shape()[2] == g.kv_heads * g.dk;
    g.beta_per_head = beta != nullptr && beta->shape()[2] == g.kv_heads;
    const float scale = attrs_.scale != 0.0f ? attrs_.scale : static_cast<float>(1.0 / std::sqrt(double(g.dk)));
    Tensor* present = ctx.num_outputs() > 1 ? ctx.output(1) : nullptr;

    const int64_t pairs = g.batch * g.kv_heads;
    const int64_t threads = ctx.thread_pool() != nullptr ? ctx.thread_pool()->num_threads() : 1;
    const int64_t slices = std::max<int64_t>(1, std::min(pairs, threads));
    // Per slice: the state [d_k, d_v], the written value and a read row [d_v], k and q rows [d_k].
    const int64_t per_slice = g.dk * g.dv + 2 * g.dv + 2 * g.dk;
    TOB_ASSIGN_OR_RETURN(Tensor scratch, ctx.AllocateScratch(DType::kFloat32, {slices, per_slice}));
    const DType state_type = present != nullptr ? present->dtype() : (past != nullptr ? past->dtype() : q.dtype());
    bool known = false;
    ew::Dispatch(StateTypes{}, q.dtype(), [&]<typename T>() {
      known = ew::Dispatch(StateTypes{}, state_type, [&]<typename S>() {
        ParallelFor(ctx.thread_pool(), slices, 1, [&](int64_t sb, int64_t se) {
          for (int64_t s = sb; s < se; ++s)
            for (int64_t pair = pairs * s / slices; pair < pairs * (s + 1) / slices; ++pair)
              Recur<T, S>(ctx, g, scale, pair, scratch.data<float>() + s * per_slice, present);
        });
      });
    });
    if (!known) return ctx.Fail("dtypes ", DTypeName(q.dtype()), " / ", DTypeName(state_type), " are not supported");
    return Status::OK();
  }

 private:
  template <typename T, typename S>
  void Recur(KernelContext& ctx, const Geometry& g, float scale, int64_t pair, float* work, Tensor* present) const {
    const int64_t b = pair / g.kv_heads, h = pair % g.kv_heads;
    const int64_t dk = g.dk, dv = g.dv;
    float* state = work;
    float* written = state + dk * dv;
    float* read = written + dv;
    float* k_row = read + dv;
    float* q_row = k_row + dk;
    const T* q = ctx.input(0)->data<T>();
    const T* k = ctx.input(1)->data<T>();
    const T* v = ctx.input(2)->data<T>();
    const Tensor* past = ctx.input(3);
    const T* decay = ctx.input(4) != nullptr ? ctx.input(4)->data<T>() : nullptr;
    const T* beta = ctx.input(5) != nullptr ? ctx.input(5)->data<T>() : nullptr;
    T* out = ctx.output(0)->data<T>();
    const int64_t q_width = g.q_heads * dk, k_width = g.kv_heads * dk, v_width = g.kv_heads * dv;
    const int64_t decay_width = g.decay_per_key ? k_width : g.kv_heads;
    const int64_t beta_width = g.beta_per_head ? g.kv_heads : 1;
    const int64_t state_at = pair * dk * dv;  // [B, H_kv, d_k, d_v]

    if (past != nullptr) {
      const S* p = past->data<S>() + state_at;
      for (int64_t i = 0; i < dk * dv; ++i) state[i] = static_cast<float>(p[i]);
    } else {
      std::fill(state, state + dk * dv, 0.0f);
    }
    for (int64_t t = 0; t < g.seq; ++t) {
      const int64_t bt = b * g.seq + t;
      for (int64_t d = 0; d < dk; ++d) k_row[d] = static_cast<float>(k[bt * k_width + h * dk + d]);
      for (int64_t m = 0; m < dv; ++m) written[m] = static_cast<float>(v[bt * v_width + h * dv + m]);
      if (decay != nullptr) {
        for (int64_t d = 0; d < dk; ++d) {
          const float gate = std::exp(static_cast<float>(decay[bt * decay_width + (g.decay_per_key ? h * dk + d : h)]));
          float* row = state + d * dv;
          for (int64_t m = 0; m < dv; ++m) row[m] *= gate;
        }
      }
      if (beta != nullptr) {
        const float rate = static_cast<float>(beta[bt * beta_width + (g.beta_per_head ? h : 0)]);
        std::fill(read, read + dv, 0.0f);
        for (int64_t d = 0; d < dk; ++d) {
          const float* row = state + d * dv;
          for (int64_t m = 0; m < dv; ++m) read[m] += row[m] * k_row[d];
        }
        for (int64_t m = 0; m < dv; ++m) written[m] = rate * (written[m] - read[m]);
      }
      for (int64_t d = 0; d < dk; ++d) {
        float* row = state + d * dv;
        for (int64_t m = 0; m < dv; ++m) row[m] += k_row[d] * written[m];
      }
      for (int64_t qh = h * g.group(); qh < (h + 1) * g.group(); ++qh) {
        for (int64_t d = 0; d < dk; ++d) q_row[d] = static_cast<float>(q[bt * q_width + qh * dk + d]);
        std::fill(read, read + dv, 0.0f);
        for (int64_t d = 0; d < dk; ++d) {
          const float* row = state + d * dv;
          for (int64_t m = 0; m < dv; ++m) read[m] += q_row[d] * row[m];
        }
        T* o = out + bt * g.q_heads * dv + qh * dv;
        for (int64_t m = 0; m < dv; ++m) o[m] = static_cast<T>(scale * read[m]);
      }
    }
    if (present != nullptr) {
      S* p = present->data<S>() + state_at;
      for (int64_t i = 0; i < dk * dv; ++i) p[i] = static_cast<S>(state[i]);
    }
  }

  LinearAttentionAttributes attrs_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuLinearAttentionKernels(KernelRegistry& registry) {
  const std::vector<DType> types{DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  registry.Register(Def("LinearAttention")
                        .Versions(27)
                        .Constraint("T", {0, 1, 2, 4, 5}, types)
                        .Constraint("S", {3}, types)
                        .Kernel<cpu::LinearAttentionKernel>());
}

}  // namespace tob
