#include <algorithm>
#include <map>

#include "partition/partitioner.h"

namespace tob {

std::string PartitionReport::ToString() const {
  size_t w_node = 4, w_op = 2, w_provider = 8;
  for (const Entry& e : nodes) {
    w_node = std::max(w_node, e.node.size());
    w_op = std::max(w_op, e.op_type.size());
    w_provider = std::max(w_provider, e.provider.size());
  }
  auto pad = [](const std::string& s, size_t width) { return s + std::string(width - s.size() + 2, ' '); };
  std::string s = pad("node", w_node) + pad("op", w_op) + pad("provider", w_provider) + "why not an earlier provider\n";
  std::map<std::string, int> per_provider;
  for (const Entry& e : nodes) {
    std::string line = pad(e.node, w_node) + pad(e.op_type, w_op) + pad(e.provider, w_provider) + e.why_not_earlier;
    line.erase(line.find_last_not_of(' ') + 1);
    s += line + "\n";
    ++per_provider[e.provider];
  }
  std::string summary;
  for (const auto& [provider, count] : per_provider)
    summary += StrCat(summary.empty() ? "" : ", ", count, " on ", provider);
  return s + StrCat(nodes.size(), " nodes (", summary.empty() ? "none" : summary, "); ", copies_inserted,
                    " copies inserted\n");
}

}  // namespace tob
