// Einsum (opset 12) on the CPU: any equation numpy accepts (ops/nn_einsum_equation.h), with
// diagonals (a label repeated in one term), ellipsis broadcasting and the implicit output.
//
// Each operand becomes a strided view with one entry per distinct label: a repeated label is a
// diagonal, whose stride is the sum of its dims' strides, so no copy is made for it. The operands
// are then contracted left to right, two at a time, as one batched GEMM of the engine
// (nn/gemm.h): the labels both operands have and a later operand or the output needs are the
// batch, the ones both have and nothing later needs are K, and each operand's own labels are M or
// N. Materialising an operand as [batch, M, K] (or [batch, K, N]) sums the labels only it has
// and nothing later needs, and broadcasts size-1 dims. The last result is permuted (and summed,
// for a single operand) into the output. float16 / bfloat16 run in float32, rounded once.
#include <algorithm>
#include <memory>
#include <vector>

#include "framework/kernel_registry.h"
#include "ops/nn_einsum_equation.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/gemm.h"

namespace tob::cpu {
namespace {

// An operand: data in the compute type C, one (label, size, stride) per distinct label.
template <typename C>
struct LabeledView {
  const C* data = nullptr;
  std::vector<int> labels;
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;

  int Find(int label) const {
    for (size_t i = 0; i < labels.size(); ++i)
      if (labels[i] == label) return static_cast<int>(i);
    return -1;
  }
};

template <typename C>
StatusOr<LabeledView<C>> MakeView(const KernelContext& ctx, const C* data, const std::vector<int>& labels,
                                  const Shape& shape) {
  LabeledView<C> v;
  v.data = data;
  const std::vector<int64_t> strides = ContiguousStrides(shape);
  for (size_t d = 0; d < labels.size(); ++d) {
    const int at = v.Find(labels[d]);
    if (at < 0) {
      v.labels.push_back(labels[d]);
      v.dims.push_back(shape[d]);
      v.strides.push_back(strides[d]);
      continue;
    }
    if (v.dims[at] != shape[d])
      return ctx.Fail("a label repeated in one term takes a diagonal, so its dims must be equal; got ", v.dims[at],
                      " and ", shape[d]);
    v.strides[at] += strides[d];
  }
  return v;
}

// out (row-major over out_dims, labels out_labels) = the sum over the view's other labels. An out
// label the view lacks, or has with size 1, is broadcast (stride 0).
template <typename C>
void SumInto(const LabeledView<C>& v, const std::vector<int>& out_labels, const std::vector<int64_t>& out_dims, C* out,
             ThreadPool* pool) {
  std::vector<int64_t> out_strides(out_labels.size(), 0);
  for (size_t k = 0; k < out_labels.size(); ++k) {
    const int at = v.Find(out_labels[k]);
    if (at >= 0 && v.dims[at] == out_dims[k]) out_strides[k] = v.strides[at];
  }
  std::vector<int64_t> sum_dims, sum_strides;
  int64_t sum_count = 1;
  for (size_t i = 0; i < v.labels.size(); ++i)
    if (std::find(out_labels.begin(), out_labels.end(), v.labels[i]) == out_labels.end()) {
      sum_dims.push_back(v.dims[i]);
      sum_strides.push_back(v.strides[i]);
      sum_count *= v.dims[i];
    }
  int64_t total = 1;
  for (int64_t d : out_dims) total *= d;
  const int64_t rank = static_cast<int64_t>(out_dims.size()), srank = static_cast<int64_t>(sum_dims.size());
  ParallelFor(pool, total, std::max<int64_t>(1, 4096 / std::max<int64_t>(sum_count, 1)), [&](int64_t b, int64_t e) {
    std::vector<int64_t> idx(static_cast<size_t>(rank), 0), sidx(static_cast<size_t>(srank), 0);
    int64_t base = 0;
    for (int64_t rest = b, d = rank - 1; d >= 0; --d) {
      idx[d] = rest % out_dims[d];
      rest /= out_dims[d];
      base += idx[d] * out_strides[d];
    }
    for (int64_t o = b; o < e; ++o) {
      C acc = C(0);
      int64_t off = base;
      for (int64_t s = 0; s < sum_count; ++s) {
        acc += v.data[off];
        for (int64_t d = srank - 1; d >= 0; --d) {
          off += sum_strides[d];
          if (++sidx[d] < sum_dims[d]) break;
          off -= sum_strides[d] * sum_dims[d];
          sidx[d] = 0;
        }
      }
      out[o] = acc;
      for (int64_t d = rank - 1; d >= 0; --d) {
        base += out_strides[d];
        if (++idx[d] < out_dims[d]) break;
        base -= out_strides[d] * out_dims[d];
        idx[d] = 0;
      }
    }
  });
}

template <typename C>
class EinsumRunner {
 public:
  EinsumRunner(const KernelContext& ctx, const EinsumEquation& e) : ctx_(ctx), e_(e) {}

