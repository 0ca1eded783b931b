// The built-in graph passes, one per file in this folder. BuildPipeline (pipeline.cc) lists them
// in order; tests run them one at a time.
#pragma once

#include <memory>

#include "optimizer/pass.h"

namespace tob {

// Re-runs static shape inference (InferShapes); changed when a value's type got more precise.
std::unique_ptr<GraphPass> CreateShapeInferencePass();
// Evaluates nodes whose inputs are all constants with the fold provider's kernels; Shape/Size of
// a statically known shape become constants too.
std::unique_ptr<GraphPass> CreateConstantFoldingPass();
// An If whose condition is a constant is replaced by the nodes of the branch it always takes.
std::unique_ptr<GraphPass> CreateInlineConstantIfPass();
// Removes Identity, Cast to the same dtype, Reshape to the same static shape and inference-mode
// Dropout whose mask is unused.
std::unique_ptr<GraphPass> CreateIdentityEliminationPass();
// Merges nodes with the same op, domain, inputs and attributes.
std::unique_ptr<GraphPass> CreateCommonSubexpressionEliminationPass();
// Folds an inference-mode BatchNormalization with constant parameters into the Conv that feeds
// it (float32 weights).
std::unique_ptr<GraphPass> CreateConvBatchNormFoldingPass();
// A Conv read only by an activation (optionally through a residual Add/Sum of a same-shaped
// value) becomes one com.microsoft FusedConv that applies both in its store.
std::unique_ptr<GraphPass> CreateConvActivationFusionPass();
// 2-D Transposes around MatMul/Gemm become Gemm's transA/transB (extended level).
std::unique_ptr<GraphPass> CreateMatMulTransposeFusionPass();
// NegativeLogLikelihoodLossGrad + LogSoftmaxGrad_13 over the class axis of the same log-probabilities
// (cross-entropy's backward as AOTAutograd writes it) become one com.microsoft
// SoftmaxCrossEntropyLossGrad (extended level; TOB_LOSS_GRAD_FUSION=0 turns it off).
std::unique_ptr<GraphPass> CreateCrossEntropyGradFusionPass();
// Moves Casts between float32 and options.low_precision across ops that compute as well in the
// low type (strategy, level and allow list of onnxruntime-training's PropagateCastOps).
std::unique_ptr<GraphPass> CreatePropagateCastOpsPass(CastPropagationOptions options);
// The hand-written RMSNorm of LLaMA-style models (ReduceMean of the squares, Rsqrt, Mul, Mul by the
// weight) becomes one ai.tob::RMSNormalization (bit-identical to the chain; it can also return the
// inverse RMS a training forward saves); level kAll unless TOB_RMS_NORM_FUSION=0, only where
// PassContext::elementwise_fusion (CPU-only sessions).
std::unique_ptr<GraphPass> CreateRmsNormFusionPass();
// HuggingFace's rotary embedding (q * cos + rotate_half(q) * sin, cos and sin proved to have equal
// halves) becomes one ai.tob::RotaryEmbedding (bit-identical to the chain); level kAll unless
// TOB_ROTARY_FUSION=0, only where PassContext::elementwise_fusion.
std::unique_ptr<GraphPass> CreateRotaryEmbeddingFusionPass();
// Connected groups of float32 elementwise nodes of one output shape become one ai.tob
// FusedElementwise node (level kAll unless TOB_ELEMENTWISE_FUSION=0; PassContext::elementwise_fusion
// turns it off for a session with a device provider).
std::unique_ptr<GraphPass> CreateElementwiseFusionPass();
// A FusedElementwise node recomputes, from its producers' inputs, values another FusedElementwise
// node writes only for it, where that holds fewer bytes at every point of the run (a recomputed
// layer's GELU / SiLU intermediates in the training backward); after ElementwiseFusion, unless
// TOB_ELEMENTWISE_REMAT=0.
std::unique_ptr<GraphPass> CreateElementwiseRematerializationPass();
// Convs with constant float32 weights (group 1, Relu or no activation, static shapes) become
// ai.tob NchwcConv on activations blocked by 16 channels, with ReorderToNchwc / ReorderFromNchwc
// only where a value enters or leaves a chain of them; level kAll unless TOB_NCHWC=0, only where
// PassContext::elementwise_fusion (CPU-only sessions) and the CPU has AVX-512.
std::unique_ptr<GraphPass> CreateNchwcLayoutPass();
// Removes nodes none of whose outputs is used, kept or a graph output.
std::unique_ptr<GraphPass> CreateDeadCodeEliminationPass();

}  // namespace tob
