// Attention (ai.onnx 23, 24, 25), RotaryEmbedding (ai.onnx 23) and FlexAttention
// (ai.onnx.preview 1: attention whose scores and probabilities pass through subgraphs).
//
// Attention's operands are 4-D [batch, heads, seq, head_size], or 3-D [batch, seq, heads *
// head_size] with the head counts in q_num_heads / kv_num_heads. K/V may have fewer heads than
// Q (grouped-query attention: q_num_heads a multiple of kv_num_heads); past_key / past_value
// ([batch, kv_heads, past_seq, head_size]) are prepended to K / V, giving present_key /
// present_value of total = past_seq + kv_seq positions.
#include "ops/fused_elementwise_program.h"  // kTobDomain
#include "ops/op_schema.h"

namespace tob {

namespace {

Dim DimAt(const ValueType* t, int64_t i) {
  if (t == nullptr || !t->has_rank() || i >= t->rank()) return Dim::Unknown();
  return (*t->shape)[i];
}

Dim Times(const Dim& d, int64_t k) { return d.is_known() ? Dim(d.value * k) : Dim::Unknown(); }
Dim Plus(const Dim& a, const Dim& b) {
  if (a.is_known() && a.value == 0) return b;
  return a.is_known() && b.is_known() ? Dim(a.value + b.value) : Dim::Unknown();
}

// A 3-D operand's hidden size split into `heads` heads: the head size.
StatusOr<Dim> HeadSize(const InferenceContext& ctx, const char* name, const ValueType& t, int64_t heads) {
  const Dim hidden = DimAt(&t, 2);
  if (!hidden.is_known()) return Dim::Unknown();
  if (hidden.value % heads != 0)
    return ctx.Fail(name, "'s hidden size ", hidden.value, " is not a multiple of its ", heads, " heads");
  return Dim(hidden.value / heads);
}

Status CheckFloat(const InferenceContext& ctx, const char* name, const ValueType& t) {
  const DType d = t.dtype;
  if (d != DType::kFloat32 && d != DType::kFloat64 && d != DType::kFloat16 && d != DType::kBFloat16)
    return ctx.Fail(name, " must be float32, float64, float16 or bfloat16, got ", DTypeName(d));
  return Status::OK();
}

Status InferAttention(InferenceContext& ctx) {
  const ValueType& q = *ctx.input_type(0);
  const ValueType& k = *ctx.input_type(1);
  const ValueType& v = *ctx.input_type(2);
  TOB_RETURN_IF_ERROR(CheckFloat(ctx, "Q", q));
  if (k.dtype != q.dtype) return ctx.Fail("K has dtype ", DTypeName(k.dtype), ", Q has ", DTypeName(q.dtype));
  TOB_RETURN_IF_ERROR(CheckFloat(ctx, "V", v));
  int64_t q_heads = 0, kv_heads = 0, mode = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("q_num_heads", &q_heads, int64_t{0}));
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("kv_num_heads", &kv_heads, int64_t{0}));
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("qk_matmul_output_mode", &mode, int64_t{0}));
  if (mode < 0 || mode > 3) return ctx.Fail("qk_matmul_output_mode must be 0, 1, 2 or 3, got ", mode);
  const int64_t rank = q.rank();
  for (const ValueType* t : {&q, &k, &v})
    if (t->has_rank() && t->rank() != 3 && t->rank() != 4)
      return ctx.Fail("Q, K and V must be 3-D or 4-D, got ", t->ToString());
  if (q.has_rank() && ((k.has_rank() && k.rank() != rank) || (v.has_rank() && v.rank() != rank)))
    return ctx.Fail("Q ", q.ToString(), ", K ", k.ToString(), " and V ", v.ToString(), " must have one rank");
  if (rank == 3 && (q_heads <= 0 || kv_heads <= 0))
    return ctx.Fail("3-D inputs need positive q_num_heads and kv_num_heads attributes");
  if (rank == 4 && ctx.opset() >= 25 && (q_heads != 0 || kv_heads != 0))
    return ctx.Fail("q_num_heads and kv_num_heads must not be given for 4-D inputs (opset 25)");

  // [batch, heads, seq, size] of each operand (Dim::Unknown() where the rank is unknown).
  Dim batch = DimAt(&q, 0), q_seq, q_head_count, head, kv_head_count, kv_seq, k_head, v_head;
  if (rank == 4) {
    q_head_count = DimAt(&q, 1);
    q_seq = DimAt(&q, 2);
    head = DimAt(&q, 3);
    kv_head_count = DimAt(&k, 1);
    kv_seq = DimAt(&k, 2);
    k_head = DimAt(&k, 3);
    v_head = DimAt(&v, 3);
  } else if (rank == 3) {
    q_head_count = Dim(q_heads);
    kv_head_count = Dim(kv_heads);
    q_seq = DimAt(&q, 1);
    kv_seq = DimAt(&k, 1);
    TOB_ASSIGN_OR_RETURN(head, HeadSize(ctx, "Q", q, q_heads));
    TOB_ASSIGN_OR_RETURN(k_head, HeadSize(ctx, "K", k, kv_heads));
    TOB_ASSIGN_OR_RETURN(v_head, HeadSize(ctx, "V", v, kv_heads));
  }
  if (head.is_known() && k_head.is_known() && head.value != k_head.value)
    return ctx.Fail("Q's head size ", head.value, " differs from K's ", k_head.value);
  if (q_head_count.is_known() && kv_head_count.is_known() &&
      (kv_head_count.value == 0 || q_head_count.value % kv_head_count.value != 0))
    return ctx.Fail("Q's ", q_head_count.value, " heads are not a multiple of K/V's ", kv_head_count.value);

  Dim past = Dim(0);
  const ValueType* past_key = ctx.input_type(4);
  const ValueType* past_value = ctx.input_type(5);
  if ((past_key == nullptr) != (past_value == nullptr))
    return ctx.Fail("past_key and past_value must be given together");
  if (past_key != nullptr) {
    if (past_key->has_rank() && past_key->rank() != 4)
      return ctx.Fail("past_key must be 4-D [batch, kv_heads, past_seq, head_size], got ", past_key->ToString());
    if (past_key->dtype != k.dtype || past_value->dtype != v.dtype)
      return ctx.Fail("past_key / past_value must have K's / V's dtype");
    past = DimAt(past_key, 2);
    if (ctx.input_type(6) != nullptr) return ctx.Fail("nonpad_kv_seqlen cannot be combined with past_key/past_value");
  }
  if (const ValueType* nonpad = ctx.input_type(6); nonpad != nullptr && nonpad->dtype != DType::kInt64)
    return ctx.Fail("nonpad_kv_seqlen must be int64, got ", DTypeName(nonpad->dtype));
  const Dim total = Plus(past, kv_seq);
  const bool known_rank = rank == 3 || rank == 4;
  auto shape = [&](Dims d) { return known_rank ? std::optional<Dims>(std::move(d)) : std::nullopt; };

  if (rank == 3) {
    ctx.set_output(0, ValueType(q.dtype, shape({batch, q_seq, Times(v_head, q_heads)})));
  } else {
    ctx.set_output(0, ValueType(q.dtype, shape({batch, q_head_count, q_seq, v_head})));
  }
  if (ctx.num_outputs() > 1) ctx.set_output(1, ValueType(k.dtype, shape({batch, kv_head_count, total, head})));
  if (ctx.num_outputs() > 2) ctx.set_output(2, ValueType(v.dtype, shape({batch, kv_head_count, total, v_head})));
  if (ctx.num_outputs() > 3) ctx.set_output(3, ValueType(q.dtype, shape({batch, q_head_count, q_seq, total})));
  return Status::OK();
}

