// ConvGrad and MaxPoolGrad against float64 references written as the naive adjoint loops of the
// forward window ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "providers/cpu/training/conv_grad.h"
#include "tensor_test_util.h"
#include "training_test_util.h"

namespace tob {
namespace {

using namespace training_test;

using tensor_test::NextIndex;

struct Window {
  std::vector<int64_t> strides, dilations, pads;  // pads: begins then ends; empty = defaults
  int64_t s(size_t d) const { return strides.empty() ? 1 : strides[d]; }
  int64_t dil(size_t d) const { return dilations.empty() ? 1 : dilations[d]; }
  int64_t pb(size_t d) const { return pads.empty() ? 0 : pads[d]; }
  int64_t pe(size_t d) const { return pads.empty() ? 0 : pads[d + pads.size() / 2]; }
};

struct ConvGradRef {
  Shape dy_shape;
  std::vector<double> dx, dw, db;
};

// The adjoint of Conv for a given dY: every (image, output channel, output position, input
// channel, kernel tap) product is added to dX, dW and dB.
ConvGradRef RefConvGrad(const Tensor& x, const Tensor& w, const Window& win, int64_t group, const Tensor* dy_in,
                        Shape* dy_shape_out) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const size_t r = xs.size() - 2;
  const int64_t N = xs[0], C = xs[1], M = ws[0], Cg = C / group, Mg = M / group;
  Shape in(xs.begin() + 2, xs.end()), k(ws.begin() + 2, ws.end()), out(r);
  for (size_t d = 0; d < r; ++d)
    out[d] = (in[d] + win.pb(d) + win.pe(d) - ((k[d] - 1) * win.dil(d) + 1)) / win.s(d) + 1;
  ConvGradRef ref;
  ref.dy_shape = {N, M};
  ref.dy_shape.insert(ref.dy_shape.end(), out.begin(), out.end());
  if (dy_shape_out != nullptr) *dy_shape_out = ref.dy_shape;
  if (dy_in == nullptr) return ref;
  std::vector<double> xv = ToDoubles(x), wv = ToDoubles(w), dy = ToDoubles(*dy_in);
  ref.dx.assign(xv.size(), 0.0);
  ref.dw.assign(wv.size(), 0.0);
  ref.db.assign(M, 0.0);
  const int64_t in_size = NumElements(in), k_size = NumElements(k), out_size = NumElements(out);
  std::vector<int64_t> o(r), kk(r), pos(r);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      std::fill(o.begin(), o.end(), 0);
      do {
        const double g = dy[(n * M + m) * out_size + tensor_test::Ravel(o, out)];
        ref.db[m] += g;
        for (int64_t c = 0; c < Cg; ++c) {
          std::fill(kk.begin(), kk.end(), 0);
          do {
            bool inside = true;
            for (size_t d = 0; d < r; ++d) {
              pos[d] = o[d] * win.s(d) - win.pb(d) + kk[d] * win.dil(d);
              inside = inside && pos[d] >= 0 && pos[d] < in[d];
            }
            if (!inside) continue;
            const int64_t xi = (n * C + (m / Mg) * Cg + c) * in_size + tensor_test::Ravel(pos, in);
            const int64_t wi = (m * Cg + c) * k_size + tensor_test::Ravel(kk, k);
            ref.dx[xi] += g * wv[wi];
            ref.dw[wi] += g * xv[xi];
          } while (NextIndex(kk, k));
        }
      } while (NextIndex(o, out));
    }
  return ref;
}

void SetAttrs(OpTester& t, const Shape& w_shape, const Window& win, int64_t group) {
  t.Attr("kernel_shape", Ints(Shape(w_shape.begin() + 2, w_shape.end())));
  if (!win.strides.empty()) t.Attr("strides", Ints(win.strides));
  if (!win.dilations.empty()) t.Attr("dilations", Ints(win.dilations));
  if (!win.pads.empty()) t.Attr("pads", Ints(win.pads));
  if (group != 1) t.Attr("group", Int(group));
}

