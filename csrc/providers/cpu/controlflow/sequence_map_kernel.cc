// SequenceMap (ai.onnx 17): runs the body, compiled once as a nested session, once per element of
// the input sequence. Iteration i feeds element i of the input sequence and, for each additional
// input, its element i (a sequence, which must be as long) or the whole tensor; body output j's
// tensor becomes element i of output sequence j. An empty input sequence gives empty sequences of
// the body outputs' dtypes.
#include "framework/kernel_registry.h"

namespace tob {

namespace {

class SequenceMapKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    if (node.subgraph("body") == nullptr)
      return InvalidModel(node.Describe(), ": required GRAPH attribute 'body' is missing");
    return MakeKernel<SequenceMapKernel>(node);
  }

  Status Compute(KernelContext& ctx) const override {
    const SubgraphRunner* body = ctx.subgraph("body");
    if (body == nullptr) return ctx.Fail("its body was not compiled (the node runs outside a session)");
    const RuntimeValue* first = ctx.input_value(0);
    if (first == nullptr || !first->is_sequence())
      return ctx.Fail("input 0 must be a sequence, got ", first == nullptr ? std::string("none") : first->Describe());
    const size_t length = first->sequence().tensors.size();
    for (int i = 1; i < ctx.num_inputs(); ++i) {
      const RuntimeValue* v = ctx.input_value(i);
      if (v == nullptr || !(v->is_tensor() || v->is_sequence()))
        return ctx.Fail("input ", i, " must be a tensor or a sequence, got ",
                        v == nullptr ? std::string("none") : v->Describe());
      if (v->is_sequence() && v->sequence().tensors.size() != length)
        return ctx.Fail("input ", i, " is a sequence of ", v->sequence().tensors.size(), " tensors; input 0 has ",
                        length);
    }
    const size_t n_out = static_cast<size_t>(ctx.num_outputs());
    std::vector<std::vector<Tensor>> gathered(n_out);
    for (size_t e = 0; e < length; ++e) {
      std::vector<RuntimeValue> feeds;
      for (int i = 0; i < ctx.num_inputs(); ++i) {
        const RuntimeValue& v = *ctx.input_value(i);
        feeds.emplace_back(v.is_sequence() ? v.sequence().tensors[e] : v.tensor());
      }
      std::vector<RuntimeValue> fetches;
      Status st = body->Run(std::move(feeds), &fetches);
      if (!st.ok()) return st.WithContext(StrCat(node().Describe(), ", element ", e));
      if (fetches.size() != n_out)
        return ctx.Fail("the body returned ", fetches.size(), " values for ", n_out, " outputs");
      for (size_t j = 0; j < n_out; ++j) {
        if (!fetches[j].is_tensor())
          return ctx.Fail("body output ", j, " must be a tensor at element ", e, ", got ", fetches[j].Describe());
        gathered[j].push_back(std::move(fetches[j].mutable_tensor()));
      }
    }
    const Graph& g = body->graph();
    for (size_t j = 0; j < n_out; ++j) {
      RuntimeValue* out = ctx.output_value(static_cast<int>(j));
      if (out == nullptr) continue;
      const DType dtype = gathered[j].empty() ? g.outputs()[j]->type().dtype : gathered[j][0].dtype();
      if (dtype == DType::kUndefined) return ctx.Fail("the element type of output ", j, " is unknown");
      *out = RuntimeValue::OfSequence(dtype, std::move(gathered[j]));
    }
    return Status::OK();
  }
};

}  // namespace

void RegisterCpuSequenceMapKernels(KernelRegistry& registry) {
  registry.Register(Def("SequenceMap").Versions(17).ValueKernel().Kernel<SequenceMapKernel>());
}

}  // namespace tob
