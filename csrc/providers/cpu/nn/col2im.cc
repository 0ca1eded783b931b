// Col2Im (opset 18): sums the columns of sliding blocks back into an image, the inverse layout of
// im2col. X is [N, C * prod(block_shape), L] with L the number of block positions; every column
// value adds to the image pixel its block offset lands on (pixels in the padding are dropped).
// Planes (n, c) are independent and split across the pool.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "framework/kernel_registry.h"

namespace tob {

namespace {

struct Col2ImGeometry {
  std::vector<int64_t> image, block, dilations, pads, strides, blocks;  // per spatial dim (pads: 2r)
  int64_t block_size = 1, image_size = 1, positions = 1;
};

class Col2ImKernel final : public OpKernel {
 public:
  Col2ImKernel(const Node& node, std::vector<int64_t> dilations, std::vector<int64_t> pads,
               std::vector<int64_t> strides)
      : OpKernel(node), dilations_(std::move(dilations)), pads_(std::move(pads)), strides_(std::move(strides)) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    std::vector<int64_t> dilations, pads, strides;
    TOB_RETURN_IF_ERROR(node.GetAttr("dilations", &dilations, std::vector<int64_t>{}));
    TOB_RETURN_IF_ERROR(node.GetAttr("pads", &pads, std::vector<int64_t>{}));
    TOB_RETURN_IF_ERROR(node.GetAttr("strides", &strides, std::vector<int64_t>{}));
    for (int64_t v : dilations)
      if (v <= 0) return InvalidModel(node.Describe(), ": dilations must be positive, got ", v);
    for (int64_t v : strides)
      if (v <= 0) return InvalidModel(node.Describe(), ": strides must be positive, got ", v);
    for (int64_t v : pads)
      if (v < 0) return InvalidModel(node.Describe(), ": pads must be non-negative, got ", v);
    return MakeKernel<Col2ImKernel>(node, std::move(dilations), std::move(pads), std::move(strides));
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    if (x.rank() != 3) return ctx.Fail("input must be [N, C * prod(block_shape), L], got ", ShapeToString(x.shape()));
    TOB_ASSIGN_OR_RETURN(Col2ImGeometry g, Geometry(ctx, x));
    const int64_t planes = y.dim(0) * y.dim(1);
    if (y.numel() == 0) return Status::OK();
    bool known = DispatchDType<float, double>(x.dtype(), [&]<typename T>() {
      const T* xp = x.data<T>();
      T* yp = y.data<T>();
      const int64_t work = std::max<int64_t>(1, g.block_size * g.positions);
      ParallelFor(ctx.thread_pool(), planes, std::max<int64_t>(1, 65536 / work),
                  [&](int64_t b, int64_t e) { FoldPlanes(g, xp, yp, b, e); });
    });
    if (!known) return ctx.Fail("dtype ", DTypeName(x.dtype()), " is not supported");
    return Status::OK();
  }

 private:
  StatusOr<Col2ImGeometry> Geometry(const KernelContext& ctx, const Tensor& x) const {
    Col2ImGeometry g;
    g.image = ctx.input(1)->ToInt64Vector();
    g.block = ctx.input(2)->ToInt64Vector();
    const size_t r = g.image.size();
    if (g.block.size() != r) return ctx.Fail("block_shape has ", g.block.size(), " values but image_shape has ", r);
    g.dilations = dilations_.empty() ? std::vector<int64_t>(r, 1) : dilations_;
    g.strides = strides_.empty() ? std::vector<int64_t>(r, 1) : strides_;
    g.pads = pads_.empty() ? std::vector<int64_t>(2 * r, 0) : pads_;
    if (g.dilations.size() != r || g.strides.size() != r || g.pads.size() != 2 * r)
      return ctx.Fail("dilations, strides and pads need ", r, ", ", r, " and ", 2 * r, " values for image_shape of ", r,
                      " dims; got ", g.dilations.size(), ", ", g.strides.size(), " and ", g.pads.size());
    for (size_t d = 0; d < r; ++d) {
      if (g.block[d] <= 0 || g.image[d] <= 0)
        return ctx.Fail("block_shape and image_shape must be positive, got block ", g.block[d], " image ", g.image[d],
                        " at dim ", d);
      const int64_t span = g.dilations[d] * (g.block[d] - 1) + 1;
      const int64_t n = (g.image[d] + g.pads[d] + g.pads[d + r] - span) / g.strides[d] + 1;
      if (n < 1) return ctx.Fail("the block (", span, " wide with dilation) does not fit image dim ", d);
      g.blocks.push_back(n);
      g.block_size *= g.block[d];
      g.image_size *= g.image[d];
      g.positions *= n;
    }
    if (x.dim(1) % g.block_size != 0)
      return ctx.Fail("input dim 1 (", x.dim(1), ") is not divisible by prod(block_shape) = ", g.block_size);
    if (x.dim(2) != g.positions)
      return ctx.Fail("input dim 2 (", x.dim(2), ") must be the number of block positions, ", g.positions);
    return g;
  }

  template <typename T>
  static void FoldPlanes(const Col2ImGeometry& g, const T* x, T* y, int64_t begin, int64_t end) {
    const size_t r = g.image.size();
    std::vector<int64_t> offset(r), at(r);
    for (int64_t p = begin; p < end; ++p) {
      T* image = y + p * g.image_size;
      std::fill(image, image + g.image_size, T(0));
      const T* columns = x + p * g.block_size * g.positions;
      std::fill(offset.begin(), offset.end(), 0);
      for (int64_t k = 0; k < g.block_size; ++k) {
        const T* column = columns + k * g.positions;
        std::fill(at.begin(), at.end(), 0);
        for (int64_t l = 0; l < g.positions; ++l) {
          int64_t pixel = 0;
          bool inside = true;
          for (size_t d = 0; d < r && inside; ++d) {
            const int64_t pos = at[d] * g.strides[d] - g.pads[d] + offset[d] * g.dilations[d];
            inside = pos >= 0 && pos < g.image[d];
            pixel = pixel * g.image[d] + pos;
          }
          if (inside) image[pixel] += column[l];
          for (int64_t d = static_cast<int64_t>(r) - 1; d >= 0 && ++at[d] == g.blocks[d]; --d) at[d] = 0;
        }
        for (int64_t d = static_cast<int64_t>(r) - 1; d >= 0 && ++offset[d] == g.block[d]; --d) offset[d] = 0;
      }
    }
  }

  std::vector<int64_t> dilations_, pads_, strides_;
};

}  // namespace

void RegisterCpuCol2ImKernels(KernelRegistry& registry) {
  registry.Register(Def("Col2Im")
                        .Versions(18)
                        .Constraint("T", {0}, {DType::kFloat32, DType::kFloat64})
                        .Constraint("I", {1, 2}, {DType::kInt64})
                        .Kernel<Col2ImKernel>());
}

}  // namespace tob
