// Transpose, and DepthToSpace / SpaceToDepth, which are transposes of a 6-D view of their input.
#include "framework/kernel_registry.h"
#include "ops/tensor_params.h"
#include "providers/cpu/tensor/copy_utils.h"
#include "providers/cpu/tensor/string_moves.h"
#include "providers/cpu/tensor/transpose.h"

namespace tob {

namespace {

class TransposeKernel final : public OpKernel {
 public:
  TransposeKernel(const Node& node, std::vector<int64_t> perm) : OpKernel(node), perm_(std::move(perm)) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    std::vector<int64_t> perm;
    TOB_RETURN_IF_ERROR(node.GetAttr("perm", &perm, std::vector<int64_t>{}));
    std::vector<int64_t> checked;
    Status s = ResolvePerm(perm, static_cast<int64_t>(perm.size()), &checked);
    if (!s.ok()) return InvalidModel(node.Describe(), ": ", s.message());
    return MakeKernel<TransposeKernel>(node, std::move(perm));
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& in = *ctx.input(0);
    Tensor* out = ctx.output(0);
    std::vector<int64_t> perm;
    Status s = ResolvePerm(perm_, in.rank(), &perm);
    if (!s.ok()) return ctx.Fail(s.message());
    for (size_t i = 0; i < perm.size(); ++i)
      if (out->shape().size() != perm.size() || out->shape()[i] != in.shape()[perm[i]])
        return ctx.Fail("output shape ", ShapeToString(out->shape()), " is not the transpose of ",
                        ShapeToString(in.shape()));
    tensor_ops::TransposeBytes(ctx.thread_pool(), in.raw_data(), out->raw_data(), DTypeSize(in.dtype()), in.shape(),
                               perm);
    return Status::OK();
  }

 private:
  std::vector<int64_t> perm_;  // empty: reversed dims
};

// DCR (depth-column-row, the default) or CRD ordering of the channel dim's blocks.
enum class BlockOrder { kDCR, kCRD };

StatusOr<BlockOrder> ReadBlockOrder(const Node& node) {
  std::string mode;
  TOB_RETURN_IF_ERROR(node.GetAttr("mode", &mode, std::string("DCR")));
  if (mode == "DCR") return BlockOrder::kDCR;
  if (mode == "CRD") return BlockOrder::kCRD;
  return InvalidModel(node.Describe(), ": mode must be DCR or CRD, got '", mode, "'");
}

class DepthSpaceKernel final : public OpKernel {
 public:
  DepthSpaceKernel(const Node& node, bool to_space, int64_t blocksize, BlockOrder order)
      : OpKernel(node), to_space_(to_space), b_(blocksize), order_(order) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, bool to_space, bool has_mode) {
    int64_t b;
    TOB_RETURN_IF_ERROR(node.GetAttr("blocksize", &b));
    if (b <= 0) return InvalidModel(node.Describe(), ": blocksize must be > 0, got ", b);
    BlockOrder order = BlockOrder::kDCR;
    if (has_mode) {
      TOB_ASSIGN_OR_RETURN(order, ReadBlockOrder(node));
    }
    return MakeKernel<DepthSpaceKernel>(node, to_space, b, order);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& in = *ctx.input(0);
    Tensor* out = ctx.output(0);
    if (in.rank() != 4) return ctx.Fail("expects a 4-D input, got ", ShapeToString(in.shape()));
    const int64_t n = in.dim(0), c = in.dim(1), h = in.dim(2), w = in.dim(3), b = b_;
    Shape view;
    std::vector<int64_t> perm;
    if (to_space_) {
      if (c % (b * b) != 0) return ctx.Fail("channels (", c, ") must be a multiple of blocksize^2 (", b * b, ")");
      const int64_t cc = c / (b * b);
      if (order_ == BlockOrder::kDCR) {
        view = {n, b, b, cc, h, w};
        perm = {0, 3, 4, 1, 5, 2};
      } else {
        view = {n, cc, b, b, h, w};
        perm = {0, 1, 4, 2, 5, 3};
      }
    } else {
      if (h % b != 0 || w % b != 0) return ctx.Fail("spatial dims ", h, "x", w, " must be multiples of blocksize ", b);
      view = {n, c, h / b, b, w / b, b};
      perm =
          order_ == BlockOrder::kDCR ? std::vector<int64_t>{0, 3, 5, 1, 2, 4} : std::vector<int64_t>{0, 1, 3, 5, 2, 4};
    }
    if (out->numel() != in.numel() || out->dtype() != in.dtype())
      return ctx.Fail("output ", ShapeToString(out->shape()), " does not match input ", ShapeToString(in.shape()));
    tensor_ops::TransposeBytes(ctx.thread_pool(), in.raw_data(), out->raw_data(), DTypeSize(in.dtype()), view, perm);
    return Status::OK();
  }

 private:
  bool to_space_;
  int64_t b_;
  BlockOrder order_;
};

KernelFactory DepthSpaceFactory(bool to_space, bool has_mode) {
  return [=](const Node& node) { return DepthSpaceKernel::Create(node, to_space, has_mode); };
}

}  // namespace

void RegisterCpuTransposeKernels(KernelRegistry& registry) {
  registry.Register(Def("Transpose")
                        .Versions(1)
                        .Constraint("T", {0}, tensor_ops::DataMovementTypes())
                        .Factory(tensor_ops::MovesStrings(&TransposeKernel::Create, {0})));
  // DepthToSpace gains the mode attribute at 11, SpaceToDepth at 28.
  registry.Register(
      Def("DepthToSpace").Versions(1, 10).Constraint("T", {0}, AllTypes()).Factory(DepthSpaceFactory(true, false)));
  registry.Register(
      Def("DepthToSpace").Versions(11).Constraint("T", {0}, AllTypes()).Factory(DepthSpaceFactory(true, true)));
  registry.Register(
      Def("SpaceToDepth").Versions(1, 27).Constraint("T", {0}, AllTypes()).Factory(DepthSpaceFactory(false, false)));
  registry.Register(
      Def("SpaceToDepth").Versions(28).Constraint("T", {0}, AllTypes()).Factory(DepthSpaceFactory(false, true)));
}

}  // namespace tob
