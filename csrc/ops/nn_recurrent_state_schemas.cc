// The recurrent-state ops of ai.onnx 27: LinearAttention (a linear-attention recurrence over a
// [d_k, d_v] state per key/value head) and CausalConvWithState (a causal depthwise 1-D convolution
// that carries its last k - 1 inputs). Both return the state for the next call.
#include "ops/nn_recurrent_state_attributes.h"
#include "ops/op_schema.h"

namespace tob {
namespace {

Dim DimAt(const ValueType* t, int64_t i) {
  if (t == nullptr || !t->has_rank() || i >= t->rank()) return Dim::Unknown();
  return (*t->shape)[i];
}

Dim Times(const Dim& d, int64_t k) { return d.is_known() ? Dim(d.value * k) : Dim::Unknown(); }

// Two dims that must agree when both are known.
Status SameDim(const InferenceContext& ctx, const Dim& a, const Dim& b, const char* what) {
  if (a.is_known() && b.is_known() && a.value != b.value) return ctx.Fail(what, ": ", a.value, " vs ", b.value);
  return Status::OK();
}

bool IsStateFloat(DType d) { return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16; }

// A packed [B, T, heads * size] operand: its per-head size.
StatusOr<Dim> PackedHeadSize(const InferenceContext& ctx, const char* name, const ValueType& t, int64_t heads) {
  if (t.has_rank() && t.rank() != 3)
    return ctx.Fail(name, " must be 3-D [batch, seq, heads * size], got ", t.ToString());
  const Dim hidden = DimAt(&t, 2);
  if (!hidden.is_known()) return Dim::Unknown();
  if (hidden.value % heads != 0)
    return ctx.Fail(name, "'s last dimension ", hidden.value, " is not a multiple of its ", heads, " heads");
  return Dim(hidden.value / heads);
}

// query [B, T, Hq*dk], key [B, T, Hkv*dk], value [B, T, Hkv*dv], past_state [B, Hkv, dk, dv]?,
// decay [B, T, Hkv*dk or Hkv]?, beta [B, T, Hkv or 1]? -> output [B, T, Hq*dv] (query's type),
// present_state [B, Hkv, dk, dv] (past_state's type, query's without it).
Status InferLinearAttention(InferenceContext& ctx) {
  TOB_ASSIGN_OR_RETURN(LinearAttentionAttributes a, LinearAttentionAttributes::Read(ctx.node()));
  const ValueType& q = *ctx.input_type(0);
  const ValueType& k = *ctx.input_type(1);
  const ValueType& v = *ctx.input_type(2);
  if (!IsStateFloat(q.dtype)) return ctx.Fail("query must be float32, float16 or bfloat16, got ", DTypeName(q.dtype));
  const char* names[] = {"query", "key", "value", "past_state", "decay", "beta"};
  for (int i : {1, 2, 4, 5})
    if (ctx.has_input(i) && ctx.input_type(i)->dtype != q.dtype)
      return ctx.Fail(names[i], " has dtype ", DTypeName(ctx.input_type(i)->dtype), ", query has ", DTypeName(q.dtype));
  if (a.gated != ctx.has_input(4))
    return ctx.Fail(a.gated ? "this update_rule needs the decay input" : "this update_rule takes no decay input");
  if (a.delta != ctx.has_input(5))
    return ctx.Fail(a.delta ? "this update_rule needs the beta input" : "this update_rule takes no beta input");

  TOB_ASSIGN_OR_RETURN(Dim dk, PackedHeadSize(ctx, "query", q, a.q_num_heads));
  TOB_ASSIGN_OR_RETURN(Dim k_dk, PackedHeadSize(ctx, "key", k, a.kv_num_heads));
  TOB_ASSIGN_OR_RETURN(Dim dv, PackedHeadSize(ctx, "value", v, a.kv_num_heads));
  TOB_RETURN_IF_ERROR(SameDim(ctx, dk, k_dk, "query and key head sizes differ"));
  if (!dk.is_known()) dk = k_dk;
  const Dim batch = DimAt(&q, 0), seq = DimAt(&q, 1);
  for (const ValueType* t : {&k, &v}) {
    TOB_RETURN_IF_ERROR(SameDim(ctx, batch, DimAt(t, 0), "key/value batch differs from query's"));
    TOB_RETURN_IF_ERROR(SameDim(ctx, seq, DimAt(t, 1), "key/value sequence length differs from query's"));
  }
  if (ctx.has_input(4)) {
    const ValueType& decay = *ctx.input_type(4);
    if (decay.has_rank() && decay.rank() != 3)
      return ctx.Fail("decay must be 3-D [batch, seq, kv_heads * d_k or kv_heads], got ", decay.ToString());
    TOB_RETURN_IF_ERROR(SameDim(ctx, batch, DimAt(&decay, 0), "decay's batch differs from query's"));
    TOB_RETURN_IF_ERROR(SameDim(ctx, seq, DimAt(&decay, 1), "decay's sequence length differs from query's"));
    const Dim last = DimAt(&decay, 2);
    if (last.is_known() && last.value != a.kv_num_heads && !(dk.is_known() && last.value == a.kv_num_heads * dk.value))
      return ctx.Fail("decay's last dimension ", last.value, " must be kv_num_heads (", a.kv_num_heads,
                      ") or kv_num_heads * d_k");
  }
  if (ctx.has_input(5)) {
    const ValueType& beta = *ctx.input_type(5);
    if (beta.has_rank() && beta.rank() != 3)
      return ctx.Fail("beta must be 3-D [batch, seq, kv_heads or 1], got ", beta.ToString());
    TOB_RETURN_IF_ERROR(SameDim(ctx, batch, DimAt(&beta, 0), "beta's batch differs from query's"));
    TOB_RETURN_IF_ERROR(SameDim(ctx, seq, DimAt(&beta, 1), "beta's sequence length differs from query's"));
    const Dim last = DimAt(&beta, 2);
    if (last.is_known() && last.value != a.kv_num_heads && last.value != 1)
      return ctx.Fail("beta's last dimension ", last.value, " must be kv_num_heads (", a.kv_num_heads, ") or 1");
  }
  DType state_type = q.dtype;
  const Dims state{batch, Dim(a.kv_num_heads), dk, dv};
  if (ctx.has_input(3)) {
    const ValueType& past = *ctx.input_type(3);
    if (!IsStateFloat(past.dtype))
      return ctx.Fail("past_state must be float32, float16 or bfloat16, got ", DTypeName(past.dtype));
    state_type = past.dtype;
    if (past.has_rank()) {
      if (past.rank() != 4)
        return ctx.Fail("past_state must be 4-D [batch, kv_heads, d_k, d_v], got ", past.ToString());
      for (int i = 0; i < 4; ++i)
        TOB_RETURN_IF_ERROR(
            SameDim(ctx, state[i], (*past.shape)[i], "past_state's shape differs from [B, Hkv, dk, dv]"));
    }
  }
  ctx.set_output(0, ValueType(q.dtype, Dims{batch, seq, Times(dv, a.q_num_heads)}));
  if (ctx.num_outputs() > 1) ctx.set_output(1, ValueType(state_type, state));
  return Status::OK();
}

// input [B, C, L], weight [C, 1, K], bias [C]?, past_state [B, C, K - 1]?
//   -> output [B, C, L], present_state [B, C, K - 1]
Status InferCausalConvWithState(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(ReadCausalConvSilu(ctx.node()).status());
  const ValueType& x = *ctx.input_type(0);
  const ValueType& w = *ctx.input_type(1);
  if (!IsStateFloat(x.dtype)) return ctx.Fail("input must be float32, float16 or bfloat16, got ", DTypeName(x.dtype));
  const char* names[] = {"input", "weight", "bias", "past_state"};
  for (int i = 1; i < 4; ++i)
    if (ctx.has_input(i) && ctx.input_type(i)->dtype != x.dtype)
      return ctx.Fail(names[i], " has dtype ", DTypeName(ctx.input_type(i)->dtype), ", input has ", DTypeName(x.dtype));
  if (x.has_rank() && x.rank() != 3) return ctx.Fail("input must be 3-D [batch, channels, length], got ", x.ToString());
  if (w.has_rank() && w.rank() != 3) return ctx.Fail("weight must be 3-D [channels, 1, k], got ", w.ToString());
  const Dim batch = DimAt(&x, 0), channels = DimAt(&x, 1), kernel = DimAt(&w, 2);
  TOB_RETURN_IF_ERROR(SameDim(ctx, channels, DimAt(&w, 0), "weight's channels differ from the input's"));
  const Dim one = DimAt(&w, 1);
  if (one.is_known() && one.value != 1)
    return ctx.Fail("weight must be [channels, 1, k] (depthwise), got ", w.ToString());
  if (kernel.is_known() && kernel.value < 1) return ctx.Fail("the kernel size must be at least 1, got ", kernel.value);
  const Dim carry = kernel.is_known() ? Dim(kernel.value - 1) : Dim::Unknown();
  if (ctx.has_input(2)) {
    const ValueType& b = *ctx.input_type(2);
    if (b.has_rank() && b.rank() != 1) return ctx.Fail("bias must be 1-D [channels], got ", b.ToString());
    TOB_RETURN_IF_ERROR(SameDim(ctx, channels, DimAt(&b, 0), "bias length differs from the channels"));
  }
  if (ctx.has_input(3)) {
    const ValueType& past = *ctx.input_type(3);
    if (past.has_rank() && past.rank() != 3)
      return ctx.Fail("past_state must be 3-D [batch, channels, k - 1], got ", past.ToString());
    TOB_RETURN_IF_ERROR(SameDim(ctx, batch, DimAt(&past, 0), "past_state's batch differs from the input's"));
    TOB_RETURN_IF_ERROR(SameDim(ctx, channels, DimAt(&past, 1), "past_state's channels differ from the input's"));
    TOB_RETURN_IF_ERROR(SameDim(ctx, carry, DimAt(&past, 2), "past_state must hold k - 1 positions"));
  }
  ctx.set_output(0, x);
  if (ctx.num_outputs() > 1) ctx.set_output(1, ValueType(x.dtype, Dims{batch, channels, carry}));
  return Status::OK();
}

}  // namespace

void RegisterNnRecurrentStateSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{"", "LinearAttention", 3, 6, 1, 2, InferLinearAttention});
  registry.Register(OpSchema{"", "CausalConvWithState", 2, 4, 1, 2, InferCausalConvWithState});
}

}  // namespace tob
