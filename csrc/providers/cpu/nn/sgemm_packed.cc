#include "providers/cpu/nn/sgemm_packed.h"

#include <algorithm>
#include <atomic>
#include <new>
#include <string>
#include <vector>

#include "core/env_switch.h"
#include "providers/cpu/nn/small_gemm.h"
#include "providers/cpu/nn/small_gemm_isa.h"

namespace tob {

namespace {

using small_gemm::Kernels;

// A panel is 2 zmm of columns; the last one is 1 zmm wide when 16 columns or fewer are left (the
// tile reads rows of `vectors * 16` floats). Every panel is given room for 32 columns per row.
constexpr int64_t kPanelCols = kSgemmPanelCols;
constexpr int64_t kVectorCols = 16;
// K block: 256 rows of a panel (32 KiB) stay in L1 while the row tiles of a block of A run over
// them; a block of A (up to kBlockRows x 256 floats = 192 KiB) stays in L2 across the panels of
// one work unit.
constexpr int64_t kKc = 256;
constexpr int64_t kBlockRows = 192;  // 16 tiles of 12 rows
constexpr int64_t kPanelsPerUnit = 8;
// The smallest problem worth waking the pool for (as small_gemm.cc).
constexpr double kMinParallelFlops = 2.0 * 64 * 64 * 128;

std::atomic<int64_t> g_packs_made{0};

int64_t NumPanels(int64_t N) { return (N + kPanelCols - 1) / kPanelCols; }

float* AllocateFloats(size_t count, size_t* bytes) {
  *bytes = (count * sizeof(float) + 63) / 64 * 64;
  if (*bytes == 0) return nullptr;
  void* p = std::aligned_alloc(64, *bytes);
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<float*>(p);
}

// Panels [p_begin, p_end) of op(B) into dst, panel p at dst + p * K * kPanelCols.
void PackPanels(bool trans_b, int64_t N, int64_t K, const float* B, int64_t ldb, int64_t p_begin, int64_t p_end,
                float* dst) {
  for (int64_t p = p_begin; p < p_end; ++p) {
    const int64_t n0 = p * kPanelCols, nw = std::min(kPanelCols, N - n0);
    const int64_t width = nw > kVectorCols ? kPanelCols : kVectorCols;
    small_gemm::PackPanel(trans_b, B, ldb, 0, K, n0, nw, width, dst + p * K * kPanelCols);
  }
}

void ScaleC(int64_t M, int64_t N, float beta, float* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m) {
    float* row = C + m * ldc;
    if (beta == 0.f) std::fill(row, row + N, 0.f);
    else
      for (int64_t n = 0; n < N; ++n) row[n] *= beta;
  }
}

// `batch` problems over packed panels: problem i reads a[i], panels[i] and writes c[i].
struct Problems {
  bool trans_a;
  int64_t M, N, K;
  float alpha;
  const float* const* a;
  int64_t lda;
  const float* const* panels;
  float beta;
  float* const* c;
  int64_t ldc;
  int64_t batch;
};

// Splits the problems into work units of (problem, block of rows, group of panels) and runs them
// on the pool. Units start at up to kBlockRows x kPanelsPerUnit panels and shrink (panels first,
// then rows) until each thread has about 4, so that a slow thread leaves little behind.
void RunPanels(const Problems& p, ThreadPool* pool) {
  const Kernels& ks = small_gemm::avx512::Get();
  const int64_t panels = NumPanels(p.N);
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  const double flops = 2.0 * static_cast<double>(p.M) * p.N * p.K * p.batch;
  const bool parallel = threads > 1 && flops >= kMinParallelFlops;

  int64_t block_rows = kBlockRows, group = kPanelsPerUnit;
  auto units_of = [&](int64_t rows, int64_t g) { return p.batch * ((p.M + rows - 1) / rows) * ((panels + g - 1) / g); };
  while (parallel && units_of(block_rows, group) < 4 * threads) {
    if (group > 1) group /= 2;
    else if (block_rows > ks.max_rows) block_rows = std::max<int64_t>(ks.max_rows, block_rows / 2);
    else break;
  }
  const int64_t row_blocks = (p.M + block_rows - 1) / block_rows;
  const int64_t groups = (panels + group - 1) / group;

  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t i = u / (row_blocks * groups), r = u / groups % row_blocks, g = u % groups;
      const int64_t m_begin = p.M * r / row_blocks, m_end = p.M * (r + 1) / row_blocks;
      const int64_t tiles = (m_end - m_begin + ks.max_rows - 1) / ks.max_rows;
      const int64_t p_end = std::min(panels, (g + 1) * group);
      const float* A = p.a[i];
      float* C = p.c[i];
      for (int64_t k0 = 0; k0 < p.K; k0 += kKc) {
        const int64_t kc = std::min(kKc, p.K - k0);
        const float beta = k0 == 0 ? p.beta : 1.f;  // later K blocks add to what the first wrote
        for (int64_t q = g * group; q < p_end; ++q) {
          const int64_t n0 = q * kPanelCols, nw = std::min(kPanelCols, p.N - n0);
          const int vectors = nw > kVectorCols ? 2 : 1;
          const float* panel = p.panels[i] + q * p.K * kPanelCols + k0 * vectors * kVectorCols;
          for (int64_t t = 0; t < tiles; ++t) {
            const int64_t lo = m_begin + (m_end - m_begin) * t / tiles;
            const int64_t hi = m_begin + (m_end - m_begin) * (t + 1) / tiles;
            const float* a = p.trans_a ? A + k0 * p.lda + lo : A + lo * p.lda + k0;
            ks.tile(static_cast<int>(hi - lo), vectors, p.trans_a, a, p.lda, panel, kc, C + lo * p.ldc + n0, p.ldc, nw,
                    p.alpha, beta);
          }
        }
      }
    }
  };
  const int64_t units = p.batch * row_blocks * groups;
  if (!parallel || units == 1) run(0, units);
  else ParallelFor(pool, units, 1, run);
}

}  // namespace

