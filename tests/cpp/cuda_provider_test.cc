// The CUDA execution provider. The host-side parts (size classes, broadcast strides, registry
// entries, errors raised before any device call) run everywhere CUDA is compiled in; the kernels
// run through OpTester, which compares CPU and CUDA with a float64 reference, and are skipped only
// when no CUDA device is visible.
#ifdef TOB_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "op_tester.h"
#include "providers/cuda/cuda_allocator.h"
#include "providers/cuda/cuda_broadcast.h"
#include "providers/cuda/cuda_provider.h"

namespace tob {
namespace {

using testing::OpTester;
using testing::RandomTensor;
using testing::ToDoubles;

#define TOB_REQUIRE_CUDA_DEVICE() \
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device"

// ---- host side: no device needed ----

TEST(CudaProvider, SizeClassesBoundWaste) {
  EXPECT_EQ(CudaAllocator::SizeClass(1), 512u);
  EXPECT_EQ(CudaAllocator::SizeClass(512), 512u);
  EXPECT_EQ(CudaAllocator::SizeClass(513), 1024u);
  EXPECT_EQ(CudaAllocator::SizeClass(4096), 4096u);
  EXPECT_EQ(CudaAllocator::SizeClass(4097), 5120u);
  EXPECT_EQ(CudaAllocator::SizeClass((1u << 20) + 1), (1u << 20) + (1u << 18));
  size_t previous = 0;
  for (size_t bytes = 1; bytes < (size_t{1} << 32); bytes = bytes * 5 / 4 + 1) {
    const size_t c = CudaAllocator::SizeClass(bytes);
    ASSERT_GE(c, bytes);
    ASSERT_GE(c, previous);
    if (bytes > 2048) ASSERT_LT(c - bytes, bytes / 4 + 1) << bytes;
    else ASSERT_EQ(c % 512, 0u) << bytes;
    previous = c;
  }
}

TEST(CudaProvider, BroadcastIndexingMergesDims) {
  auto bias = MakeBroadcastIndexing({2, 3, 4}, {2, 3, 4}, {4});
  ASSERT_TRUE(bias.ok()) << bias.status().ToString();
  EXPECT_EQ(bias.value().rank, 2);
  EXPECT_EQ(bias.value().out_dims[0], 6);
  EXPECT_EQ(bias.value().out_dims[1], 4);
  EXPECT_EQ(bias.value().a_strides[0], 4);
  EXPECT_EQ(bias.value().b_strides[0], 0);
  EXPECT_EQ(bias.value().b_strides[1], 1);

  auto mixed = MakeBroadcastIndexing({2, 3, 4}, {2, 3, 4}, {2, 1, 4});
  ASSERT_TRUE(mixed.ok());
  EXPECT_EQ(mixed.value().rank, 3);
  EXPECT_EQ(mixed.value().b_strides[0], 4);
  EXPECT_EQ(mixed.value().b_strides[1], 0);

  auto column = MakeBroadcastIndexing({5, 1, 7}, {5, 1, 1}, {1, 1, 7});
  ASSERT_TRUE(column.ok());
  EXPECT_EQ(column.value().rank, 2);  // the size-1 dim is dropped
  EXPECT_EQ(column.value().a_strides[0], 1);
  EXPECT_EQ(column.value().a_strides[1], 0);

  auto scalar = MakeBroadcastIndexing({}, {}, {});
  ASSERT_TRUE(scalar.ok());
  EXPECT_EQ(scalar.value().rank, 0);
}

TEST(CudaProvider, BroadcastIndexingRejectsBadShapes) {
  EXPECT_EQ(MakeBroadcastIndexing({2, 3}, {2, 3}, {2}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeBroadcastIndexing({3}, {2, 3}, {3}).status().code(), StatusCode::kInvalidArgument);
  // Nine dims that alternate between the inputs cannot be merged below kMaxBroadcastRank.
  Shape out(9, 2), a(9, 2), b(9, 2);
  for (size_t i = 0; i < 9; ++i) (i % 2 ? a : b)[i] = 1;
  EXPECT_EQ(MakeBroadcastIndexing(out, a, b).status().code(), StatusCode::kNotImplemented);
}

TEST(CudaProvider, RegistersItsKernels) {
  const KernelRegistry& r = KernelRegistry::Global();
  using DT = DType;
  EXPECT_NE(r.Find(kCudaProvider, "", "Add", 14, {DT::kFloat16, DT::kFloat16}), nullptr);
  EXPECT_NE(r.Find(kCudaProvider, "", "Div", 7, {DT::kInt64, DT::kInt64}), nullptr);
  EXPECT_NE(r.Find(kCudaProvider, "", "MatMul", 13, {DT::kBFloat16, DT::kBFloat16}), nullptr);
  EXPECT_NE(r.Find(kCudaProvider, "", "Gemm", 11, {DT::kFloat32, DT::kFloat32}), nullptr);
  EXPECT_NE(r.Find(kCudaProvider, "", "Gelu", 20, {DT::kFloat32}), nullptr);
  EXPECT_NE(r.Find(kCudaProvider, kMicrosoftDomain, "Gelu", 1, {DT::kFloat16}), nullptr);
  EXPECT_NE(r.Find(kCudaProvider, "", "Cast", 19, {DT::kBool}), nullptr);
  EXPECT_NE(r.Find(kCudaProvider, kMicrosoftDomain, "MemcpyToHost", 1, {DT::kInt64}), nullptr);
  // What the kernels do not run is not registered.
  EXPECT_EQ(r.Find(kCudaProvider, "", "Add", 14, {DT::kInt8, DT::kInt8}), nullptr);
  EXPECT_EQ(r.Find(kCudaProvider, "", "Relu", 12, {DT::kBFloat16}), nullptr);  // bfloat16 from opset 13
  EXPECT_EQ(r.Find(kCudaProvider, "", "Gelu", 19, {DT::kFloat32}), nullptr);   // ONNX Gelu is opset 20
}

TEST(CudaProvider, CanRunDeclinesUnsupportedCastTargets) {
  Graph g;
  g.SetOpset("", 17);
  ASSERT_TRUE(g.AddInput("x", ValueType{DType::kFloat32, std::nullopt}).ok());
  AttributeMap to_string{{"to", Attribute::Int(static_cast<int64_t>(DType::kString))}};
  AttributeMap to_half{{"to", Attribute::Int(static_cast<int64_t>(DType::kFloat16))}};
  auto bad = g.AddNode("Cast", "", {"x"}, {"s"}, to_string, "to_string");
  auto good = g.AddNode("Cast", "", {"x"}, {"h"}, to_half, "to_half");
  ASSERT_TRUE(bad.ok() && good.ok());
  CudaExecutionProvider ep(0);
  std::string why;
  EXPECT_FALSE(ep.CanRun(*bad.value(), 17, KernelRegistry::Global(), &why));
  EXPECT_NE(why.find("Cast"), std::string::npos) << why;
  EXPECT_TRUE(ep.CanRun(*good.value(), 17, KernelRegistry::Global(), &why)) << why;
}

TEST(CudaProvider, KernelRejectsHostTensors) {
  // A CUDA kernel handed host memory must fail with a Status, before any device call.
  Graph g;
  g.SetOpset("", 17);
  ASSERT_TRUE(g.AddInput("a", ValueType{DType::kFloat32, std::nullopt}).ok());
  ASSERT_TRUE(g.AddInput("b", ValueType{DType::kFloat32, std::nullopt}).ok());
  auto node = g.AddNode("Add", "", {"a", "b"}, {"y"}, {}, "add");
  ASSERT_TRUE(node.ok());
  const KernelDef* def =
      KernelRegistry::Global().Find(kCudaProvider, "", "Add", 17, {DType::kFloat32, DType::kFloat32});
  ASSERT_NE(def, nullptr);
  auto kernel = def->factory(*node.value());
  ASSERT_TRUE(kernel.ok());
  Tensor a = RandomTensor<float>({4}), b = RandomTensor<float>({4}), y = RandomTensor<float>({4});
  KernelContext ctx(*node.value(), {&a, &b}, {&y}, nullptr, CpuAllocator::Default());
  Status st = kernel.value()->Compute(ctx);
  EXPECT_EQ(st.code(), StatusCode::kRuntimeError);
  EXPECT_NE(st.message().find("cpu"), std::string::npos) << st.message();
}

TEST(CudaProvider, BadDeviceAndCopyErrorsAreStatuses) {
  CudaExecutionProvider missing(1000);
  EXPECT_EQ(missing.context().status().code(), StatusCode::kInvalidArgument);
  CudaExecutionProvider ep(0);
  Tensor small = RandomTensor<float>({3}), big = RandomTensor<float>({4});
  EXPECT_EQ(ep.CopyTensor(small, big).code(), StatusCode::kInvalidArgument);
  Tensor copy = RandomTensor<float>({3}, -1, 1, 99);
  ASSERT_TRUE(ep.CopyTensor(small, copy).ok());  // host to host needs no device
  EXPECT_EQ(ToDoubles(copy), ToDoubles(small));
}

// ---- on the device ----

TEST(CudaProvider, CopiesRoundTripThroughTheDevice) {
  TOB_REQUIRE_CUDA_DEVICE();
  CudaExecutionProvider ep(0);
  for (int64_t n : {1, 7, 4096, 1 << 20}) {
    Tensor host = RandomTensor<float>({n}, -3, 3, static_cast<uint32_t>(n));
    auto dev = Tensor::Allocate(DType::kFloat32, {n}, ep.allocator());
    ASSERT_TRUE(dev.ok());
    EXPECT_EQ(dev.value().device(), (Device{DeviceType::kCUDA, 0}));
    ASSERT_TRUE(ep.CopyTensor(host, dev.value()).ok());
    auto dev2 = Tensor::Allocate(DType::kFloat32, {n}, ep.allocator());
    ASSERT_TRUE(dev2.ok());
    ASSERT_TRUE(ep.CopyTensor(dev.value(), dev2.value()).ok());
    Tensor back = RandomTensor<float>({n}, 5, 6, 1);
    ASSERT_TRUE(ep.CopyTensor(dev2.value(), back).ok());
    EXPECT_EQ(ToDoubles(back), ToDoubles(host));
  }
}

TEST(CudaProvider, AllocatorReusesFreedBlocks) {
  TOB_REQUIRE_CUDA_DEVICE();
  CudaAllocator alloc(0);
  void* p = alloc.Alloc(3000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(alloc.live_bytes(), CudaAllocator::SizeClass(3000));
  alloc.Free(p);
  EXPECT_EQ(alloc.live_bytes(), 0u);
  EXPECT_EQ(alloc.cached_bytes(), CudaAllocator::SizeClass(3000));
  EXPECT_EQ(alloc.Alloc(2900), p);  // same size class: the cached block comes back
  void* q = alloc.Alloc(100000);
  EXPECT_NE(q, p);
  alloc.Free(p);
  alloc.Free(q);
  alloc.EmptyCache();
  EXPECT_EQ(alloc.cached_bytes(), 0u);
}

template <typename T>
double Tol() {
  if constexpr (std::is_same_v<T, Float16>) return 2e-3;
  else if constexpr (std::is_same_v<T, BFloat16>) return 1.6e-2;
  else return 1e-5;
}

template <typename T>
void CheckBinaryBroadcast(const char* op, double (*ref)(double, double)) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}}, {{2, 3, 4}, {}}, {{}, {5}},
      {{2, 1, 4}, {1, 3, 1}}, {{1030}, {1030}},  // a vector tail past the last full 16-byte pack
  };
  for (const auto& [sa, sb] : cases) {
    Tensor a = RandomTensor<T>(sa, -3, 3, 5), b = RandomTensor<T>(sb, -3, 3, 6);
    Shape out(std::max(sa.size(), sb.size()), 1);
    for (size_t i = 0; i < out.size(); ++i) {
      int64_t da = i < sa.size() ? sa[sa.size() - 1 - i] : 1, db = i < sb.size() ? sb[sb.size() - 1 - i] : 1;
      out[out.size() - 1 - i] = std::max(da, db);
    }
    auto va = ToDoubles(a), vb = ToDoubles(b);
    auto sa_str = ContiguousStrides(sa), sb_str = ContiguousStrides(sb);
    std::vector<double> expected(static_cast<size_t>(NumElements(out)));
    for (int64_t i = 0; i < NumElements(out); ++i) {
      int64_t rem = i, ia = 0, ib = 0;
      for (size_t d = out.size(); d-- > 0;) {
        int64_t c = rem % out[d];
        rem /= out[d];
        size_t k = out.size() - 1 - d;
        if (k < sa.size() && sa[sa.size() - 1 - k] != 1) ia += c * sa_str[sa.size() - 1 - k];
        if (k < sb.size() && sb[sb.size() - 1 - k] != 1) ib += c * sb_str[sb.size() - 1 - k];
      }
      expected[i] = ref(va[ia], vb[ib]);
    }
    OpTester(op, 14).Input("a", a).Input("b", b).Output("y", out, expected, Tol<T>(), Tol<T>()).Run();
  }
}

