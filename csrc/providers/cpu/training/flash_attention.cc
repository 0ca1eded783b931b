// FlashAttention / FlashAttentionGrad (com.microsoft): softmax(scale Q K^T + bias) V per (batch,
// query head) and its gradient, tiled flash-style so that no [q_seq, kv_seq] score matrix is ever
// materialised: a block of query rows meets one block of keys at a time, and the forward keeps a
// running row maximum and sum (online softmax), rescaling its accumulated output when the maximum
// grows. The backward recomputes each score block from Q, K and the saved row logsumexp.
//
// Semantics are torch's _scaled_dot_product_flash_attention_for_cpu(_backward): the causal mask is
// aligned top-left (key j visible from query i when j <= i, also when q_seq != kv_seq); the
// attention mask is added to the scaled scores (bool: false is -inf) and broadcasts over batch,
// heads and query rows; query head h reads K/V head h / (heads / kv_heads). A query row that sees
// no key gives Y = 0 and logsumexp = +inf, so exp(score - logsumexp) is 0 for each of its keys
// in both kernels and in torch's backward alike.
//
// Work: the forward splits (batch, head, query block) items over the pool; the backward splits
// (batch, head) items, each walking its key blocks (dK, dV accumulate in place) and the query
// blocks that see them (dQ accumulates in the output). Every product is a single-threaded Gemm
// on a block (the AVX-512 small-M kernel where the CPU has one); the row passes use the AVX2 exp
// (the bfloat16 path's: AVX-512 where the CPU has it, the same exp on 16 lanes).
// With grouped K/V heads, each query head's dK/dV go to scratch and are summed per group after,
// so no two threads ever write one value and the result does not depend on the thread count.
// float16 operands are widened to float32 once and the results rounded once (scores, softmax and
// every sum are float32); logsumexp is then float32, as torch keeps it. bfloat16 operands with
// even head sizes, where the CPU has the native bfloat16 GEMM (bf16_gemm.h), compute as torch's
// CPU flash attention computes 16-bit inputs: every product on the bfloat16 GEMM (the products
// exact, float32 sums), the scores, the online softmax and its row sums in float32, and the two
// float32 operands of the products, the probabilities P (forward: exp(score - running max),
// before the normalisation; backward: exp(score - logsumexp)) and the score gradients dS, rounded
// to bfloat16 once (flash_attention_rows.h: AVX-512 row passes where the CPU has them); the outputs and the dQ / dK /
// dV accumulators stay float32 until the one final rounding. Odd head sizes and CPUs without the native GEMM take the
// float32 path (widened operands, P and dS unrounded).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "framework/kernel_registry.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/bf16_gemm.h"
#include "providers/cpu/nn/gemm.h"
#include "providers/cpu/nn/vec_math.h"
#include "providers/cpu/training/flash_attention_rows.h"

namespace tob {

namespace {

constexpr int64_t kQueryBlock = 64;
constexpr int64_t kKeyBlock = 128;

struct FlashAttributes {
  bool is_causal = false;
  std::optional<float> scale;

  static StatusOr<FlashAttributes> Read(const Node& node) {
    FlashAttributes a;
    int64_t causal = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("is_causal", &causal, int64_t{0}));
    if (causal != 0 && causal != 1) return InvalidModel(node.Describe(), ": is_causal must be 0 or 1, got ", causal);
    a.is_causal = causal != 0;
    if (node.FindAttribute("scale") != nullptr) {
      float s = 0;
      TOB_RETURN_IF_ERROR(node.GetAttr("scale", &s));
      a.scale = s;
    }
    return a;
  }
};

// The sizes of one call; all operands are contiguous [batch, heads, seq, size].
struct FlashShape {
  int64_t batch = 0, heads = 0, kv_heads = 0, q_seq = 0, kv_seq = 0, head = 0, v_head = 0;
  int64_t group() const { return heads / kv_heads; }
  int64_t QOffset(int64_t b, int64_t h, int64_t i, int64_t size) const { return ((b * heads + h) * q_seq + i) * size; }
  int64_t KvOffset(int64_t b, int64_t g, int64_t j, int64_t size) const {
    return ((b * kv_heads + g) * kv_seq + j) * size;
  }
};

// Q, K, V at inputs q, q + 1, q + 2.
StatusOr<FlashShape> CheckQkv(const KernelContext& ctx, int q_input) {
  const Tensor& q = *ctx.input(q_input);
  const Tensor& k = *ctx.input(q_input + 1);
  const Tensor& v = *ctx.input(q_input + 2);
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4)
    return ctx.Fail("Q ", ShapeToString(q.shape()), ", K ", ShapeToString(k.shape()), " and V ",
                    ShapeToString(v.shape()), " must be 4-D [batch, heads, seq, head_size]");
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    return ctx.Fail("Q, K and V must have one dtype, got ", DTypeName(q.dtype()), ", ", DTypeName(k.dtype()), ", ",
                    DTypeName(v.dtype()));
  FlashShape s{q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(2), q.dim(3), v.dim(3)};
  if (k.dim(0) != s.batch || v.dim(0) != s.batch || k.dim(3) != s.head || v.dim(1) != s.kv_heads ||
      v.dim(2) != s.kv_seq)
    return ctx.Fail("K ", ShapeToString(k.shape()), " and V ", ShapeToString(v.shape()), " do not match Q ",
                    ShapeToString(q.shape()), " ([batch, kv_heads, kv_seq, head_size]; V's head size may differ)");
  if (s.kv_heads <= 0 || s.heads % s.kv_heads != 0)
    return ctx.Fail("Q's ", s.heads, " heads are not a multiple of K/V's ", s.kv_heads);
  return s;
}

// The attention mask as an additive bias of type C with broadcast strides over [batch, heads,
// q_seq, kv_seq] (0 where a dim is broadcast).
template <typename C>
struct MaskBias {
  const C* data = nullptr;
  Tensor converted;  // a bool mask as 0 / -inf
  int64_t stride[4] = {0, 0, 0, 0};
  const C* Row(int64_t b, int64_t h, int64_t i) const { return data + b * stride[0] + h * stride[1] + i * stride[2]; }
};

