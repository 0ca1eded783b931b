// DFT, STFT and MelWeightMatrix against float64 references computed here (the DFT as its defining
// O(n^2) sum), for what onnx's node tests leave out: other lengths (the FFT's radices and
// Bluestein's path), dft_length padding and truncation, every axis form of opsets 17 and 20,
// complex and real inputs, one-sided and inverse transforms, float64 / float16 / bfloat16, and
// the named refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <string>
#include <vector>

#include "op_tester.h"
#include "providers/cpu/signal/fft.h"

namespace tob::testing {
namespace {

using C = std::complex<double>;
constexpr double kPi = 3.14159265358979323846;

// The defining sum, in long double so the reference is well below float64's rounding.
std::vector<C> NaiveDft(const std::vector<C>& x, bool inverse) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<C> y(x.size());
  for (int64_t k = 0; k < n; ++k) {
    long double re = 0, im = 0;
    for (int64_t j = 0; j < n; ++j) {
      const long double angle = (inverse ? 2.0L : -2.0L) * kPi * static_cast<long double>((j * k) % n) / n;
      re += x[j].real() * std::cos(angle) - x[j].imag() * std::sin(angle);
      im += x[j].real() * std::sin(angle) + x[j].imag() * std::cos(angle);
    }
    y[k] = C(static_cast<double>(re), static_cast<double>(im));
  }
  return y;
}

std::vector<C> RandomComplex(int64_t n, uint32_t seed) {
  Tensor t = RandomTensor<double>({n, 2}, -1.0, 1.0, seed);
  std::vector<C> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = C(t.data<double>()[2 * i], t.data<double>()[2 * i + 1]);
  return x;
}

// Mixed radix (every length up to 64 and products of small primes) and Bluestein (a prime factor
// above 64) against the defining sum, both directions.
TEST(SignalFft, EveryPathMatchesTheDefiningSum) {
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 64; ++n) lengths.push_back(n);
  for (int64_t n : {67, 97, 128, 134, 210, 243, 256, 360, 509, 625, 1000, 1031, 2 * 127 * 3}) lengths.push_back(n);
  for (int64_t n : lengths) {
    const cpu::FftPlan plan(n);
    std::vector<C> scratch(static_cast<size_t>(plan.scratch_size()));
    for (bool inverse : {false, true}) {
      const std::vector<C> x = RandomComplex(n, static_cast<uint32_t>(n * 2 + inverse));
      const std::vector<C> expected = NaiveDft(x, inverse);
      std::vector<C> y = x;
      plan.Execute(y.data(), inverse, scratch.data());
      double worst = 0;
      for (int64_t k = 0; k < n; ++k) worst = std::max(worst, std::abs(y[k] - expected[k]));
      // Each output sums n terms of magnitude <= sqrt(2): an FFT's error grows like log n ulps.
      EXPECT_LT(worst, 1e-14 * std::sqrt(2.0) * static_cast<double>(n)) << "n = " << n << " inverse " << inverse;
    }
  }
}

// ---- DFT ----

struct DftCase {
  Shape shape;  // input shape, last dim 1 or 2
  int64_t axis = 1;
  int64_t length = -1;  // -1: default
  bool inverse = false;
  bool onesided = false;
};

