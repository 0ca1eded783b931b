// TfIdfVectorizer against a brute-force reference written from the spec's wording (every n-gram
// of every allowed length and skip looked up in the pool; 1-grams once), on random sequences over
// a small alphabet so that n-grams repeat: TF, IDF and TFIDF with and without weights, every
// min/max gram length and skip count up to 3, int32 and int64, [C] and [N, C] inputs, output
// columns that no n-gram maps to, and the named refusals.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "op_tester.h"

namespace tob::testing {
namespace {

struct Pool {
  std::vector<int64_t> counts;   // ngram_counts
  std::vector<int64_t> items;    // pool_int64s
  std::vector<int64_t> indexes;  // ngram_indexes
};

// 1-grams {0, 2, 4}, 2-grams {(1,2), (2,2), (3,0), (4,1)}, 3-grams {(0,1,2), (2,2,2)}; n-gram i
// goes to column indexes[i] of an output with a never-used column 9.
Pool MakePool() {
  return {{0, 3, 11}, {0, 2, 4, 1, 2, 2, 2, 3, 0, 4, 1, 0, 1, 2, 2, 2, 2}, {8, 0, 3, 1, 7, 2, 6, 4, 5, 10}};
}

std::vector<double> ReferenceTfIdf(const std::vector<int64_t>& x, int64_t rows, int64_t cols, const Pool& pool,
                                   int64_t min_n, int64_t max_n, int64_t max_skip, const std::string& mode,
                                   const std::vector<float>& weights) {
  std::map<std::vector<int64_t>, int64_t> column;  // n-gram -> output column
  int64_t id = 0;
  for (size_t i = 0; i < pool.counts.size(); ++i) {
    const int64_t n = static_cast<int64_t>(i) + 1;
    const int64_t end = i + 1 < pool.counts.size() ? pool.counts[i + 1] : static_cast<int64_t>(pool.items.size());
    for (int64_t at = pool.counts[i]; at < end; at += n, ++id)
      if (n >= min_n && n <= max_n)
        column[std::vector<int64_t>(pool.items.begin() + at, pool.items.begin() + at + n)] = pool.indexes[id];
  }
  int64_t width = 0;
  for (int64_t c : pool.indexes) width = std::max(width, c + 1);
  std::vector<double> y(static_cast<size_t>(rows * width), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> count(static_cast<size_t>(width), 0);
    for (int64_t n = min_n; n <= max_n; ++n)
      for (int64_t skip = 0; skip <= (n == 1 ? 0 : max_skip); ++skip)
        for (int64_t start = 0; start + (n - 1) * (skip + 1) < cols; ++start) {
          std::vector<int64_t> gram;
          for (int64_t j = 0; j < n; ++j) gram.push_back(x[r * cols + start + j * (skip + 1)]);
          if (auto it = column.find(gram); it != column.end()) ++count[it->second];
        }
    for (int64_t j = 0; j < width; ++j) {
      const double w = weights.empty() ? 1.0 : weights[j];
      double& out = y[r * width + j];
      if (mode == "TF") out = static_cast<double>(count[j]);
      else if (mode == "IDF") out = count[j] > 0 ? w : 0.0;
      else out = w * static_cast<double>(count[j]);
    }
  }
  return y;
}

template <typename T>
void RunTfIdf(int64_t rows, int64_t cols, bool batched, int64_t min_n, int64_t max_n, int64_t max_skip,
              const std::string& mode, const std::vector<float>& weights, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> token(0, 4);
  std::vector<int64_t> x64(static_cast<size_t>(rows * cols));
  for (auto& v : x64) v = token(gen);
  std::vector<T> xt(x64.begin(), x64.end());
  const Pool pool = MakePool();
  OpTester t("TfIdfVectorizer", 9);
  t.Input("X", Tensor::FromVector<T>(xt, batched ? Shape{rows, cols} : Shape{cols}));
  t.Attr("mode", Attribute::String(mode))
      .Attr("min_gram_length", Attribute::Int(min_n))
      .Attr("max_gram_length", Attribute::Int(max_n))
      .Attr("max_skip_count", Attribute::Int(max_skip))
      .Attr("ngram_counts", Attribute::Ints(pool.counts))
      .Attr("ngram_indexes", Attribute::Ints(pool.indexes))
      .Attr("pool_int64s", Attribute::Ints(pool.items));
  if (!weights.empty()) t.Attr("weights", Attribute::Floats(weights));
  const std::vector<double> expected = ReferenceTfIdf(x64, rows, cols, pool, min_n, max_n, max_skip, mode, weights);
  t.Output("Y", batched ? Shape{rows, 11} : Shape{11}, expected, 1e-6, 1e-6);
  t.Run();
}

TEST(NnTfIdfVectorizer, EveryGramRangeSkipAndModeMatchesBruteForce) {
  const std::vector<float> weights{0.5f, 1.5f, 2.0f, 0.25f, 3.0f, 1.0f, 0.75f, 2.5f, 0.1f, 4.0f, 1.25f};
  uint32_t seed = 1;
  for (int64_t min_n = 1; min_n <= 3; ++min_n)
    for (int64_t max_n = min_n; max_n <= 3; ++max_n)
      for (int64_t skip = 0; skip <= 3; ++skip)
        for (const char* mode : {"TF", "IDF", "TFIDF"})
          for (bool weighted : {false, true}) {
            if (std::string(mode) == "TF" && weighted) continue;
            SCOPED_TRACE(std::string(mode) + " n " + std::to_string(min_n) + ".." + std::to_string(max_n) + " skip " +
                         std::to_string(skip) + (weighted ? " weighted" : ""));
            RunTfIdf<int64_t>(3, 17, true, min_n, max_n, skip, mode, weighted ? weights : std::vector<float>{}, ++seed);
          }
}

TEST(NnTfIdfVectorizer, OneDimensionalInt32AndShortRows) {
  RunTfIdf<int32_t>(1, 23, false, 1, 3, 2, "TF", {}, 70);
  RunTfIdf<int32_t>(4, 2, true, 2, 3, 5, "TF", {}, 71);  // rows shorter than a 3-gram
  RunTfIdf<int64_t>(2, 0, true, 1, 2, 1, "TF", {}, 72);  // empty rows: all zeros
}

std::string TfIdfError(const std::vector<std::pair<std::string, Attribute>>& changes, DType dtype = DType::kInt64) {
  const Pool pool = MakePool();
  OpTester t("TfIdfVectorizer", 9);
  if (dtype == DType::kInt64) t.Input("X", Tensor::FromVector<int64_t>({1, 2, 3}, {3}));
  else t.Input("X", Tensor::FromVector<float>({1, 2, 3}, {3}));
  t.Attr("mode", Attribute::String("TF"))
      .Attr("min_gram_length", Attribute::Int(1))
      .Attr("max_gram_length", Attribute::Int(2))
      .Attr("max_skip_count", Attribute::Int(0))
      .Attr("ngram_counts", Attribute::Ints(pool.counts))
      .Attr("ngram_indexes", Attribute::Ints(pool.indexes))
      .Attr("pool_int64s", Attribute::Ints(pool.items));
  for (const auto& [name, value] : changes) t.Attr(name, value);
  t.Output("Y", {}, {});
  auto r = t.Compute();
  return r.ok() ? std::string("no error") : r.status().message();
}

TEST(NnTfIdfVectorizer, RefusesMalformedAttributesByName) {
  EXPECT_NE(TfIdfError({{"mode", Attribute::String("BM25")}}).find("mode must be"), std::string::npos);
  EXPECT_NE(TfIdfError({{"min_gram_length", Attribute::Int(3)}}).find("min_gram_length <= max_gram_length"),
            std::string::npos);
  EXPECT_NE(TfIdfError({{"ngram_counts", Attribute::Ints({0, 4})}}).find("not a whole number of 2-grams"),
            std::string::npos);
  EXPECT_NE(TfIdfError({{"ngram_indexes", Attribute::Ints({0, 1, 2})}}).find("3 entries for 9 n-grams"),
            std::string::npos);
  EXPECT_NE(TfIdfError({{"weights", Attribute::Floats({1.0f, 2.0f})}}).find("weights has 2 values for 11"),
            std::string::npos);
  EXPECT_NE(TfIdfError({{"pool_strings", Attribute::Strings({"a"})}}).find("exactly one of pool_int64s"),
            std::string::npos);
  EXPECT_NE(TfIdfError({}, DType::kFloat32).find("X must be int32 or int64"), std::string::npos);
}

}  // namespace
}  // namespace tob::testing
