// What one value slot of the executor holds at run time: a tensor, a sequence of tensors, or an
// optional with no value ("none"). An optional that holds a value is simply that tensor or
// sequence; the graph's ValueType says it was optional. Feeds and fetches of Session::RunValues,
// and the inputs and outputs of value kernels (KernelDef::ValueKernel), are RuntimeValues.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/value_type.h"

namespace tob {

// The tensors of a sequence, all of one element type. Immutable once made: the sequence ops build
// a new one (sharing the tensors' buffers), so values share a sequence without copying it.
// Its tensors are host tensors outside any run's arena (docs/architecture.md, "Sequence and
// optional values").
struct TensorSequence {
  DType dtype = DType::kUndefined;
  std::vector<Tensor> tensors;
};

class RuntimeValue {
 public:
  RuntimeValue() = default;
  // A tensor (an undefined tensor gives an undefined value).
  RuntimeValue(Tensor t) : tensor_(std::move(t)) {}  // NOLINT: implicit, a tensor is a value
  static RuntimeValue OfSequence(DType dtype, std::vector<Tensor> tensors) {
    auto seq = std::make_shared<TensorSequence>();
    seq->dtype = dtype;
    seq->tensors = std::move(tensors);
    return OfSequence(std::move(seq));
  }
  static RuntimeValue OfSequence(std::shared_ptr<const TensorSequence> seq) {
    RuntimeValue v;
    v.state_ = State::kSequence;
    v.sequence_ = std::move(seq);
    return v;
  }
  // An optional without a value; `type` is the optional's type (its kind and element type).
  static RuntimeValue None(ValueType type) {
    RuntimeValue v;
    v.state_ = State::kNone;
    type.optional = true;
    v.none_type_ = std::move(type);
    return v;
  }

  // A value that is a tensor, a sequence or none (not a slot nothing has written yet).
  bool defined() const { return state_ != State::kTensor || tensor_.defined(); }
  bool is_tensor() const { return state_ == State::kTensor && tensor_.defined(); }
  bool is_sequence() const { return state_ == State::kSequence; }
  bool is_none() const { return state_ == State::kNone; }

  // The tensor of a tensor value; the empty tensor otherwise. A kernel that allocates its outputs
  // assigns the tensor of an undefined value through mutable_tensor().
  const Tensor& tensor() const { return tensor_; }
  Tensor& mutable_tensor() { return tensor_; }
  // The sequence of a sequence value (ENFORCE: is_sequence()).
  const TensorSequence& sequence() const {
    TOB_ENFORCE(is_sequence(), "RuntimeValue::sequence() on a value that is not a sequence");
    return *sequence_;
  }
  const std::shared_ptr<const TensorSequence>& shared_sequence() const { return sequence_; }

  // The value's own type: a tensor's dtype and shape; a sequence's element type and the shape its
  // tensors share (unknown where they differ, or for an empty sequence); none's declared type.
  ValueType Type() const {
    switch (state_) {
      case State::kTensor: return tensor_.defined() ? ValueType::OfTensor(tensor_) : ValueType();
      case State::kSequence: {
        std::optional<Dims> common;
        for (size_t i = 0; i < sequence_->tensors.size(); ++i) {
          const Shape& s = sequence_->tensors[i].shape();
          if (i == 0) {
            common = DimsFromShape(s);
          } else if (common && DimsFromShape(s) != *common) {
            common.reset();
            break;
          }
        }
        return ValueType::Sequence(sequence_->dtype, std::move(common));
      }
      case State::kNone: return none_type_;
    }
    return ValueType();
  }
  // "float32[2, 3]", "a sequence of 3 float32 tensors", "none (optional seq(float32))".
  std::string Describe() const {
    switch (state_) {
      case State::kTensor:
        return tensor_.defined() ? StrCat(DTypeName(tensor_.dtype()), ShapeToString(tensor_.shape())) : "no value";
      case State::kSequence:
        return StrCat("a sequence of ", sequence_->tensors.size(), " ", DTypeName(sequence_->dtype), " tensors");
      case State::kNone: return StrCat("none (", none_type_.ToString(), ")");
    }
    return "no value";
  }

 private:
  enum class State : uint8_t { kTensor, kSequence, kNone };  // kTensor with no tensor: undefined
  State state_ = State::kTensor;
  Tensor tensor_;
  std::shared_ptr<const TensorSequence> sequence_;
  ValueType none_type_;
};

}  // namespace tob