// The float64 DFT of `x` (values of an input of c.shape) as the op defines it: output shape and values.
std::pair<Shape, std::vector<double>> ReferenceDft(const std::vector<double>& x, const DftCase& c) {
  const auto rank = static_cast<int64_t>(c.shape.size());
  const int64_t axis = c.axis < 0 ? c.axis + rank : c.axis;
  const int64_t in_len = c.shape[axis], in_parts = c.shape[rank - 1];
  int64_t n = c.length;
  if (n < 0) n = c.inverse && c.onesided ? 2 * (in_len - 1) : in_len;
  const int64_t out_len = c.onesided && !c.inverse ? n / 2 + 1 : n;
  const int64_t out_parts = c.onesided && c.inverse ? 1 : 2;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= c.shape[i];
  for (int64_t i = axis + 1; i + 1 < rank; ++i) inner *= c.shape[i];
  Shape out_shape = c.shape;
  out_shape[axis] = out_len;
  out_shape[rank - 1] = out_parts;
  std::vector<double> y(static_cast<size_t>(outer * out_len * inner * out_parts));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto value = [&](int64_t j) {
        const int64_t at = ((o * in_len + j) * inner + i) * in_parts;
        return C(x[at], in_parts == 2 ? x[at + 1] : 0.0);
      };
      std::vector<C> line(static_cast<size_t>(n), C(0, 0));
      if (c.inverse && c.onesided) {  // numpy's irfft: Hermitian extension of bins 0..n/2
        for (int64_t k = 0; k <= n / 2; ++k) line[k] = k < in_len ? value(k) : C(0, 0);
        for (int64_t k = n / 2 + 1; k < n; ++k) line[k] = std::conj(line[n - k]);
      } else {
        for (int64_t j = 0; j < std::min(n, in_len); ++j) line[j] = value(j);
      }
      std::vector<C> spectrum = NaiveDft(line, c.inverse);
      for (int64_t k = 0; k < out_len; ++k) {
        const C v = c.inverse ? spectrum[k] / static_cast<double>(n) : spectrum[k];
        const int64_t at = ((o * out_len + k) * inner + i) * out_parts;
        y[at] = v.real();
        if (out_parts == 2) y[at + 1] = v.imag();
      }
    }
  return {out_shape, y};
}

Tensor Scalar(int64_t v) { return Tensor::FromVector<int64_t>({v}, {}); }

template <typename T>
void RunDft(const DftCase& c, int opset, double tol, uint32_t seed) {
  Tensor x = RandomTensor<T>(c.shape, -2, 2, seed);
  auto [shape, expected] = ReferenceDft(ToDoubles(x), c);
  OpTester t("DFT", opset);
  t.Input("x", x);
  if (c.length >= 0) t.Input("dft_length", Scalar(c.length));
  else t.Input("", Tensor());
  if (opset >= 20) t.Input("axis", Scalar(c.axis));
  else t.Attr("axis", Attribute::Int(c.axis));
  t.Attr("inverse", Attribute::Int(c.inverse)).Attr("onesided", Attribute::Int(c.onesided));
  double scale = 1.0;  // the output's magnitude: tolerances relative to it
  for (double v : expected) scale = std::max(scale, std::fabs(v));
  t.Output("y", shape, expected, 0, tol * scale);
  t.Run();
}

std::vector<DftCase> DftCases() {
  return {
      {{2, 12, 1}, 1},                      // real, radix 4 x 3
      {{2, 7, 3, 2}, 1},                    // complex, prime length, an inner dim
      {{3, 5, 2}, -2, 8},                   // zero-padded to 8
      {{2, 9, 4, 2}, 1, 5},                 // truncated to 5
      {{2, 4, 67, 1}, 2},                   // Bluestein (67 is prime), last signal axis
      {{2, 4, 6, 2}, -3, -1, true},         // inverse, negative axis
      {{2, 10, 1}, 1, -1, false, true},     // RFFT: 6 bins
      {{2, 11, 3, 1}, 1, 15, false, true},  // RFFT of an odd padded length: 8 bins
      {{2, 6, 3, 2}, 1, -1, true, true},    // IRFFT, default length 10
      {{2, 5, 2}, 1, 9, true, true},        // IRFFT to an odd length, 5 bins used
      {{1, 4, 2}, 1, 12, true, true},       // IRFFT with missing bins (zero)
      {{4, 2}, 0, 3, true},                 // rank 2 (opset 20 allows no batch dim)
  };
}

TEST(SignalDft, Opset20AxisInputEveryFormMatchesFloat64) {
  uint32_t seed = 100;
  for (const DftCase& c : DftCases()) {
    SCOPED_TRACE("shape " + ShapeToString(c.shape) + " axis " + std::to_string(c.axis) + " length " +
                 std::to_string(c.length) + " inverse " + std::to_string(c.inverse) + " onesided " +
                 std::to_string(c.onesided));
    RunDft<double>(c, 20, 1e-13, ++seed);
    RunDft<float>(c, 20, 2e-6, ++seed);
  }
}