template <typename C>
StatusOr<std::optional<MaskBias<C>>> ReadMask(const KernelContext& ctx, const Tensor* mask, const FlashShape& s) {
  if (mask == nullptr) return std::optional<MaskBias<C>>();
  if (mask->rank() < 1 || mask->rank() > 4)
    return ctx.Fail("attn_mask must have rank 1 to 4, got ", ShapeToString(mask->shape()));
  if (mask->dtype() != DType::kBool && mask->dtype() != DTypeOf<C>())
    return ctx.Fail("attn_mask must be bool or Q's dtype ", DTypeName(DTypeOf<C>()), ", got ",
                    DTypeName(mask->dtype()));
  const int64_t target[4] = {s.batch, s.heads, s.q_seq, s.kv_seq};
  Shape dims(4 - mask->rank(), 1);
  dims.insert(dims.end(), mask->shape().begin(), mask->shape().end());
  MaskBias<C> m;
  int64_t stride = 1;
  for (int d = 3; d >= 0; --d) {
    if (dims[d] != 1 && dims[d] != target[d])
      return ctx.Fail("attn_mask ", ShapeToString(mask->shape()), " does not broadcast to [batch ", s.batch, ", heads ",
                      s.heads, ", q_seq ", s.q_seq, ", kv_seq ", s.kv_seq, "]");
    m.stride[d] = dims[d] == 1 ? 0 : stride;
    stride *= dims[d];
  }
  if (mask->dtype() == DType::kBool) {
    TOB_ASSIGN_OR_RETURN(m.converted, ctx.AllocateScratch(DTypeOf<C>(), {mask->numel()}));
    const bool* in = mask->data<bool>();
    C* out = m.converted.template data<C>();
    for (int64_t i = 0; i < mask->numel(); ++i) out[i] = in[i] ? C(0) : -std::numeric_limits<C>::infinity();
    m.data = out;
  } else {
    m.data = mask->data<C>();
  }
  return std::optional<MaskBias<C>>(std::move(m));
}

// Adds the causal and attention masks of query row i to its scores for keys [j0, j0 + cols).
template <typename C>
void MaskRow(C* row, int64_t cols, int64_t i, int64_t j0, bool causal, const MaskBias<C>* mask, int64_t b, int64_t h) {
  const C neg_inf = -std::numeric_limits<C>::infinity();
  if (causal && i + 1 - j0 < cols) std::fill(row + std::max<int64_t>(0, i + 1 - j0), row + cols, neg_inf);
  if (mask != nullptr) {
    const C* bias = mask->Row(b, h, i);
    const int64_t step = mask->stride[3];
    if (step == 1) {  // a row of the mask (vectorises)
      const C* b = bias + j0;
      for (int64_t j = 0; j < cols; ++j) row[j] += b[j];
    } else {
      for (int64_t j = 0; j < cols; ++j) row[j] += bias[(j0 + j) * step];
    }
  }
}

template <typename C>
C ScaleOf(const FlashAttributes& a, const FlashShape& s) {
  return static_cast<C>(a.scale ? *a.scale : 1.0 / std::sqrt(static_cast<double>(s.head)));
}

// Keys [0, end) that query rows [i0, i0 + rows) may see: the causal frontier ends at the last row.
int64_t KeyEnd(bool causal, int64_t i0, int64_t rows, int64_t kv_seq) {
  return causal ? std::min(kv_seq, i0 + rows) : kv_seq;
}

// The bfloat16 inputs the products may read directly (null: widened copies only).
struct Bf16Operands {
  const BFloat16* q = nullptr;
  const BFloat16* k = nullptr;
  const BFloat16* v = nullptr;
  const BFloat16* dy = nullptr;
};

// out[rows, cols] (row stride ldc) = alpha a b^T for a [rows, depth] and b [cols, depth], both with
// row stride depth: on the bfloat16 GEMM when both operands are given in bfloat16 (a16, b16), on
// the compute type's Gemm otherwise.
template <typename C>
Status ProductABt(int64_t rows, int64_t cols, int64_t depth, C alpha, const C* a, const BFloat16* a16, const C* b,
                  const BFloat16* b16, C* out, int64_t ldc) {
  if constexpr (std::is_same_v<C, float>) {
    if (a16 != nullptr && b16 != nullptr) {
      Bf16Gemm(true, rows, cols, depth, alpha, &a16, depth, &b16, depth, 0.f, &out, ldc, 1, nullptr);
      return Status::OK();
    }
  }
  return Gemm(false, true, rows, cols, depth, alpha, a, depth, b, depth, C(0), out, ldc, nullptr);
}

// p + offset, or null for null p.
inline const BFloat16* At16(const BFloat16* p, int64_t offset) { return p != nullptr ? p + offset : nullptr; }

int64_t Slices(const KernelContext& ctx, int64_t items) {
  const int64_t threads = ctx.thread_pool() != nullptr ? ctx.thread_pool()->num_threads() : 1;
  return std::max<int64_t>(1, std::min(items, threads));
}

