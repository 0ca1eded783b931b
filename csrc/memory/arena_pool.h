// The arenas of planned runs, shared by every session of the process. A session takes an arena
// for the length of one run and gives it back after, so sessions that never run at the same time
// (a training step's forward and backward graphs, the graphs around a graph break, one session's
// input-shape signatures) hold one arena between them instead of one each: the idle forward arena
// no longer sits beside the backward's at the step's peak. Free arenas are kept while a session
// lives (the largest one only), so steady steps allocate nothing and touch no new pages; a run that
// needs a larger one frees the smaller ones first. A session that releases its arena after each
// run (SessionOptions::release_arena_after_run) empties the pool instead: no arena stays resident
// between training steps, and each step pays the page faults of a fresh one.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "core/allocator.h"

namespace tob {

class ArenaPool {
 public:
  static ArenaPool& Global();

  // An arena of at least `bytes` from `allocator`: the smallest free one on the allocator's device
  // that is large enough, else a new one (nullptr when out of memory).
  std::shared_ptr<Buffer> Take(const std::shared_ptr<Allocator>& allocator, size_t bytes);
  // Gives an arena back; of the free arenas of a device only the largest is kept.
  void Give(std::shared_ptr<Buffer> arena);

  // Frees every free arena (the memory goes back to the system; the next Take allocates anew).
  void ReleaseFree();

  // Sessions alive: free arenas are kept while there is one, released when the last one goes.
  void AddUser();
  void RemoveUser();

  size_t free_bytes() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Buffer>> free_;
  int users_ = 0;
};

// Takes an arena from the pool for one scope (a run) and gives it back when the scope ends, on
// every path out of it; with `release`, frees it and the pool's free arenas instead, so that no
// arena stays resident after the scope (SessionOptions::release_arena_after_run).
class ScopedArena {
 public:
  explicit ScopedArena(bool release = false) : release_(release) {}
  ~ScopedArena() {
    if (release_) {
      arena_.reset();
      ArenaPool::Global().ReleaseFree();
    } else if (arena_) {
      ArenaPool::Global().Give(std::move(arena_));
    }
  }
  ScopedArena(const ScopedArena&) = delete;
  ScopedArena& operator=(const ScopedArena&) = delete;

  bool Take(const std::shared_ptr<Allocator>& allocator, size_t bytes) {
    arena_ = ArenaPool::Global().Take(allocator, bytes);
    return arena_ != nullptr;
  }
  void* data() const { return arena_ ? arena_->data() : nullptr; }

 private:
  bool release_ = false;
  std::shared_ptr<Buffer> arena_;
};

}  // namespace tob