TEST(SignalDft, Opset17AxisAttribute) {
  RunDft<float>({{2, 9, 4, 1}, 2}, 17, 2e-6, 7);
  RunDft<float>({{2, 9, 4, 2}, -3, 16, true}, 17, 2e-6, 8);
  RunDft<double>({{3, 8, 2}, 1, -1, true, true}, 19, 1e-13, 9);
}

TEST(SignalDft, SixteenBitTypesRoundOnce) {
  RunDft<Float16>({{2, 12, 2}, 1}, 20, 1e-3, 11);
  RunDft<BFloat16>({{2, 12, 1}, 1, -1, false, true}, 20, 8e-3, 12);
  RunDft<Float16>({{2, 7, 2}, 1, 12, true, true}, 20, 1e-3, 13);
}

TEST(SignalDft, ForwardThenInverseRestoresTheSignal) {
  // RFFT then IRFFT at the same (odd) length: the real signal comes back.
  Tensor x = RandomTensor<double>({3, 13, 1}, -2, 2, 21);
  OpTester forward("DFT", 20);
  forward.Input("x", x).Input("", Tensor()).Input("axis", Scalar(1)).Attr("onesided", Attribute::Int(1));
  forward.Output("y", {3, 7, 2}, ReferenceDft(ToDoubles(x), {{3, 13, 1}, 1, -1, false, true}).second, 0, 1e-12);
  auto spectrum = forward.Compute();
  ASSERT_TRUE(spectrum.ok()) << spectrum.status().ToString();
  OpTester back("DFT", 20);
  back.Input("s", spectrum.value()[0]).Input("n", Scalar(13)).Input("axis", Scalar(1));
  back.Attr("inverse", Attribute::Int(1)).Attr("onesided", Attribute::Int(1));
  back.Output("y", {3, 13, 1}, ToDoubles(x), 0, 1e-13);
  back.Run();
}

std::string DftError(const Tensor& x, int64_t axis, int64_t length, bool inverse, bool onesided) {
  OpTester t("DFT", 20);
  t.Input("x", x);
  if (length >= 0) t.Input("dft_length", Scalar(length));
  else t.Input("", Tensor());
  t.Input("axis", Scalar(axis)).Attr("inverse", Attribute::Int(inverse)).Attr("onesided", Attribute::Int(onesided));
  t.Output("y", {}, {});
  auto r = t.Compute();
  return r.ok() ? std::string("no error") : r.status().message();
}

TEST(SignalDft, RefusesWhatTheSpecForbidsByName) {
  Tensor x = RandomTensor<float>({2, 6, 1}, -1, 1, 31);
  EXPECT_NE(DftError(x, -1, -1, false, false).find("axis -1 is outside"), std::string::npos);
  EXPECT_NE(DftError(x, 2, -1, false, false).find("axis 2 is outside"), std::string::npos);
  EXPECT_NE(DftError(x, 1, 0, false, false).find("dft_length must be positive"), std::string::npos);
  EXPECT_NE(DftError(x, 1, -1, true, true).find("IRFFT) takes a complex input"), std::string::npos);
  Tensor one = RandomTensor<float>({2, 1, 2}, -1, 1, 32);
  EXPECT_NE(DftError(one, 1, -1, true, true).find("give a positive dft_length"), std::string::npos);
  Tensor three = RandomTensor<float>({2, 6, 3}, -1, 1, 33);
  EXPECT_NE(DftError(three, 1, -1, false, false).find("must be 1 (real) or 2 (complex)"), std::string::npos);
  // Opset 17 has no axis input.
  OpTester t("DFT", 17);
  t.Input("x", x).Input("", Tensor()).Input("axis", Scalar(1));
  t.Output("y", {}, {});
  auto r = t.Compute();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("takes 2 inputs"), std::string::npos) << r.status().message();
}

// ---- STFT ----

