// GridSample (opsets 16, 20, 22) and AffineGrid (20): the two halves of a spatial transformer.
// AffineGrid maps a regular grid over the output through theta; GridSample reads X at the grid's
// positions (normalised to [-1, 1], last grid component = last spatial dim of X) with nearest,
// linear or cubic interpolation and zeros / border / reflection padding, for any number of
// spatial dims. Each output position's taps (flat offsets into one X plane and their weights) are
// computed once and applied to every channel.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/kernel_registry.h"

namespace tob {

namespace {

enum class GridMode { kNearest, kLinear, kCubic };
enum class GridPadding { kZeros, kBorder, kReflection };

template <typename T>
using GridAcc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename A, typename T>
A ToAcc(T v) {
  if constexpr (kIs16BitFloat<T>) return static_cast<A>(static_cast<float>(v));
  else return static_cast<A>(v);
}

// Folds x back into [lo, hi] by reflecting at the borders as often as needed.
template <typename A>
A Reflect(A x, A lo, A hi) {
  const A range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    const A dx = lo - x;
    const int64_t n = static_cast<int64_t>(dx / range);
    const A r = dx - static_cast<A>(n) * range;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const A dx = x - hi;
    const int64_t n = static_cast<int64_t>(dx / range);
    const A r = dx - static_cast<A>(n) * range;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

// Keys' cubic convolution weights (alpha = -0.75, as torch) for the 4 taps around a position
// with fractional part t in [0, 1).
template <typename A>
void CubicWeights(A t, A* w) {
  const A a = A(-0.75);
  const A x = std::abs(t);
  w[0] = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a;
  w[1] = ((a + 2) * x - (a + 3)) * x * x + 1;
  w[2] = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1;
  w[3] = ((a * (2 - x) - 5 * a) * (2 - x) + 8 * a) * (2 - x) - 4 * a;
}

class GridSampleKernel final : public OpKernel {
 public:
  GridSampleKernel(const Node& node, GridMode mode, GridPadding padding, bool align_corners, bool only_2d)
      : OpKernel(node), mode_(mode), padding_(padding), align_corners_(align_corners), only_2d_(only_2d) {}

  // Opset 16 names the modes bilinear / nearest / bicubic and takes 4-D input only; 20 renamed
  // them linear / nearest / cubic and allows any number of spatial dims.
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, int opset) {
    const bool old_names = opset < 20;
    std::string mode_name, padding_name;
    TOB_RETURN_IF_ERROR(node.GetAttr("mode", &mode_name, std::string(old_names ? "bilinear" : "linear")));
    TOB_RETURN_IF_ERROR(node.GetAttr("padding_mode", &padding_name, std::string("zeros")));
    int64_t align_corners = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("align_corners", &align_corners, int64_t{0}));
    GridMode mode;
    if (mode_name == "nearest") mode = GridMode::kNearest;
    else if (mode_name == (old_names ? "bilinear" : "linear")) mode = GridMode::kLinear;
    else if (mode_name == (old_names ? "bicubic" : "cubic")) mode = GridMode::kCubic;
    else
      return InvalidModel(node.Describe(), ": attribute 'mode' = '", mode_name, "' is not one of ",
                          old_names ? "bilinear, nearest, bicubic" : "linear, nearest, cubic", " (opset ", opset, ")");
    GridPadding padding;
    if (padding_name == "zeros") padding = GridPadding::kZeros;
    else if (padding_name == "border") padding = GridPadding::kBorder;
    else if (padding_name == "reflection") padding = GridPadding::kReflection;
    else
      return InvalidModel(node.Describe(), ": attribute 'padding_mode' = '", padding_name,
                          "' is not one of zeros, border, reflection");
    if (align_corners != 0 && align_corners != 1)
      return InvalidModel(node.Describe(), ": attribute 'align_corners' must be 0 or 1, got ", align_corners);
    return MakeKernel<GridSampleKernel>(node, mode, padding, align_corners == 1, old_names);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& grid = *ctx.input(1);
    Tensor& y = *ctx.output(0);
    const int64_t r = x.rank() - 2;
    if (r < 1) return ctx.Fail("X must be [N, C, D1, ...], got ", ShapeToString(x.shape()));
    if (only_2d_ && r != 2) return ctx.Fail("GridSample before opset 20 takes 4-D X, got ", ShapeToString(x.shape()));
    if (grid.rank() != r + 2 || grid.dim(0) != x.dim(0) || grid.dim(-1) != r)
      return ctx.Fail("grid must be [N, ", r, " output dims..., ", r, "] with N = ", x.dim(0), ", got ",
                      ShapeToString(grid.shape()));
    if (y.numel() == 0) return Status::OK();
    Status status;
    bool known = DispatchDType<float, double, Float16, BFloat16>(x.dtype(), [&]<typename T>() {
      bool grid_known = DispatchDType<float, double, Float16, BFloat16>(
          grid.dtype(), [&]<typename G>() { Sample<T, G>(ctx, x, grid, &y); });
      if (!grid_known) status = ctx.Fail("grid dtype ", DTypeName(grid.dtype()), " is not supported");
    });
    if (!known) return ctx.Fail("X dtype ", DTypeName(x.dtype()), " is not supported");
    return status;
  }

