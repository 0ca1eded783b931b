// A complex FFT of any length in float64, for DFT and STFT. Lengths whose prime factors are all at
// most kMaxDirectRadix run as a mixed-radix Cooley-Tukey transform (decimation in time; radix-4
// and radix-2 butterflies written out, any other factor by a generic butterfly), O(n * sum of the
// factors). A length with a larger prime factor runs Bluestein's chirp-z algorithm: the DFT
// written as a convolution with the chirp exp(-i pi k^2 / n), evaluated by power-of-two FFTs of
// length >= 2n - 1, so every length costs O(n log n). Twiddles and chirps are computed from exact
// integer residues (k mod n, k^2 mod 2n) so their error does not grow with the index.
//
// docs/dependencies.md says why this is ours and not pocketfft or FFTW.
#pragma once

#include <complex>
#include <cstdint>
#include <memory>
#include <vector>

namespace tob::cpu {

using Complex = std::complex<double>;

class FftPlan {
 public:
  static constexpr int64_t kMaxDirectRadix = 64;

  explicit FftPlan(int64_t n);  // n >= 1
  FftPlan(const FftPlan&) = delete;
  FftPlan& operator=(const FftPlan&) = delete;

  int64_t size() const { return n_; }
  // Complex values of scratch Execute needs.
  int64_t scratch_size() const;
  // In place: data[k] <- sum_j data[j] * exp(-+2 pi i j k / n) (minus forward, plus inverse), with
  // no 1/n factor. `scratch` holds scratch_size() values; plans are immutable, so threads may
  // share one plan with scratch of their own.
  void Execute(Complex* data, bool inverse, Complex* scratch) const;

 private:
  void Forward(Complex* data, Complex* scratch) const;
  // out[0..L) = DFT of in[j * stride], j < L, where L = n / stride (decimation in time).
  void Transform(Complex* out, const Complex* in, int64_t stride, size_t level) const;

  int64_t n_;
  std::vector<int64_t> factors_;   // radices, product n_; empty when Bluestein runs
  std::vector<Complex> twiddles_;  // exp(-2 pi i k / n), k < n
  // Bluestein: the power-of-two plan of the convolution, the chirp exp(-i pi k^2 / n) (k < n),
  // and the transform of the conjugate chirp laid out circularly, divided by the plan's length.
  std::unique_ptr<FftPlan> convolution_;
  std::vector<Complex> chirp_;
  std::vector<Complex> chirp_filter_;
};

}  // namespace tob::cpu