TEST(CudaKernels, BinaryArithmeticBroadcasts) {
  TOB_REQUIRE_CUDA_DEVICE();
  auto add = [](double a, double b) { return a + b; };
  auto mul = [](double a, double b) { return a * b; };
  auto div = [](double a, double b) { return a / b; };
  CheckBinaryBroadcast<float>("Add", add);
  CheckBinaryBroadcast<Float16>("Mul", mul);
  CheckBinaryBroadcast<BFloat16>("Div", div);
  CheckBinaryBroadcast<double>("Sub", [](double a, double b) { return a - b; });
}

TEST(CudaKernels, IntegerDivisionTruncates) {
  TOB_REQUIRE_CUDA_DEVICE();
  OpTester("Div", 14)
      .Input("a", Tensor::FromVector<int64_t>({7, -7, 9, -9}, {4}))
      .Input("b", Tensor::FromVector<int64_t>({2, 2, -4, 3}, {4}))
      .Output("y", {4}, {3, -3, -2, -3}, 0, 0)
      .Run();
}

template <typename T>
void CheckActivations() {
  Tensor x = RandomTensor<T>({3, 257}, -5, 5, 8);
  auto v = ToDoubles(x);
  auto apply = [&](double (*f)(double)) {
    std::vector<double> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = f(v[i]);
    return r;
  };
  const double tol = std::max(Tol<T>(), 1e-5);
  OpTester("Relu", 14)
      .Input("x", x)
      .Output("y", {3, 257}, apply([](double a) { return a < 0 ? 0 : a; }), tol, tol)
      .Run();
  OpTester("Sigmoid", 13)
      .Input("x", x)
      .Output("y", {3, 257}, apply([](double a) { return 1 / (1 + std::exp(-a)); }), tol, tol)
      .Run();
  OpTester("Tanh", 13)
      .Input("x", x)
      .Output("y", {3, 257}, apply([](double a) { return std::tanh(a); }), tol, tol)
      .Run();
  auto gelu = apply([](double a) { return 0.5 * a * (1 + std::erf(a / std::sqrt(2.0))); });
  OpTester("Gelu", 20).Input("x", x).Output("y", {3, 257}, gelu, tol, tol).Run();
  OpTester("Gelu", 1, kMicrosoftDomain).Input("x", x).Output("y", {3, 257}, gelu, tol, tol).Run();
  OpTester("Gelu", 20)
      .Attr("approximate", Attribute::String("tanh"))
      .Input("x", x)
      .Output("y", {3, 257}, apply([](double a) {
                return 0.5 * a * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (a + 0.044715 * a * a * a)));
              }),
              tol, tol)
      .Run();
}

