#include "ops/nn_tfidf_attributes.h"

#include <algorithm>
#include <string>

namespace tob {

StatusOr<TfIdfAttributes> TfIdfAttributes::Read(const Node& node) {
  TfIdfAttributes a;
  std::string mode;
  TOB_RETURN_IF_ERROR(node.GetAttr("mode", &mode));
  if (mode == "TF") a.mode = TfIdfMode::kTf;
  else if (mode == "IDF") a.mode = TfIdfMode::kIdf;
  else if (mode == "TFIDF") a.mode = TfIdfMode::kTfIdf;
  else return InvalidModel(node.Describe(), ": mode must be 'TF', 'IDF' or 'TFIDF', got '", mode, "'");
  TOB_RETURN_IF_ERROR(node.GetAttr("min_gram_length", &a.min_gram_length));
  TOB_RETURN_IF_ERROR(node.GetAttr("max_gram_length", &a.max_gram_length));
  TOB_RETURN_IF_ERROR(node.GetAttr("max_skip_count", &a.max_skip_count));
  if (a.min_gram_length < 1 || a.max_gram_length < a.min_gram_length)
    return InvalidModel(node.Describe(), ": need 1 <= min_gram_length <= max_gram_length, got ", a.min_gram_length,
                        " and ", a.max_gram_length);
  if (a.max_skip_count < 0)
    return InvalidModel(node.Describe(), ": max_skip_count must not be negative, got ", a.max_skip_count);
  TOB_RETURN_IF_ERROR(node.GetAttr("ngram_counts", &a.ngram_counts));
  TOB_RETURN_IF_ERROR(node.GetAttr("ngram_indexes", &a.ngram_indexes));
  const bool has_ints = node.FindAttribute("pool_int64s") != nullptr;
  a.string_pool = node.FindAttribute("pool_strings") != nullptr;
  if (has_ints == a.string_pool)
    return InvalidModel(node.Describe(), ": exactly one of pool_int64s and pool_strings must be given");
  int64_t pool_size = 0;
  if (has_ints) {
    TOB_RETURN_IF_ERROR(node.GetAttr("pool_int64s", &a.pool_int64s));
    pool_size = static_cast<int64_t>(a.pool_int64s.size());
  } else {
    TOB_RETURN_IF_ERROR(node.GetAttr("pool_strings", &a.pool_strings));
    pool_size = static_cast<int64_t>(a.pool_strings.size());
  }
  TOB_RETURN_IF_ERROR(node.GetAttr("weights", &a.weights, std::vector<float>{}));

  if (a.ngram_counts.empty()) return InvalidModel(node.Describe(), ": ngram_counts must not be empty");
  int64_t ngrams = 0;
  for (size_t i = 0; i < a.ngram_counts.size(); ++i) {
    const int64_t start = a.ngram_counts[i];
    const int64_t end = i + 1 < a.ngram_counts.size() ? a.ngram_counts[i + 1] : pool_size;
    if (start < 0 || start > end || end > pool_size)
      return InvalidModel(node.Describe(), ": ngram_counts must be non-decreasing offsets into the pool of ", pool_size,
                          " items, got ", start, " then ", end);
    const int64_t n = static_cast<int64_t>(i) + 1;
    if ((end - start) % n != 0)
      return InvalidModel(node.Describe(), ": the ", end - start, " pool items of the ", n,
                          "-grams are not a whole number of ", n, "-grams");
    ngrams += (end - start) / n;
  }
  if (static_cast<int64_t>(a.ngram_indexes.size()) < ngrams)
    return InvalidModel(node.Describe(), ": ngram_indexes has ", a.ngram_indexes.size(), " entries for ", ngrams,
                        " n-grams in the pool");
  if (a.ngram_indexes.empty()) return InvalidModel(node.Describe(), ": ngram_indexes must not be empty");
  for (int64_t index : a.ngram_indexes)
    if (index < 0) return InvalidModel(node.Describe(), ": ngram_indexes must not be negative, got ", index);
  a.output_size = *std::max_element(a.ngram_indexes.begin(), a.ngram_indexes.end()) + 1;
  if (!a.weights.empty() && static_cast<int64_t>(a.weights.size()) < a.output_size)
    return InvalidModel(node.Describe(), ": weights has ", a.weights.size(), " values for ", a.output_size,
                        " output columns");
  return a;
}

}  // namespace tob
