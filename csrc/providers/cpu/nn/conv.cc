// Conv and com.microsoft FusedConv (Conv + optional Z + activation, conv_epilogue.h). 2-D convs
// run by tiles of output columns: im2col of one cache-sized block, a GEMM, and bias/Z/activation
// on the fresh block (GEMM straight on X for 1x1 stride-1 convs); float32 weights that are a
// constant are packed once per session (PrePack) and those tiles compute Y^T = col^T W^T on the
// packed panels (conv_packed.h); depthwise convs (one input
// channel per group) a direct loop, where GEMM would be a matrix-vector product per channel;
// other ranks im2col of whole images + batched GEMM.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "core/env_switch.h"
#include "framework/kernel_registry.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/conv_columns.h"
#include "providers/cpu/nn/conv_depthwise_isa.h"
#include "providers/cpu/nn/conv_epilogue.h"
#include "providers/cpu/nn/conv_implicit.h"
#include "providers/cpu/nn/conv_packed.h"
#include "providers/cpu/nn/gemm.h"
#include "providers/cpu/nn/sgemm_packed.h"
#include "providers/cpu/nn/window_geometry.h"

namespace tob {

namespace {

// The im2col buffers of the images processed together stay below this (rank > 2).
constexpr int64_t kMaxColumnBytes = int64_t{32} << 20;
// The tiled 2-D path's column block per thread: about half of a 1 MiB L2, so the block, a panel
// of the weights and the output block stay in cache through the GEMM and the epilogue.
constexpr int64_t kColumnBlockBytes = int64_t{384} << 10;
// Narrower blocks make the GEMM's B panels too short to amortise packing the weights.
constexpr int64_t kMinColumnBlock = 64;
// The transposed tiles' output block (positions x channels, before it is turned into Y's rows)
// stays below this; blocks keep at least kMinTransposedRows positions (8 register tiles of 12),
// so that each panel of the packed weights is used by enough rows.
constexpr int64_t kTransposedBlockBytes = int64_t{512} << 10;
constexpr int64_t kMinTransposedRows = 96;

std::atomic<int64_t> g_packed_tiles{0};
std::atomic<int64_t> g_batch_folds{0};
std::atomic<int64_t> g_implicit_convs{0};
// The implicit-GEMM conv's tasks: blocks of at most this many grid positions (16 register tiles)
// by parts of at most kImplicitPartPanels packed panels (256 channels), so that a task's block of
// the output (positions x channels, at most 192 KiB) and one panel of the weights stay in L2.
constexpr int64_t kImplicitBlockRows = 16 * conv_implicit::kTileRows;
constexpr int64_t kImplicitPartPanels = 8;

// Kernel heights the AVX-512 depthwise rows take (their tap rows are gathered on the stack).
constexpr int64_t kMaxVectorKernelRows = 32;

// Depthwise (C/group == 1): each output channel m reads input channel m / (M/group).
template <typename T>
void DepthwiseConv2D(const T* x, const T* w, const T* bias, T* y, int64_t N, int64_t C, int64_t M,
                     const WindowGeometry& g, ThreadPool* pool) {
  const int64_t H = g.in[0], W = g.in[1], OH = g.out[0], OW = g.out[1];
  const int64_t KH = g.kernel[0], KW = g.kernel[1];
  const int64_t sh = g.strides[0], sw = g.strides[1], dh = g.dilations[0], dw = g.dilations[1];
  const int64_t multiplier = M / C;
  std::vector<int64_t> ow_lo(KW), ow_hi(KW);
  for (int64_t kw = 0; kw < KW; ++kw) ValidOutputRange(kw * dw - g.pad_begin[1], sw, W, OW, &ow_lo[kw], &ow_hi[kw]);
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, OH * OW * KH * KW));
  ParallelFor(pool, N * M, grain, [&](int64_t begin, int64_t end) {
    for (int64_t nm = begin; nm < end; ++nm) {
      const int64_t n = nm / M, m = nm % M;
      const T* plane = x + (n * C + m / multiplier) * H * W;
      const T* filt = w + m * KH * KW;
      T* out = y + nm * OH * OW;
      const T b = bias != nullptr ? bias[m] : T(0);
      if constexpr (std::is_same_v<T, float>) {
        if (sw == 1 && conv_depthwise::avx512::Available()) {
          const float* in_rows[conv_depthwise::avx512::kMaxRows * kMaxVectorKernelRows];
          if (KH <= kMaxVectorKernelRows) {
            for (int64_t oh0 = 0; oh0 < OH; oh0 += conv_depthwise::avx512::kMaxRows) {
              const int rows = static_cast<int>(std::min<int64_t>(conv_depthwise::avx512::kMaxRows, OH - oh0));
              for (int r = 0; r < rows; ++r)
                for (int64_t kh = 0; kh < KH; ++kh) {
                  const int64_t ih = (oh0 + r) * sh - g.pad_begin[0] + kh * dh;
                  in_rows[r * KH + kh] = ih >= 0 && ih < H ? plane + ih * W : nullptr;
                }
              conv_depthwise::avx512::Rows(rows, in_rows, filt, KH, KW, dw, g.pad_begin[1], W, b, out + oh0 * OW, OW);
            }
            continue;
          }
        }
      }
      for (int64_t oh = 0; oh < OH; ++oh) {
        T* row = out + oh * OW;
        std::fill(row, row + OW, b);
        for (int64_t kh = 0; kh < KH; ++kh) {
          const int64_t ih = oh * sh - g.pad_begin[0] + kh * dh;
          if (ih < 0 || ih >= H) continue;
          const T* in_row = plane + ih * W;
          for (int64_t kw = 0; kw < KW; ++kw) {
            const T wv = filt[kh * KW + kw];
            const int64_t off = kw * dw - g.pad_begin[1];
            if (sw == 1) {
              for (int64_t ow = ow_lo[kw]; ow < ow_hi[kw]; ++ow) row[ow] += wv * in_row[ow + off];
            } else {
              for (int64_t ow = ow_lo[kw]; ow < ow_hi[kw]; ++ow) row[ow] += wv * in_row[ow * sw + off];
            }
          }
        }
      }
    }
  });
}