 private:
  // Flat index of tap i along spatial dim of size len after padding, or -1 for a zero.
  template <typename A>
  int64_t PaddedIndex(int64_t i, int64_t len, A lo, A hi) const {
    switch (padding_) {
      case GridPadding::kZeros: return i >= 0 && i < len ? i : -1;
      case GridPadding::kBorder: return std::clamp<int64_t>(i, 0, len - 1);
      case GridPadding::kReflection: {
        const int64_t j = static_cast<int64_t>(Reflect<A>(static_cast<A>(i), lo, hi));
        return std::clamp<int64_t>(j, 0, len - 1);
      }
    }
    return -1;
  }

  template <typename T, typename G>
  void Sample(KernelContext& ctx, const Tensor& x, const Tensor& grid, Tensor* y) const {
    using A = GridAcc<T>;
    const int64_t r = x.rank() - 2;
    const int64_t N = x.dim(0), C = x.dim(1);
    std::vector<int64_t> in(static_cast<size_t>(r));
    int64_t plane = 1;
    for (int64_t d = 0; d < r; ++d) plane *= (in[d] = x.dim(d + 2));
    const int64_t points = grid.numel() / std::max<int64_t>(1, N * r);  // output positions per batch
    const int64_t taps_per_dim = mode_ == GridMode::kNearest ? 1 : mode_ == GridMode::kLinear ? 2 : 4;
    const T* xp = x.data<T>();
    const G* gp = grid.data<G>();
    T* yp = y->data<T>();
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, C));
    ParallelFor(ctx.thread_pool(), N * points, grain, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> index(static_cast<size_t>(r * taps_per_dim));
      std::vector<A> weight(static_cast<size_t>(r * taps_per_dim));
      std::vector<int64_t> corner(static_cast<size_t>(r));
      std::vector<A> sums(static_cast<size_t>(C));
      for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t n = unit / points, p = unit % points;
        const G* g = gp + unit * r;
        for (int64_t d = 0; d < r; ++d) {
          const int64_t len = in[d];
          const A lo = align_corners_ ? A(0) : A(-0.5);
          const A hi = align_corners_ ? static_cast<A>(len - 1) : static_cast<A>(len) - A(0.5);
          // The grid lists coordinates innermost dim first (x, y, z).
          const A norm = ToAcc<A>(g[r - 1 - d]);
          A v = align_corners_ ? (norm + 1) / 2 * static_cast<A>(len - 1) : ((norm + 1) * static_cast<A>(len) - 1) / 2;
          if (mode_ == GridMode::kNearest) v = std::nearbyint(v);  // ties to even, as torch
          if (v < lo || v > hi) {
            if (padding_ == GridPadding::kBorder) v = std::clamp(v, A(0), static_cast<A>(len - 1));
            else if (padding_ == GridPadding::kReflection) v = Reflect(v, lo, hi);
          }
          int64_t* idx = index.data() + d * taps_per_dim;
          A* w = weight.data() + d * taps_per_dim;
          if (mode_ == GridMode::kNearest) {
            idx[0] = PaddedIndex<A>(static_cast<int64_t>(v), len, lo, hi);
            w[0] = A(1);
            continue;
          }
          const A base = std::floor(v);
          const A t = v - base;
          const int64_t i0 = static_cast<int64_t>(base);
          if (mode_ == GridMode::kLinear) {
            idx[0] = PaddedIndex<A>(i0, len, lo, hi);
            idx[1] = PaddedIndex<A>(i0 + 1, len, lo, hi);
            w[0] = 1 - t;
            w[1] = t;
          } else {
            CubicWeights(t, w);
            for (int64_t k = 0; k < 4; ++k) idx[k] = PaddedIndex<A>(i0 - 1 + k, len, lo, hi);
          }
        }
        // Sum over every combination of one tap per dim (a zero-padded tap contributes nothing).
        std::fill(corner.begin(), corner.end(), 0);
        std::fill(sums.begin(), sums.end(), A(0));
        for (bool more = true; more;) {
          int64_t offset = 0;
          A w = A(1);
          for (int64_t d = 0; d < r && offset >= 0; ++d) {
            const int64_t i = index[d * taps_per_dim + corner[d]];
            offset = i < 0 ? -1 : offset * in[d] + i;
            w *= weight[d * taps_per_dim + corner[d]];
          }
          if (offset >= 0 && w != A(0)) {
            const T* src = xp + n * C * plane + offset;
            for (int64_t c = 0; c < C; ++c) sums[c] += w * ToAcc<A>(src[c * plane]);
          }
          more = false;
          for (int64_t d = r - 1; d >= 0; --d) {
            if (++corner[d] < taps_per_dim) {
              more = true;
              break;
            }
            corner[d] = 0;
          }
        }
        for (int64_t c = 0; c < C; ++c) yp[(n * C + c) * points + p] = static_cast<T>(sums[c]);
      }
    });
  }

  GridMode mode_;
  GridPadding padding_;
  bool align_corners_;
  bool only_2d_;
};

