#include "memory/live_bytes.h"

#include <algorithm>

namespace tob {

namespace {

bool SharesMemory(const Buffer& a, const Buffer& b) {
  const char* p = static_cast<const char*>(a.data());
  const char* q = static_cast<const char*>(b.data());
  return a.bytes() > 0 && b.bytes() > 0 && p < q + b.bytes() && q < p + a.bytes();
}

}  // namespace

void LiveBytes::Exclude(const Tensor& t) {
  if (!t.buffer()) return;
  excluded_.push_back(t.buffer().get());
  excluded_sorted_ = false;
}

bool LiveBytes::Excluded(const Buffer* b) {
  if (!excluded_sorted_) {
    std::sort(excluded_.begin(), excluded_.end());
    excluded_sorted_ = true;
  }
  return std::binary_search(excluded_.begin(), excluded_.end(), b);
}

void LiveBytes::Clear() {
  counted_.clear();
  views_.clear();
  excluded_.clear();
  excluded_sorted_ = true;
  live_ = 0;
}

void LiveBytes::Hold(const Tensor& t, const std::vector<const Tensor*>& step_inputs, const RunAllocator& run_alloc) {
  const Buffer* b = t.buffer().get();
  if (b == nullptr || Excluded(b)) return;
  if (auto view = views_.find(b); view != views_.end()) {
    ++view->second.holders;
    ++counted_.at(view->second.owner).holders;
    return;
  }
  if (auto it = counted_.find(b); it != counted_.end()) {
    ++it->second.holders;
    return;
  }
  if (run_alloc.Serves(b->data())) return;
  for (const Tensor* in : step_inputs) {
    if (in == nullptr || !in->buffer() || !SharesMemory(*b, *in->buffer())) continue;
    // A view of a step input: of the caller's memory or the run allocator's (not counted here), or
    // of a counted buffer, which this tensor then keeps alive too.
    const Buffer* viewed = in->buffer().get();
    if (auto v = views_.find(viewed); v != views_.end()) viewed = v->second.owner;
    if (auto owner = counted_.find(viewed); owner != counted_.end()) {
      views_[b] = View{viewed, 1};
      ++owner->second.holders;
    }
    return;
  }
  counted_[b] = Counted{b->bytes(), 1};
  live_ += b->bytes();
}

void LiveBytes::Release(const Tensor& t) {
  const Buffer* key = t.buffer().get();
  if (auto view = views_.find(key); view != views_.end()) {
    key = view->second.owner;
    if (--view->second.holders == 0) views_.erase(view);
  }
  auto it = counted_.find(key);
  if (it == counted_.end() || --it->second.holders > 0) return;
  live_ -= it->second.bytes;
  counted_.erase(it);
}

}  // namespace tob