// y[n, m, :] = bias[m] for the images [n0, n1).
template <typename T>
void FillBias(T* y, const T* bias, int64_t n0, int64_t n1, int64_t M, int64_t out_size, ThreadPool* pool) {
  ParallelFor(pool, (n1 - n0) * M, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, out_size)),
              [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) {
                  T* dst = y + (n0 * M + i) * out_size;
                  std::fill(dst, dst + out_size, bias[i % M]);
                }
              });
}

// Per-plane epilogue for the paths that do not tile (depthwise, rank > 2): the bias is already in
// y, act(y + Z) is applied over each (image, channel) plane.
template <typename T>
void PlaneEpilogue(const conv_epilogue::ActivationSpec& act, const T* z, T* y, int64_t planes, int64_t plane_size,
                   ThreadPool* pool) {
  if (act.kind == conv_epilogue::Activation::kNone && z == nullptr) return;
  ParallelFor(pool, planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, plane_size)),
              [&](int64_t begin, int64_t end) {
                conv_epilogue::Apply<T>(act, nullptr, z, y, plane_size, begin, end, 0, plane_size);
              });
}

struct ConvShape {
  int64_t N, C, M, group, Cg, Mg, in_size, out_size, kernel_dim;
};

// 2-D convs by tiles of output columns: each task fills the im2col rows of one block of output
// positions of one (image, group) into its own L2-sized buffer (1x1 stride-1 convs read X in
// place), multiplies by the weights with a single-threaded GEMM, and applies bias, Z and the
// activation to the fresh block. Columns never go to memory and nothing re-reads Y. When the
// column blocks are too few for the threads (small late-stage images), output channels are split
// too, at the cost of filling the same columns once per part.
//
// With `packed` (the float32 weights of each group packed once per session, op(B) = W_g^T), a tile
// computes its block transposed, Y^T = col^T W^T, on the packed panels: the positions are the
// GEMM's rows (so the 49 positions of a 7x7 image fill register tiles instead of 2 panels of 32
// columns, 17 of them empty), the channels its panels. The block lands in a per-slot buffer of
// positions x channels and is turned into Y's rows before the epilogue. Channel parts are then
// whole panels (multiples of 32).
template <typename T>
Status TiledConv2D(const KernelContext& ctx, const T* x, const T* w, const PackedSgemmB* packed, const T* bias,
                   const T* z, T* y, const ConvShape& s, const WindowGeometry& g,
                   const conv_epilogue::ActivationSpec& act) {
  ThreadPool* pool = ctx.thread_pool();
  const bool pointwise = g.IsPointwise();
  const int64_t threads = pool != nullptr ? std::max(1, pool->num_threads()) : 1;
  const bool transposed = packed != nullptr;
  const int64_t m_align = transposed ? kSgemmPanelCols : 16;
  // Columns per block: the block's kernel_dim x width buffer fits about half of a 1 MiB L2.
  const int64_t budget = kColumnBlockBytes / static_cast<int64_t>(sizeof(T));
  int64_t width = std::max<int64_t>(kMinColumnBlock, budget / std::max<int64_t>(1, s.kernel_dim));
  if (transposed) {
    // The positions x channels block stays in L2 too; blocks of even widths (no narrow remainder).
    const int64_t cap = kTransposedBlockBytes / static_cast<int64_t>(sizeof(T)) / std::max<int64_t>(1, s.Mg);
    width = std::max(kMinTransposedRows, std::min(width, cap));
    const int64_t blocks = (s.out_size + width - 1) / width;
    width = (s.out_size + blocks - 1) / blocks;
  }
  if (width < s.out_size) width = std::max<int64_t>(kMinColumnBlock, (width + (transposed ? 15 : 0)) / 16 * 16);
  width = std::min(width, s.out_size);
  const int64_t col_blocks = (s.out_size + width - 1) / width;
  const int64_t units = s.N * s.group * col_blocks;
  int64_t m_parts = 1;
  if (threads > 1 && units < 2 * threads)
    m_parts = std::clamp<int64_t>((2 * threads + units - 1) / units, 1, (s.Mg + m_align - 1) / m_align);
  const int64_t tasks = units * m_parts;
  const int64_t slots = std::min(threads, tasks);
  Tensor scratch, out_blocks;
  // The transposed tiles copy a pointwise conv's block of X into the column buffer too: read in
  // place, its rows are in_size apart and the GEMM's 12-row tiles would walk K pages per step.
  if (!pointwise || transposed) {
    TOB_ASSIGN_OR_RETURN(scratch, ctx.AllocateScratch(DTypeOf<T>(), {slots * s.kernel_dim * width}));
  }
  if (transposed) {
    TOB_ASSIGN_OR_RETURN(out_blocks, ctx.AllocateScratch(DTypeOf<T>(), {slots * width * s.Mg}));
  }
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  Status first_error;
  std::mutex error_mu;
  ParallelFor(pool, slots, 1, [&](int64_t begin, int64_t end) {
    for (int64_t slot = begin; slot < end; ++slot) {
      T* cols = pointwise && !transposed ? nullptr : scratch.data<T>() + slot * s.kernel_dim * width;
      for (int64_t t = next++; t < tasks && !failed; t = next++) {
        // Parts of one column block are neighbours, so a slot that takes both reuses nothing,
        // but the two slots work on the same X rows at the same time.
        const int64_t part = t % m_parts, u = t / m_parts;
        const int64_t cb = u % col_blocks, gi = (u / col_blocks) % s.group, n = u / (col_blocks * s.group);
        const int64_t p0 = cb * width, p1 = std::min(s.out_size, p0 + width), cols_n = p1 - p0;
        const T* xg = x + (n * s.C + gi * s.Cg) * s.in_size;
        const T* b_mat;
        int64_t ldb;
        if (pointwise && !transposed) {
          b_mat = xg + p0;
          ldb = s.in_size;
        } else if (pointwise) {
          for (int64_t c = 0; c < s.Cg; ++c)
            std::memcpy(cols + c * cols_n, xg + c * s.in_size + p0, sizeof(T) * static_cast<size_t>(cols_n));
          b_mat = cols;
          ldb = cols_n;
        } else {
          for (int64_t c = 0; c < s.Cg; ++c)
            conv_columns::Im2Col2DRange(xg + c * s.in_size, g, c, cols, cols_n, p0, p1);
          b_mat = cols;
          ldb = cols_n;
        }
        const int64_t m_lo = std::min(s.Mg, (s.Mg * part / m_parts + m_align - 1) / m_align * m_align);
        const int64_t m_hi = part + 1 == m_parts
                                 ? s.Mg
                                 : std::min(s.Mg, (s.Mg * (part + 1) / m_parts + m_align - 1) / m_align * m_align);
        if (m_hi <= m_lo) continue;
        T* yg = y + (n * s.M + gi * s.Mg) * s.out_size;
        const T* bias_g = bias != nullptr ? bias + gi * s.Mg : nullptr;
        const T* z_g = z != nullptr ? z + (n * s.M + gi * s.Mg) * s.out_size : nullptr;
        if constexpr (std::is_same_v<T, float>) {
          if (transposed) {
            // block[i, j] = Y[m_lo + j, p0 + i]: col^T (op(A) with trans_a; col is K x cols_n) times
            // the packed W^T panels of channels [m_lo, m_hi), stored into Y's rows with the bias, Z
            // and Relu; another activation runs over the rows afterwards.
            const int64_t mw = m_hi - m_lo;
            float* block = out_blocks.data<float>() + slot * width * s.Mg;
            SgemmPackedBColumns(true, cols_n, m_lo, m_hi, 1.f, b_mat, ldb, packed[gi], 0.f, block, mw, nullptr);
            const bool relu = act.kind == conv_epilogue::Activation::kRelu;
            conv_packed::StoreTransposed(block, cols_n, mw, bias_g != nullptr ? bias_g + m_lo : nullptr,
                                         z_g != nullptr ? z_g + m_lo * s.out_size + p0 : nullptr, s.out_size, relu,
                                         yg + m_lo * s.out_size + p0, s.out_size);
            if (!relu && act.kind != conv_epilogue::Activation::kNone)
              conv_epilogue::Apply<T>(act, nullptr, nullptr, yg, s.out_size, m_lo, m_hi, p0, p1);
            g_packed_tiles.fetch_add(1, std::memory_order_relaxed);
            continue;
          }
        }
        Status st = Gemm(false, false, m_hi - m_lo, cols_n, s.kernel_dim, T(1), w + (gi * s.Mg + m_lo) * s.kernel_dim,
                         s.kernel_dim, b_mat, ldb, T(0), yg + m_lo * s.out_size + p0, s.out_size, nullptr);
        if (!st.ok()) {
          std::lock_guard<std::mutex> lock(error_mu);
          if (!failed.exchange(true)) first_error = st;
          continue;
        }
        conv_epilogue::Apply<T>(act, bias_g, z_g, yg, s.out_size, m_lo, m_hi, p0, p1);
      }
    }
  });
  return failed ? first_error : Status::OK();
}

