#include "ops/tensor_resize_attributes.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace tob {

namespace {

// The attribute's value among `names` (its index), or InvalidModel listing them.
StatusOr<int> Choice(const Node& node, const char* attr, const std::string& dflt,
                     const std::vector<std::string>& names) {
  std::string value;
  TOB_RETURN_IF_ERROR(node.GetAttr(attr, &value, dflt));
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == value) return static_cast<int>(i);
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  return InvalidModel(node.Describe(), ": attribute '", attr, "' = '", value, "' is not one of ", list);
}

StatusOr<bool> Flag(const Node& node, const char* attr) {
  int64_t v = 0;
  TOB_RETURN_IF_ERROR(node.GetAttr(attr, &v, int64_t{0}));
  if (v != 0 && v != 1) return InvalidModel(node.Describe(), ": attribute '", attr, "' must be 0 or 1, got ", v);
  return v == 1;
}

bool Given(const Tensor* t) { return t != nullptr && t->numel() > 0; }

}  // namespace

StatusOr<ResizeAttributes> ResizeAttributes::Read(const Node& node, int opset) {
  ResizeAttributes a;
  if (opset < 18) {
    for (const char* newer : {"antialias", "axes", "keep_aspect_ratio_policy"})
      if (node.FindAttribute(newer) != nullptr)
        return InvalidModel(node.Describe(), ": attribute '", newer, "' needs opset 18, the model has ", opset);
  }
  TOB_ASSIGN_OR_RETURN(int mode, Choice(node, "mode", "nearest", {"nearest", "linear", "cubic"}));
  a.mode = static_cast<ResizeMode>(mode);
  TOB_ASSIGN_OR_RETURN(int coordinates,
                       Choice(node, "coordinate_transformation_mode", "half_pixel",
                              {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                               "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"}));
  a.coordinates = static_cast<ResizeCoordinates>(coordinates);
  if (a.coordinates == ResizeCoordinates::kHalfPixelSymmetric && opset < 19)
    return InvalidModel(node.Describe(), ": coordinate_transformation_mode 'half_pixel_symmetric' needs opset 19");
  if (a.coordinates == ResizeCoordinates::kTfHalfPixelForNn && opset >= 13)
    return InvalidModel(node.Describe(),
                        ": coordinate_transformation_mode 'tf_half_pixel_for_nn' was removed in opset 13");
  TOB_ASSIGN_OR_RETURN(int nearest, Choice(node, "nearest_mode", "round_prefer_floor",
                                           {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}));
  a.nearest = static_cast<ResizeNearest>(nearest);
  TOB_ASSIGN_OR_RETURN(int policy,
                       Choice(node, "keep_aspect_ratio_policy", "stretch", {"stretch", "not_larger", "not_smaller"}));
  a.policy = static_cast<ResizeAspectPolicy>(policy);
  TOB_ASSIGN_OR_RETURN(a.antialias, Flag(node, "antialias"));
  TOB_ASSIGN_OR_RETURN(a.exclude_outside, Flag(node, "exclude_outside"));
  float cubic_coeff_a = -0.75f, extrapolation_value = 0.f;
  TOB_RETURN_IF_ERROR(node.GetAttr("cubic_coeff_a", &cubic_coeff_a, -0.75f));
  TOB_RETURN_IF_ERROR(node.GetAttr("extrapolation_value", &extrapolation_value, 0.f));
  a.cubic_coeff_a = cubic_coeff_a;
  a.extrapolation_value = extrapolation_value;
  TOB_RETURN_IF_ERROR(node.GetAttr("axes", &a.axes, std::vector<int64_t>{}));
  return a;
}

StatusOr<ResizeAttributes> ResizeAttributes::ReadUpsample(const Node& node) {
  ResizeAttributes a;
  TOB_ASSIGN_OR_RETURN(int mode, Choice(node, "mode", "nearest", {"nearest", "linear", "bilinear"}));
  a.mode = mode == 0 ? ResizeMode::kNearest : ResizeMode::kLinear;
  a.coordinates = ResizeCoordinates::kAsymmetric;
  a.nearest = ResizeNearest::kFloor;
  return a;
}