// Operands and results in the compute type C (float32 for the 16-bit types); lse may be null.
template <typename C>
Status ForwardTyped(const KernelContext& ctx, const FlashAttributes& a, const FlashShape& s, const Tensor& q_t,
                    const Tensor& k_t, const Tensor& v_t, const Tensor* mask_t, Tensor& y_t, Tensor* lse_t,
                    const Bf16Operands& b16) {
  const C* q = q_t.data<C>();
  const C* k = k_t.data<C>();
  const C* v = v_t.data<C>();
  TOB_ASSIGN_OR_RETURN(std::optional<MaskBias<C>> mask, ReadMask<C>(ctx, mask_t, s));
  C* y = y_t.data<C>();
  C* lse = lse_t != nullptr ? lse_t->data<C>() : nullptr;
  const C scale = ScaleOf<C>(a, s);
  const C neg_inf = -std::numeric_limits<C>::infinity();

  const int64_t blocks_per_head = (s.q_seq + kQueryBlock - 1) / kQueryBlock;
  const int64_t items = s.batch * s.heads * blocks_per_head;
  const int64_t slices = Slices(ctx, items);
  const int64_t block_rows = std::min(kQueryBlock, s.q_seq);
  const int64_t block_cols = std::min(kKeyBlock, s.kv_seq);
  // Per slice: one block of scores [rows, cols], the running row maximum and sum.
  TOB_ASSIGN_OR_RETURN(Tensor scratch,
                       ctx.AllocateScratch(DTypeOf<C>(), {slices, block_rows * block_cols + 2 * block_rows}));
  std::vector<Status> slice_status(slices);

  ParallelFor(ctx.thread_pool(), slices, 1, [&](int64_t sb, int64_t se) {
    for (int64_t slice = sb; slice < se; ++slice) {
      C* scores = scratch.data<C>() + slice * (block_rows * block_cols + 2 * block_rows);
      C* row_max = scores + block_rows * block_cols;
      C* row_sum = row_max + block_rows;
      // Items dealt round-robin: a causal head's late query blocks cost more than its early ones.
      for (int64_t item = slice; item < items; item += slices) {
        const int64_t bh = item / blocks_per_head, i0 = (item % blocks_per_head) * kQueryBlock;
        const int64_t b = bh / s.heads, h = bh % s.heads, g = h / s.group();
        const int64_t rows = std::min(kQueryBlock, s.q_seq - i0);
        C* out = y + s.QOffset(b, h, i0, s.v_head);
        std::fill_n(out, rows * s.v_head, C(0));
        std::fill_n(row_max, rows, neg_inf);
        std::fill_n(row_sum, rows, C(0));
        const int64_t key_end = KeyEnd(a.is_causal, i0, rows, s.kv_seq);
        for (int64_t j0 = 0; j0 < key_end; j0 += kKeyBlock) {
          const int64_t cols = std::min(kKeyBlock, key_end - j0);
          Status st = ProductABt(rows, cols, s.head, scale, q + s.QOffset(b, h, i0, s.head),
                                 At16(b16.q, s.QOffset(b, h, i0, s.head)), k + s.KvOffset(b, g, j0, s.head),
                                 At16(b16.k, s.KvOffset(b, g, j0, s.head)), scores, block_cols);
          if (!st.ok()) {
            slice_status[slice] = st;
            return;
          }
          for (int64_t r = 0; r < rows; ++r) {
            C* row = scores + r * block_cols;
            MaskRow(row, cols, i0 + r, j0, a.is_causal, mask ? &*mask : nullptr, b, h);
            const C new_max = std::max(row_max[r], vec::Max(row, cols));
            if (new_max == neg_inf) {  // nothing visible yet: this block adds nothing
              std::fill_n(row, cols, C(0));
              continue;
            }
            const C rescale = std::exp(row_max[r] - new_max);  // 0 on the first visible block
            row_sum[r] = row_sum[r] * rescale + vec::ExpShiftedSum(row, cols, new_max, row);
            if (rescale != C(1)) {
              C* o = out + r * s.v_head;
              for (int64_t x = 0; x < s.v_head; ++x) o[x] *= rescale;
            }
            row_max[r] = new_max;
          }
          st = Gemm(false, false, rows, s.v_head, cols, C(1), scores, block_cols, v + s.KvOffset(b, g, j0, s.v_head),
                    s.v_head, C(1), out, s.v_head, nullptr);
          if (!st.ok()) {
            slice_status[slice] = st;
            return;
          }
        }
        for (int64_t r = 0; r < rows; ++r) {
          const bool seen = row_sum[r] > C(0);
          const C inv = seen ? C(1) / row_sum[r] : C(0);
          C* o = out + r * s.v_head;
          for (int64_t x = 0; x < s.v_head; ++x) o[x] *= inv;
          if (lse != nullptr)
            lse[(b * s.heads + h) * s.q_seq + i0 + r] =
                seen ? row_max[r] + std::log(row_sum[r]) : std::numeric_limits<C>::infinity();
        }
      }
    }
  });
  for (const Status& st : slice_status) TOB_RETURN_IF_ERROR(st);
  return Status::OK();
}

inline int64_t RoundUpEven(int64_t n) { return n + (n & 1); }

inline uint16_t* Bits16(BFloat16* p) { return reinterpret_cast<uint16_t*>(p); }