// X: 4-D [batch, heads, seq, head_size] or 3-D [batch, seq, hidden] (num_heads given);
// cos/sin caches [max_position, rotary_dim / 2] with position_ids [batch, seq], else
// [batch, seq, rotary_dim / 2]. Y has X's type.
Status InferRotaryEmbedding(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  TOB_RETURN_IF_ERROR(CheckFloat(ctx, "X", x));
  int64_t num_heads = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("num_heads", &num_heads, int64_t{0}));
  if (x.has_rank() && x.rank() != 3 && x.rank() != 4)
    return ctx.Fail("X must be 3-D [batch, seq, hidden] or 4-D [batch, heads, seq, head_size], got ", x.ToString());
  if (x.rank() == 3 && num_heads <= 0) return ctx.Fail("a 3-D X needs a positive num_heads attribute");
  const bool with_positions = ctx.input_type(3) != nullptr;
  for (int i : {1, 2}) {
    const ValueType& cache = *ctx.input_type(i);
    if (cache.dtype != x.dtype)
      return ctx.Fail(i == 1 ? "cos_cache" : "sin_cache", " has dtype ", DTypeName(cache.dtype), ", X has ",
                      DTypeName(x.dtype));
    if (cache.has_rank() && cache.rank() != (with_positions ? 2 : 3))
      return ctx.Fail(i == 1 ? "cos_cache" : "sin_cache", " must be ", with_positions ? "2-D" : "3-D", " ",
                      with_positions ? "[max_position, rotary_dim / 2] with position_ids"
                                     : "[batch, seq, rotary_dim / 2] without position_ids",
                      ", got ", cache.ToString());
  }
  if (with_positions) {
    const ValueType& pos = *ctx.input_type(3);
    if (pos.dtype != DType::kInt64) return ctx.Fail("position_ids must be int64, got ", DTypeName(pos.dtype));
    if (pos.has_rank() && pos.rank() != 2)
      return ctx.Fail("position_ids must be 2-D [batch, seq], got ", pos.ToString());
  }
  ctx.set_output(0, x);
  return Status::OK();
}

