// Session: plan + sequential executor, feed validation, aliasing, memory plan reuse, profiling.
// Uses test-only ops in the "test.session" domain so it does not depend on any kernel family.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <mutex>

#include "framework/kernel_registry.h"
#include "memory/arena_pool.h"
#include "ops/op_schema.h"
#include "runtime/session.h"

namespace tob {
namespace {

constexpr const char* kDomain = "test.session";

// y = x * scale + offset (attributes), float32.
class AffineKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) {
    float scale, offset;
    TOB_RETURN_IF_ERROR(n.GetAttr("scale", &scale, 1.0f));
    TOB_RETURN_IF_ERROR(n.GetAttr("offset", &offset, 0.0f));
    return MakeKernel<AffineKernel>(n, scale, offset);
  }
  AffineKernel(const Node& n, float scale, float offset) : OpKernel(n), scale_(scale), offset_(offset) {}
  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = x.data<float>()[i] * scale_ + offset_;
    return Status::OK();
  }

 private:
  float scale_, offset_;
};

// A reshape-to-1-D that may alias its input.
class FlatViewKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) { return MakeKernel<FlatViewKernel>(n); }
  using OpKernel::OpKernel;
  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    if (!y.SharesDataWith(x)) std::copy_n(x.data<float>(), x.numel(), y.data<float>());
    ++calls_copying_;
    aliased_last_ = y.SharesDataWith(x);
    return Status::OK();
  }
  static inline int calls_copying_ = 0;
  static inline bool aliased_last_ = false;
};

void RegisterTestOps() {
  static std::once_flag once;
  std::call_once(once, [] {
    OpSchema affine;
    affine.domain = kDomain;
    affine.op_type = "Affine";
    affine.min_inputs = affine.max_inputs = 1;
    affine.infer = [](InferenceContext& ctx) { return PropagateType(ctx); };
    OpSchemaRegistry::Global().Register(affine);
    OpSchema flat;
    flat.domain = kDomain;
    flat.op_type = "FlatView";
    flat.min_inputs = flat.max_inputs = 1;
    flat.infer = [](InferenceContext& ctx) {
      const ValueType* t = ctx.input_type(0);
      Dim n = 1;
      for (const Dim& d : *t->shape) n = (n.is_known() && d.is_known()) ? Dim(n.value * d.value) : Dim::Unknown();
      ctx.set_output(0, ValueType(t->dtype, Dims{n}));
      return Status::OK();
    };
    OpSchemaRegistry::Global().Register(flat);
    KernelRegistry::Global().Register(
        Def("Affine").Domain(kDomain).Constraint("T", {0}, {DType::kFloat32}).Kernel<AffineKernel>());
    KernelRegistry::Global().Register(
        Def("FlatView").Domain(kDomain).Constraint("T", {0}, {DType::kFloat32}).Alias(0, 0).Kernel<FlatViewKernel>());
  });
}

AttributeMap Affine(float scale, float offset) {
  return {{"scale", Attribute::Float(scale)}, {"offset", Attribute::Float(offset)}};
}

// x[batch, 3] -> Affine(2, 1) -> FlatView -> Affine(1, -1) -> y ; also z = Affine(3, 0)(x)
std::unique_ptr<Graph> BuildGraph() {
  RegisterTestOps();
  auto g = std::make_unique<Graph>();
  g->SetOpset("", 17);
  g->SetOpset(kDomain, 1);
  EXPECT_TRUE(g->AddInput("x", ValueType(DType::kFloat32, Dims{Dim::Symbol("batch"), 3})).ok());
  EXPECT_TRUE(g->AddNode("Affine", kDomain, {"x"}, {"a"}, Affine(2, 1), "a1").ok());
  EXPECT_TRUE(g->AddNode("FlatView", kDomain, {"a"}, {"f"}, {}, "view").ok());
  EXPECT_TRUE(g->AddNode("Affine", kDomain, {"f"}, {"y"}, Affine(1, -1), "a2").ok());
  EXPECT_TRUE(g->AddNode("Affine", kDomain, {"x"}, {"z"}, Affine(3, 0), "a3").ok());
  EXPECT_TRUE(g->AddOutput("y").ok());
  EXPECT_TRUE(g->AddOutput("z").ok());
  return g;
}