// Implicit-GEMM convs on pre-packed weights (conv_implicit.h): the input of each (image, group)
// is copied once into zero-padded phase planes, on which every tap of the kernel is one offset, and
// register tiles of consecutive grid positions read their col^T rows straight from there: the
// same product as the transposed tiles (Y^T = col^T W^T over the packed W^T panels, each output a
// dot product over kernel_dim in K order), without im2col. A task is one block of grid positions
// of one (image, group) by one part of the channels; its block (positions x channels) goes into
// Y's rows through conv_packed::StoreTransposed with the bias, Z and Relu, one output row at a
// time (the grid's Wq - OW extra columns per row are dropped there).
Status ImplicitConv2D(const KernelContext& ctx, const float* x, const PackedSgemmB* packed, const float* bias,
                      const float* z, float* y, const ConvShape& s, const WindowGeometry& g,
                      const conv_epilogue::ActivationSpec& act) {
  ThreadPool* pool = ctx.thread_pool();
  g_implicit_convs.fetch_add(1, std::memory_order_relaxed);
  const int64_t threads = pool != nullptr ? std::max(1, pool->num_threads()) : 1;
  const conv_implicit::Layout l = conv_implicit::MakeLayout(g, s.Cg);
  const std::vector<int32_t> koff = conv_implicit::KernelOffsets(g, l, s.Cg);
  const int64_t K = s.kernel_dim, OW = g.out[1];
  const int64_t panels = (s.Mg + kSgemmPanelCols - 1) / kSgemmPanelCols;
  // Blocks of whole register tiles over the grid's positions (the last tile may be partial).
  const int64_t blocks = (l.positions + kImplicitBlockRows - 1) / kImplicitBlockRows;
  const int64_t block = ((l.positions + blocks - 1) / blocks + conv_implicit::kTileRows - 1) /
                        conv_implicit::kTileRows * conv_implicit::kTileRows;
  // Images per chunk: their phase planes stay below kMaxColumnBytes.
  const int64_t per_image = s.group * l.floats;
  const int64_t images = std::clamp<int64_t>(kMaxColumnBytes / std::max<int64_t>(1, per_image * 4), 1, s.N);
  int64_t part_panels = std::min(panels, kImplicitPartPanels);
  // Enough tasks for every thread to take a few (a preempted worker then holds back little).
  while (part_panels > 1 && images * s.group * blocks * ((panels + part_panels - 1) / part_panels) < 2 * threads)
    part_panels = (part_panels + 1) / 2;
  const int64_t parts = (panels + part_panels - 1) / part_panels;
  const int64_t part_width = std::min(s.Mg, part_panels * kSgemmPanelCols);
  TOB_ASSIGN_OR_RETURN(Tensor planes, ctx.AllocateScratch(DType::kFloat32, {images * per_image}));
  const bool relu = act.kind == conv_epilogue::Activation::kRelu;
  for (int64_t n0 = 0; n0 < s.N; n0 += images) {
    const int64_t nn = std::min(images, s.N - n0);
    const int64_t tasks = nn * s.group * parts * blocks;
    const int64_t slots = std::min(threads, tasks);
    TOB_ASSIGN_OR_RETURN(Tensor out_blocks, ctx.AllocateScratch(DType::kFloat32, {slots * block * part_width}));
    // The phase planes of every (image, group) in the chunk, by input channels.
    const int64_t channel_grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, l.plane * l.sh * l.sw));
    ParallelFor(pool, nn * s.group * s.Cg, channel_grain, [&](int64_t begin, int64_t end) {
      for (int64_t u = begin; u < end;) {
        const int64_t ig = u / s.Cg, c0 = u % s.Cg, c1 = std::min(s.Cg, c0 + (end - u));
        const int64_t n = n0 + ig / s.group, gi = ig % s.group;
        float* dst = planes.data<float>() + ig * l.floats;
        conv_implicit::FillPhasePlanes(x + (n * s.C + gi * s.Cg) * s.in_size, g, l, c0, c1, dst);
        if (c1 == s.Cg) {
          const int64_t filled = s.Cg * l.sh * l.sw * l.plane;
          std::fill(dst + filled, dst + l.floats, 0.f);
        }
        u += c1 - c0;
      }
    });
    std::atomic<int64_t> next{0};
    ParallelFor(pool, slots, 1, [&](int64_t begin, int64_t end) {
      for (int64_t slot = begin; slot < end; ++slot) {
        float* out = out_blocks.data<float>() + slot * block * part_width;
        for (int64_t t = next++; t < tasks; t = next++) {
          const int64_t rb = t % blocks, part = (t / blocks) % parts, ig = t / (blocks * parts);
          const int64_t n = n0 + ig / s.group, gi = ig % s.group;
          const int64_t q0 = rb * block, q1 = std::min(l.positions, q0 + block);
          if (q0 >= q1) continue;
          const int64_t m_lo = part * part_panels * kSgemmPanelCols, m_hi = std::min(s.Mg, m_lo + part_width);
          const int64_t mw = m_hi - m_lo;
          const float* p = planes.data<float>() + ig * l.floats;
          // Register tiles of even sizes (a last tile of 1 row would be a latency-bound chain).
          const int64_t tiles = (q1 - q0 + conv_implicit::kTileRows - 1) / conv_implicit::kTileRows;
          for (int64_t pi = m_lo / kSgemmPanelCols; pi * kSgemmPanelCols < m_hi; ++pi) {
            const int64_t c0 = pi * kSgemmPanelCols, nw = std::min(kSgemmPanelCols, s.Mg - c0);
            const int width =
                nw > kSgemmPanelCols / 2 ? static_cast<int>(kSgemmPanelCols) : static_cast<int>(kSgemmPanelCols / 2);
            const float* panel = packed[gi].data() + pi * K * kSgemmPanelCols;
            // K blocks of the panel stay in L1 across the block's register tiles.
            for (int64_t k0 = 0; k0 < K; k0 += conv_implicit::kKc) {
              const int64_t kc = std::min(conv_implicit::kKc, K - k0);
              for (int64_t i = 0; i < tiles; ++i) {
                const int64_t a = q0 + (q1 - q0) * i / tiles, e = q0 + (q1 - q0) * (i + 1) / tiles;
                conv_implicit::Tile(static_cast<int>(e - a), width, p + a, koff.data() + k0, kc, panel + k0 * width,
                                    static_cast<int>(nw), out + (a - q0) * mw + (c0 - m_lo), mw, k0 > 0);
              }
            }
          }
          // Output row oh is grid positions [oh * Wq, oh * Wq + OW).
          float* yg = y + (n * s.M + gi * s.Mg + m_lo) * s.out_size;
          const float* zg = z != nullptr ? z + (n * s.M + gi * s.Mg + m_lo) * s.out_size : nullptr;
          const float* bg = bias != nullptr ? bias + gi * s.Mg + m_lo : nullptr;
          int64_t p_lo = -1, p_hi = -1;
          for (int64_t oh = q0 / l.Wq; oh < g.out[0] && oh * l.Wq < q1; ++oh) {
            const int64_t a = std::max(q0, oh * l.Wq), e = std::min(q1, oh * l.Wq + OW);
            if (a >= e) continue;
            const int64_t pos = oh * OW + (a - oh * l.Wq);
            conv_packed::StoreTransposed(out + (a - q0) * mw, e - a, mw, bg, zg != nullptr ? zg + pos : nullptr,
                                         s.out_size, relu, yg + pos, s.out_size);
            if (p_lo < 0) p_lo = pos;
            p_hi = pos + (e - a);
          }
          if (!relu && act.kind != conv_epilogue::Activation::kNone && p_lo >= 0)
            conv_epilogue::Apply<float>(act, nullptr, nullptr, y + (n * s.M + gi * s.Mg) * s.out_size, s.out_size, m_lo,
                                        m_hi, p_lo, p_hi);
        }
      }
    });
  }
  return Status::OK();
}

