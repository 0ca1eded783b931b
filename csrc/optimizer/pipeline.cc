// The pass manager and THE pipeline: one plain, ordered list of passes per optimisation level.
#include "core/env_switch.h"
#include "optimizer/passes.h"

namespace tob {

namespace {

// On by default; TOB_ELEMENTWISE_FUSION=0 turns it off (A/B runs). One-thread CPU time of
// bench_compile's models at their benchmark size, on / off interleaved in one process: within the
// method's noise (3-8%) on every model; on for its smaller step peaks and because it changes no bit
// (docs/performance.md, "Elementwise fusion").
bool ElementwiseFusionEnabled() { return EnvSwitchOn(EnvSwitch::kElementwiseFusion); }

// On by default; TOB_LOSS_GRAD_FUSION=0 turns it off (A/B runs; docs/performance.md, "bfloat16 GEMM
// and autocast").
bool LossGradFusionEnabled() { return EnvSwitchOn(EnvSwitch::kLossGradFusion); }

// On by default; TOB_RMS_NORM_FUSION=0 turns it off (A/B runs; docs/performance.md, "RMSNorm and
// rotary embedding fusion").
bool RmsNormFusionEnabled() { return EnvSwitchOn(EnvSwitch::kRmsNormFusion); }

// On by default; TOB_ROTARY_FUSION=0 turns it off (docs/performance.md, "RMSNorm and rotary
// embedding fusion").
bool RotaryFusionEnabled() { return EnvSwitchOn(EnvSwitch::kRotaryFusion); }

// On by default; TOB_ELEMENTWISE_REMAT=0 turns it off (A/B runs; docs/memory_optimizer.md,
// "A recomputed layer's GELU gradient from x alone").
bool ElementwiseRematEnabled() { return EnvSwitchOn(EnvSwitch::kElementwiseRemat); }

// On by default; TOB_NCHWC=0 turns it off (A/B runs; docs/performance.md, "The blocked layout").
bool NchwcEnabled() { return EnvSwitchOn(EnvSwitch::kNchwc); }

}  // namespace

Status PassManager::RunPass(GraphPass& pass, Graph& graph, PassContext& ctx, bool* changed) {
  bool here = false;
  Status status = pass.Run(graph, ctx, &here);
  if (!status.ok())
    return status.WithContext(StrCat("optimizer pass ", pass.name(), graph.is_subgraph() ? " on " : "",
                                     graph.is_subgraph() ? graph.Describe() : ""));
  if (here) {
    *changed = true;
    std::string line = StrCat(pass.name(), ": ", pass.summary());
    if (graph.is_subgraph()) line += " (" + graph.Describe() + ")";
    if (ctx.log) ctx.log(line);
    applied_.push_back(std::move(line));
  }
  if (!pass.applies_to_subgraphs()) return Status::OK();
  std::vector<Graph*> subgraphs;
  for (Node* node : graph.nodes())
    for (Graph* sub : node->subgraphs()) subgraphs.push_back(sub);
  if (subgraphs.empty()) return Status::OK();
  // Names to keep refer to the main graph's values.
  PassContext sub_ctx = ctx;
  sub_ctx.keep_values.clear();
  sub_ctx.verify_after_each_pass = false;
  for (Graph* sub : subgraphs) TOB_RETURN_IF_ERROR(RunPass(pass, *sub, sub_ctx, changed));
  return Status::OK();
}

Status PassManager::Run(Graph& graph, PassContext& ctx, int max_rounds) {
  applied_.clear();
  for (int round = 0; round < max_rounds; ++round) {
    bool any_change = false;
    for (const auto& pass : passes_) {
      bool changed = false;
      TOB_RETURN_IF_ERROR(RunPass(*pass, graph, ctx, &changed));
      if (!changed) continue;
      any_change = true;
      if (ctx.verify_after_each_pass) {
        Status valid = VerifyGraph(graph, *ctx.schemas);
        if (!valid.ok())
          return Status(valid.code(),
                        StrCat("the graph is invalid after optimizer pass ", pass->name(), ": ", valid.message()));
      }
    }
    if (!any_change) break;
  }
  return Status::OK();
}

PassManager BuildPipeline(OptLevel level, const CastPropagationOptions& casts) {
  PassManager pm;
  if (level == OptLevel::kDisableAll) return pm;
  // kBasic: semantics-preserving clean-ups that every provider benefits from. Shape inference
  // comes first and runs again each round, so that folding a shape computation lets later
  // rounds see the static shapes it produced.
  pm.Add(CreateShapeInferencePass());
  pm.Add(CreateConstantFoldingPass());
  // An If whose condition folded to a constant becomes the branch it takes.
  pm.Add(CreateInlineConstantIfPass());
  // Chosen by the user (it may compute ops in the low-precision type); folding then turns the
  // Casts it puts on constants into constants of the low type.
  if (casts.enabled()) pm.Add(CreatePropagateCastOpsPass(casts));
  pm.Add(CreateIdentityEliminationPass());
  pm.Add(CreateCommonSubexpressionEliminationPass());
  pm.Add(CreateDeadCodeEliminationPass());
  if (level == OptLevel::kBasic) return pm;
  // kExtended and kAll: fusions, after the clean-ups that expose their patterns (the manager
  // repeats the whole list, so DCE also sweeps what a fusion leaves behind).
  pm.Add(CreateConvBatchNormFoldingPass());
  pm.Add(CreateConvActivationFusionPass());
  pm.Add(CreateMatMulTransposeFusionPass());
  if (LossGradFusionEnabled()) pm.Add(CreateCrossEntropyGradFusionPass());
  if (level == OptLevel::kExtended) return pm;
  // kAll: fusions into ops of our own domain (ai.tob), last, on the cleaned-up graph.
  // RMSNorm and RoPE first: ElementwiseFusion would otherwise take their elementwise nodes.
  if (RmsNormFusionEnabled()) pm.Add(CreateRmsNormFusionPass());
  if (RotaryFusionEnabled()) pm.Add(CreateRotaryEmbeddingFusionPass());
  // After ConvActivationFusion (kExtended), so that a conv's Relu and residual sum are its own.
  if (NchwcEnabled()) pm.Add(CreateNchwcLayoutPass());
  if (ElementwiseFusionEnabled()) pm.Add(CreateElementwiseFusionPass());
  if (ElementwiseFusionEnabled() && ElementwiseRematEnabled()) pm.Add(CreateElementwiseRematerializationPass());
  return pm;
}

}  // namespace tob