std::unique_ptr<Session> MakeSession(SessionOptions opts = {}) {
  opts.intra_op_threads = 2;
  auto s = Session::Create(BuildGraph(), opts);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

TEST(Session, RunsTheGraphAndAliasesViews) {
  auto s = MakeSession();
  std::vector<float> xv = {0.5f, -1.25f, 2.f, 3.5f, -0.75f, 1.5f};
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({"x"}, {Tensor::FromVector(xv, {2, 3})}, {}, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].shape(), Shape({6}));
  EXPECT_EQ(out[1].shape(), Shape({2, 3}));
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_FLOAT_EQ(out[0].data<float>()[i], xv[i] * 2.0 + 1.0 - 1.0);
    EXPECT_FLOAT_EQ(out[1].data<float>()[i], xv[i] * 3.0);
  }
  EXPECT_TRUE(FlatViewKernel::aliased_last_) << "the executor should hand FlatView its input's buffer";
}

TEST(Session, SecondRunWithSameShapesUsesThePlan) {
  auto s = MakeSession();
  std::vector<Tensor> out;
  RunStats first, second, other;
  ASSERT_TRUE(s->Run({"x"}, {Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3})}, {}, &out, &first).ok());
  ASSERT_TRUE(s->Run({"x"}, {Tensor::FromVector<float>({6, 5, 4, 3, 2, 1}, {2, 3})}, {}, &out, &second).ok());
  EXPECT_FALSE(first.planned);
  EXPECT_TRUE(second.planned);
  EXPECT_EQ(second.plan_misses, 0);
  EXPECT_EQ(first.peak_bytes, 6 * sizeof(float));  // only 'a' is an intermediate ('f' aliases it)
  EXPECT_FLOAT_EQ(out[0].data<float>()[0], 6 * 2.0f);
  ASSERT_TRUE(s->Run({"x"}, {Tensor::FromVector<float>({1, 2, 3}, {1, 3})}, {}, &out, &other).ok());
  EXPECT_FALSE(other.planned) << "a new shape signature must record a new plan";
}

TEST(Session, PeakLiveBytesCountsIntermediatesAndTheOutputsMadeSoFar) {
  // Steps run in the model's order (a1, view, a2, a3): 'a' (6 floats, intermediate) is freed after
  // a2, so at most two 6-float tensors are live at once: a + y during a2, y + z during a3. A FIFO
  // order (a1, a3, view, a2) would hold a, z and y together.
  auto s = MakeSession();
  std::vector<Tensor> out;
  RunStats first, second;
  ASSERT_TRUE(s->Run({"x"}, {Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3})}, {}, &out, &first).ok());
  ASSERT_TRUE(s->Run({"x"}, {Tensor::FromVector<float>({6, 5, 4, 3, 2, 1}, {2, 3})}, {}, &out, &second).ok());
  EXPECT_EQ(first.peak_live_bytes, 2 * 6 * sizeof(float));
  EXPECT_EQ(second.peak_live_bytes, first.peak_live_bytes) << "the planned run holds the same tensors";
}

std::vector<float> Iota(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.25f * static_cast<float>(i) - 3.f;
  return v;
}

