#include "providers/cpu/elementwise/cast_string.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <system_error>

#include "providers/cpu/elementwise/elementwise_type_sets.h"

namespace tob::ew {

namespace {

// numpy's str() of a float whose shortest round-trip digits are `digits` (no sign, no dot) with
// the decimal exponent `exp10` of the first digit.
std::string NumpyFloatText(bool negative, const std::string& digits, int exp10, double magnitude,
                           double max_positional) {
  std::string out = negative ? "-" : "";
  if (magnitude == 0 || (magnitude >= 1e-4 && magnitude < max_positional)) {
    if (exp10 >= 0) {
      const size_t int_len = static_cast<size_t>(exp10) + 1;
      std::string int_part = digits.substr(0, std::min(int_len, digits.size()));
      int_part.append(int_len > int_part.size() ? int_len - int_part.size() : 0, '0');
      std::string frac = digits.size() > int_len ? digits.substr(int_len) : "0";
      return out + int_part + "." + frac;
    }
    return out + "0." + std::string(static_cast<size_t>(-exp10 - 1), '0') + digits;
  }
  out.push_back(digits[0]);
  if (digits.size() > 1) {
    out.push_back('.');
    out.append(digits, 1, std::string::npos);
  }
  const int e = std::abs(exp10);
  out += exp10 < 0 ? "e-" : "e+";
  if (e < 10) out.push_back('0');
  return out + std::to_string(e);
}

// Digits and exponent of a scientific to_chars result "d.ddde+XX".
void SplitScientific(const char* begin, const char* end, std::string* digits, int* exp10) {
  const char* e = std::find(begin, end, 'e');
  digits->clear();
  for (const char* p = begin; p < e; ++p)
    if (*p != '.' && *p != '-') digits->push_back(*p);
  while (digits->size() > 1 && digits->back() == '0') digits->pop_back();
  // to_chars writes no terminating zero: read the exponent within [e + 1, end) only.
  const char* p = e + 1;
  const bool negative = p < end && *p == '-';
  if (p < end && (*p == '-' || *p == '+')) ++p;
  int magnitude = 0;
  std::from_chars(p, end, magnitude);
  *exp10 = negative ? -magnitude : magnitude;
}

template <typename T>
std::string FormatSpecial(T v, bool* done) {
  *done = true;
  if (std::isnan(static_cast<double>(v))) return "nan";
  if (std::isinf(static_cast<double>(v))) return v < 0 ? "-inf" : "inf";
  *done = false;
  return {};
}

// The shortest digits of a 16-bit float: the fewest significant digits that read back to it.
template <typename H>
std::string Format16(H h, double max_positional) {
  const float f = static_cast<float>(h);
  bool done = false;
  std::string special = FormatSpecial(f, &done);
  if (done) return special;
  char buf[64];
  std::string digits;
  int exp10 = 0;
  for (int precision = 0; precision < 9; ++precision) {
    auto r = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific, precision);
    float back = 0;
    std::from_chars(buf, r.ptr, back, std::chars_format::scientific);
    if (H(back).bits == h.bits || precision == 8) {
      SplitScientific(buf, r.ptr, &digits, &exp10);
      break;
    }
  }
  return NumpyFloatText(std::signbit(f), digits, exp10, std::fabs(static_cast<double>(f)), max_positional);
}

template <typename F>
std::string FormatShortest(F v, double max_positional) {
  bool done = false;
  std::string special = FormatSpecial(v, &done);
  if (done) return special;
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string digits;
  int exp10 = 0;
  SplitScientific(buf, r.ptr, &digits, &exp10);
  return NumpyFloatText(std::signbit(v), digits, exp10, std::fabs(static_cast<double>(v)), max_positional);
}

template <typename T>
std::string ToText(T v) {
  if constexpr (std::is_same_v<T, bool>) return v ? "True" : "False";
  else if constexpr (std::is_same_v<T, double>) return FormatFloat64(v);
  else if constexpr (std::is_same_v<T, float>) return FormatFloat32(v);
  else if constexpr (std::is_same_v<T, Float16>) return Format16(v, 1e3);
  else if constexpr (std::is_same_v<T, BFloat16>) return Format16(v, 1e6);
  else return std::to_string(v);
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// `s` without surrounding whitespace and with the underscores Python allows (one, between two
// digits) removed; false when an underscore stands anywhere else.
bool Normalize(const std::string& s, std::string* out) {
  size_t b = 0, e = s.size();
  while (b < e && IsSpace(s[b])) ++b;
  while (e > b && IsSpace(s[e - 1])) --e;
  out->clear();
  for (size_t i = b; i < e; ++i) {
    if (s[i] != '_') {
      out->push_back(s[i]);
      continue;
    }
    const bool between_digits = i > b && i + 1 < e && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
                                std::isdigit(static_cast<unsigned char>(s[i + 1]));
    if (!between_digits) return false;
  }
  return true;
}

bool ParseFloat64(const std::string& text, double* v) {
  std::string s;
  if (!Normalize(text, &s) || s.empty()) return false;
  size_t i = 0;
  bool negative = false;
  if (s[0] == '+' || s[0] == '-') {
    negative = s[0] == '-';
    ++i;
  }
  std::string rest = s.substr(i);
  std::string lower;
  for (char c : rest) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (lower == "inf" || lower == "infinity") {
    *v = negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    return true;
  }
  if (lower == "nan") {
    *v = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  // Python's grammar: digits with an optional '.', at least one digit, then an optional exponent.
  size_t k = 0, digits = 0;
  while (k < rest.size() && std::isdigit(static_cast<unsigned char>(rest[k]))) ++k, ++digits;
  if (k < rest.size() && rest[k] == '.') {
    ++k;
    while (k < rest.size() && std::isdigit(static_cast<unsigned char>(rest[k]))) ++k, ++digits;
  }
  if (digits == 0) return false;
  if (k < rest.size() && (rest[k] == 'e' || rest[k] == 'E')) {
    ++k;
    if (k < rest.size() && (rest[k] == '+' || rest[k] == '-')) ++k;
    size_t exp_digits = 0;
    while (k < rest.size() && std::isdigit(static_cast<unsigned char>(rest[k]))) ++k, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  if (k != rest.size()) return false;
  double parsed = 0;
  auto r = std::from_chars(rest.data(), rest.data() + rest.size(), parsed);
  if (r.ptr != rest.data() + rest.size()) return false;
  if (r.ec == std::errc::result_out_of_range) {  // Python rounds: huge -> inf, tiny -> 0
    parsed = std::strtod(rest.c_str(), nullptr);
  } else if (r.ec != std::errc()) {
    return false;
  }
  *v = negative ? -parsed : parsed;
  return true;
}

template <typename I>
bool ParseInteger(const std::string& text, I* v) {
  std::string s;
  if (!Normalize(text, &s) || s.empty()) return false;
  size_t i = 0;
  const bool negative = s[0] == '-';
  if (s[0] == '+' || s[0] == '-') ++i;
  if (i == s.size()) return false;
  uint64_t magnitude = 0;
  auto r = std::from_chars(s.data() + i, s.data() + s.size(), magnitude, 10);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size() || !std::isdigit(static_cast<unsigned char>(s[i])))
    return false;
  if (negative) {
    if (magnitude == 0) {
      *v = 0;
      return true;
    }
    if constexpr (std::is_unsigned_v<I>) {
      return false;
    } else {
      const uint64_t limit = static_cast<uint64_t>(-(std::numeric_limits<I>::min() + 1)) + 1;
      if (magnitude > limit) return false;
      *v = static_cast<I>(-static_cast<int64_t>(magnitude - 1) - 1);
      return true;
    }
  }
  if (magnitude > static_cast<uint64_t>(std::numeric_limits<I>::max())) return false;
  *v = static_cast<I>(magnitude);
  return true;
}

// `d` rounded once to a 16-bit float type (Float16 or BFloat16), to nearest, ties to even, as
// numpy's astype does: through float32 it would round twice, which can differ in a tie.
template <typename H>
H RoundFromDouble(double d) {
  if (std::isnan(d) || std::isinf(d)) return H(static_cast<float>(d));
  constexpr bool kHalf = std::is_same_v<H, Float16>;
  constexpr uint16_t kInfBits = kHalf ? 0x7C00 : 0x7F80;
  // Overflow rounds as if the exponent went on: infinity stands for the next power of two.
  const double inf_value = kHalf ? 65536.0 : std::ldexp(1.0, 128);
  const double a = std::fabs(d);
  const uint16_t near = H(static_cast<float>(a)).bits;  // within one step of the answer
  uint16_t best = near;
  double best_error = -1;
  for (int step = -1; step <= 1; ++step) {
    const int bits = static_cast<int>(near) + step;
    if (bits < 0 || bits > kInfBits) continue;
    const double value = bits == kInfBits ? inf_value : static_cast<double>(static_cast<float>(H::FromBits(bits)));
    const double error = std::fabs(a - value);
    if (best_error < 0 || error < best_error || (error == best_error && bits % 2 == 0)) {
      best = static_cast<uint16_t>(bits);
      best_error = error;
    }
  }
  return H::FromBits(static_cast<uint16_t>(best | (std::signbit(d) ? 0x8000 : 0)));
}

template <typename T>
bool FromText(const std::string& s, T* v) {
  if constexpr (std::is_same_v<T, bool>) {
    *v = !s.empty();
    return true;
  } else if constexpr (std::is_integral_v<T>) {
    return ParseInteger(s, v);
  } else {
    double d = 0;
    if (!ParseFloat64(s, &d)) return false;
    if constexpr (std::is_same_v<T, double>) *v = d;
    else if constexpr (std::is_same_v<T, float>) *v = static_cast<float>(d);
    else *v = RoundFromDouble<T>(d);
    return true;
  }
}

}  // namespace

std::string FormatFloat64(double v) { return FormatShortest(v, 1e16); }
std::string FormatFloat32(float v) { return FormatShortest(v, 1e6); }

Status CastToStrings(const KernelContext& ctx, const Tensor& x, Tensor& y) {
  if (y.dtype() != DType::kString || y.numel() != x.numel())
    return ctx.Fail("output ", DTypeName(y.dtype()), ShapeToString(y.shape()), " does not take input ",
                    DTypeName(x.dtype()), ShapeToString(x.shape()));
  std::string* out = y.data<std::string>();
  if (x.dtype() == DType::kString) {
    CopyTensorData(x, y);
    return Status::OK();
  }
  const bool known = Dispatch(AllList{}, x.dtype(), [&]<typename S>() {
    const S* in = x.data<S>();
    ParallelFor(ctx.thread_pool(), x.numel(), 4096, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = ToText(in[i]);
    });
  });
  return known ? Status::OK() : ctx.Fail("cannot cast ", DTypeName(x.dtype()), " to string");
}

Status CastFromStrings(const KernelContext& ctx, const Tensor& x, Tensor& y) {
  if (x.dtype() != DType::kString || y.numel() != x.numel())
    return ctx.Fail("output ", DTypeName(y.dtype()), ShapeToString(y.shape()), " does not take input ",
                    DTypeName(x.dtype()), ShapeToString(x.shape()));
  const std::string* in = x.data<std::string>();
  Status status;
  const bool known = Dispatch(AllList{}, y.dtype(), [&]<typename D>() {
    D* out = y.data<D>();
    for (int64_t i = 0; i < x.numel() && status.ok(); ++i)
      if (!FromText(in[i], out + i))
        status = ctx.Fail("element ", i, " \"", in[i].substr(0, 64), "\" is not a ", DTypeName(y.dtype()),
                          " value (Cast from string reads numbers as Python's float() and int() do)");
  });
  if (!known) return ctx.Fail("cannot cast string to ", DTypeName(y.dtype()));
  return status;
}

}  // namespace tob::ew
