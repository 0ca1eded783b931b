// FlashAttention and FlashAttentionGrad (com.microsoft, opset 1): torch's fused CPU attention
// (_scaled_dot_product_flash_attention_for_cpu and its backward) as engine ops.
//
// Q [batch, heads, q_seq, head_size], K [batch, kv_heads, kv_seq, head_size], V [batch,
// kv_heads, kv_seq, v_head_size] with heads a multiple of kv_heads (grouped-query attention);
// attn_mask (optional) broadcasts to [batch, heads, q_seq, kv_seq]. FlashAttention gives Y
// [batch, heads, q_seq, v_head_size] and logsumexp [batch, heads, q_seq] (float32 for 16-bit Q,
// Q's dtype otherwise); FlashAttentionGrad
// (dY, Q, K, V, Y, logsumexp, attn_mask?) gives dQ, dK, dV of the shapes of Q, K, V.
#include "ops/training_schema_utils.h"

namespace tob {

using namespace training_schema;

namespace {

// 16-bit attention keeps its row logsumexp in float32 (as torch does); other types in their own.
DType LogsumexpType(DType q) { return q == DType::kFloat16 || q == DType::kBFloat16 ? DType::kFloat32 : q; }

Dim DimOf(const ValueType& t, int64_t i) { return t.has_rank() && i < t.rank() ? (*t.shape)[i] : Dim::Unknown(); }

// Q, K, V at input positions q, q + 1, q + 2: one float dtype, rank 4, matching batch and sizes.
Status CheckQkv(const InferenceContext& ctx, int q) {
  const char* names[] = {"Q", "K", "V"};
  TOB_RETURN_IF_ERROR(CheckFloatInput(ctx, q, "Q"));
  const ValueType& query = *ctx.input_type(q);
  for (int i = 0; i < 3; ++i) {
    const ValueType& t = *ctx.input_type(q + i);
    if (t.dtype != query.dtype)
      return ctx.Fail(names[i], " has dtype ", DTypeName(t.dtype), ", Q has ", DTypeName(query.dtype));
    if (t.has_rank() && t.rank() != 4)
      return ctx.Fail(names[i], " must be 4-D [batch, heads, seq, head_size], got ", t.ToString());
  }
  const ValueType& key = *ctx.input_type(q + 1);
  const ValueType& value = *ctx.input_type(q + 2);
  const Dim qh = DimOf(query, 1), kh = DimOf(key, 1);
  if (qh.is_known() && kh.is_known() && (kh.value == 0 || qh.value % kh.value != 0))
    return ctx.Fail("Q's ", qh.value, " heads are not a multiple of K's ", kh.value);
  const Dim qe = DimOf(query, 3), ke = DimOf(key, 3);
  if (qe.is_known() && ke.is_known() && qe.value != ke.value)
    return ctx.Fail("K's head size ", ke.value, " differs from Q's ", qe.value);
  const Dim ks = DimOf(key, 2), vs = DimOf(value, 2);
  if (ks.is_known() && vs.is_known() && ks.value != vs.value)
    return ctx.Fail("K has ", ks.value, " positions, V ", vs.value);
  return Status::OK();
}

Status CheckCausalAttribute(const InferenceContext& ctx) {
  int64_t causal = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("is_causal", &causal, int64_t{0}));
  if (causal != 0 && causal != 1) return ctx.Fail("is_causal must be 0 or 1, got ", causal);
  return Status::OK();
}

// FlashAttention (Q, K, V, attn_mask?) -> Y, logsumexp.
Status InferFlashAttention(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckQkv(ctx, 0));
  TOB_RETURN_IF_ERROR(CheckCausalAttribute(ctx));
  const ValueType& q = *ctx.input_type(0);
  const ValueType& v = *ctx.input_type(2);
  std::optional<Dims> y, lse;
  if (q.has_rank()) {
    y = Dims{DimOf(q, 0), DimOf(q, 1), DimOf(q, 2), DimOf(v, 3)};
    lse = Dims{DimOf(q, 0), DimOf(q, 1), DimOf(q, 2)};
  }
  ctx.set_output(0, ValueType(q.dtype, std::move(y)));
  if (ctx.num_outputs() > 1) ctx.set_output(1, ValueType(LogsumexpType(q.dtype), std::move(lse)));
  return Status::OK();
}

// FlashAttentionGrad (dY, Q, K, V, Y, logsumexp, attn_mask?) -> dQ, dK, dV.
Status InferFlashAttentionGrad(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckQkv(ctx, 1));
  TOB_RETURN_IF_ERROR(CheckCausalAttribute(ctx));
  const DType dtype = ctx.input_type(1)->dtype;
  for (int i : {0, 4})
    if (ctx.input_type(i)->dtype != dtype)
      return ctx.Fail(i == 0 ? "dY" : "Y", " has dtype ", DTypeName(ctx.input_type(i)->dtype), ", Q has ",
                      DTypeName(dtype));
  if (ctx.input_type(5)->dtype != LogsumexpType(dtype))
    return ctx.Fail("logsumexp has dtype ", DTypeName(ctx.input_type(5)->dtype), ", expected ",
                    DTypeName(LogsumexpType(dtype)), " for Q of ", DTypeName(dtype));
  for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, *ctx.input_type(1 + i));
  return Status::OK();
}

}  // namespace

void RegisterTrainingAttentionSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{kMicrosoftDomain, "FlashAttention", 3, 4, 1, 2, InferFlashAttention});
  registry.Register(OpSchema{kMicrosoftDomain, "FlashAttentionGrad", 6, 7, 1, 3, InferFlashAttentionGrad});
}

}  // namespace tob