// The forward on bfloat16 Q, K, V with every product on the bfloat16 GEMM, as torch's CPU flash
// attention computes 16-bit inputs: scores Q K^T in float32, the online softmax in float32, the
// block's unnormalised probabilities exp(score - running max) rounded to bfloat16 for P V (their
// row sum taken before rounding), the output accumulated and normalised in float32 (y) and rounded
// once by the caller.
Status ForwardBf16(const KernelContext& ctx, const FlashAttributes& a, const FlashShape& s, const BFloat16* q,
                   const BFloat16* k, const BFloat16* v, const Tensor* mask_t, Tensor& y_t, Tensor* lse_t) {
  TOB_ASSIGN_OR_RETURN(std::optional<MaskBias<float>> mask, ReadMask<float>(ctx, mask_t, s));
  float* y = y_t.data<float>();
  float* lse = lse_t != nullptr ? lse_t->data<float>() : nullptr;
  const float scale = ScaleOf<float>(a, s);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const int64_t blocks_per_head = (s.q_seq + kQueryBlock - 1) / kQueryBlock;
  const int64_t items = s.batch * s.heads * blocks_per_head;
  const int64_t slices = Slices(ctx, items);
  const int64_t block_rows = std::min(kQueryBlock, s.q_seq);
  const int64_t block_cols = std::min(kKeyBlock, s.kv_seq);
  const int64_t per_slice = block_rows * block_cols + 2 * block_rows;
  const int64_t per_slice16 = block_rows * RoundUpEven(block_cols);
  TOB_ASSIGN_OR_RETURN(Tensor scratch, ctx.AllocateScratch(DType::kFloat32, {slices, per_slice}));
  TOB_ASSIGN_OR_RETURN(Tensor scratch16, ctx.AllocateScratch(DType::kBFloat16, {slices, per_slice16}));
  const flash_rows::RowOps& ops = flash_rows::Ops();

  ParallelFor(ctx.thread_pool(), slices, 1, [&](int64_t sb, int64_t se) {
    for (int64_t slice = sb; slice < se; ++slice) {
      float* scores = scratch.data<float>() + slice * per_slice;
      float* row_max = scores + block_rows * block_cols;
      float* row_sum = row_max + block_rows;
      BFloat16* p16 = scratch16.data<BFloat16>() + slice * per_slice16;
      for (int64_t item = slice; item < items; item += slices) {
        const int64_t bh = item / blocks_per_head, i0 = (item % blocks_per_head) * kQueryBlock;
        const int64_t b = bh / s.heads, h = bh % s.heads, g = h / s.group();
        const int64_t rows = std::min(kQueryBlock, s.q_seq - i0);
        float* out = y + s.QOffset(b, h, i0, s.v_head);
        std::fill_n(out, rows * s.v_head, 0.f);
        std::fill_n(row_max, rows, neg_inf);
        std::fill_n(row_sum, rows, 0.f);
        const BFloat16* q_block = q + s.QOffset(b, h, i0, s.head);
        const int64_t key_end = KeyEnd(a.is_causal, i0, rows, s.kv_seq);
        for (int64_t j0 = 0; j0 < key_end; j0 += kKeyBlock) {
          const int64_t cols = std::min(kKeyBlock, key_end - j0), cols_even = RoundUpEven(cols);
          const BFloat16* k_block = k + s.KvOffset(b, g, j0, s.head);
          const BFloat16* v_block = v + s.KvOffset(b, g, j0, s.v_head);
          Bf16Gemm(true, rows, cols, s.head, scale, &q_block, s.head, &k_block, s.head, 0.f, &scores, block_cols, 1,
                   nullptr);
          for (int64_t r = 0; r < rows; ++r) {
            float* row = scores + r * block_cols;
            uint16_t* p = Bits16(p16 + r * cols_even);
            MaskRow(row, cols, i0 + r, j0, a.is_causal, mask ? &*mask : nullptr, b, h);
            const float new_max = std::max(row_max[r], ops.max(row, cols));
            if (new_max == neg_inf) {  // nothing visible yet: this block adds nothing
              std::fill_n(p, cols_even, uint16_t{0});
              continue;
            }
            const float rescale = std::exp(row_max[r] - new_max);  // 0 on the first visible block
            row_sum[r] = row_sum[r] * rescale + ops.exp_shifted_sum_to_bf16(row, cols, new_max, p, cols_even);
            if (rescale != 1.f) {
              float* o = out + r * s.v_head;
              for (int64_t x = 0; x < s.v_head; ++x) o[x] *= rescale;
            }
            row_max[r] = new_max;
          }
          const BFloat16* p_block = p16;
          Bf16Gemm(false, rows, s.v_head, cols, 1.f, &p_block, cols_even, &v_block, s.v_head, 1.f, &out, s.v_head, 1,
                   nullptr);
        }
        for (int64_t r = 0; r < rows; ++r) {
          const bool seen = row_sum[r] > 0.f;
          const float inv = seen ? 1.f / row_sum[r] : 0.f;
          float* o = out + r * s.v_head;
          for (int64_t x = 0; x < s.v_head; ++x) o[x] *= inv;
          if (lse != nullptr)
            lse[(b * s.heads + h) * s.q_seq + i0 + r] =
                seen ? row_max[r] + std::log(row_sum[r]) : std::numeric_limits<float>::infinity();
        }
      }
    }
  });
  return Status::OK();
}

// dQ, dK, dV of one (batch, head): dK / dV accumulate into dk / dv (rows of the head's key
// positions), dQ into dq. scores and dscores hold one [rows, cols] block each; delta q_seq values.
template <typename C>
Status BackwardHead(const FlashAttributes& a, const FlashShape& s, const std::optional<MaskBias<C>>& mask, int64_t b,
                    int64_t h, const C* dy, const C* q, const C* k, const C* v, const C* y, const C* lse, C* dq, C* dk,
                    C* dv, C* scores, C* dscores, C* delta, int64_t block_cols, const Bf16Operands& b16) {
  const int64_t g = h / s.group();
  const C scale = ScaleOf<C>(a, s);
  const C* q_h = q + s.QOffset(b, h, 0, s.head);
  const C* dy_h = dy + s.QOffset(b, h, 0, s.v_head);
  const C* y_h = y + s.QOffset(b, h, 0, s.v_head);
  const C* lse_h = lse + (b * s.heads + h) * s.q_seq;
  const C* k_g = k + s.KvOffset(b, g, 0, s.head);
  const C* v_g = v + s.KvOffset(b, g, 0, s.v_head);
  // delta_i = sum_x dY_ix Y_ix: the softmax gradient's row term (dS = P (dP - delta)).
  for (int64_t i = 0; i < s.q_seq; ++i) {
    C acc = 0;
    for (int64_t x = 0; x < s.v_head; ++x) acc += dy_h[i * s.v_head + x] * y_h[i * s.v_head + x];
    delta[i] = acc;
  }
  for (int64_t j0 = 0; j0 < s.kv_seq; j0 += kKeyBlock) {
    const int64_t cols = std::min(kKeyBlock, s.kv_seq - j0);
    // Causal: rows before j0 see none of these keys.
    for (int64_t i0 = a.is_causal ? j0 : 0; i0 < s.q_seq; i0 += kQueryBlock) {
      const int64_t rows = std::min(kQueryBlock, s.q_seq - i0);
      TOB_RETURN_IF_ERROR(ProductABt(rows, cols, s.head, scale, q_h + i0 * s.head,
                                     At16(b16.q, s.QOffset(b, h, i0, s.head)), k_g + j0 * s.head,
                                     At16(b16.k, s.KvOffset(b, g, j0, s.head)), scores, block_cols));
      for (int64_t r = 0; r < rows; ++r) {
        C* row = scores + r * block_cols;
        MaskRow(row, cols, i0 + r, j0, a.is_causal, mask ? &*mask : nullptr, b, h);
        // P = exp(score - logsumexp): the forward's probabilities, 0 for hidden keys.
        vec::ExpShiftedSum(row, cols, lse_h[i0 + r], row);
      }
      // dV_j += P^T dY_i, dP = dY_i V_j^T.
      TOB_RETURN_IF_ERROR(Gemm(true, false, cols, s.v_head, rows, C(1), scores, block_cols, dy_h + i0 * s.v_head,
                               s.v_head, C(1), dv + j0 * s.v_head, s.v_head, nullptr));
      TOB_RETURN_IF_ERROR(ProductABt(rows, cols, s.v_head, C(1), dy_h + i0 * s.v_head,
                                     At16(b16.dy, s.QOffset(b, h, i0, s.v_head)), v_g + j0 * s.v_head,
                                     At16(b16.v, s.KvOffset(b, g, j0, s.v_head)), dscores, block_cols));
      for (int64_t r = 0; r < rows; ++r) {
        const C* p = scores + r * block_cols;
        C* ds = dscores + r * block_cols;
        const C d = delta[i0 + r];
        for (int64_t j = 0; j < cols; ++j) ds[j] = p[j] * (ds[j] - d);
      }
      // dQ_i += scale dS K_j, dK_j += scale dS^T Q_i.
      TOB_RETURN_IF_ERROR(Gemm(false, false, rows, s.head, cols, scale, dscores, block_cols, k_g + j0 * s.head, s.head,
                               C(1), dq + i0 * s.head, s.head, nullptr));
      TOB_RETURN_IF_ERROR(Gemm(true, false, cols, s.head, rows, scale, dscores, block_cols, q_h + i0 * s.head, s.head,
                               C(1), dk + j0 * s.head, s.head, nullptr));
    }
  }
  return Status::OK();
}