// A training step's forward and backward sessions never run at once: they take the process's one
// arena in turn (memory/arena_pool.h) instead of holding one each between runs.
TEST(Session, SessionsThatRunInTurnShareOneArena) {
  auto small = MakeSession();
  auto large = MakeSession();
  auto run = [](Session& s, int64_t batch, RunStats* stats) {
    std::vector<float> xv = Iota(static_cast<size_t>(batch) * 3);
    std::vector<Tensor> out;
    ASSERT_TRUE(s.Run({"x"}, {Tensor::FromVector(xv, {batch, 3})}, {}, &out, stats).ok());
    for (size_t i = 0; i < xv.size(); ++i) {
      ASSERT_FLOAT_EQ(out[0].data<float>()[i], xv[i] * 2.f);
      ASSERT_FLOAT_EQ(out[1].data<float>()[i], xv[i] * 3.f);
    }
  };
  RunStats s1, s2, l1, l2, again;
  run(*small, 16, &s1);
  run(*small, 16, &s2);
  run(*large, 64, &l1);
  run(*large, 64, &l2);
  ASSERT_TRUE(s2.planned && l2.planned);
  ASSERT_GT(l2.arena_bytes, s2.arena_bytes);
  EXPECT_EQ(ArenaPool::Global().free_bytes(), l2.arena_bytes) << "one arena, the larger, between the two sessions";
  run(*small, 16, &again);  // planned, in the shared arena
  EXPECT_TRUE(again.planned);
  EXPECT_EQ(again.plan_misses, 0);
  EXPECT_EQ(ArenaPool::Global().free_bytes(), l2.arena_bytes);
  small.reset();
  large.reset();
  EXPECT_EQ(ArenaPool::Global().free_bytes(), 0u) << "the last session gives the arenas back";
}

TEST(Session, FeedErrorsNameTheInput) {
  auto s = MakeSession();
  std::vector<Tensor> out;
  Status st = s->Run({"x"}, {Tensor::FromVector<double>({1, 2, 3}, {1, 3})}, {}, &out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("input 'x': expected dtype float32, got float64"), std::string::npos) << st.message();

  st = s->Run({"x"}, {Tensor::FromVector<float>({1, 2}, {1, 2})}, {}, &out);
  EXPECT_NE(st.message().find("dimension 1 must be 3"), std::string::npos) << st.message();

  st = s->Run({}, {}, {}, &out);
  EXPECT_NE(st.message().find("missing input 'x'"), std::string::npos) << st.message();

  st = s->Run({"x"}, {Tensor::FromVector<float>({1, 2, 3}, {1, 3})}, {"nope"}, &out);
  EXPECT_NE(st.message().find("unknown output 'nope'"), std::string::npos) << st.message();
}

TEST(Session, UnknownOpIsNotImplementedWithOpDomainAndOpset) {
  auto g = std::make_unique<Graph>();
  g->SetOpset("", 17);
  g->SetOpset("my.domain", 3);
  ASSERT_TRUE(g->AddInput("x", ValueType(DType::kFloat32, Dims{2})).ok());
  ASSERT_TRUE(g->AddNode("Mystery", "my.domain", {"x"}, {"y"}, {}, "m").ok());
  ASSERT_TRUE(g->AddOutput("y").ok());
  auto s = Session::Create(std::move(g), SessionOptions{});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotImplemented);
  const std::string& msg = s.status().message();
  EXPECT_NE(msg.find("Mystery"), std::string::npos) << msg;
  EXPECT_NE(msg.find("my.domain"), std::string::npos) << msg;
}

TEST(Session, ProfilingWritesOneEventPerNode) {
  SessionOptions opts;
  opts.enable_profiling = true;
  opts.profile_file_prefix = ::testing::TempDir() + "session_profile";
  auto s = MakeSession(opts);
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({"x"}, {Tensor::FromVector<float>({1, 2, 3}, {1, 3})}, {}, &out).ok());
  std::string path = s->EndProfiling();
  ASSERT_FALSE(path.empty());
  std::ifstream f(path);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (const char* name : {"\"a1\"", "\"view\"", "\"a2\"", "\"a3\""})
    EXPECT_NE(text.find(name), std::string::npos) << name;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tob