TEST(CudaKernels, ActivationsFloat32) {
  TOB_REQUIRE_CUDA_DEVICE();
  CheckActivations<float>();
}
TEST(CudaKernels, ActivationsFloat16) {
  TOB_REQUIRE_CUDA_DEVICE();
  CheckActivations<Float16>();
}
TEST(CudaKernels, ActivationsBFloat16) {
  TOB_REQUIRE_CUDA_DEVICE();
  CheckActivations<BFloat16>();
}

TEST(CudaKernels, CastConvertsLikeNumpy) {
  TOB_REQUIRE_CUDA_DEVICE();
  const double nan = std::nan("");
  Tensor x = Tensor::FromVector<float>({1.5f, -2.7f, 0.0f, static_cast<float>(nan), 300.0f, -0.25f}, {6});
  OpTester("Cast", 13)
      .Attr("to", Attribute::Int(static_cast<int64_t>(DType::kInt32)))
      .Input("x", x)
      .Output("y", {6}, {1, -2, 0, 0, 300, 0}, 0, 0)
      .Run();
  OpTester("Cast", 13)
      .Attr("to", Attribute::Int(static_cast<int64_t>(DType::kBool)))
      .Input("x", x)
      .Output("y", {6}, {1, 1, 0, 1, 1, 1}, 0, 0)
      .Run();
  OpTester("Cast", 13)
      .Attr("to", Attribute::Int(static_cast<int64_t>(DType::kFloat16)))
      .Input("x", x)
      .Output("y", {6}, {1.5, -2.69921875, 0, nan, 300, -0.25}, 0, 0)
      .Run();
  Tensor h = RandomTensor<Float16>({1000}, -100, 100, 4);
  OpTester("Cast", 13)
      .Attr("to", Attribute::Int(static_cast<int64_t>(DType::kFloat32)))
      .Input("x", h)
      .Output("y", {1000}, ToDoubles(h), 0, 0)
      .Run();
}

