// The recurrent ops RNN, GRU and LSTM (opsets 7, 14, 22): inputs X, W, R, B?, sequence_lens?,
// initial_h? (and LSTM's initial_c?, P?); outputs Y?, Y_h? (and LSTM's Y_c?). The shape function
// checks every input against X, W and R and the attributes (nn_recurrent_attributes.h).
#include "ops/nn_recurrent_attributes.h"
#include "ops/op_schema.h"

namespace tob {

namespace {

// Each known dim of input `i` must equal the expected dim (unknown expectations match anything).
Status CheckInputDims(InferenceContext& ctx, int i, const char* name, const Dims& expected) {
  const ValueType* t = ctx.input_type(i);
  if (t == nullptr || !t->has_rank()) return Status::OK();
  if (t->rank() != static_cast<int64_t>(expected.size()))
    return ctx.Fail("input ", name, " must have rank ", expected.size(), " (", DimsToString(expected), "), got ",
                    t->ToString());
  for (size_t d = 0; d < expected.size(); ++d) {
    const Dim& got = (*t->shape)[d];
    if (got.is_known() && expected[d].is_known() && got.value != expected[d].value)
      return ctx.Fail("input ", name, " must be ", DimsToString(expected), ", got ", t->ToString());
  }
  return Status::OK();
}

Dim Times(const Dim& d, int64_t k) { return d.is_known() ? Dim(d.value * k) : Dim::Unknown(); }

Status InferRecurrent(InferenceContext& ctx) {
  TOB_ASSIGN_OR_RETURN(RecurrentAttributes a, RecurrentAttributes::Read(ctx.node()));
  if (a.layout != 0 && ctx.opset() < 14)
    return ctx.Fail("attribute 'layout' exists from opset 14 (the model's opset is ", ctx.opset(), ")");
  const ValueType& x = *ctx.input_type(0);
  const ValueType& w = *ctx.input_type(1);
  const ValueType& r = *ctx.input_type(2);
  for (int i = 3; i < ctx.num_inputs(); ++i) {
    const ValueType* t = ctx.input_type(i);
    const bool lens = i == 4;
    if (t != nullptr && !lens && t->dtype != x.dtype)
      return ctx.Fail("input ", i, " has dtype ", DTypeName(t->dtype), ", expected X's ", DTypeName(x.dtype));
  }
  if (w.dtype != x.dtype || r.dtype != x.dtype) return ctx.Fail("X, W and R must have one dtype");
  for (const auto& [t, name] : {std::pair{&x, "X"}, std::pair{&w, "W"}, std::pair{&r, "R"}})
    if (t->has_rank() && t->rank() != 3) return ctx.Fail("input ", name, " must be 3-D, got ", t->ToString());

  const Dim seq = x.has_rank() ? (*x.shape)[a.layout == 0 ? 0 : 1] : Dim::Unknown();
  const Dim batch = x.has_rank() ? (*x.shape)[a.layout == 0 ? 1 : 0] : Dim::Unknown();
  const Dim input = x.has_rank() ? (*x.shape)[2] : Dim::Unknown();
  Dim hidden = a.hidden_size > 0 ? Dim(a.hidden_size) : Dim::Unknown();
  if (!hidden.is_known() && r.has_rank()) hidden = (*r.shape)[2];
  const Dim dirs(a.num_directions);
  const int64_t g = a.gates();
  TOB_RETURN_IF_ERROR(CheckInputDims(ctx, 1, "W", Dims{dirs, Times(hidden, g), input}));
  TOB_RETURN_IF_ERROR(CheckInputDims(ctx, 2, "R", Dims{dirs, Times(hidden, g), hidden}));
  TOB_RETURN_IF_ERROR(CheckInputDims(ctx, 3, "B", Dims{dirs, Times(hidden, 2 * g)}));
  TOB_RETURN_IF_ERROR(CheckInputDims(ctx, 4, "sequence_lens", Dims{batch}));
  const Dims state = a.layout == 0 ? Dims{dirs, batch, hidden} : Dims{batch, dirs, hidden};
  TOB_RETURN_IF_ERROR(CheckInputDims(ctx, 5, "initial_h", state));
  if (a.op == RecurrentOp::kLstm) {
    TOB_RETURN_IF_ERROR(CheckInputDims(ctx, 6, "initial_c", state));
    TOB_RETURN_IF_ERROR(CheckInputDims(ctx, 7, "P", Dims{dirs, Times(hidden, 3)}));
  }
  const ValueType* lens = ctx.input_type(4);
  if (lens != nullptr && lens->dtype != DType::kInt32)
    return ctx.Fail("sequence_lens must be int32, got ", DTypeName(lens->dtype));

  const Dims y = a.layout == 0 ? Dims{seq, dirs, batch, hidden} : Dims{batch, seq, dirs, hidden};
  ctx.set_output(0, ValueType(x.dtype, y));
  for (int o = 1; o < ctx.num_outputs(); ++o) ctx.set_output(o, ValueType(x.dtype, state));
  return Status::OK();
}

}  // namespace

void RegisterNnRecurrentSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{"", "RNN", 3, 6, 0, 2, InferRecurrent});
  registry.Register(OpSchema{"", "GRU", 3, 6, 0, 2, InferRecurrent});
  registry.Register(OpSchema{"", "LSTM", 3, 8, 0, 3, InferRecurrent});
}

}  // namespace tob
