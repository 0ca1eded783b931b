#include "ops/nn_window_attributes.h"

#include <algorithm>

namespace tob {

namespace {

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

Status CheckLength(const Node& node, const char* name, const std::vector<int64_t>& v, size_t expected) {
  if (!v.empty() && v.size() != expected)
    return InvalidModel(node.Describe(), ": attribute '", name, "' has ", v.size(), " values, expected ", expected,
                        " (one per spatial dim)");
  return Status::OK();
}

}  // namespace

StatusOr<WindowAttributes> WindowAttributes::Read(const Node& node) {
  WindowAttributes a;
  std::string auto_pad;
  TOB_RETURN_IF_ERROR(node.GetAttr("auto_pad", &auto_pad, std::string("NOTSET")));
  if (auto_pad == "NOTSET" || auto_pad.empty()) a.auto_pad = AutoPad::kNotSet;
  else if (auto_pad == "VALID") a.auto_pad = AutoPad::kValid;
  else if (auto_pad == "SAME_UPPER") a.auto_pad = AutoPad::kSameUpper;
  else if (auto_pad == "SAME_LOWER") a.auto_pad = AutoPad::kSameLower;
  else
    return InvalidModel(node.Describe(), ": auto_pad '", auto_pad,
                        "' is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER");
  TOB_RETURN_IF_ERROR(node.GetAttr("kernel_shape", &a.kernel_shape, std::vector<int64_t>{}));
  TOB_RETURN_IF_ERROR(node.GetAttr("strides", &a.strides, std::vector<int64_t>{}));
  TOB_RETURN_IF_ERROR(node.GetAttr("dilations", &a.dilations, std::vector<int64_t>{}));
  TOB_RETURN_IF_ERROR(node.GetAttr("pads", &a.pads, std::vector<int64_t>{}));
  a.pads_given = node.FindAttribute("pads") != nullptr;
  int64_t ceil_mode = 0;
  TOB_RETURN_IF_ERROR(node.GetAttr("ceil_mode", &ceil_mode, int64_t{0}));
  a.ceil_mode = ceil_mode != 0;
  TOB_RETURN_IF_ERROR(node.GetAttr("group", &a.group, int64_t{1}));
  TOB_RETURN_IF_ERROR(node.GetAttr("output_padding", &a.output_padding, std::vector<int64_t>{}));
  TOB_RETURN_IF_ERROR(node.GetAttr("output_shape", &a.output_shape, std::vector<int64_t>{}));

  for (int64_t k : a.kernel_shape)
    if (k <= 0) return InvalidModel(node.Describe(), ": kernel_shape values must be positive");
  for (int64_t s : a.strides)
    if (s <= 0) return InvalidModel(node.Describe(), ": strides must be positive");
  for (int64_t d : a.dilations)
    if (d <= 0) return InvalidModel(node.Describe(), ": dilations must be positive");
  for (int64_t p : a.pads)
    if (p < 0) return InvalidModel(node.Describe(), ": pads must be non-negative");
  for (int64_t p : a.output_padding)
    if (p < 0) return InvalidModel(node.Describe(), ": output_padding must be non-negative");
  if (a.group <= 0) return InvalidModel(node.Describe(), ": group must be positive, got ", a.group);
  return a;
}

StatusOr<WindowAttributes> WindowAttributes::Resolve(const Node& node, int64_t spatial_rank,
                                                     const std::vector<int64_t>& kernel) const {
  WindowAttributes a = *this;
  size_t r = static_cast<size_t>(spatial_rank);
  if (spatial_rank < 1) return InvalidModel(node.Describe(), ": expected at least one spatial dim");
  TOB_RETURN_IF_ERROR(CheckLength(node, "kernel_shape", a.kernel_shape, r));
  TOB_RETURN_IF_ERROR(CheckLength(node, "strides", a.strides, r));
  TOB_RETURN_IF_ERROR(CheckLength(node, "dilations", a.dilations, r));
  TOB_RETURN_IF_ERROR(CheckLength(node, "output_padding", a.output_padding, r));
  if (!a.pads.empty() && a.pads.size() != 2 * r)
    return InvalidModel(node.Describe(), ": attribute 'pads' has ", a.pads.size(), " values, expected ", 2 * r);
  if (a.kernel_shape.empty()) {
    if (kernel.size() != r) return InvalidModel(node.Describe(), ": kernel_shape is required (", r, " spatial dims)");
    a.kernel_shape = kernel;
  } else if (!kernel.empty()) {
    for (size_t i = 0; i < r; ++i)
      if (kernel[i] >= 0 && kernel[i] != a.kernel_shape[i])
        return InvalidModel(node.Describe(), ": kernel_shape[", i, "] = ", a.kernel_shape[i],
                            " does not match the weight's spatial dim ", kernel[i]);
  }
  if (a.strides.empty()) a.strides.assign(r, 1);
  if (a.dilations.empty()) a.dilations.assign(r, 1);
  if (a.pads.empty()) a.pads.assign(2 * r, 0);
  if (a.output_padding.empty()) a.output_padding.assign(r, 0);
  if (a.output_shape.size() == r + 2) a.output_shape.erase(a.output_shape.begin(), a.output_shape.begin() + 2);
  if (!a.output_shape.empty() && a.output_shape.size() != r)
    return InvalidModel(node.Describe(), ": output_shape has ", a.output_shape.size(), " values, expected ", r);
  return a;
}

StatusOr<WindowDim> SlidingWindowDim(const Node& node, const WindowAttributes& a, size_t i, int64_t in) {
  const size_t r = a.kernel_shape.size();
  const int64_t stride = a.strides[i];
  const int64_t window = (a.kernel_shape[i] - 1) * a.dilations[i] + 1;
  WindowDim d;
  if (a.auto_pad == AutoPad::kSameUpper || a.auto_pad == AutoPad::kSameLower) {
    d.out = (in + stride - 1) / stride;
    int64_t total = std::max<int64_t>(0, (d.out - 1) * stride + window - in);
    d.pad_begin = a.auto_pad == AutoPad::kSameUpper ? total / 2 : total - total / 2;
    d.pad_end = total - d.pad_begin;
    return d;
  }
  if (a.auto_pad == AutoPad::kNotSet) {
    d.pad_begin = a.pads[i];
    d.pad_end = a.pads[i + r];
  }
  int64_t span = in + d.pad_begin + d.pad_end - window;
  // With ceil_mode a window may reach past the padded input's end, as far as stride - 1 positions
  // (ONNX's and torch's output size formulas agree: a 1x1 input under a kernel of 1280 and stride
  // 1280 gives one output, HF EfficientNet's final pooling); the kernels clip such windows.
  if (span < (a.ceil_mode ? 1 - stride : 0))
    return InvalidModel(node.Describe(), ": the window (kernel ", a.kernel_shape[i], ", dilation ", a.dilations[i],
                        ") is larger than the padded input (", in + d.pad_begin + d.pad_end, ") along spatial dim ", i,
                        a.ceil_mode ? " by more than the stride less one" : "");
  if (a.ceil_mode) {
    d.out = (span + stride - 1) / stride + 1;
    // The last window must start inside the input or its begin padding.
    if ((d.out - 1) * stride >= in + d.pad_begin) --d.out;
  } else {
    d.out = span / stride + 1;
  }
  return d;
}

StatusOr<WindowDim> TransposedWindowDim(const Node& node, const WindowAttributes& a, size_t i, int64_t in) {
  const size_t r = a.kernel_shape.size();
  const int64_t stride = a.strides[i];
  const int64_t window = (a.kernel_shape[i] - 1) * a.dilations[i] + 1;
  const int64_t natural = stride * (in - 1) + a.output_padding[i] + window;
  WindowDim d;
  const bool same = a.auto_pad == AutoPad::kSameUpper || a.auto_pad == AutoPad::kSameLower;
  if (!same && a.output_shape.empty()) {
    if (a.auto_pad == AutoPad::kNotSet) {
      d.pad_begin = a.pads[i];
      d.pad_end = a.pads[i + r];
    }
    d.out = natural - d.pad_begin - d.pad_end;
  } else if (!same && a.pads_given) {
    // Explicit pads and an explicit output size: the output is that size, padded as given.
    d.out = a.output_shape[i];
    d.pad_begin = a.pads[i];
    d.pad_end = natural - d.out - d.pad_begin;
  } else {
    d.out = a.output_shape.empty() ? in * stride : a.output_shape[i];
    int64_t total = natural - d.out;
    if (total < 0) {
      // A larger output than the input covers: the extra elements are zeros at the end.
      d.pad_begin = 0;
      d.pad_end = total;
    } else if (a.auto_pad == AutoPad::kSameUpper) {
      d.pad_begin = FloorDiv(total, 2);
      d.pad_end = total - d.pad_begin;
    } else {
      d.pad_end = FloorDiv(total, 2);
      d.pad_begin = total - d.pad_end;
    }
  }
  if (d.out <= 0) return InvalidModel(node.Describe(), ": output size along spatial dim ", i, " would be ", d.out);
  if (a.output_padding[i] > 0 && a.output_padding[i] >= stride && a.output_padding[i] >= a.dilations[i])
    return InvalidModel(node.Describe(), ": output_padding[", i, "] = ", a.output_padding[i],
                        " must be smaller than the stride or the dilation");
  return d;
}

}  // namespace tob