// The bfloat16 backward of one (batch, head), torch's 16-bit arithmetic: P recomputed in float32
// from the scores and logsumexp and rounded to bfloat16 for dV += P^T dY; dP = dY V^T in float32;
// dS = P (dP - delta) from the float32 P, rounded to bfloat16 for dQ += scale dS K and dK += scale
// dS^T Q. dq, dk, dv are float32 accumulators (rounded once by the caller). p16 and ds16 hold one
// block row-major ([rows, even cols]), pt16 and dst16 its transpose ([cols, even rows]), the
// layout the bfloat16 GEMM reads as its left operand.
Status BackwardHeadBf16(const FlashAttributes& a, const FlashShape& s, const std::optional<MaskBias<float>>& mask,
                        int64_t b, int64_t h, const BFloat16* dy, const BFloat16* q, const BFloat16* k,
                        const BFloat16* v, const BFloat16* y, const float* lse, float* dq, float* dk, float* dv,
                        float* scores, float* dscores, float* delta, BFloat16* p16, BFloat16* pt16, BFloat16* ds16,
                        BFloat16* dst16, int64_t block_cols) {
  const int64_t g = h / s.group();
  const float scale = ScaleOf<float>(a, s);
  const BFloat16* q_h = q + s.QOffset(b, h, 0, s.head);
  const BFloat16* dy_h = dy + s.QOffset(b, h, 0, s.v_head);
  const BFloat16* y_h = y + s.QOffset(b, h, 0, s.v_head);
  const float* lse_h = lse + (b * s.heads + h) * s.q_seq;
  const BFloat16* k_g = k + s.KvOffset(b, g, 0, s.head);
  const BFloat16* v_g = v + s.KvOffset(b, g, 0, s.v_head);
  const flash_rows::RowOps& ops = flash_rows::Ops();
  for (int64_t i = 0; i < s.q_seq; ++i) delta[i] = ops.dot_bf16(dy_h + i * s.v_head, y_h + i * s.v_head, s.v_head);
  const BFloat16 *p_t = pt16, *ds = ds16, *ds_t = dst16;
  for (int64_t j0 = 0; j0 < s.kv_seq; j0 += kKeyBlock) {
    const int64_t cols = std::min(kKeyBlock, s.kv_seq - j0), cols_even = RoundUpEven(cols);
    const BFloat16* k_block = k_g + j0 * s.head;
    const BFloat16* v_block = v_g + j0 * s.v_head;
    float* dk_block = dk + j0 * s.head;
    float* dv_block = dv + j0 * s.v_head;
    for (int64_t i0 = a.is_causal ? j0 : 0; i0 < s.q_seq; i0 += kQueryBlock) {
      const int64_t rows = std::min(kQueryBlock, s.q_seq - i0), rows_even = RoundUpEven(rows);
      const BFloat16* q_block = q_h + i0 * s.head;
      const BFloat16* dy_block = dy_h + i0 * s.v_head;
      float* dq_block = dq + i0 * s.head;
      Bf16Gemm(true, rows, cols, s.head, scale, &q_block, s.head, &k_block, s.head, 0.f, &scores, block_cols, 1,
               nullptr);
      for (int64_t r = 0; r < rows; ++r) {
        float* row = scores + r * block_cols;
        MaskRow(row, cols, i0 + r, j0, a.is_causal, mask ? &*mask : nullptr, b, h);
        // P (float32, in place, for dS) and its bfloat16 rounding: 0 for hidden keys.
        ops.exp_shifted_to_bf16(row, cols, lse_h[i0 + r], Bits16(p16 + r * cols_even), cols_even);
      }
      PackBf16Rows(true, cols, rows, p16, cols_even, rows_even, pt16, nullptr);
      Bf16Gemm(false, cols, s.v_head, rows, 1.f, &p_t, rows_even, &dy_block, s.v_head, 1.f, &dv_block, s.v_head, 1,
               nullptr);
      Bf16Gemm(true, rows, cols, s.v_head, 1.f, &dy_block, s.v_head, &v_block, s.v_head, 0.f, &dscores, block_cols, 1,
               nullptr);
      for (int64_t r = 0; r < rows; ++r)
        ops.softmax_grad_row_to_bf16(scores + r * block_cols, dscores + r * block_cols, delta[i0 + r], cols,
                                     Bits16(ds16 + r * cols_even), cols_even);
      Bf16Gemm(false, rows, s.head, cols, scale, &ds, cols_even, &k_block, s.head, 1.f, &dq_block, s.head, 1, nullptr);
      PackBf16Rows(true, cols, rows, ds16, cols_even, rows_even, dst16, nullptr);
      Bf16Gemm(false, cols, s.head, rows, scale, &ds_t, rows_even, &q_block, s.head, 1.f, &dk_block, s.head, 1,
               nullptr);
    }
  }
  return Status::OK();
}