template <typename T = float>
void RunConvGrad(const Shape& x_shape, const Shape& w_shape, const Window& win, int64_t group, double tol,
                 int threads = 3) {
  Tensor x = RandomTensor<T>(x_shape, -1, 1, 101), w = RandomTensor<T>(w_shape, -1, 1, 102);
  Shape dy_shape;
  RefConvGrad(x, w, win, group, nullptr, &dy_shape);
  Tensor dy = RandomTensor<T>(dy_shape, -1, 1, 103);
  ConvGradRef ref = RefConvGrad(x, w, win, group, &dy, nullptr);
  OpTester t("ConvGrad", 1, kMicrosoftDomain);
  SetAttrs(t, w_shape, win, group);
  t.Input("dY", dy)
      .Input("X", x)
      .Input("W", w)
      .Output("dX", x_shape, ref.dx, tol, tol)
      .Output("dW", w_shape, ref.dw, tol, tol)
      .Output("dB", {w_shape[0]}, ref.db, tol, tol)
      .Threads(threads)
      .Run();
}

TEST(TrainingConvGrad, TwoDimensionalPadsStridesDilations) {
  RunConvGrad({2, 3, 9, 8}, {4, 3, 3, 3}, {}, 1, 1e-4);
  RunConvGrad({2, 3, 9, 8}, {4, 3, 3, 2}, {{2, 1}, {1, 2}, {1, 0, 2, 1}}, 1, 1e-4);
  RunConvGrad({1, 2, 11, 10}, {5, 2, 3, 3}, {{3, 2}, {2, 2}, {2, 2, 2, 2}}, 1, 1e-4);  // one image
}

TEST(TrainingConvGrad, StrideOneInputGradAsFlippedConv) {
  // Stride 1: dX is a conv of dY with the flipped weight, padded by dilation * (k - 1) - pad.
  RunConvGrad({2, 3, 9, 8}, {4, 3, 3, 3}, {{1, 1}, {2, 1}, {2, 1, 1, 2}}, 1, 1e-4);
  RunConvGrad({2, 3, 9, 8}, {4, 3, 3, 2}, {{}, {}, {1, 0, 2, 1}}, 1, 1e-4);
  // Pads beyond the window's span: that form does not exist, the column path takes over.
  RunConvGrad({1, 2, 5, 5}, {3, 2, 2, 2}, {{}, {}, {2, 2, 2, 2}}, 1, 1e-4);
}

TEST(TrainingConvGrad, GroupsAndDepthwise) {
  RunConvGrad({2, 4, 7, 7}, {6, 2, 3, 3}, {{1, 1}, {}, {1, 1, 1, 1}}, 2, 1e-4);
  RunConvGrad({2, 3, 10, 9}, {6, 1, 3, 3}, {{2, 1}, {1, 2}, {1, 1, 1, 1}}, 3, 1e-4);
  RunConvGrad({3, 4, 8, 8}, {4, 1, 3, 3}, {{}, {}, {1, 1, 1, 1}}, 4, 1e-4);
  RunConvGrad<double>({2, 3, 19}, {3, 1, 5}, {{2}, {}, {2, 2}}, 3, 1e-10);  // 1-D depthwise
  RunConvGrad({1, 2, 4, 5, 4}, {2, 1, 2, 2, 2}, {}, 2, 1e-4);               // 3-D: GEMM path
}

TEST(TrainingConvGrad, OneAndThreeDimensional) {
  RunConvGrad({3, 2, 17}, {4, 2, 4}, {{2}, {2}, {1, 2}}, 1, 1e-4);
  RunConvGrad({2, 2, 5, 6, 4}, {3, 2, 2, 3, 2}, {{2, 1, 1}, {}, {1, 0, 1, 0, 1, 1}}, 1, 1e-4);
}

TEST(TrainingConvGrad, Pointwise) {
  RunConvGrad({3, 8, 5, 6}, {4, 8, 1, 1}, {}, 1, 1e-4);
  RunConvGrad({2, 6, 5, 6}, {4, 3, 1, 1}, {}, 2, 1e-4);
  RunConvGrad({2, 8, 5, 6}, {4, 8, 1, 1}, {{2, 2}, {}, {}}, 1, 1e-4);  // strided: through columns
}

TEST(TrainingConvGrad, DoubleAndHalf) {
  RunConvGrad<double>({2, 3, 6, 7}, {4, 3, 3, 3}, {{1, 2}, {}, {1, 1, 1, 1}}, 1, 1e-10);
  RunConvGrad<Float16>({2, 3, 6, 7}, {4, 3, 3, 3}, {{1, 2}, {}, {1, 1, 1, 1}}, 1, 3e-2);
}

