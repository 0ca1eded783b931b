// MaxPool (with Indices), AveragePool and the global pools against float64 references written as
// naive loops here (RefPool follows torch's NaN rule for max pooling). LpPool is in
// nn_hardmax_lppool_col2im_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "op_tester.h"
#include "tensor_test_util.h"
#include "window_test_util.h"

namespace tob {
namespace {

using testing::OpTester;
using testing::RandomTensor;
using testing::ToDoubles;

using tensor_test::NextIndex;
using window_test::SetWindowAttrs;
using window_test::Window;

Attribute Ints(std::vector<int64_t> v) { return Attribute::Ints(std::move(v)); }

enum class Pool { kMax, kAvg };

struct PoolRef {
  Shape shape;
  std::vector<double> y;
  std::vector<double> indices;
};

PoolRef RefPool(const Tensor& x, const Window& win, bool ceil_mode, Pool kind, bool count_include_pad,
                bool column_major) {
  const Shape& xs = x.shape();
  const size_t r = xs.size() - 2;
  Shape in(xs.begin() + 2, xs.end()), out(r);
  for (size_t d = 0; d < r; ++d) {
    const int64_t span = in[d] + win.pb(d) + win.pe(d) - ((win.kernel[d] - 1) * win.dil(d) + 1);
    out[d] = ceil_mode ? (span + win.s(d) - 1) / win.s(d) + 1 : span / win.s(d) + 1;
    if (ceil_mode && (out[d] - 1) * win.s(d) >= in[d] + win.pb(d)) --out[d];
  }
  PoolRef ref;
  ref.shape = {xs[0], xs[1]};
  ref.shape.insert(ref.shape.end(), out.begin(), out.end());
  std::vector<double> xv = ToDoubles(x);
  const int64_t planes = xs[0] * xs[1], in_size = NumElements(in);
  Shape k(win.kernel.begin(), win.kernel.end());
  for (int64_t p = 0; p < planes; ++p) {
    std::vector<int64_t> o(r, 0);
    do {
      double best = -std::numeric_limits<double>::infinity(), sum = 0;
      int64_t best_index = -1, count = 0, padded = 0;
      std::vector<int64_t> kk(r, 0);
      do {
        std::vector<int64_t> pos(r);
        bool inside = true, in_padded = true;
        for (size_t d = 0; d < r; ++d) {
          pos[d] = o[d] * win.s(d) - win.pb(d) + kk[d] * win.dil(d);
          inside = inside && pos[d] >= 0 && pos[d] < in[d];
          in_padded = in_padded && pos[d] >= -win.pb(d) && pos[d] < in[d] + win.pe(d);
        }
        padded += in_padded;
        if (!inside) continue;
        const double v = xv[p * in_size + tensor_test::Ravel(pos, in)];
        ++count;
        sum += v;
        if (v > best || std::isnan(v)) {  // torch: a NaN tap wins, the last NaN's index
          best = v;
          int64_t flat = 0;
          if (column_major) {
            for (int64_t d = static_cast<int64_t>(r) - 1; d >= 0; --d) flat = flat * in[d] + pos[d];
          } else {
            flat = tensor_test::Ravel(pos, in);
          }
          best_index = p * in_size + flat;
        }
      } while (NextIndex(kk, k));
      ref.y.push_back(kind == Pool::kMax ? best : sum / (count_include_pad ? padded : count));
      ref.indices.push_back(static_cast<double>(best_index));
    } while (NextIndex(o, out));
  }
  return ref;
}

// Sets about one element in `every` to NaN, at pseudo-random places (a fixed LCG).
template <typename T>
void SprinkleNaN(Tensor& x, int64_t every, uint32_t seed = 7) {
  T* p = x.data<T>();
  uint32_t state = seed;
  for (int64_t i = 0; i < x.numel(); ++i) {
    state = state * 1664525u + 1013904223u;
    if ((state >> 8) % static_cast<uint32_t>(every) == 0)
      p[i] = static_cast<T>(std::numeric_limits<float>::quiet_NaN());
  }
}

// `nan_every` > 0: about one input in nan_every is NaN (float types).
template <typename T = float>
void RunPool(Pool kind, const Shape& x_shape, const Window& win, bool ceil_mode, bool count_include_pad = false,
             bool with_indices = false, int64_t storage_order = 0, double tol = 1e-5, int64_t nan_every = 0) {
  const double lo = std::is_same_v<T, uint8_t> ? 0 : std::is_same_v<T, int8_t> ? -100 : -3;
  const double hi = std::is_same_v<T, uint8_t> ? 250 : std::is_same_v<T, int8_t> ? 100 : 3;
  Tensor x = RandomTensor<T>(x_shape, lo, hi, 31);
  if constexpr (!std::is_integral_v<T>) {
    if (nan_every > 0) SprinkleNaN<T>(x, nan_every);
  }
  PoolRef ref = RefPool(x, win, ceil_mode, kind, count_include_pad, storage_order == 1);
  OpTester t(kind == Pool::kMax ? "MaxPool" : "AveragePool", kind == Pool::kMax ? 12 : 19);
  SetWindowAttrs(t, win, true);
  if (ceil_mode) t.Attr("ceil_mode", Attribute::Int(1));
  if (count_include_pad) t.Attr("count_include_pad", Attribute::Int(1));
  if (storage_order) t.Attr("storage_order", Attribute::Int(storage_order));
  t.Input("X", x).Output("Y", ref.shape, ref.y, tol, tol);
  if (with_indices) t.Output("Indices", ref.shape, ref.indices, 0, 0);
  t.Run();
}

TEST(NnMaxPool, PadsStridesDilationsCeilMode) {
  RunPool(Pool::kMax, {2, 3, 8, 9}, {{3, 3}, {2, 2}, {}, {1, 1, 1, 1}}, false);
  RunPool(Pool::kMax, {1, 2, 9, 10}, {{3, 2}, {2, 3}, {2, 1}, {1, 0, 1, 1}}, true);
  RunPool(Pool::kMax, {1, 2, 5, 5}, {{2, 2}, {2, 2}, {}, {}}, true);  // ceil adds a partial window
  RunPool(Pool::kMax, {2, 2, 17}, {{4}, {3}, {}, {2, 1}}, true);      // 1-D
  // Wide rows: the vectorised stride-2 path and its tail, with even and odd widths.
  RunPool(Pool::kMax, {1, 2, 5, 41}, {{3, 3}, {2, 2}, {}, {1, 1, 1, 1}}, true);
  RunPool(Pool::kMax, {1, 2, 4, 64}, {{2, 2}, {2, 2}, {}, {}}, false);
  RunPool(Pool::kMax, {1, 1, 3, 70}, {{1, 3}, {1, 2}, {1, 2}, {0, 0, 0, 1}}, false);
  RunPool(Pool::kMax, {1, 2, 5, 6, 4}, {{2, 3, 2}, {2, 2, 1}, {}, {1, 1, 0, 0, 1, 1}}, false);  // 3-D
}

TEST(NnMaxPool, IndicesRowAndColumnMajor) {
  RunPool(Pool::kMax, {2, 3, 7, 6}, {{3, 3}, {2, 2}, {}, {1, 1, 1, 1}}, false, false, true, 0);
  RunPool(Pool::kMax, {2, 3, 7, 6}, {{3, 2}, {2, 1}, {}, {}}, false, false, true, 1);
  RunPool(Pool::kMax, {1, 2, 4, 5, 3}, {{2, 2, 2}, {1, 2, 1}, {}, {}}, false, false, true, 0);
}

TEST(NnMaxPool, Int8AndHalf) {
  RunPool<int8_t>(Pool::kMax, {1, 2, 6, 6}, {{2, 2}, {2, 2}, {}, {}}, false);
  RunPool<uint8_t>(Pool::kMax, {1, 2, 6, 6}, {{3, 3}, {1, 1}, {}, {1, 1, 1, 1}}, false);
  RunPool<Float16>(Pool::kMax, {1, 2, 6, 6}, {{3, 3}, {2, 2}, {}, {1, 1, 1, 1}}, true, false, false, 0, 1e-3);
}

TEST(NnMaxPool, AutoPadSameUpper) {
  // in 7, kernel 3, stride 2 -> out 4, total pad 2 -> 1/1.
  Tensor x = RandomTensor<float>({1, 2, 7, 7}, -3, 3, 5);
  PoolRef ref = RefPool(x, {{3, 3}, {2, 2}, {}, {1, 1, 1, 1}}, false, Pool::kMax, false, false);
  OpTester("MaxPool", 12)
      .Attr("kernel_shape", Ints({3, 3}))
      .Attr("strides", Ints({2, 2}))
      .Attr("auto_pad", Attribute::String("SAME_UPPER"))
      .Input("X", x)
      .Output("Y", ref.shape, ref.y)
      .Run();
}

TEST(NnAveragePool, CountIncludePadAndCeilMode) {
  RunPool(Pool::kAvg, {2, 3, 8, 9}, {{3, 3}, {2, 2}, {}, {1, 1, 1, 1}}, false, false);
  RunPool(Pool::kAvg, {2, 3, 8, 9}, {{3, 3}, {2, 2}, {}, {1, 1, 1, 1}}, false, true);
  RunPool(Pool::kAvg, {1, 2, 7, 7}, {{3, 3}, {2, 2}, {}, {1, 1, 1, 1}}, true, true);  // ceil window past the pad
  RunPool(Pool::kAvg, {1, 2, 7, 8}, {{2, 3}, {3, 2}, {2, 1}, {0, 1, 1, 0}}, true, false);
  RunPool(Pool::kAvg, {2, 2, 15}, {{4}, {2}, {}, {1, 2}}, false, true);
  RunPool(Pool::kAvg, {1, 2, 6, 53}, {{3, 3}, {2, 2}, {}, {1, 1, 1, 1}}, true, false);
  RunPool(Pool::kAvg, {1, 2, 6, 40}, {{3, 3}, {1, 1}, {}, {1, 1, 1, 1}}, false, true);
  RunPool(Pool::kAvg, {1, 1, 4, 5, 6}, {{2, 2, 3}, {2, 1, 2}, {}, {1, 0, 1, 0, 1, 1}}, false, true);
  RunPool<double>(Pool::kAvg, {1, 2, 6, 6}, {{2, 2}, {2, 2}, {}, {}}, false, false, false, 0, 1e-12);
}

// A window that is the whole unpadded input (ResNet's final 7x7 AveragePool): one reduction per
// plane (pool.cc's global-window path), against the float64 reference; strides and ceil_mode do
// not change its single output; Max with Indices keeps the tap loop; 16-bit and 1-D/3-D inputs.
TEST(NnPool, WholePlaneWindow) {
  RunPool(Pool::kAvg, {1, 2048, 7, 7}, {{7, 7}, {1, 1}, {}, {}}, false, false, false, 0, 1e-5);
  RunPool(Pool::kAvg, {3, 5, 9, 11}, {{9, 11}, {2, 3}, {}, {}}, true, true);
  RunPool(Pool::kMax, {2, 6, 13, 10}, {{13, 10}, {1, 1}, {}, {}}, false);
  RunPool(Pool::kMax, {2, 3, 6, 5}, {{6, 5}, {1, 1}, {}, {}}, false, false, true);  // with Indices
  RunPool(Pool::kAvg, {2, 4, 37}, {{37}, {1}, {}, {}}, false);
  RunPool(Pool::kMax, {1, 3, 4, 5, 6}, {{4, 5, 6}, {1, 1, 1}, {}, {}}, false);
  RunPool<double>(Pool::kAvg, {1, 3, 5, 5}, {{5, 5}, {1, 1}, {}, {}}, false, false, false, 0, 1e-12);
  RunPool<Float16>(Pool::kAvg, {1, 3, 4, 4}, {{4, 4}, {1, 1}, {}, {}}, false, false, false, 0, 2e-3);
  RunPool<int8_t>(Pool::kMax, {1, 2, 5, 5}, {{5, 5}, {1, 1}, {}, {}}, false);
  // Pads or a dilation make it an ordinary window (the tap loop).
  RunPool(Pool::kAvg, {1, 2, 7, 7}, {{7, 7}, {1, 1}, {}, {1, 1, 1, 1}}, false, true);
}

// The interior of MaxPool's 2-D rows goes eight outputs at a time (stride 1 or 2, float), the
// border and other strides one at a time: both, and the overlapping last block, against the float64
// reference over widths around the block size, pads, dilations and ceil_mode.
TEST(NnMaxPool, VectorBlocksAndBorders) {
  RunPool(Pool::kMax, {1, 3, 7, 112}, {{3, 3}, {2, 2}, {}, {1, 1, 1, 1}}, false);  // ResNet's stem pool
  for (int64_t w : {8, 15, 16, 17, 18, 19, 23, 24, 33}) {
    RunPool(Pool::kMax, {1, 2, 5, w}, {{3, 3}, {2, 2}, {}, {1, 1, 1, 1}}, false);
    RunPool(Pool::kMax, {1, 2, 5, w}, {{3, 3}, {1, 1}, {}, {1, 1, 1, 1}}, true);
    RunPool(Pool::kMax, {1, 2, 4, w}, {{2, 2}, {2, 2}, {}, {}}, true);
    RunPool(Pool::kMax, {1, 1, 6, w}, {{2, 4}, {1, 2}, {1, 2}, {0, 2, 1, 1}}, true);   // dilated taps, stride 2
    RunPool(Pool::kMax, {1, 1, 6, w}, {{3, 3}, {2, 1}, {2, 2}, {2, 2, 1, 2}}, false);  // dilated taps, stride 1
    RunPool(Pool::kMax, {1, 1, 5, w}, {{2, 5}, {1, 3}, {}, {0, 1, 1, 2}}, true);       // stride 3: per column
    // Left pads of 2 (the first block masks its padded taps), with stride 1 and dilated stride 2.
    RunPool(Pool::kMax, {2, 2, 6, w}, {{3, 5}, {1, 1}, {}, {1, 2, 1, 2}}, false);
    RunPool(Pool::kMax, {2, 2, 6, w}, {{2, 3}, {2, 2}, {1, 2}, {0, 2, 0, 2}}, true);
  }
  RunPool(Pool::kMax, {2, 2, 37}, {{3}, {2}, {}, {1, 1}}, false);  // 1-D
  RunPool<double>(Pool::kMax, {1, 2, 5, 40}, {{3, 3}, {2, 2}, {}, {1, 1, 1, 1}}, false, false, false, 0, 0);
  RunPool<BFloat16>(Pool::kMax, {1, 2, 5, 40}, {{3, 3}, {2, 2}, {}, {1, 1, 1, 1}}, true, false, false, 0, 0);
}

// torch (and numpy's max) propagate NaN through max pooling: a window with a NaN input gives NaN,
// and its index is the last NaN's in scan order. Every MaxPool path: the vector blocks and the
// per-column border, strides 1, 2 and 3, dilations, ceil_mode, 1-D and 3-D, Indices in both
// storage orders, 16-bit and double inputs, a whole-plane window and GlobalMaxPool. The reference
// (RefPool) follows torch's rule; a max that drops NaN (std::max(best, v)) fails these.
TEST(NnMaxPool, NaNPropagatesAsTorch) {
  const int64_t every = 23;
  const bool ceil = true;
  RunPool(Pool::kMax, {1, 3, 9, 112}, {{3, 3}, {2, 2}, {}, {1, 1, 1, 1}}, false, false, false, 0, 0, every);
  RunPool(Pool::kMax, {1, 2, 7, 41}, {{3, 3}, {1, 1}, {}, {1, 1, 1, 1}}, ceil, false, false, 0, 0, every);
  RunPool(Pool::kMax, {1, 2, 7, 41}, {{2, 4}, {1, 2}, {1, 2}, {0, 2, 1, 1}}, ceil, false, false, 0, 0, every);
  RunPool(Pool::kMax, {1, 2, 6, 29}, {{2, 5}, {1, 3}, {}, {0, 1, 1, 2}}, ceil, false, false, 0, 0, every);
  RunPool(Pool::kMax, {2, 2, 6, 33}, {{3, 5}, {1, 1}, {}, {1, 2, 1, 2}}, false, false, false, 0, 0, 7);
  RunPool(Pool::kMax, {2, 2, 37}, {{3}, {2}, {}, {1, 1}}, false, false, false, 0, 0, every);
  RunPool(Pool::kMax, {1, 2, 5, 6, 7}, {{2, 3, 2}, {2, 2, 1}, {}, {1, 1, 0, 0, 1, 1}}, false, false, false, 0, 0, 11);
  RunPool(Pool::kMax, {2, 3, 9, 10}, {{3, 3}, {2, 2}, {}, {1, 1, 1, 1}}, false, false, true, 0, 0, 13);  // Indices
  RunPool(Pool::kMax, {2, 3, 9, 10}, {{3, 2}, {2, 1}, {}, {}}, ceil, false, true, 1, 0, 13);
  RunPool(Pool::kMax, {1, 2, 4, 5, 6}, {{2, 2, 2}, {1, 2, 1}, {}, {}}, false, false, true, 0, 0, 9);
  RunPool<Float16>(Pool::kMax, {1, 2, 7, 30}, {{3, 3}, {2, 2}, {}, {1, 1, 1, 1}}, false, false, false, 0, 1e-3, every);
  RunPool<double>(Pool::kMax, {1, 2, 7, 30}, {{3, 3}, {1, 1}, {}, {}}, false, false, true, 0, 0, every);
  // Whole-plane windows: the plane reduction (vector blocks of 16 and the scalar tail).
  RunPool(Pool::kMax, {2, 6, 13, 10}, {{13, 10}, {1, 1}, {}, {}}, false, false, false, 0, 0, 97);
  RunPool<Float16>(Pool::kMax, {1, 4, 5, 5}, {{5, 5}, {1, 1}, {}, {}}, false, false, false, 0, 1e-3, 31);
}

TEST(NnGlobalPool, MaxPropagatesNaN) {
  // One NaN per plane at the first, a middle, the last-block and the tail position of a 7x7 plane,
  // and planes without: against the float64 maximum, NaN where the plane has one.
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Tensor x = dtype == DType::kFloat32 ? RandomTensor<float>({1, 6, 7, 7}, -2, 2, 43)
                                        : RandomTensor<double>({1, 6, 7, 7}, -2, 2, 43);
    const int nan_at[6] = {0, 20, -1, 40, 48, -1};
    for (int p = 0; p < 6; ++p) {
      if (nan_at[p] < 0) continue;
      if (dtype == DType::kFloat32) x.data<float>()[p * 49 + nan_at[p]] = std::numeric_limits<float>::quiet_NaN();
      else x.data<double>()[p * 49 + nan_at[p]] = std::numeric_limits<double>::quiet_NaN();
    }
    std::vector<double> xv = ToDoubles(x), mx;
    for (int p = 0; p < 6; ++p) {
      double m = -std::numeric_limits<double>::infinity();
      for (int i = 0; i < 49; ++i) m = (xv[p * 49 + i] > m || std::isnan(xv[p * 49 + i])) ? xv[p * 49 + i] : m;
      mx.push_back(m);
    }
    OpTester("GlobalMaxPool", 1).Input("X", x).Output("Y", {1, 6, 1, 1}, mx).Run();
    OpTester("MaxPool", 12).Attr("kernel_shape", Ints({7, 7})).Input("X", x).Output("Y", {1, 6, 1, 1}, mx).Run();
  }
}

TEST(NnPool, MissingKernelShapeIsAnError) {
  auto r =
      OpTester("MaxPool", 12).Input("X", RandomTensor<float>({1, 1, 4, 4})).Output("Y", {1, 1, 4, 4}, {}).Compute();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidModel);
  r = OpTester("AveragePool", 19)
          .Attr("kernel_shape", Ints({2, 2, 2}))
          .Input("X", RandomTensor<float>({1, 1, 4, 4}))
          .Output("Y", {1, 1, 3, 3}, {})
          .Compute();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidModel);
}

