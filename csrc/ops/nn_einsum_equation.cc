#include "ops/nn_einsum_equation.h"

#include <algorithm>

namespace tob {

namespace {

int LetterId(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return 26 + (c - 'a');
  return -1;
}

std::string LabelName(int id) {
  if (id < 26) return std::string(1, static_cast<char>('A' + id));
  if (id < EinsumEquation::kLetters) return std::string(1, static_cast<char>('a' + id - 26));
  return "...[" + std::to_string(id - EinsumEquation::kLetters) + "]";
}

// One term: its letters with -1 where the ellipsis stands (at most one).
Status ParseTerm(const Node& node, const std::string& term, std::vector<int>* labels) {
  for (size_t i = 0; i < term.size(); ++i) {
    if (term[i] == '.') {
      if (term.compare(i, 3, "...") != 0)
        return InvalidModel(node.Describe(), ": equation term '", term, "' has a '.' outside an ellipsis '...'");
      if (std::count(labels->begin(), labels->end(), -1) != 0)
        return InvalidModel(node.Describe(), ": equation term '", term, "' has more than one ellipsis");
      labels->push_back(-1);
      i += 2;
      continue;
    }
    const int id = LetterId(term[i]);
    if (id < 0)
      return InvalidModel(node.Describe(), ": equation term '", term, "' has '", term[i],
                          "', expected letters, '...', ',' and '->'");
    labels->push_back(id);
  }
  return Status::OK();
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts(1);
  for (char c : s) {
    if (c == sep) parts.emplace_back();
    else parts.back() += c;
  }
  return parts;
}

}  // namespace

StatusOr<EinsumEquation> EinsumEquation::Parse(const Node& node, const std::string& equation,
                                               const std::vector<int64_t>& input_ranks) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const bool explicit_output = arrow != std::string::npos;
  const std::string lhs = explicit_output ? eq.substr(0, arrow) : eq;
  const std::vector<std::string> terms = Split(lhs, ',');
  if (terms.size() != input_ranks.size())
    return InvalidModel(node.Describe(), ": equation '", equation, "' has ", terms.size(), " input terms for ",
                        input_ranks.size(), " inputs");
  std::vector<std::vector<int>> raw(terms.size());
  int ellipsis_rank = 0;
  std::vector<int> ellipsis_of(terms.size(), 0);
  for (size_t i = 0; i < terms.size(); ++i) {
    TOB_RETURN_IF_ERROR(ParseTerm(node, terms[i], &raw[i]));
    const bool has_ellipsis = std::count(raw[i].begin(), raw[i].end(), -1) != 0;
    const int64_t letters = static_cast<int64_t>(raw[i].size()) - (has_ellipsis ? 1 : 0);
    const int64_t rank = input_ranks[i];
    if (rank >= 0 && (has_ellipsis ? rank < letters : rank != letters))
      return InvalidModel(node.Describe(), ": equation term '", terms[i], "' has ", letters, " labels",
                          has_ellipsis ? " and an ellipsis" : "", " for input ", i, " of rank ", rank);
    if (has_ellipsis) {
      if (rank < 0) return InvalidModel(node.Describe(), ": input ", i, " with an ellipsis needs a known rank");
      ellipsis_of[i] = static_cast<int>(rank - letters);
      ellipsis_rank = std::max(ellipsis_rank, ellipsis_of[i]);
    }
  }
  EinsumEquation e;
  e.num_labels = kLetters + ellipsis_rank;
  std::vector<int> count(static_cast<size_t>(kLetters), 0);
  bool any_ellipsis = false;
  for (size_t i = 0; i < raw.size(); ++i) {
    std::vector<int>& labels = e.inputs.emplace_back();
    for (int id : raw[i]) {
      if (id >= 0) {
        labels.push_back(id);
        ++count[id];
        continue;
      }
      any_ellipsis = any_ellipsis || ellipsis_of[i] > 0;
      for (int k = 0; k < ellipsis_of[i]; ++k) labels.push_back(kLetters + ellipsis_rank - ellipsis_of[i] + k);
    }
  }
  if (explicit_output) {
    std::vector<int> out;
    const std::string rhs = eq.substr(arrow + 2);
    if (rhs.find("->") != std::string::npos || rhs.find(',') != std::string::npos)
      return InvalidModel(node.Describe(), ": equation '", equation, "' has more than one output term");
    TOB_RETURN_IF_ERROR(ParseTerm(node, rhs, &out));
    bool output_ellipsis = false;
    for (int id : out) {
      if (id < 0) {
        output_ellipsis = true;
        for (int k = 0; k < ellipsis_rank; ++k) e.output.push_back(kLetters + k);
        continue;
      }
      if (count[id] == 0)
        return InvalidModel(node.Describe(), ": output label '", LabelName(id), "' of equation '", equation,
                            "' is in no input term");
      if (std::find(e.output.begin(), e.output.end(), id) != e.output.end())
        return InvalidModel(node.Describe(), ": output label '", LabelName(id), "' of equation '", equation,
                            "' is repeated");
      e.output.push_back(id);
    }
    if (any_ellipsis && !output_ellipsis)
      return InvalidModel(node.Describe(), ": equation '", equation,
                          "' broadcasts ellipsis dims in its inputs but its output has no '...'");
  } else {
    for (int k = 0; k < ellipsis_rank; ++k) e.output.push_back(kLetters + k);
    for (int id = 0; id < kLetters; ++id)
      if (count[id] == 1) e.output.push_back(id);
  }
  return e;
}

StatusOr<std::vector<int64_t>> EinsumEquation::LabelSizes(const Node& node,
                                                          const std::vector<std::vector<int64_t>>& shapes) const {
  std::vector<int64_t> size(static_cast<size_t>(num_labels), 1);
  std::vector<bool> unknown(static_cast<size_t>(num_labels), false);
  for (size_t i = 0; i < inputs.size(); ++i)
    for (size_t d = 0; d < inputs[i].size(); ++d) {
      const int id = inputs[i][d];
      const int64_t n = shapes[i][d];
      if (n < 0) {
        unknown[id] = true;
        continue;
      }
      if (n == 1) continue;
      if (size[id] != 1 && size[id] != n)
        return InvalidModel(node.Describe(), ": label '", LabelName(id), "' has size ", size[id], " in one place and ",
                            n, " in input ", i);
      size[id] = n;
    }
  for (int id = 0; id < num_labels; ++id)
    if (unknown[id] && size[id] == 1) size[id] = -1;
  return size;
}

}  // namespace tob