// Convs whose output images hold only a few positions (the last stages of an image classifier at
// small resolutions: 1x1, 2x2, 4x4 outputs). There each image's product is a matrix-vector-like
// GEMM (N = out_size) that streams the whole weight once per image; here the columns of every image
// sit side by side ([kernel_dim, N * out_size], image-major) and one GEMM per group streams the
// weight once, then each image's block is copied into Y's rows with the bias, Z and activation.
// The arithmetic per output is the same dot product over kernel_dim (one GEMM instead of N).
template <typename T>
Status BatchFoldedConv2D(const KernelContext& ctx, const T* x, const T* w, const T* bias, const T* z, T* y,
                         const ConvShape& s, const WindowGeometry& g, const conv_epilogue::ActivationSpec& act) {
  ThreadPool* pool = ctx.thread_pool();
  g_batch_folds.fetch_add(1, std::memory_order_relaxed);
  const int64_t P = s.out_size, width = s.N * P;
  TOB_ASSIGN_OR_RETURN(Tensor cols, ctx.AllocateScratch(DTypeOf<T>(), {s.kernel_dim * width}));
  TOB_ASSIGN_OR_RETURN(Tensor out, ctx.AllocateScratch(DTypeOf<T>(), {s.Mg * width}));
  for (int64_t gi = 0; gi < s.group; ++gi) {
    ParallelFor(pool, s.N * s.Cg, 1, [&](int64_t begin, int64_t end) {
      for (int64_t u = begin; u < end; ++u) {
        const int64_t n = u / s.Cg, c = u % s.Cg;
        const T* plane = x + (n * s.C + gi * s.Cg + c) * s.in_size;
        conv_columns::Im2Col2D(plane, g, c, cols.data<T>() + n * P, width);
      }
    });
    TOB_RETURN_IF_ERROR(Gemm(false, false, s.Mg, width, s.kernel_dim, T(1), w + gi * s.Mg * s.kernel_dim, s.kernel_dim,
                             cols.data<T>(), width, T(0), out.data<T>(), width, pool));
    const T* o = out.data<T>();
    ParallelFor(pool, s.N, 1, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        T* yg = y + (n * s.M + gi * s.Mg) * P;
        for (int64_t m = 0; m < s.Mg; ++m) std::memcpy(yg + m * P, o + m * width + n * P, sizeof(T) * P);
        conv_epilogue::Apply<T>(act, bias != nullptr ? bias + gi * s.Mg : nullptr,
                                z != nullptr ? z + (n * s.M + gi * s.Mg) * P : nullptr, yg, P, 0, s.Mg, 0, P);
      }
    });
  }
  return Status::OK();
}

