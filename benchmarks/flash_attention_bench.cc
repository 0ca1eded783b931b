// CPU time of the engine's FlashAttention / FlashAttentionGrad kernels alone (no session, no
// Python), float32, on training shapes: the bench models' attention (batch 4 x 4 heads x 128
// tokens, head size 32) with is_causal, with HuggingFace's additive causal mask (a float [B, 1, S, S]
// mask holding the dtype's minimum above the diagonal, what its eager attention passes and
// attention_fusion.py hands over), and unmasked; then longer sequences. Each cell is the best and
// the median of interleaved rounds of one call (the process's CPU time, so other jobs on a shared
// machine count little); GFLOP/s counts the products a dense (unmasked) attention does. bf16 runs
// the same cases on bfloat16 operands (the mask float32, as autocast hands it over; logsumexp float32).
//   ./build/<dir>/tob_flash_bench [threads] [rounds] [f32|bf16]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/domain.h"
#include "framework/kernel_registry.h"
#include "framework/thread_pool.h"
#include "ir/graph.h"
#include "ops/op_schema.h"
#include "providers/cpu/cpu_execution_provider.h"

namespace {

using namespace tob;

enum class Mask { kNone, kCausal, kAdditiveCausal };

struct Case {
  int64_t batch, heads, seq, head;
  Mask mask;
};

const char* MaskName(Mask m) {
  return m == Mask::kNone ? "none" : m == Mask::kCausal ? "is_causal" : "additive causal";
}

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

Tensor Random(const Shape& shape, std::mt19937& gen) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return Tensor::FromVector<float>(v, shape);
}

Tensor Narrowed(const Tensor& t, DType dtype) {
  if (dtype == DType::kFloat32) return t;
  std::vector<BFloat16> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = BFloat16(t.data<float>()[i]);
  return Tensor::FromVector<BFloat16>(v, t.shape());
}

// One node's kernel with its graph, ready to compute on fixed operands.
struct Prepared {
  std::unique_ptr<Graph> graph;
  std::unique_ptr<OpKernel> kernel;
  std::vector<Tensor> inputs, outputs;
};

Prepared Prepare(const std::string& op, const std::vector<std::pair<std::string, Tensor>>& inputs,
                 const std::vector<std::pair<std::string, Shape>>& outputs, bool causal, DType dtype) {
  Prepared p;
  p.graph = std::make_unique<Graph>();
  p.graph->SetOpset(kMicrosoftDomain, 1);
  p.graph->SetOpset("", 17);
  std::vector<std::string> in_names, out_names;
  for (const auto& [name, t] : inputs) {
    in_names.push_back(name);
    if (!p.graph->AddInput(name, ValueType::OfTensor(t)).ok()) std::abort();
    p.inputs.push_back(t);
  }
  for (const auto& [name, shape] : outputs) {
    out_names.push_back(name);
    const Tensor out = Tensor::FromVector<float>(std::vector<float>(NumElements(shape)), shape);
    p.outputs.push_back(name == "logsumexp" ? out : Narrowed(out, dtype));
  }
  AttributeMap attrs;
  attrs["is_causal"] = Attribute::Int(causal ? 1 : 0);
  auto node = p.graph->AddNode(op, kMicrosoftDomain, in_names, out_names, attrs, "bench");
  if (!node.ok()) std::abort();
  std::vector<DType> dtypes;
  for (const auto& in : inputs) dtypes.push_back(in.second.dtype());
  std::string why;
  const KernelDef* def = KernelRegistry::Global().Find(kCpuProvider, kMicrosoftDomain, op, 1, dtypes, &why);
  if (def == nullptr) {
    std::fprintf(stderr, "no kernel for %s: %s\n", op.c_str(), why.c_str());
    std::exit(1);
  }
  auto kernel = def->factory(*node.value());
  if (!kernel.ok()) std::abort();
  p.kernel = std::move(kernel.value());
  return p;
}