// The backward's frame, in the compute type C: zeroes the gradients, splits the (batch, head)
// items over the pool and calls head(slice, slice16, b, h, dq, dk, dv) for each, with the slice's
// scratch (per_slice values of C, per_slice16 bfloat16 values) and the rows its gradients
// accumulate into; every gradient is computed (the products share their blocks), so all three
// are given. With grouped K/V heads each query head's dK / dV go to scratch, summed per group
// after.
template <typename C, typename HeadFn>
Status BackwardFrame(const KernelContext& ctx, const FlashShape& s, Tensor& dq_t, Tensor& dk_t, Tensor& dv_t,
                     int64_t per_slice, int64_t per_slice16, HeadFn&& head) {
  C* dq = dq_t.data<C>();
  C* dk = dk_t.data<C>();
  C* dv = dv_t.data<C>();
  std::fill_n(dq, dq_t.numel(), C(0));
  const bool grouped = s.group() > 1;
  Tensor dk_heads, dv_heads;
  C* dk_acc = dk;
  C* dv_acc = dv;
  if (grouped) {
    TOB_ASSIGN_OR_RETURN(dk_heads, ctx.AllocateScratch(DTypeOf<C>(), {s.batch, s.heads, s.kv_seq, s.head}));
    TOB_ASSIGN_OR_RETURN(dv_heads, ctx.AllocateScratch(DTypeOf<C>(), {s.batch, s.heads, s.kv_seq, s.v_head}));
    dk_acc = dk_heads.data<C>();
    dv_acc = dv_heads.data<C>();
  }
  const int64_t acc_heads = s.batch * (grouped ? s.heads : s.kv_heads);
  std::fill_n(dk_acc, acc_heads * s.kv_seq * s.head, C(0));
  std::fill_n(dv_acc, acc_heads * s.kv_seq * s.v_head, C(0));

  const int64_t items = s.batch * s.heads;
  const int64_t slices = Slices(ctx, items);
  TOB_ASSIGN_OR_RETURN(Tensor scratch, ctx.AllocateScratch(DTypeOf<C>(), {slices, per_slice}));
  Tensor scratch16;
  if (per_slice16 > 0) {
    TOB_ASSIGN_OR_RETURN(scratch16, ctx.AllocateScratch(DType::kBFloat16, {slices, per_slice16}));
  }
  std::vector<Status> slice_status(slices);
  ParallelFor(ctx.thread_pool(), slices, 1, [&](int64_t sb, int64_t se) {
    for (int64_t slice = sb; slice < se; ++slice) {
      C* slice_scratch = scratch.data<C>() + slice * per_slice;
      BFloat16* slice16 = per_slice16 > 0 ? scratch16.data<BFloat16>() + slice * per_slice16 : nullptr;
      for (int64_t item = items * slice / slices; item < items * (slice + 1) / slices; ++item) {
        const int64_t b = item / s.heads, h = item % s.heads;
        // Ungrouped, head h's dK / dV rows are the output's (b, h) rows; grouped, its own scratch rows.
        const int64_t kv_index = grouped ? item : b * s.kv_heads + h;
        Status st = head(slice_scratch, slice16, b, h, dq + s.QOffset(b, h, 0, s.head),
                         dk_acc + kv_index * s.kv_seq * s.head, dv_acc + kv_index * s.kv_seq * s.v_head);
        if (!st.ok()) {
          slice_status[slice] = st;
          return;
        }
      }
    }
  });
  for (const Status& st : slice_status) TOB_RETURN_IF_ERROR(st);
  if (grouped) {
    const int64_t group = s.group();
    ParallelFor(ctx.thread_pool(), s.batch * s.kv_heads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t bg = begin; bg < end; ++bg) {
        const int64_t nk = s.kv_seq * s.head, nv = s.kv_seq * s.v_head;
        C* dk_out = dk + bg * nk;
        C* dv_out = dv + bg * nv;
        for (int64_t m = 0; m < group; ++m) {
          const C* dk_in = dk_acc + (bg * group + m) * nk;
          const C* dv_in = dv_acc + (bg * group + m) * nv;
          for (int64_t x = 0; x < nk; ++x) dk_out[x] = m == 0 ? dk_in[x] : dk_out[x] + dk_in[x];
          for (int64_t x = 0; x < nv; ++x) dv_out[x] = m == 0 ? dv_in[x] : dv_out[x] + dv_in[x];
        }
      }
    });
  }
  return Status::OK();
}

// Operands and gradients in the compute type C.
template <typename C>
Status BackwardTyped(const KernelContext& ctx, const FlashAttributes& a, const FlashShape& s, const Tensor& dy_t,
                     const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& y_t, const Tensor& lse_t,
                     const Tensor* mask_t, Tensor& dq_t, Tensor& dk_t, Tensor& dv_t, const Bf16Operands& b16) {
  TOB_ASSIGN_OR_RETURN(std::optional<MaskBias<C>> mask, ReadMask<C>(ctx, mask_t, s));
  const C* dy = dy_t.data<C>();
  const C* q = q_t.data<C>();
  const C* k = k_t.data<C>();
  const C* v = v_t.data<C>();
  const C* y = y_t.data<C>();
  const C* lse = lse_t.data<C>();
  const int64_t block_rows = std::min(kQueryBlock, s.q_seq);
  const int64_t block_cols = std::min(kKeyBlock, s.kv_seq);
  return BackwardFrame<C>(ctx, s, dq_t, dk_t, dv_t, 2 * block_rows * block_cols + s.q_seq, 0,
                          [&](C* scratch, BFloat16*, int64_t b, int64_t h, C* dq, C* dk, C* dv) {
                            C* dscores = scratch + block_rows * block_cols;
                            return BackwardHead<C>(a, s, mask, b, h, dy, q, k, v, y, lse, dq, dk, dv, scratch, dscores,
                                                   dscores + block_rows * block_cols, block_cols, b16);
                          });
}

