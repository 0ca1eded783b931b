// FlexAttention (ai.onnx.preview 1): attention whose score matrix passes through the score_mod
// subgraph before the softmax and whose probabilities pass through prob_mod after it, each run as
// a compiled nested session (SubgraphRunner) on the whole [B, Hq, L, S] tensor. With onnx's
// reference semantics:
//   Q' = Q * sqrt(scale), K' = K * sqrt(scale)     in the input type (scale: 1/sqrt(E) by default)
//   scores = Q' K'^T                                 rounded to the input type, then to the
//                                                    softmax precision P (softmax_precision;
//                                                    float32 unless the inputs are float64)
//   scores = score_mod(scores); probs = softmax(scores, last axis); probs = prob_mod(probs)
//   Y = probs V                                      in P, rounded to the input type
// Query head h reads key/value head h / (Hq / Hkv) (grouped-query attention). Sums run in float64
// and round once to their type. The score matrix is materialised (the subgraphs take all of it), so
// memory is B * Hq * L * S elements of P; (batch, head) pairs are spread over the pool.
#include <cmath>

#include "core/half.h"
#include "framework/kernel_registry.h"

namespace tob {

namespace {

double RoundTo(double x, DType t) {
  switch (t) {
    case DType::kFloat32: return static_cast<float>(x);
    case DType::kFloat16: return static_cast<float>(Float16(static_cast<float>(x)));
    case DType::kBFloat16: return static_cast<float>(BFloat16(static_cast<float>(x)));
    default: return x;
  }
}

std::vector<double> ReadAll(const Tensor& t) {
  std::vector<double> r(static_cast<size_t>(t.numel()));
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kFloat32:
      for (int64_t i = 0; i < n; ++i) r[i] = t.data<float>()[i];
      break;
    case DType::kFloat64:
      for (int64_t i = 0; i < n; ++i) r[i] = t.data<double>()[i];
      break;
    case DType::kFloat16:
      for (int64_t i = 0; i < n; ++i) r[i] = static_cast<float>(t.data<Float16>()[i]);
      break;
    case DType::kBFloat16:
      for (int64_t i = 0; i < n; ++i) r[i] = static_cast<float>(t.data<BFloat16>()[i]);
      break;
    default: break;
  }
  return r;
}

void Store(Tensor& t, int64_t i, double x) {
  switch (t.dtype()) {
    case DType::kFloat32: t.data<float>()[i] = static_cast<float>(x); break;
    case DType::kFloat64: t.data<double>()[i] = x; break;
    case DType::kFloat16: t.data<Float16>()[i] = Float16(static_cast<float>(x)); break;
    case DType::kBFloat16: t.data<BFloat16>()[i] = BFloat16(static_cast<float>(x)); break;
    default: break;
  }
}

class FlexAttentionKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    float scale = 0.f;
    const bool has_scale = node.FindAttribute("scale") != nullptr;
    if (has_scale) TOB_RETURN_IF_ERROR(node.GetAttr("scale", &scale));
    int64_t precision = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("softmax_precision", &precision, int64_t{0}));
    return std::unique_ptr<OpKernel>(new FlexAttentionKernel(node, has_scale, scale, precision));
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor &q = *ctx.input(0), &k = *ctx.input(1), &v = *ctx.input(2);
    Tensor& y = *ctx.output(0);
    for (const Tensor* t : {&q, &k, &v})
      if (t->rank() != 4) return ctx.Fail("Q, K and V must be 4-D, got ", ShapeToString(t->shape()));
    const int64_t b = q.dim(0), hq = q.dim(1), l = q.dim(2), e = q.dim(3);
    const int64_t hkv = k.dim(1), s = k.dim(2), ev = v.dim(3);
    if (k.dim(0) != b || v.dim(0) != b || k.dim(3) != e || v.dim(1) != hkv || v.dim(2) != s || hkv <= 0 ||
        hq % hkv != 0)
      return ctx.Fail("Q ", ShapeToString(q.shape()), ", K ", ShapeToString(k.shape()), " and V ",
                      ShapeToString(v.shape()),
                      " do not fit together (batch, head size, key length; Q's heads a "
                      "multiple of K's)");
    const DType in_type = q.dtype();
    const DType p_type = precision_ != 0 ? DTypeFromOnnx(static_cast<int32_t>(precision_))
                                         : (in_type == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32);
    const double scale = has_scale_ ? scale_ : 1.0 / std::sqrt(static_cast<double>(e));
    const double root = RoundTo(std::sqrt(static_cast<float>(scale)), in_type);
    const std::vector<double> qd = ReadAll(q), kd = ReadAll(k), vd = ReadAll(v);
    const int64_t group = hq / hkv;

    TOB_ASSIGN_OR_RETURN(Tensor scores, Tensor::Allocate(p_type, {b, hq, l, s}, CpuAllocator::Default()));
    ParallelFor(ctx.thread_pool(), b * hq, 1, [&](int64_t begin, int64_t end) {
      std::vector<double> krow(static_cast<size_t>(e));
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t bi = bh / hq, h = bh % hq, hk = h / group;
        const double* qp = qd.data() + (bi * hq + h) * l * e;
        const double* kp = kd.data() + (bi * hkv + hk) * s * e;
        for (int64_t i = 0; i < l; ++i)
          for (int64_t j = 0; j < s; ++j) {
            double dot = 0;
            for (int64_t c = 0; c < e; ++c)
              dot += RoundTo(qp[i * e + c] * root, in_type) * RoundTo(kp[j * e + c] * root, in_type);
            Store(scores, (bh * l + i) * s + j, RoundTo(dot, in_type));
          }
      }
    });
    TOB_RETURN_IF_ERROR(Modify(ctx, "score_mod", &scores));
    std::vector<double> probs = ReadAll(scores);
    ParallelFor(ctx.thread_pool(), b * hq * l, 16, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        double* r = probs.data() + row * s;
        double m = -INFINITY;
        for (int64_t j = 0; j < s; ++j) m = std::max(m, r[j]);
        double sum = 0;
        for (int64_t j = 0; j < s; ++j) sum += (r[j] = RoundTo(std::exp(r[j] - m), p_type));
        for (int64_t j = 0; j < s; ++j) Store(scores, row * s + j, r[j] / sum);
      }
    });
    TOB_RETURN_IF_ERROR(Modify(ctx, "prob_mod", &scores));
    probs = ReadAll(scores);
    ParallelFor(ctx.thread_pool(), b * hq, 1, [&](int64_t begin, int64_t end) {
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t bi = bh / hq, h = bh % hq, hk = h / group;
        const double* pp = probs.data() + bh * l * s;
        const double* vp = vd.data() + (bi * hkv + hk) * s * ev;
        for (int64_t i = 0; i < l; ++i)
          for (int64_t c = 0; c < ev; ++c) {
            double acc = 0;
            for (int64_t j = 0; j < s; ++j) acc += pp[i * s + j] * RoundTo(vp[j * ev + c], p_type);
            Store(y, (bh * l + i) * ev + c, RoundTo(acc, p_type));
          }
      }
    });
    return Status::OK();
  }

 private:
  FlexAttentionKernel(const Node& node, bool has_scale, float scale, int64_t precision)
      : OpKernel(node), has_scale_(has_scale), scale_(scale), precision_(precision) {}

  // Runs modifier subgraph `name`, when the node has one, on *t (replaced by its result).
  Status Modify(KernelContext& ctx, const char* name, Tensor* t) const {
    if (node().subgraph(name) == nullptr) return Status::OK();
    const SubgraphRunner* runner = ctx.subgraph(name);
    if (runner == nullptr) return ctx.Fail(name, " was not compiled (the node runs outside a session)");
    std::vector<Tensor> out;
    TOB_RETURN_IF_ERROR(runner->RunTensors({*t}, &out));
    if (out.size() != 1 || out[0].dtype() != t->dtype() || out[0].shape() != t->shape())
      return ctx.Fail(name, " must return one ", DTypeName(t->dtype()), ShapeToString(t->shape()), " tensor, got ",
                      out.empty() ? std::string("none") : DTypeName(out[0].dtype()) + ShapeToString(out[0].shape()));
    // The result may be the subgraph's view of *t: keep a tensor of our own to write into.
    if (out[0].SharesDataWith(*t)) return Status::OK();
    *t = std::move(out[0]);
    return Status::OK();
  }

  bool has_scale_;
  float scale_;
  int64_t precision_;
};

}  // namespace

void RegisterCpuFlexAttentionKernels(KernelRegistry& registry) {
  registry.Register(Def("FlexAttention")
                        .Domain(kOnnxPreviewDomain)
                        .Versions(1)
                        .Constraint("T1", {0, 1, 2}, FloatTypes())
                        .Kernel<FlexAttentionKernel>());
}

}  // namespace tob