// Any spatial rank: im2col of whole images + batched GEMM onto a bias-filled Y.
template <typename T>
Status ColumnConvND(const KernelContext& ctx, const T* x, const T* w, const T* bias, T* y, const ConvShape& s,
                    const WindowGeometry& geometry) {
  ThreadPool* pool = ctx.thread_pool();
  const bool pointwise = geometry.IsPointwise();
  const int64_t col_per_image = pointwise ? 0 : s.group * s.kernel_dim * s.out_size;
  const int64_t images_per_chunk =
      pointwise ? s.N : std::clamp<int64_t>(kMaxColumnBytes / std::max<int64_t>(1, col_per_image * sizeof(T)), 1, s.N);
  Tensor col;
  if (!pointwise) {
    TOB_ASSIGN_OR_RETURN(col, ctx.AllocateScratch(DTypeOf<T>(), {images_per_chunk * col_per_image}));
  }
  std::vector<const T*> a_ptrs, b_ptrs;
  std::vector<T*> c_ptrs;
  for (int64_t n0 = 0; n0 < s.N; n0 += images_per_chunk) {
    const int64_t n1 = std::min(s.N, n0 + images_per_chunk);
    if (!pointwise) {
      T* cols = col.data<T>();
      // One unit per (image, group, input channel) row block of the column buffer.
      ParallelFor(pool, (n1 - n0) * s.group * s.Cg, 1, [&](int64_t begin, int64_t end) {
        for (int64_t u = begin; u < end; ++u) {
          const int64_t ig = u / s.Cg, c = u % s.Cg;
          const int64_t n = n0 + ig / s.group, gi = ig % s.group;
          const T* xg = x + (n * s.C + gi * s.Cg) * s.in_size;
          T* dst = cols + ig * s.kernel_dim * s.out_size;
          if (geometry.rank() == 2) conv_columns::Im2Col2D(xg + c * s.in_size, geometry, c, dst, s.out_size);
          else conv_columns::Im2ColND(xg + c * s.in_size, geometry, c, dst, s.out_size);
        }
      });
    }
    if (bias != nullptr) FillBias(y, bias, n0, n1, s.M, s.out_size, pool);
    a_ptrs.clear();
    b_ptrs.clear();
    c_ptrs.clear();
    for (int64_t n = n0; n < n1; ++n) {
      for (int64_t gi = 0; gi < s.group; ++gi) {
        a_ptrs.push_back(w + gi * s.Mg * s.kernel_dim);
        b_ptrs.push_back(pointwise ? x + (n * s.C + gi * s.Cg) * s.in_size
                                   : col.data<T>() + ((n - n0) * s.group + gi) * s.kernel_dim * s.out_size);
        c_ptrs.push_back(y + (n * s.M + gi * s.Mg) * s.out_size);
      }
    }
    TOB_RETURN_IF_ERROR(BatchedGemm(false, false, s.Mg, s.out_size, s.kernel_dim, T(1), a_ptrs.data(), s.kernel_dim,
                                    b_ptrs.data(), s.out_size, bias != nullptr ? T(1) : T(0), c_ptrs.data(), s.out_size,
                                    static_cast<int64_t>(a_ptrs.size()), pool));
  }
  return Status::OK();
}

