// Scan (ai.onnx 8-25): runs the body, compiled once as a nested session, once per element of the
// scan inputs' sequence, carrying N state variables from one iteration to the next and stacking
// K scan outputs.
//  - Opset 9+: scan_input_axes / scan_output_axes pick the sequence dim of each scan input and
//    output (negative counts from the end), scan_input_directions / scan_output_directions run or
//    place it in reverse. A scan input scanned along dim 0 is fed as views of its own memory; along
//    another dim it is transposed once (that dim to the front), and so is a scan output placed
//    along a dim other than 0.
//  - Opset 8: every state and scan input has a leading batch dim and the sequence on dim 1; each
//    batch entry is scanned on its own, for sequence_lens[b] steps (absent: the whole sequence),
//    `directions` reversing scan inputs; scan outputs are zero past a short sequence (as
//    onnxruntime).
// States move from one iteration's fetches to the next one's feeds without a copy.
#include "framework/kernel_registry.h"
#include "providers/cpu/controlflow/controlflow_utils.h"

namespace tob {

namespace {

using controlflow::SliceFirst;
using controlflow::StackedOutput;

Status ReadList(const Node& node, const char* name, size_t count, bool directions, std::vector<int64_t>* out) {
  TOB_RETURN_IF_ERROR(node.GetAttr(name, out, std::vector<int64_t>(count, 0)));
  if (out->size() != count)
    return InvalidModel(node.Describe(), ": attribute '", name, "' has ", out->size(), " entries, expected ", count);
  for (int64_t v : *out)
    if (directions && v != 0 && v != 1)
      return InvalidModel(node.Describe(), ": attribute '", name, "' must hold 0 (forward) or 1 (reverse), got ", v);
  return Status::OK();
}

class ScanKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, bool batched) {
    if (node.subgraph("body") == nullptr)
      return InvalidModel(node.Describe(), ": required GRAPH attribute 'body' is missing");
    auto k = std::unique_ptr<ScanKernel>(new ScanKernel(node, batched));
    TOB_RETURN_IF_ERROR(node.GetAttr("num_scan_inputs", &k->m_));
    const int64_t first = batched ? 1 : 0;
    const int64_t variadic = static_cast<int64_t>(node.inputs().size()) - first;
    if (k->m_ < 1 || k->m_ > variadic)
      return InvalidModel(node.Describe(), ": num_scan_inputs is ", k->m_, " but the node has ", variadic,
                          " state and scan inputs");
    k->n_ = variadic - k->m_;
    k->k_ = static_cast<int64_t>(node.outputs().size()) - k->n_;
    if (k->k_ < 0)
      return InvalidModel(node.Describe(), ": has ", node.outputs().size(), " outputs for ", k->n_, " state variables");
    const size_t m = static_cast<size_t>(k->m_), kk = static_cast<size_t>(k->k_);
    if (batched) {
      TOB_RETURN_IF_ERROR(ReadList(node, "directions", m, true, &k->in_dirs_));
      k->in_axes_.assign(m, 1);
    } else {
      TOB_RETURN_IF_ERROR(ReadList(node, "scan_input_axes", m, false, &k->in_axes_));
      TOB_RETURN_IF_ERROR(ReadList(node, "scan_input_directions", m, true, &k->in_dirs_));
      TOB_RETURN_IF_ERROR(ReadList(node, "scan_output_axes", kk, false, &k->out_axes_));
      TOB_RETURN_IF_ERROR(ReadList(node, "scan_output_directions", kk, true, &k->out_dirs_));
    }
    return std::unique_ptr<OpKernel>(std::move(k));
  }

  Status Compute(KernelContext& ctx) const override {
    const SubgraphRunner* body = ctx.subgraph("body");
    if (body == nullptr) return ctx.Fail("its body was not compiled (the node runs outside a session)");
    return batched_ ? ComputeBatched(ctx, *body) : ComputeSequence(ctx, *body);
  }

 private:
  ScanKernel(const Node& node, bool batched) : OpKernel(node), batched_(batched) {}

  // The sequence length shared by the scan inputs, each along its axis (`axes` normalized here).
  Status SequenceLength(const KernelContext& ctx, size_t first_scan_input, std::vector<int64_t>* axes, int64_t min_rank,
                        int64_t* length) const {
    *length = -1;
    for (size_t j = 0; j < axes->size(); ++j) {
      const int input = static_cast<int>(first_scan_input + j);
      const Tensor* x = ctx.input(input);
      if (x == nullptr) return ctx.Fail("scan input ", input, " is missing");
      if (x->rank() < min_rank)
        return ctx.Fail("scan input ", input, " has shape ", ShapeToString(x->shape()), "; it needs ",
                        batched_ ? "a batch and a sequence dimension" : "a dimension to scan");
      int64_t& axis = (*axes)[j];
      if (axis < -x->rank() || axis >= x->rank())
        return ctx.Fail("scan axis ", axis, " of scan input ", input, " is out of range for shape ",
                        ShapeToString(x->shape()));
      if (axis < 0) axis += x->rank();
      const int64_t len = x->shape()[axis];
      if (*length >= 0 && len != *length)
        return ctx.Fail("scan inputs have different sequence lengths: input ", input, " has ", len, " along axis ",
                        axis, " but input ", first_scan_input, " has ", *length);
      *length = len;
    }
    return Status::OK();
  }