StatusOr<ResizePlan> PlanResize(const Node& node, const ResizeAttributes& attrs, const std::vector<int64_t>& input,
                                const Tensor* roi, const Tensor* scales, const Tensor* sizes) {
  const int64_t rank = static_cast<int64_t>(input.size());
  std::vector<int64_t> axes;
  if (attrs.axes.empty()) {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  } else {
    for (int64_t a : attrs.axes) {
      const int64_t n = a < 0 ? a + rank : a;
      if (n < 0 || n >= rank)
        return InvalidModel(node.Describe(), ": axis ", a, " in 'axes' is out of range for an input of rank ", rank);
      if (std::find(axes.begin(), axes.end(), n) != axes.end())
        return InvalidModel(node.Describe(), ": axis ", a, " appears more than once in 'axes'");
      axes.push_back(n);
    }
  }
  const size_t n = axes.size();
  ResizePlan plan;
  plan.output = input;
  plan.scales.assign(input.size(), 1.0);
  plan.roi_start.assign(input.size(), 0.0);
  plan.roi_end.assign(input.size(), 1.0);
  if (Given(scales) == Given(sizes))
    return InvalidModel(node.Describe(), ": exactly one of the scales and sizes inputs must be given (non-empty), got ",
                        Given(scales) ? "both" : "neither");
  if (Given(scales)) {
    if (static_cast<size_t>(scales->numel()) != n)
      return InvalidModel(node.Describe(), ": scales has ", scales->numel(), " values, expected ", n,
                          attrs.axes.empty() ? " (the input's rank)" : " (one per axis in 'axes')");
    for (size_t i = 0; i < n; ++i) {
      const double s = scales->ElementAsDouble(static_cast<int64_t>(i));
      const double out = std::floor(s * static_cast<double>(input[axes[i]]));
      // A scale that is not a positive finite number, or an output dim past 2^53, is a bad model.
      if (!(s > 0) || !(out <= 9007199254740992.0))
        return InvalidModel(node.Describe(), ": scales must be positive and give a representable size, got ", s,
                            " for axis ", axes[i]);
      plan.scales[axes[i]] = s;
      plan.output[axes[i]] = static_cast<int64_t>(out);
    }
  } else {
    if (static_cast<size_t>(sizes->numel()) != n)
      return InvalidModel(node.Describe(), ": sizes has ", sizes->numel(), " values, expected ", n,
                          attrs.axes.empty() ? " (the input's rank)" : " (one per axis in 'axes')");
    std::vector<double> ratio(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t size = sizes->ElementAsInt64(static_cast<int64_t>(i));
      if (size < 0) return InvalidModel(node.Describe(), ": sizes must be non-negative, got ", size);
      const int64_t in = input[axes[i]];
      ratio[i] = in > 0 ? static_cast<double>(size) / static_cast<double>(in) : 1.0;
      plan.output[axes[i]] = size;
      plan.scales[axes[i]] = ratio[i];
    }
    if (attrs.policy != ResizeAspectPolicy::kStretch && n > 0) {
      // One scale for every resized axis; the sizes then round half up from it.
      const double s = attrs.policy == ResizeAspectPolicy::kNotLarger ? *std::min_element(ratio.begin(), ratio.end())
                                                                      : *std::max_element(ratio.begin(), ratio.end());
      for (int64_t a : axes) {
        plan.scales[a] = s;
        plan.output[a] = static_cast<int64_t>(s * static_cast<double>(input[a]) + 0.5);
      }
    }
  }
  if (attrs.coordinates == ResizeCoordinates::kTfCropAndResize && Given(roi)) {
    if (static_cast<size_t>(roi->numel()) != 2 * n)
      return InvalidModel(node.Describe(), ": roi has ", roi->numel(), " values, expected ", 2 * n,
                          " (starts then ends of the resized axes)");
    for (size_t i = 0; i < n; ++i) {
      plan.roi_start[axes[i]] = roi->ElementAsDouble(static_cast<int64_t>(i));
      plan.roi_end[axes[i]] = roi->ElementAsDouble(static_cast<int64_t>(n + i));
    }
  }
  return plan;
}

}  // namespace tob
