// The string ops: StringNormalizer, StringConcat, StringSplit and RegexFullMatch (RE2, the syntax
// ONNX specifies; docs/dependencies.md). Strings are UTF-8 bytes; case changes decode them.
#include <re2/re2.h>

#include <cwctype>
#include <locale>
#include <memory>
#include <string>
#include <unordered_set>

#include "framework/kernel_registry.h"
#include "providers/cpu/elementwise/elementwise_loops.h"

namespace tob {

namespace {

// ---- UTF-8 <-> code points, for case changes ----

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// The code point at s[*i] (advancing *i); false for bytes that are not UTF-8.
bool NextCodePoint(const std::string& s, size_t* i, char32_t* c) {
  const auto b = static_cast<unsigned char>(s[*i]);
  int extra = b < 0x80 ? 0 : (b >> 5) == 0x6 ? 1 : (b >> 4) == 0xE ? 2 : (b >> 3) == 0x1E ? 3 : -1;
  if (extra < 0 || *i + extra >= s.size() + (extra == 0 ? 1 : 0)) return false;
  char32_t v = extra == 0 ? b : extra == 1 ? (b & 0x1F) : extra == 2 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k <= extra; ++k) {
    const auto n = static_cast<unsigned char>(s[*i + k]);
    if ((n >> 6) != 0x2) return false;
    v = (v << 6) | (n & 0x3F);
  }
  *i += extra + 1;
  *c = v;
  return true;
}

// StringNormalizer's case change: each code point through the locale's wide ctype (glibc's
// Unicode simple case mapping). Bytes that are not UTF-8 are kept as they are.
class CaseMapper {
 public:
  explicit CaseMapper(const std::locale& locale) : ctype_(&std::use_facet<std::ctype<wchar_t>>(locale)) {}
  std::string Map(const std::string& s, bool upper) const {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      char32_t c = 0;
      const size_t start = i;
      if (!NextCodePoint(s, &i, &c)) {
        out.push_back(s[start]);
        i = start + 1;
        continue;
      }
      const wchar_t w = static_cast<wchar_t>(c);
      AppendUtf8(static_cast<char32_t>(upper ? ctype_->toupper(w) : ctype_->tolower(w)), &out);
    }
    return out;
  }

 private:
  const std::ctype<wchar_t>* ctype_;
};

// The named locale, or its UTF-8 variant. When neither is installed (a container often has only C
// and C.UTF-8), C.UTF-8: glibc's case tables there are the Unicode simple case mappings, which
// every locale uses except those with their own rules for i and I (Turkic languages), for which
// a missing locale is an error rather than a different answer.
StatusOr<std::locale> FindLocale(const Node& node, const std::string& name) {
  for (const std::string& candidate : {name, name + ".UTF-8", name + ".utf8"}) {
    if (name.empty()) break;
    try {
      return std::locale(candidate);
    } catch (const std::runtime_error&) {}
  }
  const std::string language = name.substr(0, name.find_first_of("_.@"));
  for (const char* own_rules : {"tr", "az", "crh", "tt"})
    if (language == own_rules)
      return InvalidArgument(node.Describe(), ": locale '", name,
                             "' is not installed, and its case rules differ from the default ones");
  try {
    return std::locale("C.UTF-8");
  } catch (const std::runtime_error&) {
    return InvalidArgument(node.Describe(), ": neither locale '", name, "' nor C.UTF-8 is installed");
  }
}

class StringNormalizerKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    std::string action, locale_name;
    int64_t case_sensitive = 0;
    std::vector<std::string> stopwords;
    TOB_RETURN_IF_ERROR(node.GetAttr("case_change_action", &action, std::string("NONE")));
    TOB_RETURN_IF_ERROR(node.GetAttr("is_case_sensitive", &case_sensitive, int64_t{0}));
    TOB_RETURN_IF_ERROR(node.GetAttr("locale", &locale_name, std::string("en_US")));
    TOB_RETURN_IF_ERROR(node.GetAttr("stopwords", &stopwords, std::vector<std::string>{}));
    if (action != "NONE" && action != "LOWER" && action != "UPPER")
      return InvalidModel(node.Describe(), ": case_change_action must be NONE, LOWER or UPPER, got '", action, "'");
    TOB_ASSIGN_OR_RETURN(std::locale locale, FindLocale(node, locale_name));
    auto k = std::unique_ptr<StringNormalizerKernel>(new StringNormalizerKernel(node, locale));
    k->action_ = action;
    k->case_sensitive_ = case_sensitive != 0;
    for (const std::string& w : stopwords) k->stopwords_.insert(k->case_sensitive_ ? w : k->mapper_.Map(w, false));
    return std::unique_ptr<OpKernel>(std::move(k));
  }

  // Elements equal to a stopword go (compared lowercased unless is_case_sensitive), the rest
  // change case; nothing left gives one empty string, as the spec says.
  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    if (!(x.rank() == 1 || (x.rank() == 2 && x.dim(0) == 1)))
      return ctx.Fail("X must be [C] or [1, C], got ", ShapeToString(x.shape()));
    const std::string* in = x.data<std::string>();
    std::vector<std::string> kept;
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (!stopwords_.empty() && stopwords_.count(case_sensitive_ ? in[i] : mapper_.Map(in[i], false))) continue;
      kept.push_back(action_ == "NONE" ? in[i] : mapper_.Map(in[i], action_ == "UPPER"));
    }
    if (kept.empty()) kept.emplace_back();
    const int64_t n = static_cast<int64_t>(kept.size());
    *ctx.output(0) = Tensor::FromVector<std::string>(kept, x.rank() == 1 ? Shape{n} : Shape{1, n});
    return Status::OK();
  }

 private:
  StringNormalizerKernel(const Node& node, const std::locale& locale)
      : OpKernel(node), locale_(locale), mapper_(locale_) {}
  std::locale locale_;
  CaseMapper mapper_;
  std::string action_;
  bool case_sensitive_ = false;
  std::unordered_set<std::string> stopwords_;
};

struct ConcatStrings {
  std::string operator()(const std::string& a, const std::string& b) const { return a + b; }
};

class StringConcatKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<StringConcatKernel>(node); }
  Status Compute(KernelContext& ctx) const override {
    return ew::RunBinary<std::string, std::string, std::string>(ctx, *ctx.input(0), *ctx.input(1), *ctx.output(0),
                                                                ConcatStrings{});
  }
};

// Python's str.isspace(): the code points Unicode calls whitespace.
bool IsPythonSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The length in bytes of the whitespace character at s[i], or 0 when there is none (bytes that
// are not UTF-8 are never whitespace).
size_t SpaceAt(const std::string& s, size_t i) {
  size_t next = i;
  char32_t c = 0;
  if (!NextCodePoint(s, &next, &c) || !IsPythonSpace(c)) return 0;
  return next - i;
}

// Python's str.split(delimiter, maxsplit), as onnx's reference runs it: with no delimiter, runs
// of whitespace separate the parts and none is empty (after maxsplit splits, the rest is one part
// with its leading whitespace dropped and its trailing whitespace kept); with one, every occurrence
// splits. At most maxsplit splits (-1: no limit).
std::vector<std::string> SplitString(const std::string& s, const std::string& delimiter, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (delimiter.empty()) {
    size_t i = 0;
    while (true) {
      for (size_t n = SpaceAt(s, i); i < s.size() && n > 0; n = SpaceAt(s, i)) i += n;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(s.substr(i));
        break;
      }
      size_t j = i;
      while (j < s.size() && SpaceAt(s, j) == 0) ++j;
      parts.push_back(s.substr(i, j - i));
      i = j;
    }
    return parts;
  }
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    const size_t at = s.find(delimiter, start);
    if (at == std::string::npos) break;
    parts.push_back(s.substr(start, at - start));
    start = at + delimiter.size();
  }
  parts.push_back(s.substr(start));
  return parts;
}

