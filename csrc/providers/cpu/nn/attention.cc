// Attention (ai.onnx 23-25): Y = softmax(softcap(scale Q K^T) + bias) V per (batch, query head),
// with K/V heads shared by groups of query heads (GQA) and past_key/past_value prepended.
//
// The bias adds, per score: the attention mask (bool: false -> -inf; numeric: added; a last dim
// shorter than the keys is padded with -inf), the causal mask (key j visible from query i when
// j <= i + offset, offset = past length, or nonpad_kv_seqlen[b] - q_seq for an external cache),
// the padding of nonpad_kv_seqlen (keys j >= nonpad[b] hidden) and, from opset 25, the local
// window around i + offset. A query row whose bias is -inf everywhere attends nothing: its
// probabilities and output are 0. qk_matmul_output is, by mode, the (softcapped) scores (0 and
// 1), the scores plus bias (2) or the probabilities (3): what onnx's reference gives.
//
// Work is split in tiles of query rows of one (batch, head): a tile's scores [rows, total] live
// in one scratch slice per thread (never the whole [q_seq, total] matrix of every head), Q K^T
// and P V are single-threaded GEMMs on the tile, over only the keys the tile's rows may see (the
// causal frontier halves the work of a causal prefill). 16-bit types compute in float32 (softmax
// included), float64 in float64.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "framework/kernel_registry.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/gemm.h"
#include "providers/cpu/nn/vec_math.h"

namespace tob {

namespace {

constexpr int64_t kQueryTile = 32;

struct AttentionAttributes {
  int64_t q_num_heads = 0, kv_num_heads = 0;
  bool is_causal = false;
  std::optional<float> scale;
  float softcap = 0;
  int64_t qk_mode = 0;
  int64_t left_window = -1, right_window = -1;

  static StatusOr<AttentionAttributes> Read(const Node& node) {
    AttentionAttributes a;
    int64_t causal = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("q_num_heads", &a.q_num_heads, int64_t{0}));
    TOB_RETURN_IF_ERROR(node.GetAttr("kv_num_heads", &a.kv_num_heads, int64_t{0}));
    TOB_RETURN_IF_ERROR(node.GetAttr("is_causal", &causal, int64_t{0}));
    a.is_causal = causal != 0;
    if (node.FindAttribute("scale") != nullptr) {
      float s = 0;
      TOB_RETURN_IF_ERROR(node.GetAttr("scale", &s));
      a.scale = s;
    }
    TOB_RETURN_IF_ERROR(node.GetAttr("softcap", &a.softcap, 0.0f));
    TOB_RETURN_IF_ERROR(node.GetAttr("qk_matmul_output_mode", &a.qk_mode, int64_t{0}));
    TOB_RETURN_IF_ERROR(node.GetAttr("left_window_size", &a.left_window, int64_t{-1}));
    TOB_RETURN_IF_ERROR(node.GetAttr("right_window_size", &a.right_window, int64_t{-1}));
    if (a.qk_mode < 0 || a.qk_mode > 3)
      return InvalidModel(node.Describe(), ": qk_matmul_output_mode must be 0..3, got ", a.qk_mode);
    if (a.left_window < -1 || a.right_window < -1)
      return InvalidModel(node.Describe(), ": left_window_size / right_window_size must be -1 or >= 0");
    return a;
  }
};

// Where element (b, h, s, 0) of a [batch, heads, seq, size] operand lives: 4-D tensors are laid
// out [B, H, S, D], 3-D ones [B, S, H * D]; the size dim is always contiguous.
struct HeadLayout {
  int64_t batch_stride = 0, head_stride = 0, seq_stride = 0;
  int64_t Offset(int64_t b, int64_t h, int64_t s) const { return b * batch_stride + h * head_stride + s * seq_stride; }