  Status RunBody(const KernelContext& ctx, const SubgraphRunner& body, std::vector<Tensor> feeds,
                 std::vector<Tensor>* fetches, int64_t t, int64_t batch) const {
    Status st = body.RunTensors(std::move(feeds), fetches);
    if (!st.ok())
      return st.WithContext(batch < 0 ? StrCat(node().Describe(), ", iteration ", t)
                                      : StrCat(node().Describe(), ", batch entry ", batch, ", iteration ", t));
    if (static_cast<int64_t>(fetches->size()) != n_ + k_)
      return ctx.Fail("the body returned ", fetches->size(), " values; it must return ", n_ + k_);
    return Status::OK();
  }

  Status ComputeSequence(KernelContext& ctx, const SubgraphRunner& body) const {
    ThreadPool* pool = ctx.thread_pool();
    const size_t n = static_cast<size_t>(n_), m = static_cast<size_t>(m_), kk = static_cast<size_t>(k_);
    std::vector<int64_t> axes = in_axes_;
    int64_t length = 0;
    TOB_RETURN_IF_ERROR(SequenceLength(ctx, n, &axes, 1, &length));
    std::vector<Tensor> scanned;  // each scan input with its sequence dim first
    for (size_t j = 0; j < m; ++j) {
      TOB_ASSIGN_OR_RETURN(Tensor front, controlflow::AxisToFront(pool, *ctx.input(static_cast<int>(n + j)), axes[j]));
      scanned.push_back(std::move(front));
    }
    std::vector<Tensor> states;
    for (size_t j = 0; j < n; ++j) states.push_back(*ctx.input(static_cast<int>(j)));
    std::vector<StackedOutput> outputs;
    for (size_t s = 0; s < kk; ++s) outputs.emplace_back(StrCat(node().Describe(), ": scan output ", s), length);
    for (int64_t t = 0; t < length; ++t) {
      std::vector<Tensor> feeds;
      feeds.reserve(n + m);
      for (Tensor& v : states) feeds.push_back(std::move(v));
      for (size_t j = 0; j < m; ++j) feeds.push_back(SliceFirst(scanned[j], in_dirs_[j] ? length - 1 - t : t));
      std::vector<Tensor> fetches;
      TOB_RETURN_IF_ERROR(RunBody(ctx, body, std::move(feeds), &fetches, t, -1));
      for (size_t j = 0; j < n; ++j) states[j] = std::move(fetches[j]);
      for (size_t s = 0; s < kk; ++s)
        TOB_RETURN_IF_ERROR(outputs[s].Put(pool, out_dirs_[s] ? length - 1 - t : t, fetches[n + s], t));
    }
    for (size_t j = 0; j < n; ++j)
      if (Tensor* out = ctx.output(static_cast<int>(j))) *out = std::move(states[j]);
    for (size_t s = 0; s < kk; ++s) {
      Tensor* out = ctx.output(static_cast<int>(n + s));
      if (out == nullptr) continue;
      TOB_ASSIGN_OR_RETURN(Tensor stacked, outputs[s].Finish(body.graph().outputs()[n + s]->type()));
      int64_t axis = out_axes_[s];
      if (axis < -stacked.rank() || axis >= stacked.rank())
        return ctx.Fail("scan_output_axes[", s, "] = ", axis, " is out of range for scan output shape ",
                        ShapeToString(stacked.shape()));
      if (axis < 0) axis += stacked.rank();
      TOB_ASSIGN_OR_RETURN(*out, controlflow::FrontToAxis(pool, stacked, axis));
    }
    return Status::OK();
  }

