#include "memory/arena_pool.h"

#include <algorithm>

namespace tob {

ArenaPool& ArenaPool::Global() {
  static ArenaPool* pool = new ArenaPool();  // never destroyed: sessions may outlive static destruction
  return *pool;
}

std::shared_ptr<Buffer> ArenaPool::Take(const std::shared_ptr<Allocator>& allocator, size_t bytes) {
  std::vector<std::shared_ptr<Buffer>> too_small;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if ((*it)->device() != allocator->device() || (*it)->bytes() < bytes) continue;
      if (best == free_.end() || (*it)->bytes() < (*best)->bytes()) best = it;
    }
    if (best != free_.end()) {
      std::shared_ptr<Buffer> arena = std::move(*best);
      free_.erase(best);
      return arena;
    }
    // None is large enough: the device's free arenas are smaller than the one allocated now, which
    // Give keeps instead of them; freed before the new one is allocated, not after the run (a
    // forward's arena idle through the larger backward's run would add to the step's peak).
    for (auto it = free_.begin(); it != free_.end();) {
      if ((*it)->device() == allocator->device()) {
        too_small.push_back(std::move(*it));
        it = free_.erase(it);
      } else {
        ++it;
      }
    }
  }
  too_small.clear();
  return AllocateBuffer(allocator, bytes);
}

void ArenaPool::Give(std::shared_ptr<Buffer> arena) {
  std::vector<std::shared_ptr<Buffer>> released;  // freed outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  if (users_ == 0) {
    released.push_back(std::move(arena));
    return;
  }
  // Keep the largest free arena of the device: it serves every run a smaller one would.
  for (auto it = free_.begin(); it != free_.end();) {
    if ((*it)->device() != arena->device()) {
      ++it;
    } else if ((*it)->bytes() <= arena->bytes()) {
      released.push_back(std::move(*it));
      it = free_.erase(it);
    } else {
      released.push_back(std::move(arena));
      return;
    }
  }
  free_.push_back(std::move(arena));
}

void ArenaPool::ReleaseFree() {
  std::vector<std::shared_ptr<Buffer>> released;  // freed outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  released.swap(free_);
}

void ArenaPool::AddUser() {
  std::lock_guard<std::mutex> lock(mu_);
  ++users_;
}

void ArenaPool::RemoveUser() {
  std::vector<std::shared_ptr<Buffer>> released;
  std::lock_guard<std::mutex> lock(mu_);
  if (--users_ == 0) released.swap(free_);
}

size_t ArenaPool::free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t total = 0;
  for (const auto& a : free_) total += a->bytes();
  return total;
}

}  // namespace tob