  static HeadLayout Of4D(int64_t heads, int64_t seq, int64_t size) { return {heads * seq * size, seq * size, size}; }
  static HeadLayout Of3D(int64_t heads, int64_t seq, int64_t size) { return {seq * heads * size, size, heads * size}; }
};

// The sizes of one call, checked against every operand.
struct AttentionShape {
  bool three_d = false;
  int64_t batch = 0, q_heads = 0, kv_heads = 0, q_seq = 0, kv_seq = 0, past = 0, head = 0, v_head = 0;
  int64_t total() const { return past + kv_seq; }
  int64_t group() const { return q_heads / kv_heads; }
  HeadLayout q() const {
    return three_d ? HeadLayout::Of3D(q_heads, q_seq, head) : HeadLayout::Of4D(q_heads, q_seq, head);
  }
  HeadLayout k() const {
    return three_d ? HeadLayout::Of3D(kv_heads, kv_seq, head) : HeadLayout::Of4D(kv_heads, kv_seq, head);
  }
  HeadLayout v() const {
    return three_d ? HeadLayout::Of3D(kv_heads, kv_seq, v_head) : HeadLayout::Of4D(kv_heads, kv_seq, v_head);
  }
  HeadLayout y() const {
    return three_d ? HeadLayout::Of3D(q_heads, q_seq, v_head) : HeadLayout::Of4D(q_heads, q_seq, v_head);
  }
};

StatusOr<AttentionShape> CheckShapes(const KernelContext& ctx, const AttentionAttributes& a) {
  const Tensor& q = *ctx.input(0);
  const Tensor& k = *ctx.input(1);
  const Tensor& v = *ctx.input(2);
  if (q.rank() != k.rank() || q.rank() != v.rank() || (q.rank() != 3 && q.rank() != 4))
    return ctx.Fail("Q ", ShapeToString(q.shape()), ", K ", ShapeToString(k.shape()), " and V ",
                    ShapeToString(v.shape()), " must all be 3-D or all 4-D");
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    return ctx.Fail("Q, K and V must have one dtype, got ", DTypeName(q.dtype()), ", ", DTypeName(k.dtype()), ", ",
                    DTypeName(v.dtype()));
  AttentionShape s;
  s.three_d = q.rank() == 3;
  s.batch = q.dim(0);
  if (s.three_d) {
    if (a.q_num_heads <= 0 || a.kv_num_heads <= 0)
      return ctx.Fail("3-D inputs need positive q_num_heads and kv_num_heads");
    s.q_heads = a.q_num_heads;
    s.kv_heads = a.kv_num_heads;
    s.q_seq = q.dim(1);
    s.kv_seq = k.dim(1);
    if (q.dim(2) % s.q_heads != 0 || k.dim(2) % s.kv_heads != 0 || v.dim(2) % s.kv_heads != 0)
      return ctx.Fail("hidden sizes of Q ", q.dim(2), ", K ", k.dim(2), ", V ", v.dim(2),
                      " must be multiples of their head counts ", s.q_heads, ", ", s.kv_heads);
    s.head = q.dim(2) / s.q_heads;
    if (k.dim(2) / s.kv_heads != s.head) return ctx.Fail("K's head size differs from Q's ", s.head);
    s.v_head = v.dim(2) / s.kv_heads;
    if (k.dim(0) != s.batch || v.dim(0) != s.batch || v.dim(1) != s.kv_seq)
      return ctx.Fail("K ", ShapeToString(k.shape()), " and V ", ShapeToString(v.shape()), " do not match Q ",
                      ShapeToString(q.shape()));
  } else {
    s.q_heads = q.dim(1);
    s.q_seq = q.dim(2);
    s.head = q.dim(3);
    s.kv_heads = k.dim(1);
    s.kv_seq = k.dim(2);
    s.v_head = v.dim(3);
    if (k.dim(0) != s.batch || v.dim(0) != s.batch || k.dim(3) != s.head || v.dim(1) != s.kv_heads ||
        v.dim(2) != s.kv_seq)
      return ctx.Fail("K ", ShapeToString(k.shape()), " and V ", ShapeToString(v.shape()), " do not match Q ",
                      ShapeToString(q.shape()), " ([batch, heads, seq, head_size], V's head size may differ)");
  }
  if (s.kv_heads <= 0 || s.q_heads % s.kv_heads != 0)
    return ctx.Fail("Q's ", s.q_heads, " heads are not a multiple of K/V's ", s.kv_heads);
  const Tensor* past_key = ctx.input(4);
  const Tensor* past_value = ctx.input(5);
  if ((past_key == nullptr) != (past_value == nullptr)) return ctx.Fail("past_key and past_value go together");
  if (past_key != nullptr) {
    const int64_t past = past_key->rank() == 4 ? past_key->dim(2) : -1;
    if (past_key->shape() != Shape{s.batch, s.kv_heads, past, s.head} ||
        past_value->shape() != Shape{s.batch, s.kv_heads, past, s.v_head} || past_key->dtype() != q.dtype() ||
        past_value->dtype() != q.dtype())
      return ctx.Fail("past_key ", ShapeToString(past_key->shape()), " / past_value ",
                      ShapeToString(past_value->shape()), " must be [", s.batch, ", ", s.kv_heads, ", past, ", s.head,
                      "] / [..., ", s.v_head, "] of Q's dtype");
    s.past = past_key->dim(2);
  }
  if (const Tensor* nonpad = ctx.input(6); nonpad != nullptr) {
    if (past_key != nullptr) return ctx.Fail("nonpad_kv_seqlen cannot be combined with past_key/past_value");
    if (nonpad->dtype() != DType::kInt64 || nonpad->shape() != Shape{s.batch})
      return ctx.Fail("nonpad_kv_seqlen must be int64 [", s.batch, "], got ", ShapeToString(nonpad->shape()));
  }
  return s;
}

// The attention mask as an additive bias in the compute type, and its broadcast strides over
// [batch, q_heads, q_seq, keys]; keys at or past `keys` are masked.
template <typename C>
struct MaskBias {
  Tensor values;
  int64_t stride[4] = {0, 0, 0, 0};
  int64_t keys = 0;
  const C* data() const { return values.template data<C>(); }
};

template <typename C>
StatusOr<std::optional<MaskBias<C>>> ReadMask(const KernelContext& ctx, const AttentionShape& s) {
  const Tensor* mask = ctx.input(3);
  if (mask == nullptr) return std::optional<MaskBias<C>>();
  if (mask->rank() < 1 || mask->rank() > 4)
    return ctx.Fail("attn_mask must have rank 1 to 4, got ", ShapeToString(mask->shape()));
  const int64_t target[4] = {s.batch, s.q_heads, s.q_seq, s.total()};
  Shape dims(4 - mask->rank(), 1);
  dims.insert(dims.end(), mask->shape().begin(), mask->shape().end());
  MaskBias<C> m;
  m.keys = dims[3];
  if (m.keys > s.total())
    return ctx.Fail("attn_mask's last dim ", m.keys, " exceeds the ", s.total(), " keys (past + current)");
  for (int d = 0; d < 3; ++d)
    if (dims[d] != 1 && dims[d] != target[d])
      return ctx.Fail("attn_mask ", ShapeToString(mask->shape()), " does not broadcast to [batch ", s.batch,
                      ", q_heads ", s.q_heads, ", q_seq ", s.q_seq, ", keys]");
  int64_t stride = 1;
  for (int d = 3; d >= 0; --d) {
    m.stride[d] = dims[d] == 1 && d < 3 ? 0 : stride;
    stride *= dims[d];
  }
  TOB_ASSIGN_OR_RETURN(m.values, ctx.AllocateScratch(DTypeOf<C>(), {mask->numel()}));
  C* out = m.values.template data<C>();
  const int64_t n = mask->numel();
  if (mask->dtype() == DType::kBool) {
    const bool* in = mask->data<bool>();
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] ? C(0) : -std::numeric_limits<C>::infinity();
  } else if (!DispatchDType<float, double, Float16, BFloat16>(mask->dtype(), [&]<typename M>() {
               const M* in = mask->data<M>();
               for (int64_t i = 0; i < n; ++i) out[i] = static_cast<C>(static_cast<ComputeType<M>>(in[i]));
             })) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<C>(mask->ElementAsDouble(i));  // integer masks
  }
  return std::optional<MaskBias<C>>(std::move(m));
}