bool SgemmAvailable() {
  static const bool available = [] { return EnvSwitchOn(EnvSwitch::kSgemm) && small_gemm::avx512::Available(); }();
  return available;
}

PackedSgemmB PackedSgemmB::Pack(bool trans_b, int64_t N, int64_t K, const float* B, int64_t ldb, ThreadPool* pool) {
  PackedSgemmB packed;
  packed.N_ = N;
  packed.K_ = K;
  const int64_t panels = NumPanels(N);
  packed.data_.reset(AllocateFloats(static_cast<size_t>(panels * K * kPanelCols), &packed.bytes_));
  if (packed.bytes_ > 0) {
    float* dst = packed.data_.get();
    ParallelFor(pool, panels, 1, [&](int64_t b, int64_t e) { PackPanels(trans_b, N, K, B, ldb, b, e, dst); });
  }
  g_packs_made.fetch_add(1, std::memory_order_relaxed);
  return packed;
}

int64_t PackedSgemmB::packs_made() { return g_packs_made.load(std::memory_order_relaxed); }

void SgemmPackedB(bool trans_a, int64_t M, float alpha, const float* A, int64_t lda, const PackedSgemmB& b, float beta,
                  float* C, int64_t ldc, ThreadPool* pool) {
  if (M == 0 || b.N() == 0) return;
  if (b.K() == 0) {
    ScaleC(M, b.N(), beta, C, ldc);
    return;
  }
  const float* panels = b.data();
  RunPanels(Problems{trans_a, M, b.N(), b.K(), alpha, &A, lda, &panels, beta, &C, ldc, 1}, pool);
}

void SgemmPackedBColumns(bool trans_a, int64_t M, int64_t n_begin, int64_t n_end, float alpha, const float* A,
                         int64_t lda, const PackedSgemmB& b, float beta, float* C, int64_t ldc, ThreadPool* pool) {
  const int64_t N = n_end - n_begin;
  if (M == 0 || N <= 0) return;
  if (b.K() == 0) {
    ScaleC(M, N, beta, C, ldc);
    return;
  }
  const float* panels = b.data() + n_begin / kPanelCols * b.K() * kPanelCols;
  RunPanels(Problems{trans_a, M, N, b.K(), alpha, &A, lda, &panels, beta, &C, ldc, 1}, pool);
}

void Sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* const* a, int64_t lda,
           const float* const* b, int64_t ldb, float beta, float* const* c, int64_t ldc, int64_t batch,
           ThreadPool* pool) {
  // A B broadcast over consecutive problems (MatMul's batch of A against one B) is packed once.
  std::vector<int64_t> slot(batch);
  std::vector<int64_t> distinct;
  for (int64_t i = 0; i < batch; ++i) {
    if (i == 0 || b[i] != b[i - 1]) distinct.push_back(i);
    slot[i] = static_cast<int64_t>(distinct.size()) - 1;
  }
  const int64_t panels = NumPanels(N);
  const int64_t per_problem = panels * K * kPanelCols;
  size_t bytes = 0;
  std::unique_ptr<float, void (*)(void*)> buffer(
      AllocateFloats(static_cast<size_t>(per_problem * static_cast<int64_t>(distinct.size())), &bytes), std::free);
  const int64_t pack_units = static_cast<int64_t>(distinct.size()) * panels;
  auto pack = [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t d = u / panels, q = u % panels;
      PackPanels(trans_b, N, K, b[distinct[d]], ldb, q, q + 1, buffer.get() + d * per_problem);
    }
  };
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  if (threads > 1 && pack_units > 1 && 2.0 * M * N * K * batch >= kMinParallelFlops)
    ParallelFor(pool, pack_units, 1, pack);
  else pack(0, pack_units);
  std::vector<const float*> packed(batch);
  for (int64_t i = 0; i < batch; ++i) packed[i] = buffer.get() + slot[i] * per_problem;
  RunPanels(Problems{trans_a, M, N, K, alpha, a, lda, packed.data(), beta, c, ldc, batch}, pool);
}

}  // namespace tob
