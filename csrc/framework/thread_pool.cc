#include "framework/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <map>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace tob {

namespace {
thread_local bool tls_in_parallel_region = false;

// How long an idle worker, or a caller waiting for its workers, busy-waits before blocking.
// Long enough to bridge the gap between two nodes of a run (a few microseconds of bookkeeping,
// or a node too small to split), short enough not to take a core from torch between runs.
constexpr auto kSpin = std::chrono::microseconds(100);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until done() or the spin budget is spent; returns done().
template <typename Pred>
bool SpinUntil(Pred done) {
  if (done()) return true;
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 1;; ++i) {
    CpuRelax();
    if (done()) return true;
    if ((i & 63) == 0 && std::chrono::steady_clock::now() >= deadline) return false;
  }
}
std::atomic<const ExternalParallelRuntime*> g_external_runtime{nullptr};
}  // namespace

void SetExternalParallelRuntime(const ExternalParallelRuntime* runtime) {
  g_external_runtime.store(runtime, std::memory_order_release);
}

const ExternalParallelRuntime* GetExternalParallelRuntime() {
  return g_external_runtime.load(std::memory_order_acquire);
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {}

std::unique_ptr<ThreadPool> ThreadPool::Following(int num_threads) {
  auto pool = std::make_unique<ThreadPool>(num_threads);
  pool->follow_external_ = true;
  return pool;
}

int ThreadPool::num_threads() const {
  if (follow_external_)
    if (const ExternalParallelRuntime* external = GetExternalParallelRuntime()) return external->num_threads();
  return num_threads_;
}

void ThreadPool::StartWorkers() {
  std::call_once(workers_started_, [this] {
    for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);  // ends the spin of any worker
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
    SpinUntil([&] { return generation_.load(std::memory_order_acquire) != seen_generation; });
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!stop_ && generation_.load() == seen_generation) {
        ++sleepers_;
        work_cv_.wait(lock, [&] { return stop_ || generation_.load() != seen_generation; });
        --sleepers_;
      }
      if (stop_) return;
      seen_generation = generation_.load();
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

void ThreadPool::ParallelFor(int64_t n, int64_t min_grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_grain = std::max<int64_t>(1, min_grain);
  const ExternalParallelRuntime* external = GetExternalParallelRuntime();
  const int external_threads = external != nullptr ? external->num_threads() : 0;
  if (external != nullptr && !follow_external_ && external_threads != num_threads_) external = nullptr;
  const int threads = external != nullptr ? external_threads : num_threads_;
  // Every chunk gets at least min_grain iterations.
  int64_t max_chunks = std::min<int64_t>(threads, std::max<int64_t>(1, n / min_grain));
  if (max_chunks <= 1 || tls_in_parallel_region) {
    fn(0, n);
    return;
  }
  if (external != nullptr) {
    // The same chunks as below: max_chunks pieces, each of at least min_grain iterations.
    external->parallel_for(n, (n + max_chunks - 1) / max_chunks, fn);
    return;
  }
  StartWorkers();
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
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = job;
    generation_.fetch_add(1, std::memory_order_release);
    wake = sleepers_ > 0;  // spinning workers see the new generation without a wake-up
  }
  if (wake) work_cv_.notify_all();
  tls_in_parallel_region = true;
  int64_t ran = RunClaimedChunks(*job);
  tls_in_parallel_region = false;
  job->remaining.fetch_sub(ran);
  if (!SpinUntil([&] { return job->remaining.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return job->remaining.load() == 0; });
  }
  std::lock_guard<std::mutex> lock(mu_);
  job_.reset();
}

std::shared_ptr<ThreadPool> ThreadPool::Shared(int num_threads) {
  static std::mutex mu;
  static std::map<int, std::weak_ptr<ThreadPool>> pools;
  std::lock_guard<std::mutex> lock(mu);
  num_threads = std::max(0, num_threads);
  auto& slot = pools[num_threads];
  if (auto p = slot.lock()) return p;
  std::shared_ptr<ThreadPool> p = num_threads == 0
                                      ? Following(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())))
                                      : std::make_shared<ThreadPool>(num_threads);
  slot = p;
  return p;
}

void ParallelFor(ThreadPool* pool, int64_t n, int64_t min_grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr) {
    if (n > 0) fn(0, n);
    return;
  }
  pool->ParallelFor(n, min_grain, fn);
}

}  // namespace tob