TEST(NnGlobalPool, AverageAndMax) {
  Tensor x = RandomTensor<float>({2, 3, 5, 7}, -2, 2, 41);
  std::vector<double> xv = ToDoubles(x), avg, mx;
  for (int p = 0; p < 6; ++p) {
    double s = 0, m = -1e300;
    for (int i = 0; i < 35; ++i) {
      s += xv[p * 35 + i];
      m = std::max(m, xv[p * 35 + i]);
    }
    avg.push_back(s / 35);
    mx.push_back(m);
  }
  OpTester("GlobalAveragePool", 11).Input("X", x).Output("Y", {2, 3, 1, 1}, avg, 1e-5, 1e-6).Run();
  OpTester("GlobalMaxPool", 11).Input("X", x).Output("Y", {2, 3, 1, 1}, mx).Run();
  Tensor x3 = RandomTensor<double>({1, 2, 3, 4, 5}, -2, 2, 42);
  std::vector<double> x3v = ToDoubles(x3), avg3;
  for (int p = 0; p < 2; ++p) {
    double s = 0;
    for (int i = 0; i < 60; ++i) s += x3v[p * 60 + i];
    avg3.push_back(s / 60);
  }
  OpTester("GlobalAveragePool", 11).Input("X", x3).Output("Y", {1, 2, 1, 1, 1}, avg3, 1e-12, 1e-12).Run();
}

}  // namespace
}  // namespace tob