// `packed`: the weights of each group packed once per session (float32 only), or nullptr.
template <typename T>
Status ConvTyped(const KernelContext& ctx, const Tensor& X, const Tensor& Wt, const PackedSgemmB* packed,
                 const Tensor* B, const Tensor* Z, Tensor& Y, const WindowGeometry& geometry, int64_t group,
                 const conv_epilogue::ActivationSpec& act) {
  ConvShape s;
  s.N = X.dim(0);
  s.C = X.dim(1);
  s.M = Wt.dim(0);
  s.group = group;
  s.Cg = s.C / group;
  s.Mg = s.M / group;
  s.in_size = geometry.in_size();
  s.out_size = geometry.out_size();
  s.kernel_dim = s.Cg * geometry.kernel_size();
  const T* x = X.data<T>();
  const T* w = Wt.data<T>();
  const T* bias = B != nullptr ? B->data<T>() : nullptr;
  const T* z = Z != nullptr ? Z->data<T>() : nullptr;
  T* y = Y.data<T>();
  ThreadPool* pool = ctx.thread_pool();
  if (Y.numel() == 0) return Status::OK();

  if (s.Cg == 1 && group > 1 && geometry.rank() <= 2) {
    DepthwiseConv2D(x, w, bias, y, s.N, s.C, s.M, geometry.As2D(), pool);
    PlaneEpilogue(act, z, y, s.N * s.M, s.out_size, pool);
    return Status::OK();
  }
  // TOB_CONV_TILED=0 takes the whole-image column path for 2-D convs too: the A/B switch behind
  // the figures in docs/performance.md.
  if (geometry.rank() <= 2 && conv_packed::BatchFoldWins(s.N, s.out_size, packed != nullptr))
    return BatchFoldedConv2D(ctx, x, w, bias, z, y, s, geometry.As2D(), act);
  if (geometry.rank() <= 2 && conv_packed::TiledEnabled()) {
    const bool transposed = packed != nullptr && conv_packed::TransposedWins(s.Mg, s.kernel_dim, geometry.kernel_size(),
                                                                             geometry.IsPointwise());
    if constexpr (std::is_same_v<T, float>) {
      if (transposed) {
        const WindowGeometry g2 = geometry.As2D();
        if (conv_packed::ImplicitWins(g2, s.Cg)) return ImplicitConv2D(ctx, x, packed, bias, z, y, s, g2, act);
      }
    }
    return TiledConv2D(ctx, x, w, transposed ? packed : nullptr, bias, z, y, s, geometry.As2D(), act);
  }
  TOB_RETURN_IF_ERROR(ColumnConvND(ctx, x, w, bias, y, s, geometry.rank() <= 2 ? geometry.As2D() : geometry));
  PlaneEpilogue(act, z, y, s.N * s.M, s.out_size, pool);
  return Status::OK();
}