// Row-major reference: y[b] = a[b] x b[b] with numpy batch broadcasting.
std::vector<double> MatMulRef(const Tensor& a, const Tensor& b, Shape* out_shape) {
  Shape sa = a.rank() == 1 ? Shape{1, a.dim(0)} : a.shape();
  Shape sb = b.rank() == 1 ? Shape{b.dim(0), 1} : b.shape();
  const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  Shape batch(std::max(ba.size(), bb.size()), 1);
  for (size_t i = 0; i < batch.size(); ++i) {
    int64_t x = i < ba.size() ? ba[ba.size() - 1 - i] : 1, y = i < bb.size() ? bb[bb.size() - 1 - i] : 1;
    batch[batch.size() - 1 - i] = std::max(x, y);
  }
  *out_shape = batch;
  if (a.rank() > 1) out_shape->push_back(m);
  if (b.rank() > 1) out_shape->push_back(n);
  auto va = ToDoubles(a), vb = ToDoubles(b);
  std::vector<double> y(static_cast<size_t>(NumElements(batch) * m * n));
  for (int64_t t = 0; t < NumElements(batch); ++t) {
    int64_t rem = t, ia = 0, ib = 0, sa_mul = 1, sb_mul = 1;
    for (size_t d = batch.size(); d-- > 0;) {
      int64_t c = rem % batch[d];
      rem /= batch[d];
      size_t k2 = batch.size() - 1 - d;
      if (k2 < ba.size()) {
        if (ba[ba.size() - 1 - k2] != 1) ia += c * sa_mul;
        sa_mul *= ba[ba.size() - 1 - k2];
      }
      if (k2 < bb.size()) {
        if (bb[bb.size() - 1 - k2] != 1) ib += c * sb_mul;
        sb_mul *= bb[bb.size() - 1 - k2];
      }
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += va[ia * m * k + i * k + p] * vb[ib * k * n + p * n + j];
        y[t * m * n + i * n + j] = s;
      }
  }
  return y;
}

