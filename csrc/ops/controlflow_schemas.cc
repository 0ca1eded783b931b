// Control flow: If, Loop and Scan (ai.onnx, every opset). Their shape functions infer the
// subgraphs for the types the op gives their formal inputs (InferenceContext::InferSubgraph):
//   If    no inputs; the outputs merge both branches' (a dim the branches disagree on is unknown),
//         or are the taken branch's when the condition is known (a constant, or at run time).
//   Loop  (iteration number, condition, N loop-carried values) -> (condition, N carried, K scan
//         outputs); the carried values' shapes are widened to a fixpoint (a dim that changes from
//         one iteration to the next becomes unknown), scan outputs get a leading dim of unknown
//         length (the trip count is data).
//   Scan  opset 9+: (N states, M scan-input slices) -> (N states, K scan-output slices), with the
//         axes and directions attributes; opset 8: a leading batch dim on every input and output,
//         the sequence on axis 1, an optional sequence_lens first input.
// Errors name the node, the subgraph and what was expected (a branch with the wrong number of
// outputs, a body with the wrong number of inputs, scan inputs of different lengths).
#include <algorithm>

#include "ops/op_schema.h"

namespace tob {

namespace {

bool SameDim(const Dim& a, const Dim& b) { return a.value == b.value && a.symbol == b.symbol; }

bool SameType(const ValueType& a, const ValueType& b) {
  if (a.dtype != b.dtype || a.shape.has_value() != b.shape.has_value()) return false;
  if (!a.shape) return true;
  if (a.shape->size() != b.shape->size()) return false;
  for (size_t i = 0; i < a.shape->size(); ++i)
    if (!SameDim((*a.shape)[i], (*b.shape)[i])) return false;
  return true;
}

// What holds for both types: the dtype (when one is undefined, the other's), the rank when they
// agree on it, each dim they agree on (a known size or the same symbol), unknown elsewhere.
ValueType Generalize(const ValueType& a, const ValueType& b) {
  ValueType r;
  r.dtype = a.dtype == DType::kUndefined ? b.dtype : a.dtype;
  // A sequence or an optional stays one (an untyped value says nothing about its kind).
  r.kind = a.dtype == DType::kUndefined ? b.kind : a.kind;
  r.optional = a.optional || b.optional;
  if (!a.shape || !b.shape || a.shape->size() != b.shape->size()) return r;
  Dims dims;
  for (size_t i = 0; i < a.shape->size(); ++i) {
    const Dim& x = (*a.shape)[i];
    const Dim& y = (*b.shape)[i];
    dims.push_back((x.is_known() || x.is_symbolic()) && x == y ? x : Dim::Unknown());
  }
  r.shape = std::move(dims);
  return r;
}

std::string TypeName(const ValueType& t) { return t.dtype == DType::kUndefined ? "an untyped value" : t.ToString(); }

Status CheckSameDType(const InferenceContext& ctx, const ValueType& a, const ValueType& b, const std::string& what) {
  if (a.dtype != DType::kUndefined && b.dtype != DType::kUndefined && a.dtype != b.dtype)
    return ctx.Fail(what, ": ", TypeName(a), " vs ", TypeName(b), " (the dtypes must be equal)");
  if (a.dtype != DType::kUndefined && b.dtype != DType::kUndefined && a.kind != b.kind)
    return ctx.Fail(what, ": ", TypeName(a), " vs ", TypeName(b), " (a sequence and a tensor)");
  return Status::OK();
}

// Scan slices its scan inputs (Scan 8 its states too) and Loop and Scan stack their scan outputs
// a whole number of bytes per element; the packed sub-byte types (int4, uint4, float4e2m1, int2,
// uint2) hold several elements in a byte, so such values are refused by name, not sliced wrongly.
// (Loop-carried values and If's outputs pass through whole and may have any dtype.)
Status RefusePacked(const InferenceContext& ctx, DType dtype, const std::string& what) {
  if (IsPackedDType(dtype))
    return ctx.Fail(what, " is ", DTypeName(dtype),
                    ": the control-flow kernels slice and stack whole bytes per element, and a packed "
                    "sub-byte type holds several elements in a byte");
  return Status::OK();
}

// A one-element tensor of `dtype` (a condition, a trip count): scalar or [1].
Status CheckOneElement(const InferenceContext& ctx, int input, DType dtype, const char* what) {
  const ValueType* t = ctx.input_type(input);
  if (t == nullptr) return Status::OK();
  if (t->kind != ValueKind::kTensor)
    return ctx.Fail(what, " (input ", input, ") must be a tensor, got ", t->ToString());
  if (t->dtype != DType::kUndefined && t->dtype != dtype)
    return ctx.Fail(what, " (input ", input, ") must be ", DTypeName(dtype), ", got ", t->ToString());
  if (t->shape)
    for (const Dim& d : *t->shape)
      if (d.is_known() && d.value != 1)
        return ctx.Fail(what, " (input ", input, ") must hold one element, got shape ", DimsToString(*t->shape));
  return Status::OK();
}

// The type a body declares for its input i when it has the dtype the op feeds, else `fallback`
// (the iteration number and the condition: scalars, or [1] where the body declares that).
ValueType ScalarInputType(const Graph& body, size_t i, DType dtype) {
  const ValueType& declared = body.inputs()[i]->declared_type();
  if (declared.dtype == dtype && declared.shape && declared.shape->size() <= 1) {
    std::optional<Shape> s = ConcreteShape(*declared.shape);
    if (s && NumElements(*s) == 1) return declared;
  }
  return ValueType(dtype, Dims{});
}

// Loop-carried values (Loop) and states (Scan): the body is inferred with the carried types, and
// a dim whose value the body changes is widened to unknown, until the body returns what it was
// given (each round infers from the declared types again). `prefix` and `suffix` are the body's
// other inputs; `carried_out` is where the carried values start among the body's outputs.
Status InferCarried(InferenceContext& ctx, const std::string& attr, const std::vector<ValueType>& prefix,
                    std::vector<ValueType>* carried, const std::vector<ValueType>& suffix, size_t carried_out,
                    std::vector<ValueType>* body_outputs) {
  const Graph* body = ctx.subgraph(attr);
  // The body's own declarations of the carried inputs say only the dtype: shapes may change
  // from one iteration to the next (as onnx's inference, which drops them too).
  for (size_t j = 0; j < carried->size(); ++j) {
    const ValueType& declared = body->inputs()[prefix.size() + j]->declared_type();
    TOB_RETURN_IF_ERROR(
        CheckSameDType(ctx, (*carried)[j], declared,
                       StrCat(attr, " input ", prefix.size() + j, " '", body->inputs()[prefix.size() + j]->name(),
                              "' is declared differently from the loop-carried value that feeds it")));
    if ((*carried)[j].dtype == DType::kUndefined) (*carried)[j].dtype = declared.dtype;
  }
  auto inputs_for = [&](const std::vector<ValueType>& c) {
    std::vector<ValueType> in = prefix;
    in.insert(in.end(), c.begin(), c.end());
    in.insert(in.end(), suffix.begin(), suffix.end());
    return in;
  };
  constexpr int kMaxRounds = 8;
  for (int round = 0;; ++round) {
    TOB_RETURN_IF_ERROR(ctx.InferSubgraph(attr, inputs_for(*carried), body_outputs));
    if (body_outputs->size() < carried_out + carried->size()) return Status::OK();  // the caller reports it
    bool stable = true;
    for (size_t j = 0; j < carried->size(); ++j) {
      const ValueType& out = (*body_outputs)[carried_out + j];
      TOB_RETURN_IF_ERROR(CheckSameDType(ctx, (*carried)[j], out,
                                         StrCat("loop-carried value ", j, ": the ", attr,
                                                " returns a different dtype "
                                                "than it is given")));
      ValueType widened = Generalize((*carried)[j], out);
      stable = stable && SameType(widened, (*carried)[j]);
      (*carried)[j] = std::move(widened);
    }
    if (stable || !ctx.infers_subgraphs()) return Status::OK();
    if (round + 1 == kMaxRounds) {  // cannot happen with monotone shape functions; stay sound
      for (ValueType& t : *carried) t.shape.reset();
      return ctx.InferSubgraph(attr, inputs_for(*carried), body_outputs);
    }
  }
}

// ---------------- If ----------------

Status InferIf(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckOneElement(ctx, 0, DType::kBool, "the condition"));
  const Tensor* cond = ctx.input_value(0);
  const bool known = cond != nullptr && cond->numel() == 1;
  const size_t n = static_cast<size_t>(ctx.num_outputs());
  if (known) {  // only the branch that runs: the other may even be ill-typed (it never runs)
    const char* taken = cond->ElementAsInt64(0) != 0 ? "then_branch" : "else_branch";
    std::vector<ValueType> out;
    TOB_RETURN_IF_ERROR(ctx.InferSubgraph(taken, {}, &out));
    if (out.size() != n)
      return ctx.Fail(taken, " has ", out.size(), " outputs but the node has ", n,
                      " (each branch must produce every output of the If)");
    for (size_t i = 0; i < n; ++i) ctx.set_output(i, out[i]);
    return Status::OK();
  }
  std::vector<ValueType> then_out, else_out;
  TOB_RETURN_IF_ERROR(ctx.InferSubgraph("then_branch", {}, &then_out));
  TOB_RETURN_IF_ERROR(ctx.InferSubgraph("else_branch", {}, &else_out));
  for (const auto& [name, outs] : {std::make_pair("then_branch", &then_out), std::make_pair("else_branch", &else_out)})
    if (outs->size() != n)
      return ctx.Fail(name, " has ", outs->size(), " outputs but the node has ", n,
                      " (each branch must produce every output of the If)");
  for (size_t i = 0; i < n; ++i)
    TOB_RETURN_IF_ERROR(
        CheckSameDType(ctx, then_out[i], else_out[i], StrCat("output ", i, ": then_branch and else_branch disagree")));
  for (size_t i = 0; i < n; ++i) ctx.set_output(i, Generalize(then_out[i], else_out[i]));
  return Status::OK();
}

// ---------------- Loop ----------------

Status InferLoop(InferenceContext& ctx) {
  const Graph* body = ctx.subgraph("body");
  if (body == nullptr) return ctx.Fail("required GRAPH attribute 'body' is missing");
  TOB_RETURN_IF_ERROR(CheckOneElement(ctx, 0, DType::kInt64, "the trip count M"));
  TOB_RETURN_IF_ERROR(CheckOneElement(ctx, 1, DType::kBool, "the condition"));
  const size_t n = ctx.num_inputs() > 2 ? static_cast<size_t>(ctx.num_inputs() - 2) : 0;
  const size_t outs = static_cast<size_t>(ctx.num_outputs());
  if (body->inputs().size() != 2 + n)
    return ctx.Fail("body takes ", body->inputs().size(), " inputs; a Loop with ", n, " loop-carried value",
                    n == 1 ? "" : "s", " needs ", 2 + n, " (iteration number, condition, the loop-carried values)");
  if (outs < n)
    return ctx.Fail("has ", outs, " outputs but ", n, " loop-carried values (each needs its final value as an output)");
  if (body->outputs().size() != 1 + outs)
    return ctx.Fail("body has ", body->outputs().size(), " outputs; it must return the condition, the ", n,
                    " loop-carried values and one value per scan output (", 1 + outs, " for this node's ", outs,
                    " outputs)");
  std::vector<ValueType> carried;
  for (size_t j = 0; j < n; ++j) {
    const ValueType* t = ctx.input_type(static_cast<int>(2 + j));
    if (t == nullptr) return ctx.Fail("loop-carried input ", 2 + j, " is missing");
    carried.push_back(*t);
  }
  const std::vector<ValueType> prefix = {ScalarInputType(*body, 0, DType::kInt64),
                                         ScalarInputType(*body, 1, DType::kBool)};
  std::vector<ValueType> body_out;
  TOB_RETURN_IF_ERROR(InferCarried(ctx, "body", prefix, &carried, {}, 1, &body_out));
  if (body_out.size() != 1 + outs) return ctx.Fail("body returned ", body_out.size(), " types");
  const ValueType& cond_out = body_out[0];
  if (cond_out.kind != ValueKind::kTensor || (cond_out.dtype != DType::kUndefined && cond_out.dtype != DType::kBool))
    return ctx.Fail("body output 0 (the condition) must be a bool tensor, got ", cond_out.ToString());
  for (size_t j = 0; j < n; ++j) ctx.set_output(static_cast<int>(j), Generalize(carried[j], body_out[1 + j]));
  for (size_t k = n; k < outs; ++k) {
    const ValueType& slice = body_out[1 + k];
    if (slice.kind != ValueKind::kTensor || slice.optional)
      return ctx.Fail("scan output ", k - n, " (body output ", 1 + k, ") must be a tensor, got ", slice.ToString());
    TOB_RETURN_IF_ERROR(RefusePacked(ctx, slice.dtype, StrCat("scan output ", k)));
    ValueType t(slice.dtype, std::nullopt);
    if (slice.shape) {
      Dims dims{Dim::Unknown()};  // the trip count is data (the condition may stop the loop early)
      dims.insert(dims.end(), slice.shape->begin(), slice.shape->end());
      t.shape = std::move(dims);
    }
    ctx.set_output(static_cast<int>(k), std::move(t));
  }
  return Status::OK();
}

// ---------------- SequenceMap ----------------

// SequenceMap (ai.onnx 17): the body runs once per element of input 0, fed that element and, for
// each additional input, its element at the same position (a sequence) or the whole tensor; each
// body output (a tensor) gathers into an output sequence.
Status InferSequenceMap(InferenceContext& ctx) {
  const Graph* body = ctx.subgraph("body");
  if (body == nullptr) return ctx.Fail("required GRAPH attribute 'body' is missing");
  const int n_in = ctx.num_inputs();
  if (static_cast<int>(body->inputs().size()) != n_in)
    return ctx.Fail("body takes ", body->inputs().size(), " inputs; it must take one per input of the node (", n_in,
                    ")");
  if (body->outputs().size() != static_cast<size_t>(ctx.num_outputs()))
    return ctx.Fail("body has ", body->outputs().size(), " outputs for the node's ", ctx.num_outputs());
  std::vector<ValueType> feeds;
  for (int i = 0; i < n_in; ++i) {
    if (!ctx.has_input(i)) return ctx.Fail("input ", i, " is missing");
    const ValueType& t = *ctx.input_type(i);
    if (t.optional || (i == 0 && !t.is_sequence()))
      return ctx.Fail("input ", i, " must be a ", i == 0 ? "sequence" : "tensor or a sequence", ", got ", t.ToString());
    feeds.push_back(t.is_sequence() ? ValueType(t.dtype, t.shape) : t);
  }
  std::vector<ValueType> out;
  TOB_RETURN_IF_ERROR(ctx.InferSubgraph("body", feeds, &out));
  for (size_t j = 0; j < out.size(); ++j) {
    if (!out[j].is_tensor()) return ctx.Fail("body output ", j, " must be a tensor, got ", out[j].ToString());
    ctx.set_output(static_cast<int>(j), ValueType::Sequence(out[j].dtype, out[j].shape));
  }
  return Status::OK();
}

// ---------------- Scan ----------------

Status ReadAxes(const InferenceContext& ctx, const char* name, size_t count, std::vector<int64_t>* out) {
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr(name, out, std::vector<int64_t>(count, 0)));
  if (out->size() != count)
    return ctx.Fail("attribute '", name, "' has ", out->size(), " entries; it needs one per scan ",
                    std::string(name).find("output") != std::string::npos ? "output" : "input", " (", count, ")");
  return Status::OK();
}

