#include "providers/cpu/signal/fft.h"

#include <algorithm>
#include <cmath>

namespace tob::cpu {
namespace {

constexpr double kPi = 3.14159265358979323846;

// The radices of n, fours first; false when a prime factor exceeds kMaxDirectRadix.
bool Factorize(int64_t n, std::vector<int64_t>* factors) {
  while (n % 4 == 0) {
    factors->push_back(4);
    n /= 4;
  }
  while (n % 2 == 0) {
    factors->push_back(2);
    n /= 2;
  }
  for (int64_t f = 3; f * f <= n; f += 2)
    while (n % f == 0) {
      if (f > FftPlan::kMaxDirectRadix) return false;
      factors->push_back(f);
      n /= f;
    }
  if (n > 1) {
    if (n > FftPlan::kMaxDirectRadix) return false;
    factors->push_back(n);
  }
  return true;
}

}  // namespace

FftPlan::FftPlan(int64_t n) : n_(n) {
  if (Factorize(n, &factors_)) {
    twiddles_.resize(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k)
      twiddles_[k] = std::polar(1.0, -2.0 * kPi * static_cast<double>(k) / static_cast<double>(n));
    return;
  }
  factors_.clear();
  int64_t m = 1;
  while (m < 2 * n - 1) m <<= 1;
  convolution_ = std::make_unique<FftPlan>(m);
  chirp_.resize(static_cast<size_t>(n));
  const unsigned __int128 period = 2 * static_cast<unsigned __int128>(n);
  for (int64_t k = 0; k < n; ++k) {
    const auto residue = static_cast<int64_t>(static_cast<unsigned __int128>(k) * k % period);
    chirp_[k] = std::polar(1.0, -kPi * static_cast<double>(residue) / static_cast<double>(n));
  }
  chirp_filter_.assign(static_cast<size_t>(m), Complex(0.0, 0.0));
  chirp_filter_[0] = std::conj(chirp_[0]);
  for (int64_t k = 1; k < n; ++k) chirp_filter_[k] = chirp_filter_[m - k] = std::conj(chirp_[k]);
  std::vector<Complex> scratch(static_cast<size_t>(convolution_->scratch_size()));
  convolution_->Forward(chirp_filter_.data(), scratch.data());
  const double inv_m = 1.0 / static_cast<double>(m);
  for (Complex& c : chirp_filter_) c *= inv_m;
}

int64_t FftPlan::scratch_size() const { return convolution_ ? 2 * convolution_->size() : n_; }

void FftPlan::Execute(Complex* data, bool inverse, Complex* scratch) const {
  // The inverse transform is the conjugate of the forward transform of the conjugate.
  if (inverse)
    for (int64_t k = 0; k < n_; ++k) data[k] = std::conj(data[k]);
  Forward(data, scratch);
  if (inverse)
    for (int64_t k = 0; k < n_; ++k) data[k] = std::conj(data[k]);
}

void FftPlan::Forward(Complex* data, Complex* scratch) const {
  if (!convolution_) {
    std::copy(data, data + n_, scratch);
    Transform(data, scratch, 1, 0);
    return;
  }
  const int64_t m = convolution_->size();
  Complex* a = scratch;
  Complex* inner = scratch + m;
  for (int64_t k = 0; k < n_; ++k) a[k] = data[k] * chirp_[k];
  std::fill(a + n_, a + m, Complex(0.0, 0.0));
  convolution_->Forward(a, inner);
  for (int64_t k = 0; k < m; ++k) a[k] *= chirp_filter_[k];
  convolution_->Execute(a, /*inverse=*/true, inner);
  for (int64_t k = 0; k < n_; ++k) data[k] = a[k] * chirp_[k];
}

void FftPlan::Transform(Complex* out, const Complex* in, int64_t stride, size_t level) const {
  if (level == factors_.size()) {
    out[0] = in[0];
    return;
  }
  const int64_t len = n_ / stride;
  const int64_t p = factors_[level];
  const int64_t m = len / p;
  // Sub-transform q takes the inputs j = q (mod p) and lands in out[q * m, (q + 1) * m).
  for (int64_t q = 0; q < p; ++q) Transform(out + q * m, in + q * stride, stride * p, level + 1);
  // X[u + r m] = sum_q W_len^(q u) W_p^(q r) F_q[u], with W_len^e = twiddles_[e * stride].
  const Complex* w = twiddles_.data();
  if (p == 2) {
    for (int64_t u = 0; u < m; ++u) {
      const Complex a = out[u];
      const Complex b = out[u + m] * w[u * stride];
      out[u] = a + b;
      out[u + m] = a - b;
    }
  } else if (p == 4) {
    for (int64_t u = 0; u < m; ++u) {
      const Complex t0 = out[u];
      const Complex t1 = out[u + m] * w[u * stride];
      const Complex t2 = out[u + 2 * m] * w[2 * u * stride];
      const Complex t3 = out[u + 3 * m] * w[3 * u * stride];
      const Complex s02 = t0 + t2, d02 = t0 - t2, s13 = t1 + t3, d13 = t1 - t3;
      const Complex minus_i_d13(d13.imag(), -d13.real());
      out[u] = s02 + s13;
      out[u + m] = d02 + minus_i_d13;
      out[u + 2 * m] = s02 - s13;
      out[u + 3 * m] = d02 - minus_i_d13;
    }
  } else {
    Complex t[kMaxDirectRadix];
    const int64_t root = n_ / p;  // W_p^e = twiddles_[e * root]
    for (int64_t u = 0; u < m; ++u) {
      for (int64_t q = 0; q < p; ++q) t[q] = out[q * m + u] * w[q * u * stride];
      for (int64_t r = 0; r < p; ++r) {
        Complex acc = t[0];
        int64_t e = 0;  // q * r mod p
        for (int64_t q = 1; q < p; ++q) {
          e += r;
          if (e >= p) e -= p;
          acc += t[q] * w[e * root];
        }
        out[r * m + u] = acc;
      }
    }
  }
}

}  // namespace tob::cpu
