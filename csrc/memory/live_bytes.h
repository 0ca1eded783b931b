// The bytes a run's tensors hold outside its run allocator: graph outputs, the values they alias
// and tensors a kernel allocated itself (ATen nodes). Added to the run allocator's own count
// (intermediates and scratch), it is the memory the run holds at a time: RunStats::peak_live_bytes.
#pragma once

#include <cstddef>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "memory/run_allocator.h"

namespace tob {

class LiveBytes {
 public:
  // Memory of graph inputs, bound states and constants: the caller's, never counted.
  void Exclude(const Tensor& t);
  // A step put `t` in a slot. Counted once per buffer, however many slots hold it; not counted
  // when the run allocator serves it or when it views memory of the caller's (an input that is not
  // donated). A tensor a kernel made as a view of a counted one (an ATen node's view of a donated
  // input or of another kernel's output, in a Buffer of its own) holds that one's count: the
  // memory stays until the last of them is released.
  void Hold(const Tensor& t, const std::vector<const Tensor*>& step_inputs, const RunAllocator& run_alloc);
  // A slot holding `t` was released.
  void Release(const Tensor& t);
  size_t live() const { return live_; }
  // Forgets every buffer, keeping the containers' memory: a LiveBytes reused from run to run
  // (Session::RunBound keeps one per thread) allocates nothing once it has grown to a run's size.
  void Clear();

 private:
  bool Excluded(const Buffer* b);

  struct Counted {
    size_t bytes = 0;
    int holders = 0;
  };
  struct View {
    const Buffer* owner = nullptr;  // the counted buffer it views
    int holders = 0;                // slots holding the view (each also holds a count of the owner)
  };
  std::unordered_map<const Buffer*, Counted> counted_;
  std::unordered_map<const Buffer*, View> views_;
  // The caller's buffers (a run's inputs and constants, added before its first step): sorted on
  // the first lookup after an Exclude, then searched.
  std::vector<const Buffer*> excluded_;
  bool excluded_sorted_ = true;
  size_t live_ = 0;
};

}  // namespace tob