// K or V (type T) as [batch, kv_heads, total, size]: with a past, the concatenation written into
// `present` (the output, or scratch); without, the operand itself in its own layout (copied into
// the present output in 4-D layout when that is requested).
template <typename T>
struct HeadOperand {
  const T* data = nullptr;
  HeadLayout layout;
  int64_t numel = 0;
};

template <typename T>
StatusOr<HeadOperand<T>> KeysOrValues(const KernelContext& ctx, const AttentionShape& s, const Tensor& current,
                                      HeadLayout current_layout, const Tensor* past, int64_t size,
                                      Tensor* present_out) {
  const HeadLayout present_layout = HeadLayout::Of4D(s.kv_heads, s.total(), size);
  if (past == nullptr && present_out == nullptr)
    return HeadOperand<T>{current.data<T>(), current_layout, current.numel()};
  Tensor present;
  if (present_out != nullptr) {
    present = *present_out;
  } else {
    TOB_ASSIGN_OR_RETURN(present, ctx.AllocateScratch(DTypeOf<T>(), {s.batch, s.kv_heads, s.total(), size}));
  }
  T* dst = present.data<T>();
  const T* src = current.data<T>();
  const T* past_data = past != nullptr ? past->data<T>() : nullptr;
  ParallelFor(ctx.thread_pool(), s.batch * s.kv_heads, 1, [&](int64_t b0, int64_t e0) {
    for (int64_t bh = b0; bh < e0; ++bh) {
      const int64_t b = bh / s.kv_heads, h = bh % s.kv_heads;
      T* out = dst + present_layout.Offset(b, h, 0);
      if (past_data != nullptr) std::copy_n(past_data + bh * s.past * size, s.past * size, out);
      for (int64_t j = 0; j < s.kv_seq; ++j)
        std::copy_n(src + current_layout.Offset(b, h, j), size, out + (s.past + j) * size);
    }
  });
  return HeadOperand<T>{dst, present_layout, present.numel()};
}