template <typename T>
void CheckMatMul() {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}}, {{2, 3, 4}, {4, 5}}, {{2, 3, 4}, {2, 4, 5}}, {{3, 4}, {2, 4, 5}}, {{2, 1, 3, 4}, {1, 3, 4, 5}},
      {{4}, {2, 4, 5}}, {{3, 4}, {4}},       {{64, 96}, {96, 33}},
  };
  for (const auto& [sa, sb] : cases) {
    Tensor a = RandomTensor<T>(sa, -1, 1, 21), b = RandomTensor<T>(sb, -1, 1, 22);
    Shape out;
    auto expected = MatMulRef(a, b, &out);
    const double tol = std::is_same_v<T, float> ? 1e-4 : 5 * Tol<T>();
    OpTester("MatMul", 13).Input("a", a).Input("b", b).Output("y", out, expected, tol, tol).Run();
  }
}

TEST(CudaKernels, MatMulFloat32) {
  TOB_REQUIRE_CUDA_DEVICE();
  CheckMatMul<float>();
}
TEST(CudaKernels, MatMulFloat16) {
  TOB_REQUIRE_CUDA_DEVICE();
  CheckMatMul<Float16>();
}
TEST(CudaKernels, MatMulBFloat16) {
  TOB_REQUIRE_CUDA_DEVICE();
  CheckMatMul<BFloat16>();
}