// AffineGrid: for theta [N, r, r + 1] and size (N, C, spatial...), grid[n, ..., :] = theta[n] @
// (x, y[, z], 1) over a regular grid of normalised coordinates in [-1, 1] (pixel centres, or the
// corner pixels with align_corners). Computed in float64.
class AffineGridKernel final : public OpKernel {
 public:
  AffineGridKernel(const Node& node, bool align_corners) : OpKernel(node), align_corners_(align_corners) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t align_corners = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("align_corners", &align_corners, int64_t{0}));
    if (align_corners != 0 && align_corners != 1)
      return InvalidModel(node.Describe(), ": attribute 'align_corners' must be 0 or 1, got ", align_corners);
    return MakeKernel<AffineGridKernel>(node, align_corners == 1);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& theta = *ctx.input(0);
    const std::vector<int64_t> size = ctx.input(1)->ToInt64Vector();
    Tensor& y = *ctx.output(0);
    if (size.size() != 4 && size.size() != 5)
      return ctx.Fail("size must hold (N, C, H, W) or (N, C, D, H, W), got ", size.size(), " values");
    const int64_t r = static_cast<int64_t>(size.size()) - 2;
    if (theta.rank() != 3 || theta.dim(0) != size[0] || theta.dim(1) != r || theta.dim(2) != r + 1)
      return ctx.Fail("theta must be [", size[0], ", ", r, ", ", r + 1, "], got ", ShapeToString(theta.shape()));
    // Normalised coordinate of each index along each spatial dim (outermost first).
    std::vector<std::vector<double>> axis(static_cast<size_t>(r));
    for (int64_t d = 0; d < r; ++d) {
      const int64_t len = size[d + 2];
      for (int64_t i = 0; i < len; ++i) {
        double v;
        if (align_corners_) v = len == 1 ? -1.0 : -1.0 + static_cast<double>(i) * (2.0 / static_cast<double>(len - 1));
        else {
          const double step = 2.0 / static_cast<double>(len);
          v = -1.0 + step / 2 + static_cast<double>(i) * step;
        }
        axis[d].push_back(v);
      }
    }
    int64_t points = 1;
    for (int64_t d = 0; d < r; ++d) points *= size[d + 2];
    if (y.numel() == 0) return Status::OK();
    Status status;
    bool known = DispatchDType<float, double, Float16, BFloat16>(theta.dtype(), [&]<typename T>() {
      const T* tp = theta.data<T>();
      T* yp = y.data<T>();
      ParallelFor(ctx.thread_pool(), size[0] * points, 1024, [&](int64_t begin, int64_t end) {
        std::vector<double> homogeneous(static_cast<size_t>(r + 1), 1.0);
        for (int64_t unit = begin; unit < end; ++unit) {
          const int64_t n = unit / points;
          // (x, y[, z]): the innermost spatial dim's coordinate first.
          for (int64_t d = r - 1, rest = unit % points; d >= 0; --d) {
            homogeneous[r - 1 - d] = axis[d][rest % size[d + 2]];
            rest /= size[d + 2];
          }
          const T* t = tp + n * r * (r + 1);
          for (int64_t row = 0; row < r; ++row) {
            double acc = 0;
            for (int64_t k = 0; k <= r; ++k) acc += ToAcc<double>(t[row * (r + 1) + k]) * homogeneous[k];
            yp[unit * r + row] = static_cast<T>(static_cast<GridAcc<T>>(acc));
          }
        }
      });
    });
    if (!known) return ctx.Fail("theta dtype ", DTypeName(theta.dtype()), " is not supported");
    return status;
  }

 private:
  bool align_corners_;
};

}  // namespace

void RegisterCpuGridSampleKernels(KernelRegistry& registry) {
  registry.Register(Def("GridSample")
                        .Versions(16, 19)
                        .Constraint("T1", {0}, FloatTypes())
                        .Constraint("T2", {1}, FloatTypes())
                        .Factory([](const Node& n) { return GridSampleKernel::Create(n, 16); }));
  registry.Register(Def("GridSample")
                        .Versions(20)
                        .Constraint("T1", {0}, FloatTypes())
                        .Constraint("T2", {1}, FloatTypes())
                        .Factory([](const Node& n) { return GridSampleKernel::Create(n, 20); }));
  registry.Register(Def("AffineGrid")
                        .Versions(20)
                        .Constraint("T1", {0}, FloatTypes())
                        .Constraint("T2", {1}, {DType::kInt64})
                        .Kernel<AffineGridKernel>());
}

}  // namespace tob