class StringSplitKernel final : public OpKernel {
 public:
  StringSplitKernel(const Node& node, std::string delimiter, int64_t maxsplit)
      : OpKernel(node), delimiter_(std::move(delimiter)), maxsplit_(maxsplit) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    std::string delimiter;
    int64_t maxsplit = -1;
    TOB_RETURN_IF_ERROR(node.GetAttr("delimiter", &delimiter, std::string()));
    if (node.FindAttribute("maxsplit") != nullptr) TOB_RETURN_IF_ERROR(node.GetAttr("maxsplit", &maxsplit));
    if (node.FindAttribute("maxsplit") != nullptr && maxsplit < 0)
      return InvalidModel(node.Describe(), ": maxsplit must be >= 0, got ", maxsplit);
    return MakeKernel<StringSplitKernel>(node, std::move(delimiter), maxsplit);
  }

  // Y pads every element's substrings with "" to the largest count; Z holds the counts.
  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const std::string* in = x.data<std::string>();
    std::vector<std::vector<std::string>> parts(static_cast<size_t>(x.numel()));
    int64_t widest = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      parts[i] = SplitString(in[i], delimiter_, maxsplit_);
      widest = std::max<int64_t>(widest, static_cast<int64_t>(parts[i].size()));
    }
    Shape y_shape = x.shape();
    y_shape.push_back(widest);
    TOB_ASSIGN_OR_RETURN(Tensor y, Tensor::Allocate(DType::kString, y_shape, CpuAllocator::Default()));
    TOB_ASSIGN_OR_RETURN(Tensor z, Tensor::Allocate(DType::kInt64, x.shape(), CpuAllocator::Default()));
    std::string* out = y.data<std::string>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      z.data<int64_t>()[i] = static_cast<int64_t>(parts[i].size());
      for (size_t k = 0; k < parts[i].size(); ++k) out[i * widest + static_cast<int64_t>(k)] = std::move(parts[i][k]);
    }
    if (ctx.output(0) != nullptr) *ctx.output(0) = std::move(y);
    if (ctx.output(1) != nullptr) *ctx.output(1) = std::move(z);
    return Status::OK();
  }

 private:
  std::string delimiter_;
  int64_t maxsplit_;
};

class RegexFullMatchKernel final : public OpKernel {
 public:
  RegexFullMatchKernel(const Node& node, std::unique_ptr<RE2> re) : OpKernel(node), re_(std::move(re)) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    std::string pattern;
    TOB_RETURN_IF_ERROR(node.GetAttr("pattern", &pattern));
    RE2::Options options;
    options.set_log_errors(false);
    auto re = std::make_unique<RE2>(pattern, options);
    if (!re->ok())
      return InvalidModel(node.Describe(), ": pattern '", pattern, "' is not an RE2 regular expression: ", re->error());
    return MakeKernel<RegexFullMatchKernel>(node, std::move(re));
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const std::string* in = x.data<std::string>();
    bool* out = ctx.output(0)->data<bool>();
    ParallelFor(ctx.thread_pool(), x.numel(), 256, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = RE2::FullMatch(in[i], *re_);
    });
    return Status::OK();
  }

 private:
  std::unique_ptr<RE2> re_;  // RE2 matches from many threads at once
};

}  // namespace

void RegisterCpuStringKernels(KernelRegistry& registry) {
  const std::vector<DType> strings{DType::kString};
  registry.Register(Def("StringNormalizer")
                        .Versions(10)
                        .Constraint("tensor(string)", {0}, strings)
                        .KernelAllocatesOutputs()
                        .Kernel<StringNormalizerKernel>());
  registry.Register(Def("StringConcat").Versions(20).Constraint("T", {0, 1}, strings).Kernel<StringConcatKernel>());
  registry.Register(Def("StringSplit")
                        .Versions(20)
                        .Constraint("T1", {0}, strings)
                        .KernelAllocatesOutputs()
                        .Kernel<StringSplitKernel>());
  registry.Register(Def("RegexFullMatch").Versions(20).Constraint("T1", {0}, strings).Kernel<RegexFullMatchKernel>());
}

}  // namespace tob
