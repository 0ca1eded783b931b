// NonMaxSuppression (opsets 10, 11): per batch and class, boxes in descending score order (equal
// scores: the lower box index first) are kept unless their IoU with a box already kept exceeds
// iou_threshold, up to max_output_boxes_per_class. The number of selected boxes depends on the
// data, so the kernel allocates its output [num_selected, 3] = (batch, class, box) itself.
// Box arithmetic is done in float32, the boxes' type, as the reference does: results on a
// threshold boundary depend on that rounding.
#include <algorithm>
#include <memory>
#include <numeric>
#include <vector>

#include "framework/kernel_registry.h"

namespace tob {

namespace {

struct Box {
  float y_min, x_min, y_max, x_max;
};

// Corner form of box `b` (4 floats): [y1, x1, y2, x2] in any corner order, or
// [x_center, y_center, width, height] when center_point_box is set.
Box ToCorners(const float* b, bool center_point_box) {
  if (center_point_box) {
    const float half_w = b[2] / 2, half_h = b[3] / 2;
    return Box{b[1] - half_h, b[0] - half_w, b[1] + half_h, b[0] + half_w};
  }
  return Box{std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]), std::max(b[1], b[3])};
}

// Whether b suppresses a: their intersection over union exceeds the threshold.
bool Suppresses(const Box& a, const Box& b, float iou_threshold) {
  const float ix_min = std::max(a.x_min, b.x_min), ix_max = std::min(a.x_max, b.x_max);
  if (ix_max <= ix_min) return false;
  const float iy_min = std::max(a.y_min, b.y_min), iy_max = std::min(a.y_max, b.y_max);
  if (iy_max <= iy_min) return false;
  const float intersection = (ix_max - ix_min) * (iy_max - iy_min);
  if (intersection <= 0) return false;
  const float area_a = (a.x_max - a.x_min) * (a.y_max - a.y_min);
  const float area_b = (b.x_max - b.x_min) * (b.y_max - b.y_min);
  const float union_area = area_a + area_b - intersection;
  if (area_a <= 0 || area_b <= 0 || union_area <= 0) return false;
  return intersection / union_area > iou_threshold;
}

class NonMaxSuppressionKernel final : public OpKernel {
 public:
  NonMaxSuppressionKernel(const Node& node, bool center_point_box) : OpKernel(node), center_(center_point_box) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t center_point_box = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("center_point_box", &center_point_box, int64_t{0}));
    if (center_point_box != 0 && center_point_box != 1)
      return InvalidModel(node.Describe(), ": attribute 'center_point_box' must be 0 or 1, got ", center_point_box);
    return MakeKernel<NonMaxSuppressionKernel>(node, center_point_box == 1);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& boxes = *ctx.input(0);
    const Tensor& scores = *ctx.input(1);
    if (boxes.rank() != 3 || boxes.dim(2) != 4)
      return ctx.Fail("boxes must be [num_batches, spatial_dimension, 4], got ", ShapeToString(boxes.shape()));
    if (scores.rank() != 3 || scores.dim(0) != boxes.dim(0) || scores.dim(2) != boxes.dim(1))
      return ctx.Fail("scores must be [num_batches, num_classes, spatial_dimension] = [", boxes.dim(0), ", C, ",
                      boxes.dim(1), "], got ", ShapeToString(scores.shape()));
    // Omitted or empty threshold inputs: no box limit means no output at all (the spec's default
    // of 0), no IoU threshold is 0, and no score threshold filters nothing.
    int64_t max_per_class = 0;
    float iou_threshold = 0.f;
    bool filter_scores = false;
    float score_threshold = 0.f;
    if (const Tensor* t = ctx.input(2); t != nullptr && t->numel() > 0)
      max_per_class = std::max<int64_t>(0, t->ElementAsInt64(0));
    if (const Tensor* t = ctx.input(3); t != nullptr && t->numel() > 0)
      iou_threshold = static_cast<float>(t->ElementAsDouble(0));
    if (const Tensor* t = ctx.input(4); t != nullptr && t->numel() > 0) {
      filter_scores = true;
      score_threshold = static_cast<float>(t->ElementAsDouble(0));
    }
    if (iou_threshold < 0.f || iou_threshold > 1.f)
      return ctx.Fail("iou_threshold must be in [0, 1], got ", iou_threshold);
    const int64_t batches = boxes.dim(0), classes = scores.dim(1), count = boxes.dim(1);
    std::vector<int64_t> selected;  // flattened (batch, class, box) triples
    std::vector<int64_t> order, kept;
    std::vector<Box> corners(static_cast<size_t>(count));
    for (int64_t b = 0; b < batches; ++b) {
      const float* batch_boxes = boxes.data<float>() + b * count * 4;
      for (int64_t i = 0; i < count; ++i) corners[i] = ToCorners(batch_boxes + i * 4, center_);
      for (int64_t c = 0; c < classes; ++c) {
        const float* s = scores.data<float>() + (b * classes + c) * count;
        order.clear();
        for (int64_t i = 0; i < count; ++i)
          if (!filter_scores || s[i] > score_threshold) order.push_back(i);
        std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) { return s[i] > s[j]; });
        kept.clear();
        for (int64_t i : order) {
          if (static_cast<int64_t>(kept.size()) >= max_per_class) break;
          bool suppressed = false;
          for (int64_t k : kept) {
            if (Suppresses(corners[i], corners[k], iou_threshold)) {
              suppressed = true;
              break;
            }
          }
          if (suppressed) continue;
          kept.push_back(i);
          selected.insert(selected.end(), {b, c, i});
        }
      }
    }
    const int64_t n = static_cast<int64_t>(selected.size()) / 3;
    TOB_ASSIGN_OR_RETURN(Tensor out, Tensor::Allocate(DType::kInt64, {n, 3}, CpuAllocator::Default()));
    std::copy(selected.begin(), selected.end(), out.data<int64_t>());
    *ctx.output(0) = std::move(out);
    return Status::OK();
  }

 private:
  bool center_;
};

}  // namespace

void RegisterCpuNonMaxSuppressionKernels(KernelRegistry& registry) {
  registry.Register(Def("NonMaxSuppression")
                        .Versions(10)
                        .Constraint("boxes", {0, 1, 3, 4}, {DType::kFloat32})
                        .Constraint("max_output_boxes_per_class", {2}, {DType::kInt64})
                        .KernelAllocatesOutputs()
                        .Kernel<NonMaxSuppressionKernel>());
}

}  // namespace tob