// FlexAttention: Q [B, Hq, L, E], K [B, Hkv, S, E], V [B, Hkv, S, Ev] -> Y [B, Hq, L, Ev]. Its
// score_mod and prob_mod subgraphs take and return one [B, Hq, L, S] tensor of the softmax
// precision (softmax_precision; absent: float64 for float64 inputs, else float32).
Status InferFlexAttention(InferenceContext& ctx) {
  const ValueType& q = *ctx.input_type(0);
  const ValueType& k = *ctx.input_type(1);
  const ValueType& v = *ctx.input_type(2);
  TOB_RETURN_IF_ERROR(CheckFloat(ctx, "Q", q));
  if (k.dtype != q.dtype || v.dtype != q.dtype)
    return ctx.Fail("Q, K and V must share one dtype, got ", DTypeName(q.dtype), ", ", DTypeName(k.dtype), ", ",
                    DTypeName(v.dtype));
  for (const ValueType* t : {&q, &k, &v})
    if (t->has_rank() && t->rank() != 4) return ctx.Fail("Q, K and V must be 4-D, got ", t->ToString());
  const Dim hq = DimAt(&q, 1), hkv = DimAt(&k, 1), e = DimAt(&q, 3), ek = DimAt(&k, 3), s = DimAt(&k, 2),
            sv = DimAt(&v, 2), hv = DimAt(&v, 1);
  if (hq.is_known() && hkv.is_known() && (hkv.value <= 0 || hq.value % hkv.value != 0))
    return ctx.Fail("Q's ", hq.value, " heads are not a multiple of K's ", hkv.value);
  if ((e.is_known() && ek.is_known() && e.value != ek.value) ||
      (s.is_known() && sv.is_known() && s.value != sv.value) ||
      (hkv.is_known() && hv.is_known() && hkv.value != hv.value))
    return ctx.Fail("K ", k.ToString(), " and V ", v.ToString(), " do not fit Q ", q.ToString(),
                    " (head size, key length and key heads must agree)");
  int64_t precision = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("softmax_precision", &precision, int64_t{0}));
  DType compute = q.dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  if (precision != 0) {
    compute = DTypeFromOnnx(static_cast<int32_t>(precision));
    if (compute != DType::kFloat32 && compute != DType::kFloat64 && compute != DType::kFloat16 &&
        compute != DType::kBFloat16)
      return ctx.Fail("softmax_precision must name float, float16, bfloat16 or double, got ", precision);
  }
  const ValueType scores(compute, Dims{DimAt(&q, 0), hq, DimAt(&q, 2), s});
  for (const char* name : {"score_mod", "prob_mod"}) {
    if (ctx.subgraph(name) == nullptr) continue;
    std::vector<ValueType> out;
    TOB_RETURN_IF_ERROR(ctx.InferSubgraph(name, {scores}, &out));
    if (out.size() != 1) return ctx.Fail(name, " must return one tensor, it returns ", out.size());
    if (out[0].dtype != DType::kUndefined && out[0].dtype != compute)
      return ctx.Fail(name, " returns ", out[0].ToString(), "; it must return ", DTypeName(compute),
                      " (the softmax precision) of its input's shape");
    if (out[0].has_rank() && out[0].rank() != 4)
      return ctx.Fail(name, " returns ", out[0].ToString(), "; it must keep its input's shape ", scores.ToString());
  }
  ctx.set_output(0, ValueType(q.dtype, Dims{DimAt(&q, 0), hq, DimAt(&q, 2), DimAt(&v, 3)}));
  return Status::OK();
}

}  // namespace

void RegisterNnAttentionSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{kOnnxPreviewDomain, "FlexAttention", 3, 3, 1, 1, InferFlexAttention});
  registry.Register(OpSchema{"", "Attention", 3, 7, 1, 4, InferAttention});
  registry.Register(OpSchema{"", "RotaryEmbedding", 3, 4, 1, 1, InferRotaryEmbedding});
  // The same op at any opset, which the rotary embedding fusion emits (optimizer/rotary_embedding_fusion.cc).
  registry.Register(OpSchema{kTobDomain, "RotaryEmbedding", 3, 4, 1, 1, InferRotaryEmbedding});
}

}  // namespace tob
