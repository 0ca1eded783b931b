// BoundSubgraph: a nested session (Session::CreateNested) bound to this run's values of the
// enclosing graphs that it reads, as a control-flow kernel runs it (framework/kernel.h). Used by
// Session::RunStep and Session::RunValueStep only.
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

#include "framework/kernel.h"
#include "runtime/session.h"

namespace tob {

// A nested session bound to this run's values of the enclosing graphs it reads: what a
// control-flow kernel sees as its subgraph (framework/kernel.h).
class BoundSubgraph final : public SubgraphRunner {
 public:
  BoundSubgraph(Session* session, std::vector<RuntimeValue> outer) : session_(session), outer_(std::move(outer)) {}
  const Graph& graph() const override { return session_->graph(); }
  Status Run(std::vector<RuntimeValue> feeds, std::vector<RuntimeValue>* fetches) const override {
    if (feeds.size() != session_->graph().inputs().size())
      return InvalidArgument(session_->graph().Describe(), " takes ", session_->graph().inputs().size(),
                             " inputs, got ", feeds.size());
    feeds.insert(feeds.end(), outer_.begin(), outer_.end());
    size_t peak = 0;
    TOB_RETURN_IF_ERROR(session_->RunNested(std::move(feeds), fetches, &peak));
    peak_live_bytes_ = std::max(peak_live_bytes_, peak);
    return Status::OK();
  }
  // The most a run of the subgraph held at once (its intermediates and outputs).
  size_t peak_live_bytes() const { return peak_live_bytes_; }

 private:
  Session* session_;
  std::vector<RuntimeValue> outer_;
  mutable size_t peak_live_bytes_ = 0;
};

}  // namespace tob
