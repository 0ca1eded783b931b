#include "framework/thread_pool.h"

#include <algorithm>
#include <map>

namespace tob {

namespace {
thread_local bool tls_in_parallel_region = false;
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::WorkerLoop(int worker_index) {
  int64_t seen_generation = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    std::pair<int64_t, int64_t> chunk;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen_generation; });
      if (stop_) return;
      seen_generation = generation_;
      if (worker_index >= static_cast<int>(chunks_.size())) continue;
      job = job_;
      chunk = chunks_[worker_index];
    }
    tls_in_parallel_region = true;
    (*job)(chunk.first, chunk.second);
    tls_in_parallel_region = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--remaining_ == 0) done_cv_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_grain = std::max<int64_t>(1, min_grain);
  int64_t max_chunks = std::min<int64_t>(num_threads_, (n + min_grain - 1) / min_grain);
  if (max_chunks <= 1 || tls_in_parallel_region) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  std::vector<std::pair<int64_t, int64_t>> chunks;
  int64_t base = n / max_chunks, extra = n % max_chunks, begin = 0;
  for (int64_t c = 0; c < max_chunks; ++c) {
    int64_t len = base + (c < extra ? 1 : 0);
    chunks.emplace_back(begin, begin + len);
    begin += len;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    chunks_ = chunks;
    remaining_ = static_cast<int>(chunks.size()) - 1;  // chunk 0 runs here
    ++generation_;
  }
  work_cv_.notify_all();
  tls_in_parallel_region = true;
  fn(chunks[0].first, chunks[0].second);
  tls_in_parallel_region = false;
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return remaining_ == 0; });
  job_ = nullptr;
}

std::shared_ptr<ThreadPool> ThreadPool::Shared(int num_threads) {
  static std::mutex mu;
  static std::map<int, std::weak_ptr<ThreadPool>> pools;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = pools[num_threads];
  if (auto p = slot.lock()) return p;
  auto p = std::make_shared<ThreadPool>(num_threads);
  slot = p;
  return p;
}

void ParallelFor(ThreadPool* pool, int64_t n, int64_t min_grain,
                 const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr) {
    if (n > 0) fn(0, n);
    return;
  }
  pool->ParallelFor(n, min_grain, fn);
}

}  // namespace tob