  Status ComputeBatched(KernelContext& ctx, const SubgraphRunner& body) const {
    ThreadPool* pool = ctx.thread_pool();
    const size_t n = static_cast<size_t>(n_), m = static_cast<size_t>(m_), kk = static_cast<size_t>(k_);
    std::vector<int64_t> axes = in_axes_;
    int64_t max_length = 0;
    TOB_RETURN_IF_ERROR(SequenceLength(ctx, 1 + n, &axes, 2, &max_length));
    int64_t batch = -1;
    for (size_t i = 1; i < 1 + n + m; ++i) {
      const Tensor* x = ctx.input(static_cast<int>(i));
      if (x == nullptr) return ctx.Fail("input ", i, " is missing");
      if (x->rank() < 1) return ctx.Fail("input ", i, " has no batch dimension (Scan 8)");
      if (batch >= 0 && x->shape()[0] != batch)
        return ctx.Fail("inputs have different batch sizes: input ", i, " has ", x->shape()[0], ", input 1 has ",
                        batch);
      batch = x->shape()[0];
    }
    std::vector<int64_t> lengths(static_cast<size_t>(batch), max_length);
    if (const Tensor* lens = ctx.input(0)) {
      if (lens->dtype() != DType::kInt64 || lens->numel() != batch)
        return ctx.Fail("sequence_lens must be int64 with one entry per batch entry (", batch, "), got ",
                        DTypeName(lens->dtype()), ShapeToString(lens->shape()));
      for (int64_t b = 0; b < batch; ++b) {
        lengths[b] = lens->data<int64_t>()[b];
        if (lengths[b] < 0 || lengths[b] > max_length)
          return ctx.Fail("sequence_lens[", b, "] = ", lengths[b], " is outside [0, ", max_length, "]");
      }
    }
    std::vector<StackedOutput> final_states, scan_outputs;
    for (size_t j = 0; j < n; ++j) final_states.emplace_back(StrCat(node().Describe(), ": state ", j), batch);
    for (size_t s = 0; s < kk; ++s) scan_outputs.emplace_back(StrCat(node().Describe(), ": scan output ", s), batch);
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<Tensor> states;
      for (size_t j = 0; j < n; ++j) states.push_back(SliceFirst(*ctx.input(static_cast<int>(1 + j)), b));
      std::vector<Tensor> sequences;  // [max_length, ...] of this batch entry
      for (size_t j = 0; j < m; ++j) sequences.push_back(SliceFirst(*ctx.input(static_cast<int>(1 + n + j)), b));
      std::vector<StackedOutput> per_entry;
      for (size_t s = 0; s < kk; ++s)
        per_entry.emplace_back(StrCat(node().Describe(), ": scan output ", s, " of batch entry ", b), max_length);
      const int64_t len = lengths[b];
      for (int64_t t = 0; t < len; ++t) {
        std::vector<Tensor> feeds;
        feeds.reserve(n + m);
        for (Tensor& v : states) feeds.push_back(std::move(v));
        for (size_t j = 0; j < m; ++j) feeds.push_back(SliceFirst(sequences[j], in_dirs_[j] ? len - 1 - t : t));
        std::vector<Tensor> fetches;
        TOB_RETURN_IF_ERROR(RunBody(ctx, body, std::move(feeds), &fetches, t, b));
        for (size_t j = 0; j < n; ++j) states[j] = std::move(fetches[j]);
        for (size_t s = 0; s < kk; ++s) TOB_RETURN_IF_ERROR(per_entry[s].Put(pool, t, fetches[n + s], t));
      }
      for (size_t j = 0; j < n; ++j) TOB_RETURN_IF_ERROR(final_states[j].Put(pool, b, states[j], b));
      for (size_t s = 0; s < kk; ++s) {
        const ValueType& declared = body.graph().outputs()[n + s]->type();
        TOB_RETURN_IF_ERROR(per_entry[s].ZeroRest(len, declared));
        TOB_ASSIGN_OR_RETURN(Tensor entry, per_entry[s].Finish(declared));
        TOB_RETURN_IF_ERROR(scan_outputs[s].Put(pool, b, entry, b));
      }
    }
    for (size_t j = 0; j < n; ++j) {
      Tensor* out = ctx.output(static_cast<int>(j));
      if (out == nullptr) continue;
      ValueType state_type = body.graph().outputs()[j]->type();
      TOB_ASSIGN_OR_RETURN(*out, final_states[j].Finish(state_type));
    }
    for (size_t s = 0; s < kk; ++s) {
      Tensor* out = ctx.output(static_cast<int>(n + s));
      if (out == nullptr) continue;
      // An empty batch: [0, max_length, slice dims].
      ValueType entry = body.graph().outputs()[n + s]->type();
      if (entry.shape) entry.shape->insert(entry.shape->begin(), Dim(max_length));
      TOB_ASSIGN_OR_RETURN(*out, scan_outputs[s].Finish(entry));
    }
    return Status::OK();
  }

  bool batched_;
  int64_t m_ = 0, n_ = 0, k_ = 0;
  std::vector<int64_t> in_axes_, in_dirs_, out_axes_, out_dirs_;
};

}  // namespace

void RegisterCpuScanKernels(KernelRegistry& registry) {
  registry.Register(Def("Scan")
                        .Versions(8, 8)
                        .Constraint("I", {0}, {DType::kInt64})
                        .KernelAllocatesOutputs()
                        .Factory([](const Node& n) { return ScanKernel::Create(n, true); }));
  registry.Register(Def("Scan").Versions(9).KernelAllocatesOutputs().Factory(
      [](const Node& n) { return ScanKernel::Create(n, false); }));
}

}  // namespace tob
