#include "memory/live_bytes.h"

namespace tob {

namespace {

bool SharesMemory(const Buffer& a, const Buffer& b) {
  const char* p = static_cast<const char*>(a.data());
  const char* q = static_cast<const char*>(b.data());
  return a.bytes() > 0 && b.bytes() > 0 && p < q + b.bytes() && q < p + a.bytes();
}

}  // namespace

void LiveBytes::Exclude(const Tensor& t) {
  if (t.buffer()) excluded_.insert(t.buffer().get());
}

void LiveBytes::Hold(const Tensor& t, const std::vector<const Tensor*>& step_inputs, const RunAllocator& run_alloc) {
  const Buffer* b = t.buffer().get();
  if (b == nullptr || excluded_.count(b) != 0) return;
  auto it = counted_.find(b);
  if (it != counted_.end()) {
    ++it->second.holders;
    return;
  }
  if (run_alloc.Serves(b->data())) return;
  for (const Tensor* in : step_inputs)
    if (in != nullptr && in->buffer() && SharesMemory(*b, *in->buffer())) return;
  counted_[b] = Counted{b->bytes(), 1};
  live_ += b->bytes();
}

void LiveBytes::Release(const Tensor& t) {
  auto it = counted_.find(t.buffer().get());
  if (it == counted_.end() || --it->second.holders > 0) return;
  live_ -= it->second.bytes;
  counted_.erase(it);
}

}  // namespace tob