// A 16-bit operand's float32 copy (same layout); other types as they are.
template <typename T>
StatusOr<const ComputeType<T>*> AsCompute(const KernelContext& ctx, const T* data, int64_t n, Tensor* keep) {
  if constexpr (kIs16BitFloat<T>) {
    TOB_ASSIGN_OR_RETURN(*keep, ctx.AllocateScratch(DType::kFloat32, {n}));
    ParallelConvertToFloat(ctx.thread_pool(), data, n, keep->data<float>());
    return static_cast<const float*>(keep->data<float>());
  } else {
    return data;
  }
}

template <typename C, typename T>
void StoreRow(const C* src, int64_t n, T* dst) {
  if constexpr (std::is_same_v<C, T>) std::copy_n(src, n, dst);
  else FromFloat(src, dst, n);
}

template <typename T>
Status AttentionTyped(KernelContext& ctx, const AttentionAttributes& a, const AttentionShape& s) {
  using C = ComputeType<T>;
  const int64_t total = s.total();
  TOB_ASSIGN_OR_RETURN(auto keys, KeysOrValues<T>(ctx, s, *ctx.input(1), s.k(), ctx.input(4), s.head, ctx.output(1)));
  TOB_ASSIGN_OR_RETURN(auto values,
                       KeysOrValues<T>(ctx, s, *ctx.input(2), s.v(), ctx.input(5), s.v_head, ctx.output(2)));
  const HeadLayout q_layout = s.q(), k_layout = keys.layout, v_layout = values.layout, y_layout = s.y();
  Tensor q_keep, k_keep, v_keep;
  TOB_ASSIGN_OR_RETURN(const C* q, AsCompute<T>(ctx, ctx.input(0)->data<T>(), ctx.input(0)->numel(), &q_keep));
  TOB_ASSIGN_OR_RETURN(const C* k, AsCompute<T>(ctx, keys.data, keys.numel, &k_keep));
  TOB_ASSIGN_OR_RETURN(const C* v, AsCompute<T>(ctx, values.data, values.numel, &v_keep));
  TOB_ASSIGN_OR_RETURN(std::optional<MaskBias<C>> mask, ReadMask<C>(ctx, s));
  const int64_t* nonpad = ctx.input(6) != nullptr ? ctx.input(6)->data<int64_t>() : nullptr;
  T* y = ctx.output(0)->data<T>();
  Tensor* qk_out = ctx.output(3);
  const C scale = static_cast<C>(a.scale ? *a.scale : 1.0 / std::sqrt(static_cast<double>(s.head)));
  const C softcap = static_cast<C>(a.softcap);
  const C neg_inf = -std::numeric_limits<C>::infinity();

  const int64_t tiles_per_head = (s.q_seq + kQueryTile - 1) / kQueryTile;
  const int64_t items = s.batch * s.q_heads * tiles_per_head;
  const int64_t slices = std::max<int64_t>(
      1, std::min<int64_t>(items, ctx.thread_pool() != nullptr ? ctx.thread_pool()->num_threads() : 1));
  const int64_t tile_rows = std::min(kQueryTile, s.q_seq);
  TOB_ASSIGN_OR_RETURN(Tensor score_scratch, ctx.AllocateScratch(DTypeOf<C>(), {slices, tile_rows, total}));
  TOB_ASSIGN_OR_RETURN(Tensor out_scratch, ctx.AllocateScratch(DTypeOf<C>(), {slices, tile_rows, s.v_head}));
  std::vector<Status> slice_status(slices);

  // The causal, padding and window masks leave query i of batch b one interval of keys [lo, hi);
  // offset aligns the causal and window masks bottom-right (a query block continuing a cache).
  auto offset_of = [&](int64_t b) { return s.past > 0 ? s.past : (nonpad != nullptr ? nonpad[b] - s.q_seq : 0); };
  auto visible_keys = [&](int64_t b, int64_t i, int64_t keys) {
    const int64_t at = i + offset_of(b);
    int64_t lo = 0, hi = keys;
    if (a.is_causal) hi = std::min(hi, at + 1);
    if (nonpad != nullptr) hi = std::min(hi, nonpad[b]);
    if (a.right_window >= 0) hi = std::min(hi, at + a.right_window + 1);
    if (a.left_window >= 0) lo = std::max(lo, at - a.left_window);
    lo = std::clamp<int64_t>(lo, 0, keys);
    return std::make_pair(lo, std::clamp<int64_t>(hi, lo, keys));
  };

  ParallelFor(ctx.thread_pool(), slices, 1, [&](int64_t sb, int64_t se) {
    for (int64_t slice = sb; slice < se; ++slice) {
      C* scores = score_scratch.data<C>() + slice * tile_rows * total;
      C* out_tile = out_scratch.data<C>() + slice * tile_rows * s.v_head;
      for (int64_t item = items * slice / slices; item < items * (slice + 1) / slices; ++item) {
        const int64_t bh = item / tiles_per_head, i0 = (item % tiles_per_head) * kQueryTile;
        const int64_t b = bh / s.q_heads, h = bh % s.q_heads, kvh = h / s.group();
        const int64_t rows = std::min(kQueryTile, s.q_seq - i0);
        // Keys past what the tile's last row may see (causal frontier, right window, padding) get
        // probability 0 whatever their scores: leave them out of both GEMMs. qk_matmul_output needs
        // every score, so not then.
        int64_t keys = total;
        if (qk_out == nullptr) {
          const int64_t last_seen = i0 + rows - 1 + offset_of(b);
          if (a.is_causal) keys = std::min(keys, last_seen + 1);
          if (a.right_window >= 0) keys = std::min(keys, last_seen + a.right_window + 1);
          if (nonpad != nullptr) keys = std::min(keys, nonpad[b]);
          keys = std::max<int64_t>(keys, 0);
        }
        if (keys > 0) {
          Status st = Gemm(false, true, rows, keys, s.head, scale, q + q_layout.Offset(b, h, i0), q_layout.seq_stride,
                           k + k_layout.Offset(b, kvh, 0), k_layout.seq_stride, C(0), scores, total, nullptr);
          if (!st.ok()) {
            slice_status[slice] = st;
            return;
          }
        }
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = i0 + r;
          C* row = scores + r * total;
          T* qk_row = qk_out != nullptr ? qk_out->data<T>() + ((b * s.q_heads + h) * s.q_seq + i) * total : nullptr;
          if (softcap > 0)
            for (int64_t j = 0; j < keys; ++j) row[j] = softcap * std::tanh(row[j] / softcap);
          if (qk_row != nullptr && a.qk_mode <= 1) StoreRow(row, total, qk_row);
          const auto [lo, hi] = visible_keys(b, i, keys);
          std::fill(row, row + lo, neg_inf);
          std::fill(row + hi, row + keys, neg_inf);
          bool any_visible = hi > lo;
          if (mask) {
            const C* mask_row = mask->data() + b * mask->stride[0] + h * mask->stride[1] + i * mask->stride[2];
            any_visible = false;
            for (int64_t j = lo; j < hi; ++j) {
              const C bias = j < mask->keys ? mask_row[j] : neg_inf;
              any_visible |= bias != neg_inf;
              row[j] += bias;
            }
          }
          if (qk_row != nullptr && a.qk_mode == 2) StoreRow(row, total, qk_row);
          if (!any_visible) {
            std::fill_n(row, keys, C(0));
          } else {
            const C max = vec::Max(row, keys);
            const C inv = C(1) / vec::ExpShiftedSum(row, keys, max, row);
            for (int64_t j = 0; j < keys; ++j) row[j] *= inv;
          }
          if (qk_row != nullptr && a.qk_mode == 3) StoreRow(row, total, qk_row);
        }
        if (keys > 0) {
          Status st = Gemm(false, false, rows, s.v_head, keys, C(1), scores, total, v + v_layout.Offset(b, kvh, 0),
                           v_layout.seq_stride, C(0), out_tile, s.v_head, nullptr);
          if (!st.ok()) {
            slice_status[slice] = st;
            return;
          }
        } else {
          std::fill_n(out_tile, rows * s.v_head, C(0));
        }
        for (int64_t r = 0; r < rows; ++r)
          StoreRow(out_tile + r * s.v_head, s.v_head, y + y_layout.Offset(b, h, i0 + r));
      }
    }
  });
  for (const Status& st : slice_status) TOB_RETURN_IF_ERROR(st);
  return Status::OK();
}