// signal [batch, length, parts] -> [batch, frames, bins, 2], float64.
std::vector<double> ReferenceStft(const std::vector<double>& x, int64_t batch, int64_t length, int64_t parts,
                                  int64_t step, const std::vector<double>& window, bool onesided) {
  const auto n = static_cast<int64_t>(window.size());
  const int64_t frames = (length - n) / step + 1, bins = onesided ? n / 2 + 1 : n;
  std::vector<double> y;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t f = 0; f < frames; ++f) {
      std::vector<C> frame(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        const int64_t at = (b * length + f * step + j) * parts;
        frame[j] = C(x[at], parts == 2 ? x[at + 1] : 0.0) * window[j];
      }
      std::vector<C> s = NaiveDft(frame, false);
      for (int64_t k = 0; k < bins; ++k) {
        y.push_back(s[k].real());
        y.push_back(s[k].imag());
      }
    }
  return y;
}

TEST(SignalStft, WindowsStepsAndSidesMatchFloat64) {
  struct Case {
    int64_t batch, length, parts, step, frame;
    bool with_window, with_length, onesided;
  };
  const Case cases[] = {
      {2, 40, 1, 5, 12, true, false, true},   // frame length from the window
      {1, 33, 1, 4, 10, false, true, true},   // rectangular window of frame_length
      {2, 29, 2, 3, 7, true, true, false},    // complex signal, both given, two-sided
      {3, 20, 1, 7, 20, false, false, true},  // neither: one frame of the whole signal
      {1, 90, 1, 9, 67, true, false, true},   // a prime frame length (Bluestein)
  };
  uint32_t seed = 50;
  for (const Case& c : cases) {
    SCOPED_TRACE("length " + std::to_string(c.length) + " frame " + std::to_string(c.frame));
    for (bool f64 : {true, false}) {
      Tensor x = f64 ? RandomTensor<double>({c.batch, c.length, c.parts}, -1, 1, ++seed)
                     : RandomTensor<float>({c.batch, c.length, c.parts}, -1, 1, ++seed);
      Tensor w = f64 ? RandomTensor<double>({c.frame}, 0.1, 1, ++seed) : RandomTensor<float>({c.frame}, 0.1, 1, ++seed);
      std::vector<double> window = c.with_window ? ToDoubles(w) : std::vector<double>(c.frame, 1.0);
      const std::vector<double> expected =
          ReferenceStft(ToDoubles(x), c.batch, c.length, c.parts, c.step, window, c.onesided);
      OpTester t("STFT", 17);
      t.Input("signal", x).Input("frame_step", Scalar(c.step));
      if (c.with_window) t.Input("window", w);
      else t.Input("", Tensor());
      if (c.with_length) t.Input("frame_length", Scalar(c.frame));
      t.Attr("onesided", Attribute::Int(c.onesided));
      const int64_t frames = (c.length - c.frame) / c.step + 1, bins = c.onesided ? c.frame / 2 + 1 : c.frame;
      t.Output("y", {c.batch, frames, bins, 2}, expected, 0, f64 ? 1e-12 : 1e-5);
      t.Run();
    }
  }
}

TEST(SignalStft, SixteenBitSignal) {
  Tensor x = RandomTensor<Float16>({2, 24, 1}, -1, 1, 61);
  Tensor w = RandomTensor<Float16>({8}, 0.1, 1, 62);
  OpTester t("STFT", 17);
  t.Input("signal", x).Input("frame_step", Scalar(4)).Input("window", w);
  t.Output("y", {2, 5, 5, 2}, ReferenceStft(ToDoubles(x), 2, 24, 1, 4, ToDoubles(w), true), 0, 8e-3);
  t.Run();
}

TEST(SignalStft, RefusesFramesThatDoNotFit) {
  Tensor x = RandomTensor<float>({1, 16, 1}, -1, 1, 71);
  auto error = [&](int64_t step, const Tensor* window, int64_t frame_length) {
    OpTester t("STFT", 17);
    t.Input("signal", x).Input("frame_step", Scalar(step));
    if (window != nullptr) t.Input("window", *window);
    else t.Input("", Tensor());
    if (frame_length >= 0) t.Input("frame_length", Scalar(frame_length));
    t.Output("y", {}, {});
    auto r = t.Compute();
    return r.ok() ? std::string("no error") : r.status().message();
  };
  Tensor w8 = RandomTensor<float>({8}, 0.1, 1, 72);
  EXPECT_NE(error(0, nullptr, 4).find("frame_step must be positive"), std::string::npos);
  EXPECT_NE(error(2, nullptr, 17).find("longer than the signal"), std::string::npos);
  EXPECT_NE(error(2, &w8, 6).find("the window has 8 values but frame_length is 6"), std::string::npos);
  Tensor w2d = RandomTensor<float>({2, 4}, 0.1, 1, 73);
  EXPECT_NE(error(2, &w2d, -1).find("window must be 1-D"), std::string::npos);
}