void Compute(Prepared& p, ThreadPool* pool, CpuExecutionProvider& ep) {
  std::vector<const Tensor*> ins;
  for (const Tensor& t : p.inputs) ins.push_back(&t);
  std::vector<Tensor*> outs;
  for (Tensor& t : p.outputs) outs.push_back(&t);
  KernelContext ctx(*p.graph->nodes().front(), ins, outs, pool, ep.allocator());
  Status st = p.kernel->Compute(ctx);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 9;
  const DType dtype = argc > 3 && std::string(argv[3]) == "bf16" ? DType::kBFloat16 : DType::kFloat32;
  const Case cases[] = {
      {4, 4, 128, 32, Mask::kNone},           {4, 4, 128, 32, Mask::kCausal}, {4, 4, 128, 32, Mask::kAdditiveCausal},
      {4, 12, 128, 64, Mask::kCausal},        {4, 8, 512, 64, Mask::kCausal}, {1, 2, 1024, 64, Mask::kCausal},
      {2, 4, 512, 32, Mask::kAdditiveCausal},
  };
  ThreadPool pool(threads);
  CpuExecutionProvider ep;
  std::mt19937 gen(0);
  std::printf("threads: %d, %s, CPU ms per call, best / median of %d interleaved rounds\n", threads, DTypeName(dtype),
              rounds);
  std::printf("%-22s %-16s %22s %22s\n", "B x H x S x E", "mask", "forward ms (GFLOP/s)", "backward ms (GFLOP/s)");
  for (const Case& c : cases) {
    const Shape bhse{c.batch, c.heads, c.seq, c.head}, bhs{c.batch, c.heads, c.seq};
    Tensor q = Narrowed(Random(bhse, gen), dtype), k = Narrowed(Random(bhse, gen), dtype),
           v = Narrowed(Random(bhse, gen), dtype), dy = Narrowed(Random(bhse, gen), dtype);
    std::vector<std::pair<std::string, Tensor>> fwd_in{{"Q", q}, {"K", k}, {"V", v}};
    Tensor mask;
    if (c.mask == Mask::kAdditiveCausal) {
      std::vector<float> m(c.batch * c.seq * c.seq, 0.f);
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t i = 0; i < c.seq; ++i)
          for (int64_t j = i + 1; j < c.seq; ++j) m[(b * c.seq + i) * c.seq + j] = std::numeric_limits<float>::lowest();
      mask = Tensor::FromVector<float>(m, {c.batch, 1, c.seq, c.seq});  // float32 beside bf16, as autocast gives it
      fwd_in.emplace_back("attn_mask", mask);
    }
    const bool causal = c.mask == Mask::kCausal;
    Prepared fwd = Prepare("FlashAttention", fwd_in, {{"Y", bhse}, {"logsumexp", bhs}}, causal, dtype);
    Compute(fwd, &pool, ep);
    std::vector<std::pair<std::string, Tensor>> bwd_in{
        {"dY", dy}, {"Q", q}, {"K", k}, {"V", v}, {"Y", fwd.outputs[0]}, {"logsumexp", fwd.outputs[1]}};
    if (mask.defined()) bwd_in.emplace_back("attn_mask", mask);
    Prepared bwd = Prepare("FlashAttentionGrad", bwd_in, {{"dQ", bhse}, {"dK", bhse}, {"dV", bhse}}, causal, dtype);
    std::vector<double> tf, tb;
    const int reps = std::max<int64_t>(1, 64 * 128 * 128 / (c.batch * c.heads * c.seq * c.seq / 16));
    for (int r = 0; r < rounds + 1; ++r) {
      double t0 = CpuSeconds();
      for (int i = 0; i < reps; ++i) Compute(fwd, &pool, ep);
      double t1 = CpuSeconds();
      for (int i = 0; i < reps; ++i) Compute(bwd, &pool, ep);
      double t2 = CpuSeconds();
      if (r == 0) continue;  // warm-up
      tf.push_back((t1 - t0) / reps);
      tb.push_back((t2 - t1) / reps);
    }
    std::sort(tf.begin(), tf.end());
    std::sort(tb.begin(), tb.end());
    const double flops = 2.0 * c.batch * c.heads * c.seq * c.seq * c.head;
    char shape[64];
    std::snprintf(shape, sizeof shape, "%lld x %lld x %lld x %lld", static_cast<long long>(c.batch),
                  static_cast<long long>(c.heads), static_cast<long long>(c.seq), static_cast<long long>(c.head));
    std::printf("%-22s %-16s %8.3f / %6.3f (%4.0f) %8.3f / %6.3f (%4.0f)\n", shape, MaskName(c.mask), tf[0] * 1e3,
                tf[tf.size() / 2] * 1e3, 2 * flops / tf[0] * 1e-9, tb[0] * 1e3, tb[tb.size() / 2] * 1e3,
                5 * flops / tb[0] * 1e-9);
  }
  return 0;
}