class ConvKernel final : public OpKernel {
 public:
  ConvKernel(const Node& node, WindowAttributes attrs, conv_epilogue::ActivationSpec act)
      : OpKernel(node), attrs_(std::move(attrs)), act_(act) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(node));
    TOB_ASSIGN_OR_RETURN(conv_epilogue::ActivationSpec act, conv_epilogue::ReadActivation(node));
    return MakeKernel<ConvKernel>(node, std::move(attrs), act);
  }

  // A float32 constant W of a 1-D or 2-D conv that is not depthwise: op(B) = W_g^T of each group,
  // [kernel_dim, Mg], packed once for the transposed tiles (TiledConv2D).
  Status PrePack(int input_index, const Tensor& constant, bool* packed) override {
    *packed = false;
    if (input_index != 1 || constant.dtype() != DType::kFloat32 || !SgemmAvailable() || !conv_packed::TiledEnabled())
      return Status::OK();
    const int64_t group = attrs_.group;
    if ((constant.rank() != 3 && constant.rank() != 4) || group < 1 || constant.dim(0) % group != 0)
      return Status::OK();
    const int64_t Mg = constant.dim(0) / group;
    const int64_t kernel_dim = constant.numel() / std::max<int64_t>(1, constant.dim(0));
    if (Mg == 0 || kernel_dim == 0 || (constant.dim(1) == 1 && group > 1)) return Status::OK();  // depthwise
    // Shapes that keep the per-call GEMM (TransposedWins) need no packed copy.
    const int64_t kernel_size = kernel_dim / constant.dim(1);
    const auto ones = [](const std::vector<int64_t>& v, int64_t value) {
      return std::all_of(v.begin(), v.end(), [&](int64_t e) { return e == value; });
    };
    if (!conv_packed::TransposedWins(Mg, kernel_dim, kernel_size,
                                     kernel_size == 1 && ones(attrs_.strides, 1) && ones(attrs_.pads, 0)))
      return Status::OK();
    const float* w = constant.data<float>();
    for (int64_t gi = 0; gi < group; ++gi)
      packed_w_.push_back(PackedSgemmB::Pack(true, Mg, kernel_dim, w + gi * Mg * kernel_dim, kernel_dim, nullptr));
    packed_shape_ = constant.shape();
    *packed = true;
    return Status::OK();
  }
  size_t PrePackedBytes() const override {
    size_t bytes = 0;
    for (const PackedSgemmB& p : packed_w_) bytes += p.bytes();
    return bytes;
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& w = *ctx.input(1);
    const Tensor* b = ctx.input(2);
    const Tensor* z = ctx.input(3);  // FusedConv's Z, added before the activation
    Tensor& y = *ctx.output(0);
    const int64_t group = attrs_.group;
    if (x.rank() < 3 || w.rank() != x.rank())
      return ctx.Fail("expected X [N, C, D1, ...] and W of the same rank, got ", ShapeToString(x.shape()), " and ",
                      ShapeToString(w.shape()));
    if (x.dim(1) != w.dim(1) * group || w.dim(0) % group != 0)
      return ctx.Fail("X has ", x.dim(1), " channels; W ", ShapeToString(w.shape()), " with group ", group, " expects ",
                      w.dim(1) * group);
    if (b != nullptr && (b->rank() != 1 || b->dim(0) != w.dim(0)))
      return ctx.Fail("bias must be 1-D with ", w.dim(0), " values, got ", ShapeToString(b->shape()));
    std::vector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
    auto geometry = WindowGeometry::Compute(node(), attrs_, x.shape(), kernel, false);
    if (!geometry.ok()) return geometry.status();
    Shape expected{x.dim(0), w.dim(0)};
    expected.insert(expected.end(), geometry.value().out.begin(), geometry.value().out.end());
    if (y.shape() != expected)
      return ctx.Fail("output shape ", ShapeToString(y.shape()), " differs from ", ShapeToString(expected));
    if (z != nullptr && (z->shape() != expected || z->dtype() != x.dtype()))
      return ctx.Fail("Z must be ", DTypeName(x.dtype()), " of the output shape ", ShapeToString(expected), ", got ",
                      DTypeName(z->dtype()), " ", ShapeToString(z->shape()));
    return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
      if constexpr (kIs16BitFloat<T>) {
        TOB_ASSIGN_OR_RETURN(Tensor xf, ToFloatScratch(ctx, x));
        TOB_ASSIGN_OR_RETURN(Tensor wf, ToFloatScratch(ctx, w));
        Tensor bf;
        if (b != nullptr) {
          TOB_ASSIGN_OR_RETURN(bf, ToFloatScratch(ctx, *b));
        }
        Tensor zf;
        if (z != nullptr) {
          TOB_ASSIGN_OR_RETURN(zf, ToFloatScratch(ctx, *z));
        }
        TOB_ASSIGN_OR_RETURN(Tensor yf, ctx.AllocateScratch(DType::kFloat32, y.shape()));
        TOB_RETURN_IF_ERROR(ConvTyped<float>(ctx, xf, wf, nullptr, b ? &bf : nullptr, z ? &zf : nullptr, yf,
                                             geometry.value(), group, act_));
        return FromFloatScratch(ctx, yf, &y);
      } else {
        // The packed weights are the constant's (its shape was checked when packing).
        const PackedSgemmB* packed =
            std::is_same_v<T, float> && !packed_w_.empty() && w.shape() == packed_shape_ ? packed_w_.data() : nullptr;
        return ConvTyped<T>(ctx, x, w, packed, b, z, y, geometry.value(), group, act_);
      }
    });
  }

 private:
  WindowAttributes attrs_;
  conv_epilogue::ActivationSpec act_;
  std::vector<PackedSgemmB> packed_w_;  // one per group, set once by PrePack, read-only afterwards
  Shape packed_shape_;
};

}  // namespace

