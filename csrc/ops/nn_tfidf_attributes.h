// TfIdfVectorizer's attributes (ai.onnx 9), read and checked once for the shape function and the
// CPU kernel: the n-gram pool, where each n-gram lands in the output, and the weighting.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"

namespace tob {

enum class TfIdfMode { kTf, kIdf, kTfIdf };

struct TfIdfAttributes {
  TfIdfMode mode = TfIdfMode::kTf;
  int64_t min_gram_length = 1;
  int64_t max_gram_length = 1;
  int64_t max_skip_count = 0;
  std::vector<int64_t> ngram_counts;   // start of the n-grams of length i + 1 in the pool
  std::vector<int64_t> ngram_indexes;  // output column of n-gram i (in pool order)
  std::vector<int64_t> pool_int64s;
  std::vector<std::string> pool_strings;
  bool string_pool = false;    // pool_strings given instead of pool_int64s
  std::vector<float> weights;  // per output column; empty = all ones
  int64_t output_size = 0;     // max(ngram_indexes) + 1

  // Every documented constraint is checked: mode TF, IDF or TFIDF; 1 <= min_gram_length <=
  // max_gram_length; max_skip_count >= 0; exactly one pool; ngram_counts non-decreasing within
  // the pool, each length's share of the pool a whole number of n-grams; an output column for
  // every n-gram, none negative; weights (when given) covering every output column.
  static StatusOr<TfIdfAttributes> Read(const Node& node);
};

}  // namespace tob
