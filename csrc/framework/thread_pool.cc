#include "framework/thread_pool.h"

#include <algorithm>
#include <map>

namespace tob {

namespace {
thread_local bool tls_in_parallel_region = false;
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int64_t ThreadPool::RunClaimedChunks(Job& job) {
  int64_t ran = 0;
  const int64_t total = static_cast<int64_t>(job.chunks.size());
  for (int64_t c = job.next.fetch_add(1); c < total; c = job.next.fetch_add(1)) {
    (*job.fn)(job.chunks[c].first, job.chunks[c].second);
    ++ran;
  }
  return ran;
}

void ThreadPool::WorkerLoop() {
  int64_t seen_generation = 0;
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen_generation; });
      if (stop_) return;
      seen_generation = generation_;
      job = job_;
    }
    if (!job) continue;
    tls_in_parallel_region = true;
    int64_t ran = RunClaimedChunks(*job);
    tls_in_parallel_region = false;
    if (ran > 0 && job->remaining.fetch_sub(ran) == ran) {
      std::lock_guard<std::mutex> lock(mu_);  // pairs with the caller's predicate check
      done_cv_.notify_all();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_grain = std::max<int64_t>(1, min_grain);
  // Every chunk gets at least min_grain iterations.
  int64_t max_chunks = std::min<int64_t>(num_threads_, std::max<int64_t>(1, n / min_grain));
  if (max_chunks <= 1 || tls_in_parallel_region) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  int64_t base = n / max_chunks, extra = n % max_chunks, begin = 0;
  for (int64_t c = 0; c < max_chunks; ++c) {
    int64_t len = base + (c < extra ? 1 : 0);
    job->chunks.emplace_back(begin, begin + len);
    begin += len;
  }
  job->remaining.store(max_chunks);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = job;
    ++generation_;
  }
  work_cv_.notify_all();
  tls_in_parallel_region = true;
  int64_t ran = RunClaimedChunks(*job);
  tls_in_parallel_region = false;
  job->remaining.fetch_sub(ran);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return job->remaining.load() == 0; });
  job_.reset();
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