TEST(TrainingConvGrad, SeveralImageChunks) {
  // 576 x 4096 float columns per image (9 MiB), above a chunk's 512 KiB: one image per chunk, so
  // dW accumulates over four.
  RunConvGrad({4, 64, 64, 64}, {4, 64, 3, 3}, {{}, {}, {1, 1, 1, 1}}, 1, 2e-3, 4);
  // 72 x 400 columns per image (112.5 KiB): four images per chunk for dW, three chunks; the
  // flipped conv's 36 x 400 (56 KiB) nine images per chunk, two chunks, the last one short.
  RunConvGrad({12, 8, 20, 20}, {4, 8, 3, 3}, {{}, {}, {1, 1, 1, 1}}, 1, 1e-4);
}

TEST(TrainingConvGrad, SmallImagesFoldTheBatch) {
  // Stride 1 with at most 9 input positions per image: the flipped conv's images share one GEMM
  // per group and are scattered back into dX (one position; 3x3 positions with groups).
  const int64_t before = conv_grad::BatchFoldsRun();
  RunConvGrad({3, 8, 1, 1}, {6, 8, 3, 3}, {{}, {}, {1, 1, 1, 1}}, 1, 1e-4);
  RunConvGrad({5, 6, 3, 3}, {4, 3, 3, 3}, {{}, {}, {1, 1, 1, 1}}, 2, 1e-4);
  RunConvGrad({4, 4, 2, 3}, {6, 4, 2, 2}, {{}, {}, {1, 0, 1, 1}}, 1, 1e-4);
  if (std::getenv("TOB_CONV_BATCH_FOLD") == nullptr || std::string(std::getenv("TOB_CONV_BATCH_FOLD")).empty())
    EXPECT_GE(conv_grad::BatchFoldsRun() - before, 3);  // the folded path ran (not the per-image one)
}

TEST(TrainingConvGrad, SamePaddingMatchesExplicitPads) {
  Tensor x = RandomTensor<float>({1, 2, 7, 8}, -1, 1, 111), w = RandomTensor<float>({3, 2, 3, 3}, -1, 1, 112);
  // in 7 / 8, kernel 3, stride 2 -> out 4, total pads 2 and 1: SAME_UPPER puts the odd one last.
  const Window explicit_pads{{2, 2}, {}, {1, 0, 1, 1}};
  Shape dy_shape;
  RefConvGrad(x, w, explicit_pads, 1, nullptr, &dy_shape);
  Tensor dy = RandomTensor<float>(dy_shape, -1, 1, 113);
  ConvGradRef ref = RefConvGrad(x, w, explicit_pads, 1, &dy, nullptr);
  OpTester("ConvGrad", 1, kMicrosoftDomain)
      .Attr("auto_pad", Attribute::String("SAME_UPPER"))
      .Attr("strides", Ints({2, 2}))
      .Input("dY", dy)
      .Input("X", x)
      .Input("W", w)
      .Output("dX", {1, 2, 7, 8}, ref.dx, 1e-4, 1e-4)
      .Output("dW", {3, 2, 3, 3}, ref.dw, 1e-4, 1e-4)
      .Run();
}

TEST(TrainingConvGrad, ComputesOnlyRequestedOutputs) {
  const Shape x_shape{2, 4, 6, 6}, w_shape{6, 2, 3, 3};
  const Window win{{1, 1}, {}, {1, 1, 1, 1}};
  Tensor x = RandomTensor<float>(x_shape, -1, 1, 121), w = RandomTensor<float>(w_shape, -1, 1, 122);
  Shape dy_shape;
  RefConvGrad(x, w, win, 2, nullptr, &dy_shape);
  Tensor dy = RandomTensor<float>(dy_shape, -1, 1, 123);
  ConvGradRef ref = RefConvGrad(x, w, win, 2, &dy, nullptr);
  AttributeMap attrs{{"kernel_shape", Ints({3, 3})}, {"pads", Ints({1, 1, 1, 1})}, {"group", Int(2)}};
  for (const std::vector<bool>& mask : std::vector<std::vector<bool>>{
           {false, true, true}, {true, false, false}, {false, false, true}, {true, true, false}}) {
    auto outs = RunWithOutputs("ConvGrad", kMicrosoftDomain, 1, {dy, x, w}, attrs, mask);
    ASSERT_TRUE(outs.ok()) << outs.status().ToString();
    const std::vector<double>* refs[3] = {&ref.dx, &ref.dw, &ref.db};
    const Shape shapes[3] = {x_shape, w_shape, {6}};
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(outs.value()[i].defined(), mask[i]);
      if (mask[i])
        testing::ExpectClose(outs.value()[i], shapes[i], *refs[i], 1e-4, 1e-4, "output " + std::to_string(i));
    }
  }
}

