// TfIdfVectorizer (ai.onnx 9) over integer sequences (pool_int64s) or string sequences
// (pool_strings). The string form numbers the pool's distinct strings when the kernel is built and
// reads each input string as its number (a string outside the pool as -1, which no n-gram has), so
// both forms count on the same integer trie.
//
// The pool's n-grams of the lengths in [min_gram_length, max_gram_length] go into a trie when the
// kernel is built; n-gram i (in pool order, over every length) is identified by i + 1 and counts
// into output column ngram_indexes[i]. Each row of X is scanned as onnx's reference (and
// onnxruntime) do: for every skip distance s in 1..max_skip_count + 1 and start position, walk
// the trie along X[start], X[start + s], X[start + 2s], ... and count every n-gram of at least
// min_gram_length met on the way. 1-grams do not depend on s and are counted in the first pass
// only. The counts then become the output: TF the counts, IDF weights[j] (1 without weights)
// where the count is positive, TFIDF weights[j] * count; the weights are indexed by output
// column j, as the reference does.
#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "framework/kernel_registry.h"
#include "ops/nn_tfidf_attributes.h"

namespace tob::cpu {
namespace {

struct TrieNode {
  int64_t id = 0;  // 1-based n-gram id, 0 when no n-gram ends here
  std::unordered_map<int64_t, int32_t> children;
};

class TfIdfVectorizerKernel final : public OpKernel {
 public:
  TfIdfVectorizerKernel(const Node& node, TfIdfAttributes attrs, std::vector<TrieNode> trie,
                        std::unordered_map<std::string, int64_t> vocabulary)
      : OpKernel(node), attrs_(std::move(attrs)), trie_(std::move(trie)), vocabulary_(std::move(vocabulary)) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(TfIdfAttributes a, TfIdfAttributes::Read(node));
    // The string pool as numbers: each distinct string its first position's index.
    std::unordered_map<std::string, int64_t> vocabulary;
    std::vector<int64_t> pool = a.pool_int64s;
    if (a.string_pool) {
      pool.clear();
      for (const std::string& s : a.pool_strings)
        pool.push_back(vocabulary.emplace(s, static_cast<int64_t>(vocabulary.size())).first->second);
    }
    std::vector<TrieNode> trie(1);
    int64_t id = 1;
    const auto pool_size = static_cast<int64_t>(pool.size());
    for (size_t i = 0; i < a.ngram_counts.size(); ++i) {
      const auto n = static_cast<int64_t>(i) + 1;
      const int64_t start = a.ngram_counts[i];
      const int64_t end = i + 1 < a.ngram_counts.size() ? a.ngram_counts[i + 1] : pool_size;
      if (n < a.min_gram_length || n > a.max_gram_length) {
        id += (end - start) / n;
        continue;
      }
      for (int64_t at = start; at < end; at += n, ++id) {
        int32_t cur = 0;
        for (int64_t j = 0; j < n; ++j) {
          const int64_t key = pool[at + j];
          auto found = trie[cur].children.find(key);
          int32_t next;
          if (found == trie[cur].children.end()) {
            next = static_cast<int32_t>(trie.size());
            trie[cur].children.emplace(key, next);
            trie.emplace_back();
          } else {
            next = found->second;
          }
          cur = next;
        }
        trie[cur].id = id;  // a repeated n-gram keeps its last id, as the reference's map does
      }
    }
    return MakeKernel<TfIdfVectorizerKernel>(node, std::move(a), std::move(trie), std::move(vocabulary));
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    if ((x.dtype() == DType::kString) != attrs_.string_pool)
      return ctx.Fail(attrs_.string_pool ? "X must be string with pool_strings, got "
                                         : "X must be int32 or int64 with pool_int64s, got ",
                      DTypeName(x.dtype()));
    const int64_t rows = x.rank() == 2 ? x.shape()[0] : 1;
    const int64_t row_size = x.rank() == 2 ? x.shape()[1] : x.numel();
    float* y = ctx.output(0)->data<float>();
    const int64_t width = attrs_.output_size;
    TOB_ASSIGN_OR_RETURN(Tensor counts, ctx.AllocateScratch(DType::kInt64, {rows, width}));
    ParallelFor(ctx.thread_pool(), rows, 4, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        int64_t* count = counts.data<int64_t>() + r * width;
        std::fill(count, count + width, int64_t{0});
        if (x.dtype() == DType::kString) {
          std::vector<int64_t> ids(static_cast<size_t>(row_size));
          const std::string* row = x.data<std::string>() + r * row_size;
          for (int64_t i = 0; i < row_size; ++i) {
            auto found = vocabulary_.find(row[i]);
            ids[i] = found == vocabulary_.end() ? -1 : found->second;
          }
          CountRow(ids.data(), row_size, count);
        } else if (x.dtype() == DType::kInt32) {
          CountRow(x.data<int32_t>() + r * row_size, row_size, count);
        } else {
          CountRow(x.data<int64_t>() + r * row_size, row_size, count);
        }
        Weigh(count, y + r * width);
      }
    });
    return Status::OK();
  }

 private:
  template <typename T>
  void CountRow(const T* row, int64_t size, int64_t* count) const {
    int64_t first_size = attrs_.min_gram_length;
    for (int64_t skip = 1; skip <= attrs_.max_skip_count + 1; ++skip) {
      for (int64_t start = 0; start < size; ++start) {
        if (start + skip * (first_size - 1) >= size) break;
        int32_t node = 0;
        int64_t item = start;
        for (int64_t n = 1; n <= attrs_.max_gram_length && item < size; ++n, item += skip) {
          const auto& children = trie_[node].children;
          auto found = children.find(static_cast<int64_t>(row[item]));
          if (found == children.end()) break;
          node = found->second;
          if (n >= first_size && trie_[node].id != 0) ++count[attrs_.ngram_indexes[trie_[node].id - 1]];
        }
      }
      if (first_size == 1) {  // 1-grams do not depend on the skip distance: count them once
        first_size = 2;
        if (first_size > attrs_.max_gram_length) break;
      }
    }
  }

  void Weigh(const int64_t* count, float* out) const {
    const std::vector<float>& w = attrs_.weights;
    for (int64_t j = 0; j < attrs_.output_size; ++j) {
      const auto c = static_cast<float>(count[j]);
      switch (attrs_.mode) {
        case TfIdfMode::kTf: out[j] = c; break;
        case TfIdfMode::kIdf: out[j] = count[j] > 0 ? (w.empty() ? 1.0f : w[j]) : 0.0f; break;
        case TfIdfMode::kTfIdf: out[j] = w.empty() ? c : w[j] * c; break;
      }
    }
  }

  TfIdfAttributes attrs_;
  std::vector<TrieNode> trie_;
  std::unordered_map<std::string, int64_t> vocabulary_;  // the string form's pool strings -> numbers
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuTfIdfVectorizerKernels(KernelRegistry& registry) {
  registry.Register(Def("TfIdfVectorizer")
                        .Versions(9)
                        .Constraint("T", {0}, {DType::kInt32, DType::kInt64, DType::kString})
                        .Kernel<cpu::TfIdfVectorizerKernel>());
}

}  // namespace tob