// ---- MelWeightMatrix ----

// The spec's construction in float64 (edges given in float64, so no rounding of the edge type).
std::vector<double> ReferenceMel(int64_t mel_bins, int64_t dft_length, int64_t rate, double lower, double upper) {
  auto mel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
  const int64_t bins = dft_length / 2 + 1;
  const double step = (mel(upper) - mel(lower)) / static_cast<double>(mel_bins + 2);
  std::vector<int64_t> corner;
  for (int64_t i = 0; i < mel_bins + 2; ++i) {
    const double hz = 700.0 * (std::pow(10.0, (mel(lower) + static_cast<double>(i) * step) / 2595.0) - 1.0);
    corner.push_back(static_cast<int64_t>(std::floor(static_cast<double>(dft_length + 1) * hz / rate)));
  }
  std::vector<double> w(static_cast<size_t>(bins * mel_bins), 0.0);
  for (int64_t i = 0; i < mel_bins; ++i) {
    const int64_t l = corner[i], c = corner[i + 1], r = corner[i + 2];
    if (c == l) w[c * mel_bins + i] = 1.0;
    for (int64_t j = l; c > l && j <= c; ++j) w[j * mel_bins + i] = double(j - l) / double(c - l);
    for (int64_t j = c; j < r; ++j) w[j * mel_bins + i] = double(r - j) / double(r - c);
  }
  return w;
}

TEST(SignalMelWeightMatrix, TrianglesMatchTheSpecInEachOutputType) {
  struct Case {
    int64_t mel_bins, dft_length, rate;
    double lower, upper;
  };
  for (const Case& c :
       {Case{10, 64, 16000, 20.0, 8000.0}, Case{23, 512, 22050, 0.0, 11025.0}, Case{4, 33, 8000, 300.0, 3700.0}}) {
    const std::vector<double> expected = ReferenceMel(c.mel_bins, c.dft_length, c.rate, c.lower, c.upper);
    for (int64_t code : {1, 11, 10, 7}) {  // float32, float64, float16, int64
      SCOPED_TRACE("mel_bins " + std::to_string(c.mel_bins) + " output_datatype " + std::to_string(code));
      OpTester t("MelWeightMatrix", 17);
      t.Input("num_mel_bins", Tensor::FromVector<int64_t>({c.mel_bins}, {}))
          .Input("dft_length", Tensor::FromVector<int64_t>({c.dft_length}, {}))
          .Input("sample_rate", Tensor::FromVector<int64_t>({c.rate}, {}))
          .Input("lower_edge_hertz", Tensor::FromVector<double>({c.lower}, {}))
          .Input("upper_edge_hertz", Tensor::FromVector<double>({c.upper}, {}))
          .Attr("output_datatype", Attribute::Int(code));
      std::vector<double> e = expected;
      if (code == 7)
        for (double& v : e) v = std::trunc(v);
      t.Output("w", {c.dft_length / 2 + 1, c.mel_bins}, e, 0, code == 10 ? 5e-4 : 1e-7);
      t.Run();
    }
  }
}

TEST(SignalMelWeightMatrix, RefusesEdgesBeyondNyquist) {
  OpTester t("MelWeightMatrix", 17);
  t.Input("num_mel_bins", Tensor::FromVector<int32_t>({8}, {}))
      .Input("dft_length", Tensor::FromVector<int32_t>({16}, {}))
      .Input("sample_rate", Tensor::FromVector<int32_t>({8000}, {}))
      .Input("lower_edge_hertz", Tensor::FromVector<float>({0.0f}, {}))
      .Input("upper_edge_hertz", Tensor::FromVector<float>({7000.0f}, {}));
  t.Output("w", {9, 8}, std::vector<double>(72, 0.0));
  auto r = t.Compute();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("sample_rate / 2"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tob::testing