  // views: one per input; writes the output (out_dims, row-major) into out.
  Status Run(std::vector<LabeledView<C>> views, const std::vector<int64_t>& out_dims, C* out) {
    LabeledView<C> current = std::move(views[0]);
    for (size_t k = 1; k < views.size(); ++k) {
      std::vector<bool> kept(static_cast<size_t>(e_.num_labels), false);
      for (int id : e_.output) kept[id] = true;
      for (size_t later = k + 1; later < views.size(); ++later)
        for (int id : views[later].labels) kept[id] = true;
      TOB_ASSIGN_OR_RETURN(current, Contract(current, views[k], kept));
    }
    SumInto(current, e_.output, out_dims, out, ctx_.thread_pool());
    return Status::OK();
  }

 private:
  // a x b over the labels they share and nothing later needs, as one batched GEMM.
  StatusOr<LabeledView<C>> Contract(const LabeledView<C>& a, const LabeledView<C>& b, const std::vector<bool>& kept) {
    std::vector<int> batch, m, n, k;
    std::vector<int64_t> batch_dims, m_dims, n_dims, k_dims;
    int64_t nb = 1, nm = 1, nn = 1, nk = 1;
    for (size_t i = 0; i < a.labels.size(); ++i) {
      const int id = a.labels[i];
      const int j = b.Find(id);
      if (j < 0) {
        if (kept[id]) {
          m.push_back(id);
          m_dims.push_back(a.dims[i]);
          nm *= a.dims[i];
        }
        continue;  // summed while materialising a
      }
      const int64_t size = std::max(a.dims[i], b.dims[j]);
      if (kept[id]) {
        batch.push_back(id);
        batch_dims.push_back(size);
        nb *= size;
      } else {
        k.push_back(id);
        k_dims.push_back(size);
        nk *= size;
      }
    }
    for (size_t j = 0; j < b.labels.size(); ++j)
      if (a.Find(b.labels[j]) < 0 && kept[b.labels[j]]) {
        n.push_back(b.labels[j]);
        n_dims.push_back(b.dims[j]);
        nn *= b.dims[j];
      }
    auto concat = [](std::vector<int> x, const std::vector<int>& y, const std::vector<int>& z) {
      x.insert(x.end(), y.begin(), y.end());
      x.insert(x.end(), z.begin(), z.end());
      return x;
    };
    auto concat_dims = [](std::vector<int64_t> x, const std::vector<int64_t>& y, const std::vector<int64_t>& z) {
      x.insert(x.end(), y.begin(), y.end());
      x.insert(x.end(), z.begin(), z.end());
      return x;
    };
    ThreadPool* pool = ctx_.thread_pool();
    TOB_ASSIGN_OR_RETURN(Tensor am, ctx_.AllocateScratch(DTypeOf<C>(), {std::max<int64_t>(nb * nm * nk, 1)}));
    TOB_ASSIGN_OR_RETURN(Tensor bm, ctx_.AllocateScratch(DTypeOf<C>(), {std::max<int64_t>(nb * nk * nn, 1)}));
    TOB_ASSIGN_OR_RETURN(Tensor cm, ctx_.AllocateScratch(DTypeOf<C>(), {std::max<int64_t>(nb * nm * nn, 1)}));
    SumInto(a, concat(batch, m, k), concat_dims(batch_dims, m_dims, k_dims), am.data<C>(), pool);
    SumInto(b, concat(batch, k, n), concat_dims(batch_dims, k_dims, n_dims), bm.data<C>(), pool);
    C* c = cm.data<C>();
    if (nk == 0) {
      std::fill(c, c + nb * nm * nn, C(0));
    } else if (nb * nm * nn > 0) {
      std::vector<const C*> ap(static_cast<size_t>(nb)), bp(static_cast<size_t>(nb));
      std::vector<C*> cp(static_cast<size_t>(nb));
      for (int64_t i = 0; i < nb; ++i) {
        ap[i] = am.data<C>() + i * nm * nk;
        bp[i] = bm.data<C>() + i * nk * nn;
        cp[i] = c + i * nm * nn;
      }
      TOB_RETURN_IF_ERROR(BatchedGemm(false, false, nm, nn, nk, C(1), ap.data(), std::max<int64_t>(nk, 1), bp.data(),
                                      std::max<int64_t>(nn, 1), C(0), cp.data(), std::max<int64_t>(nn, 1), nb, pool));
    }
    LabeledView<C> r;
    r.data = c;
    r.labels = concat(batch, m, n);
    r.dims = concat_dims(batch_dims, m_dims, n_dims);
    r.strides = ContiguousStrides(r.dims);
    buffers_.push_back(std::move(cm));
    return r;
  }