// bfloat16 operands (dY, Q, K, V, Y) with every product on the bfloat16 GEMM (BackwardHeadBf16);
// the mask in float32, the gradients float32 accumulators.
Status BackwardBf16(const KernelContext& ctx, const FlashAttributes& a, const FlashShape& s, const Tensor& dy_t,
                    const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& y_t, const Tensor& lse_t,
                    const Tensor* mask_t, Tensor& dq_t, Tensor& dk_t, Tensor& dv_t) {
  TOB_ASSIGN_OR_RETURN(std::optional<MaskBias<float>> mask, ReadMask<float>(ctx, mask_t, s));
  const BFloat16* dy = dy_t.data<BFloat16>();
  const BFloat16* q = q_t.data<BFloat16>();
  const BFloat16* k = k_t.data<BFloat16>();
  const BFloat16* v = v_t.data<BFloat16>();
  const BFloat16* y = y_t.data<BFloat16>();
  const float* lse = lse_t.data<float>();
  const int64_t block_rows = std::min(kQueryBlock, s.q_seq);
  const int64_t block_cols = std::min(kKeyBlock, s.kv_seq);
  const int64_t block16 = RoundUpEven(block_rows) * RoundUpEven(block_cols);
  return BackwardFrame<float>(
      ctx, s, dq_t, dk_t, dv_t, 2 * block_rows * block_cols + s.q_seq, 4 * block16,
      [&](float* scratch, BFloat16* scratch16, int64_t b, int64_t h, float* dq, float* dk, float* dv) {
        float* dscores = scratch + block_rows * block_cols;
        return BackwardHeadBf16(a, s, mask, b, h, dy, q, k, v, y, lse, dq, dk, dv, scratch, dscores,
                                dscores + block_rows * block_cols, scratch16, scratch16 + block16,
                                scratch16 + 2 * block16, scratch16 + 3 * block16, block_cols);
      });
}

bool Is16Bit(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }

// The compute type's copy of an operand: float32/float64 tensors as they are, 16-bit ones as a
// float32 copy in scratch (kept alive by `keep`).
StatusOr<const Tensor*> InCompute(const KernelContext& ctx, const Tensor* t, Tensor* keep) {
  if (t == nullptr || !Is16Bit(t->dtype())) return t;
  TOB_ASSIGN_OR_RETURN(*keep, ToFloatScratch(ctx, *t));
  return static_cast<const Tensor*>(keep);
}

// Where a result of the compute type goes: the output itself (float32/float64), or float32
// scratch rounded into it afterwards (16-bit, or an omitted output when `always`).
StatusOr<Tensor*> OutCompute(const KernelContext& ctx, Tensor* out, const Shape& shape, DType compute, Tensor* keep,
                             bool always) {
  if (out != nullptr && !Is16Bit(out->dtype())) return out;
  if (out == nullptr && !always) return static_cast<Tensor*>(nullptr);
  TOB_ASSIGN_OR_RETURN(*keep, ctx.AllocateScratch(compute, shape));
  return keep;
}

Status RoundInto(const KernelContext& ctx, const Tensor* computed, Tensor* out) {
  if (out == nullptr || computed == out) return Status::OK();
  return FromFloatScratch(ctx, *computed, out);
}

// The bfloat16 inputs the products read directly: Q and K when the head size is even (the
// bfloat16 GEMM reads K in pairs), V and dY when V's head size is; none without the native kernel.
Bf16Operands Bf16OperandsOf(const FlashShape& s, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* dy) {
  Bf16Operands o;
  if (q.dtype() != DType::kBFloat16 || !Bf16GemmAvailable()) return o;
  if (s.head % 2 == 0) {
    o.q = q.data<BFloat16>();
    o.k = k.data<BFloat16>();
  }
  if (s.v_head % 2 == 0 && dy != nullptr) {
    o.v = v.data<BFloat16>();
    o.dy = dy->data<BFloat16>();
  }
  return o;
}

// float32 and float64 compute in their own type; float16 and bfloat16 in float32 (operands
// widened once, results rounded once; logsumexp stays float32, as torch keeps it).
template <typename Fn>
Status DispatchCompute(const KernelContext& ctx, DType dtype, Fn&& fn) {
  if (dtype == DType::kFloat64) return fn.template operator()<double>();
  if (dtype == DType::kFloat32 || Is16Bit(dtype)) return fn.template operator()<float>();
  return ctx.Fail("Q must be float32, float64, float16 or bfloat16, got ", DTypeName(dtype));
}

DType LogsumexpType(DType q) { return Is16Bit(q) ? DType::kFloat32 : q; }

// Whether bfloat16 operands take the all-bfloat16 path (ForwardBf16 / BackwardHeadBf16): the
// native GEMM is there and both head sizes are even (each is the inner size of a product whose
// left operand is an input, read in pairs).
bool AllBf16Products(DType dtype, const FlashShape& s) {
  return dtype == DType::kBFloat16 && Bf16GemmAvailable() && s.head % 2 == 0 && s.v_head % 2 == 0;
}

class FlashAttentionKernel final : public OpKernel {
 public:
  FlashAttentionKernel(const Node& node, FlashAttributes attrs) : OpKernel(node), attrs_(attrs) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(FlashAttributes attrs, FlashAttributes::Read(node));
    return MakeKernel<FlashAttentionKernel>(node, attrs);
  }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(FlashShape s, CheckQkv(ctx, 0));
    if (ctx.output(0)->numel() == 0) return Status::OK();
    const DType dtype = ctx.input(0)->dtype();
    const DType compute = Is16Bit(dtype) ? DType::kFloat32 : dtype;
    if (ctx.output(1) != nullptr && ctx.output(1)->dtype() != LogsumexpType(dtype))
      return ctx.Fail("logsumexp must be ", DTypeName(LogsumexpType(dtype)), " for Q of ", DTypeName(dtype));
    Tensor keep[5];
    if (AllBf16Products(dtype, s)) {
      TOB_ASSIGN_OR_RETURN(const Tensor* mask, InCompute(ctx, ctx.input(3), &keep[3]));
      TOB_ASSIGN_OR_RETURN(Tensor * y, OutCompute(ctx, ctx.output(0), ctx.output(0)->shape(), compute, &keep[4], true));
      TOB_RETURN_IF_ERROR(ForwardBf16(ctx, attrs_, s, ctx.input(0)->data<BFloat16>(), ctx.input(1)->data<BFloat16>(),
                                      ctx.input(2)->data<BFloat16>(), mask, *y, ctx.output(1)));
      return RoundInto(ctx, y, ctx.output(0));
    }
    TOB_ASSIGN_OR_RETURN(const Tensor* q, InCompute(ctx, ctx.input(0), &keep[0]));
    TOB_ASSIGN_OR_RETURN(const Tensor* k, InCompute(ctx, ctx.input(1), &keep[1]));
    TOB_ASSIGN_OR_RETURN(const Tensor* v, InCompute(ctx, ctx.input(2), &keep[2]));
    TOB_ASSIGN_OR_RETURN(const Tensor* mask, InCompute(ctx, ctx.input(3), &keep[3]));
    TOB_ASSIGN_OR_RETURN(Tensor * y, OutCompute(ctx, ctx.output(0), ctx.output(0)->shape(), compute, &keep[4], true));
    TOB_RETURN_IF_ERROR(DispatchCompute(ctx, dtype, [&]<typename C>() -> Status {
      return ForwardTyped<C>(ctx, attrs_, s, *q, *k, *v, mask, *y, ctx.output(1),
                             Bf16OperandsOf(s, *ctx.input(0), *ctx.input(1), *ctx.input(2), nullptr));
    }));
    return RoundInto(ctx, y, ctx.output(0));
  }

 private:
  FlashAttributes attrs_;
};