namespace conv_packed {

bool TiledEnabled() {
  // TOB_CONV_TILED=0 takes the whole-image column path for 2-D convs too: the A/B switch behind
  // the figures in docs/performance.md.
  static const bool tiled = EnvSwitchOn(EnvSwitch::kConvTiled);
  return tiled;
}

bool TransposedWins(int64_t Mg, int64_t kernel_dim, int64_t kernel_size, bool pointwise) {
  // TOB_CONV_PACKED=0 packs nothing and keeps every conv on the per-call GEMM (the path before
  // pre-packing), =1 packs every float32 constant W and sends its conv to the transposed tiles: the
  // A/B switches of docs/performance.md.
  static const int mode = [] {
    const std::string value = EnvSwitchValue(EnvSwitch::kConvPacked);
    return value.empty() ? -1 : value == "1" ? 1 : 0;
  }();
  if (mode >= 0) return mode == 1;
  // Measured per ResNet-50 conv shape (docs/performance.md, "Convolution"): the transposed tiles
  // win or tie on every conv but 1x1 ones with a stride (a strided gather either way; the
  // per-call GEMM's wider position blocks measured 5-20% faster) and pointwise ones with few input
  // channels and many output channels (64 -> 256, 128 -> 512: the GEMM's K is too short to hide
  // turning the positions x channels block around, 10-15% slower).
  if (kernel_size != 1) return true;
  return pointwise && !(kernel_dim <= 128 && Mg >= 256);
}

bool BatchFoldWins(int64_t images, int64_t out_size, bool packed_weights) {
  // TOB_CONV_BATCH_FOLD=0 keeps every conv on the per-image paths, =1 folds whenever there are two
  // images or more, pre-packed weights too (the A/B switches of docs/performance.md, "Convolution").
  static const int mode = [] {
    const std::string value = EnvSwitchValue(EnvSwitch::kConvBatchFold);
    return value.empty() ? -1 : value == "1" ? 1 : 0;
  }();
  if (images < 2 || mode == 0) return false;
  return mode == 1 || (!packed_weights && out_size <= kMaxFoldedPositions);
}

int64_t BatchFoldsRun() { return g_batch_folds.load(std::memory_order_relaxed); }

bool ImplicitWins(const WindowGeometry& g, int64_t channels) {
  // TOB_CONV_IMPLICIT=0 keeps every conv on the tiles of im2col columns, =1 sends every conv with
  // packed weights here: the A/B switch of docs/performance.md. Read on every call (a getenv per
  // conv node), so that a benchmark can alternate the two paths on one session in one process.
  const std::string mode = EnvSwitchValue(EnvSwitch::kConvImplicit);
  if (mode == "0" || g.rank() != 2) return false;
  const conv_implicit::Layout l = conv_implicit::MakeLayout(g, channels);
  // Tap offsets are int32.
  if (l.floats > int64_t{1} << 30) return false;
  if (mode == "1") return true;
  // Measured per ResNet-50 shape (docs/performance.md, "Convolution"): every conv with a kernel
  // larger than 1x1 (pointwise ones measured 5-25% slower than the tiles, which then read X in
  // place of a copy), unless the grid's extra columns add more than half of the output positions
  // (ResNet's worst, 3x3 pad 1 on 7x7, adds 24% and still gains).
  if (g.kernel_size() == 1) return false;
  return l.positions * 2 <= g.out_size() * 3;
}

int64_t ImplicitConvsRun() { return g_implicit_convs.load(std::memory_order_relaxed); }

int64_t PackedTilesRun() { return g_packed_tiles.load(std::memory_order_relaxed); }

}  // namespace conv_packed

void RegisterCpuConvKernels(KernelRegistry& registry) {
  registry.Register(Def("Conv").Versions(1).Constraint("T", {0, 1, 2}, FloatTypes()).Kernel<ConvKernel>());
  registry.Register(Def("FusedConv")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T", {0, 1, 2, 3}, FloatTypes())
                        .Kernel<ConvKernel>());
}

}  // namespace tob