  const KernelContext& ctx_;
  const EinsumEquation& e_;
  std::vector<Tensor> buffers_;  // the intermediate results the views point into
};

class EinsumKernel final : public OpKernel {
 public:
  EinsumKernel(const Node& node, std::string equation) : OpKernel(node), equation_(std::move(equation)) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    std::string equation;
    TOB_RETURN_IF_ERROR(node.GetAttr("equation", &equation));
    return MakeKernel<EinsumKernel>(node, std::move(equation));
  }

  Status Compute(KernelContext& ctx) const override {
    std::vector<int64_t> ranks;
    std::vector<std::vector<int64_t>> shapes;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      ranks.push_back(ctx.input(i)->rank());
      shapes.push_back(ctx.input(i)->shape());
    }
    TOB_ASSIGN_OR_RETURN(EinsumEquation e, EinsumEquation::Parse(node(), equation_, ranks));
    Tensor& y = *ctx.output(0);
    switch (y.dtype()) {
      case DType::kFloat32: return Run<float>(ctx, e, nullptr, y.shape(), y.data<float>());
      case DType::kFloat64: return Run<double>(ctx, e, nullptr, y.shape(), y.data<double>());
      case DType::kFloat16:
      case DType::kBFloat16: {
        std::vector<Tensor> widened;
        for (int i = 0; i < ctx.num_inputs(); ++i) {
          TOB_ASSIGN_OR_RETURN(Tensor w, ToFloatScratch(ctx, *ctx.input(i)));
          widened.push_back(std::move(w));
        }
        TOB_ASSIGN_OR_RETURN(Tensor out, ctx.AllocateScratch(DType::kFloat32, y.shape()));
        TOB_RETURN_IF_ERROR(Run<float>(ctx, e, &widened, y.shape(), out.data<float>()));
        return FromFloatScratch(ctx, out, &y);
      }
      default: return ctx.Fail("dtype ", DTypeName(y.dtype()), " is not supported");
    }
  }

 private:
  // widened: float32 copies of 16-bit inputs (nullptr: the inputs are already C).
  template <typename C>
  Status Run(const KernelContext& ctx, const EinsumEquation& e, const std::vector<Tensor>* widened,
             const Shape& out_shape, C* out) const {
    std::vector<LabeledView<C>> views;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& t = widened != nullptr ? (*widened)[i] : *ctx.input(i);
      TOB_ASSIGN_OR_RETURN(LabeledView<C> v, MakeView<C>(ctx, t.data<C>(), e.inputs[i], t.shape()));
      views.push_back(std::move(v));
    }
    return EinsumRunner<C>(ctx, e).Run(std::move(views), out_shape, out);
  }

  std::string equation_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuEinsumKernels(KernelRegistry& registry) {
  registry.Register(Def("Einsum")
                        .Versions(12)
                        .Constraint("T", {TypeConstraint::kAllInputs},
                                    {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16})
                        .Kernel<cpu::EinsumKernel>());
}

}  // namespace tob