class FlashAttentionGradKernel final : public OpKernel {
 public:
  FlashAttentionGradKernel(const Node& node, FlashAttributes attrs) : OpKernel(node), attrs_(attrs) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(FlashAttributes attrs, FlashAttributes::Read(node));
    return MakeKernel<FlashAttentionGradKernel>(node, attrs);
  }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(FlashShape s, CheckQkv(ctx, 1));
    const DType dtype = ctx.input(1)->dtype();
    const DType compute = Is16Bit(dtype) ? DType::kFloat32 : dtype;
    const Tensor& dy = *ctx.input(0);
    const Tensor& y = *ctx.input(4);
    const Tensor& lse = *ctx.input(5);
    const Shape y_shape{s.batch, s.heads, s.q_seq, s.v_head};
    if (dy.shape() != y_shape || y.shape() != y_shape || dy.dtype() != dtype || y.dtype() != dtype)
      return ctx.Fail("dY ", ShapeToString(dy.shape()), " and Y ", ShapeToString(y.shape()), " must be ",
                      ShapeToString(y_shape), " of Q's dtype");
    if (lse.shape() != Shape{s.batch, s.heads, s.q_seq} || lse.dtype() != LogsumexpType(dtype))
      return ctx.Fail("logsumexp ", ShapeToString(lse.shape()), " must be [", s.batch, ", ", s.heads, ", ", s.q_seq,
                      "] of ", DTypeName(LogsumexpType(dtype)), " (FlashAttention's second output)");
    Tensor keep[9];
    Tensor* grads[3];
    if (AllBf16Products(dtype, s)) {
      TOB_ASSIGN_OR_RETURN(const Tensor* mask, InCompute(ctx, ctx.input(6), &keep[5]));
      for (int i = 0; i < 3; ++i) {
        TOB_ASSIGN_OR_RETURN(grads[i],
                             OutCompute(ctx, ctx.output(i), ctx.input(1 + i)->shape(), compute, &keep[6 + i], true));
      }
      TOB_RETURN_IF_ERROR(BackwardBf16(ctx, attrs_, s, dy, *ctx.input(1), *ctx.input(2), *ctx.input(3), y, lse, mask,
                                       *grads[0], *grads[1], *grads[2]));
      for (int i = 0; i < 3; ++i) TOB_RETURN_IF_ERROR(RoundInto(ctx, grads[i], ctx.output(i)));
      return Status::OK();
    }
    TOB_ASSIGN_OR_RETURN(const Tensor* dy_c, InCompute(ctx, &dy, &keep[0]));
    TOB_ASSIGN_OR_RETURN(const Tensor* q, InCompute(ctx, ctx.input(1), &keep[1]));
    TOB_ASSIGN_OR_RETURN(const Tensor* k, InCompute(ctx, ctx.input(2), &keep[2]));
    TOB_ASSIGN_OR_RETURN(const Tensor* v, InCompute(ctx, ctx.input(3), &keep[3]));
    TOB_ASSIGN_OR_RETURN(const Tensor* y_c, InCompute(ctx, &y, &keep[4]));
    TOB_ASSIGN_OR_RETURN(const Tensor* mask, InCompute(ctx, ctx.input(6), &keep[5]));
    for (int i = 0; i < 3; ++i) {
      TOB_ASSIGN_OR_RETURN(grads[i],
                           OutCompute(ctx, ctx.output(i), ctx.input(1 + i)->shape(), compute, &keep[6 + i], true));
    }
    TOB_RETURN_IF_ERROR(DispatchCompute(ctx, dtype, [&]<typename C>() -> Status {
      return BackwardTyped<C>(ctx, attrs_, s, *dy_c, *q, *k, *v, *y_c, lse, mask, *grads[0], *grads[1], *grads[2],
                              Bf16OperandsOf(s, *ctx.input(1), *ctx.input(2), *ctx.input(3), &dy));
    }));
    for (int i = 0; i < 3; ++i) TOB_RETURN_IF_ERROR(RoundInto(ctx, grads[i], ctx.output(i)));
    return Status::OK();
  }

 private:
  FlashAttributes attrs_;
};

}  // namespace

void RegisterCpuFlashAttentionKernels(KernelRegistry& registry) {
  const std::vector<DType>& types = FloatTypes();
  std::vector<DType> mask_types = types;
  mask_types.push_back(DType::kBool);
  registry.Register(Def("FlashAttention")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T", {0, 1, 2}, types)
                        .Constraint("M", {3}, mask_types)
                        .Kernel<FlashAttentionKernel>());
  registry.Register(Def("FlashAttentionGrad")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T", {0, 1, 2, 3, 4}, types)
                        .Constraint("L", {5}, {DType::kFloat32, DType::kFloat64})
                        .Constraint("M", {6}, mask_types)
                        .Kernel<FlashAttentionGradKernel>());
}

}  // namespace tob