class AttentionKernel final : public OpKernel {
 public:
  AttentionKernel(const Node& node, AttentionAttributes attrs) : OpKernel(node), attrs_(attrs) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(AttentionAttributes attrs, AttentionAttributes::Read(node));
    return MakeKernel<AttentionKernel>(node, attrs);
  }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(AttentionShape s, CheckShapes(ctx, attrs_));
    if (s.batch == 0 || s.q_heads == 0 || s.q_seq == 0) return Status::OK();
    return DispatchFloat(ctx, ctx.input(0)->dtype(),
                         [&]<typename T>() -> Status { return AttentionTyped<T>(ctx, attrs_, s); });
  }

 private:
  AttentionAttributes attrs_;
};

}  // namespace

void RegisterCpuAttentionKernels(KernelRegistry& registry) {
  std::vector<DType> mask_types = FloatTypes();
  for (DType t : {DType::kBool, DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64, DType::kUInt8,
                  DType::kUInt16, DType::kUInt32, DType::kUInt64})
    mask_types.push_back(t);
  registry.Register(Def("Attention")
                        .Versions(23, 25)
                        .Constraint("T1", {0, 1, 4}, FloatTypes())
                        .Constraint("T2", {2, 5}, FloatTypes())
                        .Constraint("U", {3}, mask_types)
                        .Constraint("M", {6}, {DType::kInt64})
                        .Kernel<AttentionKernel>());
}

}  // namespace tob
