#include "ops/signal_attributes.h"

namespace tob {

StatusOr<DftAttributes> DftAttributes::Read(const Node& node, int opset) {
  DftAttributes a;
  int64_t inverse = 0, onesided = 0;
  TOB_RETURN_IF_ERROR(node.GetAttr("inverse", &inverse, int64_t{0}));
  TOB_RETURN_IF_ERROR(node.GetAttr("onesided", &onesided, int64_t{0}));
  if (inverse != 0 && inverse != 1)
    return InvalidModel(node.Describe(), ": attribute 'inverse' must be 0 or 1, got ", inverse);
  if (onesided != 0 && onesided != 1)
    return InvalidModel(node.Describe(), ": attribute 'onesided' must be 0 or 1, got ", onesided);
  a.inverse = inverse == 1;
  a.onesided = onesided == 1;
  a.axis_is_input = opset >= 20;
  if (a.axis_is_input) {
    if (node.FindAttribute("axis") != nullptr)
      return InvalidModel(node.Describe(), ": DFT-", opset, " takes the axis as input 2, not as an attribute");
  } else {
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &a.axis_attribute, int64_t{1}));
  }
  return a;
}

StatusOr<int64_t> ReadScalarInput(const Node& node, const char* what, const Tensor& value) {
  if (!(IsSignedInteger(value.dtype()) || IsUnsignedInteger(value.dtype())))
    return InvalidModel(node.Describe(), ": ", what, " must be an integer scalar, got ", DTypeName(value.dtype()));
  if (value.rank() > 1 || value.numel() != 1)
    return InvalidModel(node.Describe(), ": ", what, " must be a scalar, got shape ", ShapeToString(value.shape()));
  return value.ElementAsInt64(0);
}

StatusOr<int64_t> ResolveDftAxis(const Node& node, const DftAttributes& attrs, int64_t rank, const Tensor* axis_input) {
  int64_t axis = attrs.axis_attribute;
  if (attrs.axis_is_input) {
    axis = -2;
    if (axis_input != nullptr) {
      TOB_ASSIGN_OR_RETURN(axis, ReadScalarInput(node, "axis", *axis_input));
    }
  }
  // [-rank, -2] or [0, rank - 2]: the last dimension holds the real and imaginary parts.
  if (axis < -rank || axis > rank - 2 || axis == -1)
    return InvalidModel(node.Describe(), ": axis ", axis, " is outside [", -rank, ", -2] and [0, ", rank - 2,
                        "] for an input of rank ", rank, " (the last dimension holds the complex parts)");
  return axis < 0 ? axis + rank : axis;
}

StatusOr<int64_t> ResolveDftLength(const Node& node, const DftAttributes& attrs, int64_t axis_dim,
                                   const Tensor* length_input) {
  int64_t length = attrs.inverse && attrs.onesided ? 2 * (axis_dim - 1) : axis_dim;
  if (length_input != nullptr) {
    TOB_ASSIGN_OR_RETURN(length, ReadScalarInput(node, "dft_length", *length_input));
    if (length < 1) return InvalidModel(node.Describe(), ": dft_length must be positive, got ", length);
  } else if (length < 1) {
    return InvalidModel(node.Describe(), ": the default transform length of an axis of ", axis_dim, " elements is ",
                        length, "; give a positive dft_length");
  }
  return length;
}

StatusOr<bool> ReadStftOnesided(const Node& node) {
  int64_t onesided = 1;
  TOB_RETURN_IF_ERROR(node.GetAttr("onesided", &onesided, int64_t{1}));
  if (onesided != 0 && onesided != 1)
    return InvalidModel(node.Describe(), ": attribute 'onesided' must be 0 or 1, got ", onesided);
  return onesided == 1;
}

StatusOr<StftPlan> PlanStft(const Node& node, bool onesided, int64_t signal_length, const Tensor& frame_step,
                            int64_t window_length, const Tensor* frame_length) {
  StftPlan p;
  TOB_ASSIGN_OR_RETURN(p.frame_step, ReadScalarInput(node, "frame_step", frame_step));
  if (p.frame_step < 1) return InvalidModel(node.Describe(), ": frame_step must be positive, got ", p.frame_step);
  if (frame_length != nullptr) {
    TOB_ASSIGN_OR_RETURN(p.frame_length, ReadScalarInput(node, "frame_length", *frame_length));
    if (window_length >= 0 && window_length != p.frame_length)
      return InvalidModel(node.Describe(), ": the window has ", window_length, " values but frame_length is ",
                          p.frame_length);
  } else {
    p.frame_length = window_length >= 0 ? window_length : signal_length;
  }
  if (p.frame_length < 1) return InvalidModel(node.Describe(), ": frame_length must be positive, got ", p.frame_length);
  if (p.frame_length > signal_length)
    return InvalidModel(node.Describe(), ": frame_length ", p.frame_length, " is longer than the signal (",
                        signal_length, " samples)");
  p.frames = (signal_length - p.frame_length) / p.frame_step + 1;
  p.bins = onesided ? p.frame_length / 2 + 1 : p.frame_length;
  return p;
}

}  // namespace tob
