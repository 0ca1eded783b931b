// Loop (ai.onnx 1-25): runs the body, compiled once as a nested session, while the trip count M
// (absent: no limit) and the condition (absent: true) allow. Each iteration feeds the iteration
// number, the condition and the loop-carried values, and takes back the condition, the new
// loop-carried values (tensors, sequences or optionals: a value kernel) and one slice per scan
// output (a tensor). Loop-carried values move from one
// iteration's fetches to the next one's feeds (a body's outputs are never memory its next run
// reuses), so carrying costs no copy; the scan outputs' slices are kept and stacked once at the
// end. Zero iterations give the initial values and empty scan outputs ([0, slice dims]).
#include <climits>

#include "framework/kernel_registry.h"
#include "providers/cpu/controlflow/controlflow_utils.h"

namespace tob {

namespace {

class LoopKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    if (node.subgraph("body") == nullptr)
      return InvalidModel(node.Describe(), ": required GRAPH attribute 'body' is missing");
    return MakeKernel<LoopKernel>(node);
  }

  Status Compute(KernelContext& ctx) const override {
    const SubgraphRunner* body = ctx.subgraph("body");
    if (body == nullptr) return ctx.Fail("its body was not compiled (the node runs outside a session)");
    const size_t n = ctx.num_inputs() > 2 ? static_cast<size_t>(ctx.num_inputs() - 2) : 0;
    const size_t outs = static_cast<size_t>(ctx.num_outputs());
    if (outs < n) return ctx.Fail("has ", outs, " outputs for ", n, " loop-carried values");
    const size_t k = outs - n;
    int64_t trips = INT64_MAX;
    if (const RuntimeValue* mv = ctx.input_value(0)) {
      const Tensor* m = ctx.input(0);
      if (m == nullptr || m->dtype() != DType::kInt64 || m->numel() != 1)
        return ctx.Fail("the trip count M must be an int64 tensor of one element, got ",
                        m == nullptr ? mv->Describe() : DTypeName(m->dtype()) + ShapeToString(m->shape()));
      trips = *m->data<int64_t>();
    }
    bool cond = true;
    if (const RuntimeValue* cv = ctx.input_value(1)) {
      const Tensor* c = ctx.input(1);
      if (c == nullptr) return ctx.Fail("the condition (input 1) must be a tensor, got ", cv->Describe());
      TOB_ASSIGN_OR_RETURN(cond, controlflow::ReadCondition(ctx, *c, "the condition (input 1)"));
    }
    // Loop-carried values are values of any kind (tensors, sequences, none), moved whole.
    std::vector<RuntimeValue> carried;
    for (size_t j = 0; j < n; ++j) {
      const RuntimeValue* v = ctx.input_value(static_cast<int>(2 + j));
      if (v == nullptr) return ctx.Fail("loop-carried input ", 2 + j, " is missing");
      carried.push_back(*v);
    }
    const Shape iteration_shape = controlflow::OneElementShape(body->graph(), 0);
    const Shape cond_shape = controlflow::OneElementShape(body->graph(), 1);
    std::vector<std::vector<Tensor>> slices(k);
    int64_t i = 0;
    for (; i < trips && cond; ++i) {
      std::vector<RuntimeValue> feeds;
      feeds.reserve(2 + n);
      feeds.emplace_back(controlflow::Int64Scalar(i, iteration_shape));
      feeds.emplace_back(controlflow::BoolScalar(cond, cond_shape));
      for (RuntimeValue& v : carried) feeds.push_back(std::move(v));
      std::vector<RuntimeValue> fetches;
      Status st = body->Run(std::move(feeds), &fetches);
      if (!st.ok()) return st.WithContext(StrCat(node().Describe(), ", iteration ", i));
      if (fetches.size() != 1 + n + k)
        return ctx.Fail("the body returned ", fetches.size(), " values; it must return ", 1 + n + k);
      if (!fetches[0].is_tensor())
        return ctx.Fail("the body's condition output at iteration ", i, " must be a tensor, got ",
                        fetches[0].Describe());
      TOB_ASSIGN_OR_RETURN(cond, controlflow::ReadCondition(ctx, fetches[0].tensor(),
                                                            StrCat("the body's condition output at iteration ", i)));
      for (size_t j = 0; j < n; ++j) carried[j] = std::move(fetches[1 + j]);
      for (size_t s = 0; s < k; ++s) {
        RuntimeValue& slice = fetches[1 + n + s];
        if (!slice.is_tensor())
          return ctx.Fail("scan output ", s, " (body output ", 1 + n + s, ") must be a tensor at iteration ", i,
                          ", got ", slice.Describe());
        slices[s].push_back(std::move(slice.mutable_tensor()));
      }
    }
    for (size_t j = 0; j < n; ++j)
      if (RuntimeValue* out = ctx.output_value(static_cast<int>(j))) *out = std::move(carried[j]);
    for (size_t s = 0; s < k; ++s) {
      RuntimeValue* out = ctx.output_value(static_cast<int>(n + s));
      if (out == nullptr) continue;
      controlflow::StackedOutput stacked(StrCat(node().Describe(), ": scan output ", s), i);
      for (int64_t t = 0; t < i; ++t) {
        TOB_RETURN_IF_ERROR(stacked.Put(ctx.thread_pool(), t, slices[s][t], t));
        slices[s][t] = Tensor();
      }
      TOB_ASSIGN_OR_RETURN(Tensor stacked_out, stacked.Finish(body->graph().outputs()[1 + n + s]->type()));
      *out = std::move(stacked_out);
    }
    return Status::OK();
  }
};

}  // namespace

void RegisterCpuLoopKernels(KernelRegistry& registry) {
  registry.Register(Def("Loop")
                        .Versions(1)
                        .Constraint("I", {0}, {DType::kInt64})
                        .Constraint("B", {1}, {DType::kBool})
                        .ValueKernel()
                        .Kernel<LoopKernel>());
}

}  // namespace tob