Status ReadDirections(const InferenceContext& ctx, const char* name, size_t count, std::vector<int64_t>* out) {
  TOB_RETURN_IF_ERROR(ReadAxes(ctx, name, count, out));
  for (int64_t d : *out)
    if (d != 0 && d != 1) return ctx.Fail("attribute '", name, "' must hold 0 (forward) or 1 (reverse), got ", d);
  return Status::OK();
}

// The sequence dim shared by the scan inputs: the first known length (every known one must
// equal it), else a symbol they all share, else unknown.
Status MergeSequenceDim(const InferenceContext& ctx, const Dim& d, size_t input, Dim* seq, int* first) {
  if (*first < 0) {
    *seq = d;
    *first = static_cast<int>(input);
    return Status::OK();
  }
  if (d.is_known() && seq->is_known() && d.value != seq->value)
    return ctx.Fail("scan inputs have different sequence lengths: input ", input, " has ", d.value, " but input ",
                    *first, " has ", seq->value);
  if (!seq->is_known() && (d.is_known() || !(*seq == d))) *seq = d.is_known() ? d : Dim::Unknown();
  return Status::OK();
}

Dims Without(const Dims& dims, size_t first, size_t count) {
  Dims r(dims.begin(), dims.begin() + first);
  r.insert(r.end(), dims.begin() + first + count, dims.end());
  return r;
}

