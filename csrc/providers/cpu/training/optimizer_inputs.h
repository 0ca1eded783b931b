// What the optimizer kernels share: reading their one-value inputs (learning rate, step, loss
// scale, norm, signals) and passing a state through unchanged when update_signal is false.
#pragma once

#include <cstring>
#include <optional>

#include "framework/kernel.h"

namespace tob::optimizer_inputs {

// The value of one-element input i as a double; nullopt when the input is omitted.
inline StatusOr<std::optional<double>> OptionalScalar(const KernelContext& ctx, int i, const char* name) {
  const Tensor* t = ctx.input(i);
  if (t == nullptr) return std::optional<double>();
  if (t->numel() != 1)
    return ctx.Fail("input ", i, " (", name, ") must hold one value, got shape ", ShapeToString(t->shape()));
  return std::optional<double>(t->ElementAsDouble(0));
}

inline StatusOr<double> RequiredScalar(const KernelContext& ctx, int i, const char* name) {
  TOB_ASSIGN_OR_RETURN(std::optional<double> v, OptionalScalar(ctx, i, name));
  if (!v) return ctx.Fail("input ", i, " (", name, ") is required");
  return *v;
}

// Whether the update should happen: update_signal omitted or true.
inline StatusOr<bool> ShouldUpdate(const KernelContext& ctx, int i) {
  TOB_ASSIGN_OR_RETURN(std::optional<double> signal, OptionalScalar(ctx, i, "update_signal"));
  return !signal || *signal != 0.0;
}

// dst = src unless dst is omitted or already is src (an in-place state).
inline Status PassThrough(const KernelContext& ctx, const Tensor* src, Tensor* dst) {
  if (dst == nullptr || src == nullptr || dst->SharesDataWith(*src)) return Status::OK();
  if (dst->nbytes() != src->nbytes() || dst->dtype() != src->dtype())
    return ctx.Fail("output ", DTypeName(dst->dtype()), ShapeToString(dst->shape()), " cannot take input ",
                    DTypeName(src->dtype()), ShapeToString(src->shape()));
  if (src->nbytes() > 0) std::memcpy(dst->raw_data(), src->raw_data(), src->nbytes());
  return Status::OK();
}

// Input i must have `shape` (the weights' shape) and dtype `dtype` (kUndefined: any).
inline Status CheckOperand(const KernelContext& ctx, const Tensor* t, int i, const char* name, const Shape& shape,
                           DType dtype = DType::kUndefined) {
  if (t == nullptr) return ctx.Fail("input ", i, " (", name, ") is required");
  if (t->shape() != shape)
    return ctx.Fail("input ", i, " (", name, ") has shape ", ShapeToString(t->shape()), ", the weights have ",
                    ShapeToString(shape));
  if (dtype != DType::kUndefined && t->dtype() != dtype)
    return ctx.Fail("input ", i, " (", name, ") must be ", DTypeName(dtype), ", got ", DTypeName(t->dtype()));
  return Status::OK();
}

}  // namespace tob::optimizer_inputs