TEST(TrainingConvGrad, WrongDyShapeIsAnError) {
  OpTester t("ConvGrad", 1, kMicrosoftDomain);
  t.Attr("kernel_shape", Ints({3, 3}))
      .Input("dY", RandomTensor<float>({1, 2, 4, 4}))
      .Input("X", RandomTensor<float>({1, 3, 5, 5}))
      .Input("W", RandomTensor<float>({2, 3, 3, 3}))
      .Output("dX", {1, 3, 5, 5}, {});
  ExpectFailure(t, "is not the Conv output shape");
}

// ---------------------------------------------------------------- MaxPoolGrad

template <typename T = float>
void RunMaxPoolGrad(const Shape& x_shape, const std::vector<int64_t>& kernel, const Window& win, double tol) {
  Tensor x = RandomTensor<T>(x_shape, -3, 3, 131);
  OpTester fwd("MaxPool", 12);
  fwd.Attr("kernel_shape", Ints(kernel));
  if (!win.strides.empty()) fwd.Attr("strides", Ints(win.strides));
  if (!win.pads.empty()) fwd.Attr("pads", Ints(win.pads));
  if (!win.dilations.empty()) fwd.Attr("dilations", Ints(win.dilations));
  auto pooled = fwd.Input("X", x).Output("Y", {}, {}).Output("Indices", {}, {}).Compute();
  ASSERT_TRUE(pooled.ok()) << pooled.status().ToString();
  const Tensor& indices = pooled.value()[1];
  Tensor dy = RandomTensor<T>(indices.shape(), -1, 1, 132);
  std::vector<double> dx(static_cast<size_t>(x.numel()), 0.0), dyv = ToDoubles(dy);
  for (int64_t i = 0; i < indices.numel(); ++i) dx[indices.data<int64_t>()[i]] += dyv[i];
  OpTester("MaxPoolGrad", 1, kMicrosoftDomain)
      .Input("dY", dy)
      .Input("Indices", indices)
      .Input("X", x)
      .Output("dX", x_shape, dx, tol, tol)
      .Threads(3)
      .Run();
}

TEST(TrainingMaxPoolGrad, OverlappingAndStridedWindows) {
  RunMaxPoolGrad({2, 3, 8, 9}, {3, 3}, {{1, 1}, {}, {1, 1, 1, 1}}, 1e-6);  // overlapping: gradients add
  RunMaxPoolGrad({2, 3, 8, 8}, {2, 2}, {{2, 2}, {}, {}}, 1e-6);
  RunMaxPoolGrad({1, 2, 9, 10}, {3, 2}, {{2, 3}, {2, 1}, {1, 0, 1, 1}}, 1e-6);
  RunMaxPoolGrad({2, 2, 17}, {4}, {{3}, {}, {2, 1}}, 1e-6);
  RunMaxPoolGrad({1, 2, 5, 6, 4}, {2, 3, 2}, {{2, 2, 1}, {}, {}}, 1e-6);
}

TEST(TrainingMaxPoolGrad, HalfAndDouble) {
  RunMaxPoolGrad<Float16>({2, 2, 6, 6}, {3, 3}, {{1, 1}, {}, {1, 1, 1, 1}}, 3e-3);
  RunMaxPoolGrad<double>({2, 2, 6, 6}, {3, 3}, {{2, 2}, {}, {1, 1, 1, 1}}, 1e-12);
}

TEST(TrainingMaxPoolGrad, IndexOutsideItsPlaneIsAnError) {
  // Plane 1 of a [1, 2, 2, 2] input holds indices 4..7; 2 belongs to plane 0.
  OpTester t("MaxPoolGrad", 1, kMicrosoftDomain);
  t.Input("dY", RandomTensor<float>({1, 2, 1, 1}))
      .Input("Indices", Tensor::FromVector<int64_t>({1, 2}, {1, 2, 1, 1}))
      .Input("X", RandomTensor<float>({1, 2, 2, 2}))
      .Output("dX", {1, 2, 2, 2}, {});
  ExpectFailure(t, "Indices[1] = 2 is outside its (n, c) plane [4, 8)");
}

}  // namespace
}  // namespace tob