Status InferScan(InferenceContext& ctx) {
  const Graph* body = ctx.subgraph("body");
  if (body == nullptr) return ctx.Fail("required GRAPH attribute 'body' is missing");
  const bool batched = ctx.opset() < 9;  // Scan 8: [batch, ...] states, [batch, seq, ...] scan inputs
  int64_t m_attr = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("num_scan_inputs", &m_attr));
  const size_t first = batched ? 1 : 0;  // Scan 8's first input is sequence_lens
  const size_t variadic = ctx.num_inputs() > static_cast<int>(first) ? ctx.num_inputs() - first : 0;
  if (m_attr < 1 || static_cast<size_t>(m_attr) > variadic)
    return ctx.Fail("num_scan_inputs is ", m_attr, " but the node has ", variadic,
                    " state and scan inputs (it needs at least one scan input)");
  const size_t m = static_cast<size_t>(m_attr), n = variadic - m;
  const size_t outs = static_cast<size_t>(ctx.num_outputs());
  if (outs < n) return ctx.Fail("has ", outs, " outputs but ", n, " state variables (each needs its final value)");
  const size_t k = outs - n;
  if (body->inputs().size() != n + m)
    return ctx.Fail("body takes ", body->inputs().size(), " inputs; a Scan with ", n, " state variables and ", m,
                    " scan inputs needs ", n + m);
  if (body->outputs().size() != n + k)
    return ctx.Fail("body has ", body->outputs().size(), " outputs; this Scan needs ", n + k, " (", n,
                    " state variables and ", k, " scan outputs)");
  std::vector<int64_t> in_axes(m, 0), out_axes(k, 0), in_dirs, out_dirs;
  if (batched) {
    TOB_RETURN_IF_ERROR(ReadDirections(ctx, "directions", m, &in_dirs));
    if (const ValueType* lens = ctx.input_type(0);
        lens != nullptr &&
        ((lens->dtype != DType::kUndefined && lens->dtype != DType::kInt64) || (lens->has_rank() && lens->rank() != 1)))
      return ctx.Fail("sequence_lens (input 0) must be a 1-D int64 tensor (one length per batch entry), got ",
                      lens->ToString());
  } else {
    TOB_RETURN_IF_ERROR(ReadAxes(ctx, "scan_input_axes", m, &in_axes));
    TOB_RETURN_IF_ERROR(ReadAxes(ctx, "scan_output_axes", k, &out_axes));
    TOB_RETURN_IF_ERROR(ReadDirections(ctx, "scan_input_directions", m, &in_dirs));
    TOB_RETURN_IF_ERROR(ReadDirections(ctx, "scan_output_directions", k, &out_dirs));
  }
  // Scan 8: the batch dim, shared by every state and scan input.
  Dim batch = Dim::Unknown();
  int batch_from = -1;
  auto merge_batch = [&](const ValueType& t, size_t input) -> Status {
    if (!batched) return Status::OK();
    if (t.shape && t.shape->empty()) return ctx.Fail("input ", input, " has no batch dimension (Scan 8)");
    if (!t.shape) return Status::OK();
    const Dim& d = (*t.shape)[0];
    if (batch_from >= 0 && d.is_known() && batch.is_known() && d.value != batch.value)
      return ctx.Fail("inputs have different batch sizes: input ", input, " has ", d.value, " but input ", batch_from,
                      " has ", batch.value);
    if (batch_from < 0 || (!batch.is_known() && d.is_known())) {
      batch = d;
      batch_from = static_cast<int>(input);
    }
    return Status::OK();
  };
  std::vector<ValueType> states;
  for (size_t j = 0; j < n; ++j) {
    const size_t input = first + j;
    const ValueType* t = ctx.input_type(static_cast<int>(input));
    if (t == nullptr) return ctx.Fail("state input ", input, " is missing");
    if (batched) TOB_RETURN_IF_ERROR(RefusePacked(ctx, t->dtype, StrCat("state input ", input)));
    TOB_RETURN_IF_ERROR(merge_batch(*t, input));
    ValueType s(t->dtype, std::nullopt);
    if (t->shape) s.shape = batched ? Without(*t->shape, 0, 1) : *t->shape;
    states.push_back(std::move(s));
  }
  std::vector<ValueType> slices;
  Dim seq = Dim::Unknown();
  int seq_from = -1;
  for (size_t j = 0; j < m; ++j) {
    const size_t input = first + n + j;
    const ValueType* t = ctx.input_type(static_cast<int>(input));
    if (t == nullptr) return ctx.Fail("scan input ", input, " is missing");
    TOB_RETURN_IF_ERROR(RefusePacked(ctx, t->dtype, StrCat("scan input ", input)));
    TOB_RETURN_IF_ERROR(merge_batch(*t, input));
    ValueType s(t->dtype, std::nullopt);
    if (t->shape) {
      const int64_t rank = static_cast<int64_t>(t->shape->size());
      const int64_t need = batched ? 2 : 1;
      if (rank < need)
        return ctx.Fail("scan input ", input, " has shape ", DimsToString(*t->shape), "; it needs ",
                        batched ? "a batch and a sequence dimension" : "a dimension to scan");
      int64_t axis = batched ? 1 : in_axes[j];
      if (!batched) TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, rank, &axis));
      TOB_RETURN_IF_ERROR(MergeSequenceDim(ctx, (*t->shape)[axis], input, &seq, &seq_from));
      s.shape = batched ? Without(*t->shape, 0, 2) : Without(*t->shape, static_cast<size_t>(axis), 1);
    }
    slices.push_back(std::move(s));
  }
  std::vector<ValueType> body_out;
  TOB_RETURN_IF_ERROR(InferCarried(ctx, "body", {}, &states, slices, 0, &body_out));
  if (body_out.size() != n + k) return ctx.Fail("body returned ", body_out.size(), " types");
  for (size_t j = 0; j < n; ++j) {
    ValueType t = Generalize(states[j], body_out[j]);
    if (batched && t.shape) t.shape->insert(t.shape->begin(), batch);
    ctx.set_output(static_cast<int>(j), std::move(t));
  }
  for (size_t j = 0; j < k; ++j) {
    const ValueType& slice = body_out[n + j];
    TOB_RETURN_IF_ERROR(RefusePacked(ctx, slice.dtype, StrCat("scan output ", n + j)));
    ValueType t(slice.dtype, std::nullopt);
    if (slice.shape) {
      Dims dims = *slice.shape;
      if (batched) {
        dims.insert(dims.begin(), seq);
        dims.insert(dims.begin(), batch);
      } else {
        int64_t axis = out_axes[j];
        TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, static_cast<int64_t>(dims.size()) + 1, &axis));
        dims.insert(dims.begin() + axis, seq);
      }
      t.shape = std::move(dims);
    }
    ctx.set_output(static_cast<int>(n + j), std::move(t));
  }
  return Status::OK();
}

}  // namespace

void RegisterControlFlowSchemas(OpSchemaRegistry& registry) {
  // If's outputs and Loop's loop-carried values may be sequences or optionals (the shape
  // functions keep the condition, the trip count and the scan outputs tensors, by name).
  OpSchema if_schema{"", "If", 1, 1, 1, INT_MAX, InferIf};
  if_schema.non_tensor_values = true;
  registry.Register(if_schema);
  OpSchema loop_schema{"", "Loop", 0, INT_MAX, 0, INT_MAX, InferLoop};
  loop_schema.non_tensor_values = true;
  registry.Register(loop_schema);
  OpSchema sequence_map_schema{"", "SequenceMap", 1, INT_MAX, 1, INT_MAX, InferSequenceMap};
  sequence_map_schema.non_tensor_values = true;
  registry.Register(sequence_map_schema);
  // Scan 8's first input (sequence_lens) may be omitted; the shape function counts the others.
  registry.Register(OpSchema{"", "Scan", 0, INT_MAX, 0, INT_MAX, InferScan});
}

}  // namespace tob