TEST(CudaKernels, GemmTransposesScalesAndBroadcastsC) {
  TOB_REQUIRE_CUDA_DEVICE();
  const int64_t m = 5, k = 7, n = 6;
  for (int trans_a : {0, 1})
    for (int trans_b : {0, 1})
      for (const Shape& sc : {Shape{n}, Shape{m, 1}, Shape{m, n}, Shape{}}) {
        Tensor a = RandomTensor<float>(trans_a ? Shape{k, m} : Shape{m, k}, -1, 1, 31);
        Tensor b = RandomTensor<float>(trans_b ? Shape{n, k} : Shape{k, n}, -1, 1, 32);
        Tensor c = RandomTensor<float>(sc, -1, 1, 33);
        auto va = ToDoubles(a), vb = ToDoubles(b), vc = ToDoubles(c);
        const double alpha = 0.5, beta = -1.5;
        std::vector<double> y(m * n);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (int64_t p = 0; p < k; ++p)
              s += va[trans_a ? p * m + i : i * k + p] * vb[trans_b ? j * k + p : p * n + j];
            double cv = sc.empty() ? vc[0] : sc.size() == 1 ? vc[j] : sc[1] == 1 ? vc[i] : vc[i * n + j];
            y[i * n + j] = alpha * s + beta * cv;
          }
        OpTester("Gemm", 13)
            .Attr("alpha", Attribute::Float(0.5f))
            .Attr("beta", Attribute::Float(-1.5f))
            .Attr("transA", Attribute::Int(trans_a))
            .Attr("transB", Attribute::Int(trans_b))
            .Input("a", a)
            .Input("b", b)
            .Input("c", c)
            .Output("y", {m, n}, y, 1e-5, 1e-5)
            .Run();
      }
}

TEST(CudaKernels, GemmHalfWithoutC) {
  TOB_REQUIRE_CUDA_DEVICE();
  Tensor a = RandomTensor<Float16>({16, 32}, -1, 1, 41), b = RandomTensor<Float16>({32, 8}, -1, 1, 42);
  Shape out;
  auto expected = MatMulRef(a, b, &out);
  OpTester("Gemm", 13).Input("a", a).Input("b", b).Output("y", {16, 8}, expected, 1e-2, 1e-2).Run();
}

}  // namespace
}  // namespace tob

#endif  // TOB_WITH_CUDA
