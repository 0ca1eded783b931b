// ThreadPool: every index exactly once, chunking bounds, nesting runs inline, shared pools, and
// the hand-over to an external runtime (torch's pool in the Python module).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "framework/thread_pool.h"

namespace tob {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  ThreadPool pool(4);
  for (int64_t n : {1, 7, 64, 1000, 12345}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPool, RespectsMinimumGrainAndUsesSeveralThreads) {
  ThreadPool pool(2);
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  std::set<std::thread::id> threads;
  std::condition_variable both_running;
  pool.ParallelFor(1000, 100, [&](int64_t b, int64_t e) {
    std::unique_lock<std::mutex> lock(mu);
    chunks.emplace_back(b, e);
    threads.insert(std::this_thread::get_id());
    both_running.notify_all();
    // Hold the chunk until the other participant claims one: proves a worker takes part (the
    // caller would otherwise claim both chunks, which is the intended behaviour under load).
    both_running.wait_for(lock, std::chrono::seconds(10), [&] { return threads.size() == 2; });
  });
  EXPECT_EQ(chunks.size(), 2u);
  EXPECT_EQ(threads.size(), 2u);
  chunks.clear();
  pool.ParallelFor(150, 100, [&](int64_t b, int64_t e) { chunks.emplace_back(b, e); });
  ASSERT_EQ(chunks.size(), 1u) << "below two grains the work must stay on the caller";
  EXPECT_EQ(chunks[0].first, 0);
  EXPECT_EQ(chunks[0].second, 150);
}

TEST(ThreadPool, CallerFinishesTheJobWhenWorkersAreBusy) {
  // Back-to-back jobs: whichever participant claims a chunk runs it, late wake-ups of a
  // previous job must never run or lose a chunk of the next one.
  ThreadPool pool(2);
  for (int rep = 0; rep < 200; ++rep) {
    std::atomic<int64_t> sum{0};
    pool.ParallelFor(64, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
    ASSERT_EQ(sum.load(), 64 * 63 / 2);
  }
}

TEST(ThreadPool, NestedParallelForRunsInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  pool.ParallelFor(4, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) pool.ParallelFor(10, 1, [&](int64_t ib, int64_t ie) { total += ie - ib; });
  });
  EXPECT_EQ(total.load(), 40);
}

TEST(ThreadPool, SharedPoolsAreOnePerSize) {
  auto a = ThreadPool::Shared(3);
  auto b = ThreadPool::Shared(3);
  auto c = ThreadPool::Shared(2);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(a.get(), c.get());
  EXPECT_EQ(a->num_threads(), 3);
}

TEST(ThreadPool, NullPoolRunsInline) {
  int64_t seen = 0;
  ParallelFor(nullptr, 17, 1, [&](int64_t b, int64_t e) { seen += e - b; });
  EXPECT_EQ(seen, 17);
}

// A stand-in external runtime of two threads: runs the chunks serially and records the calls.
std::atomic<int> g_external_calls{0};
std::atomic<int64_t> g_external_grain{0};
int TwoThreads() { return 2; }
void SerialParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  g_external_calls.fetch_add(1);
  g_external_grain.store(grain);
  for (int64_t b = 0; b < n; b += grain) fn(b, std::min(n, b + grain));
}
const ExternalParallelRuntime kSerialRuntime{&TwoThreads, &SerialParallelFor};

int64_t ProcessThreadCount() {
  int64_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++count;
  return count;
}

struct ExternalRuntimeScope {
  ExternalRuntimeScope() {
    g_external_calls = 0;
    SetExternalParallelRuntime(&kSerialRuntime);
  }
  ~ExternalRuntimeScope() { SetExternalParallelRuntime(nullptr); }
};

TEST(ThreadPool, ExternalRuntimeOfTheSameSizeRunsTheWork) {
  ExternalRuntimeScope scope;
  const int64_t threads_before = ProcessThreadCount();
  ThreadPool same(2);
  std::vector<std::atomic<int>> hits(1001);
  same.ParallelFor(1001, 100, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  EXPECT_EQ(g_external_calls.load(), 1);
  // The same two chunks the pool would make itself: 1001 over 2 threads, each >= min_grain.
  EXPECT_EQ(g_external_grain.load(), 501);
  EXPECT_EQ(ProcessThreadCount(), threads_before) << "a pool whose work goes elsewhere starts no thread";

  // Too little work for two chunks: inline, the runtime is not involved.
  same.ParallelFor(150, 100, [](int64_t, int64_t) {});
  EXPECT_EQ(g_external_calls.load(), 1);

  // Another size keeps its own workers.
  ThreadPool other(3);
  std::atomic<int64_t> seen{0};
  other.ParallelFor(300, 1, [&](int64_t b, int64_t e) { seen += e - b; });
  EXPECT_EQ(seen.load(), 300);
  EXPECT_EQ(g_external_calls.load(), 1);
}

TEST(ThreadPool, UninstallingTheExternalRuntimeGoesBackToOwnWorkers) {
  {
    ExternalRuntimeScope scope;
    ThreadPool::Shared(2)->ParallelFor(64, 1, [](int64_t, int64_t) {});
    EXPECT_EQ(g_external_calls.load(), 1);
  }
  std::atomic<int64_t> seen{0};
  ThreadPool::Shared(2)->ParallelFor(64, 1, [&](int64_t b, int64_t e) { seen += e - b; });
  EXPECT_EQ(seen.load(), 64);
  EXPECT_EQ(g_external_calls.load(), 1);
}

TEST(ThreadPool, FollowingPoolTakesTheExternalRuntimesSize) {
  auto following = ThreadPool::Following(3);
  EXPECT_EQ(following->num_threads(), 3) << "no runtime installed: its own size";
  {
    ExternalRuntimeScope scope;
    EXPECT_EQ(following->num_threads(), 2);
    std::atomic<int64_t> seen{0};
    following->ParallelFor(90, 1, [&](int64_t b, int64_t e) { seen += e - b; });
    EXPECT_EQ(seen.load(), 90);
    EXPECT_EQ(g_external_calls.load(), 1) << "a following pool of another size still hands its work over";
    EXPECT_EQ(g_external_grain.load(), 45);
  }
  std::atomic<int64_t> seen{0};
  following->ParallelFor(90, 1, [&](int64_t b, int64_t e) { seen += e - b; });
  EXPECT_EQ(seen.load(), 90);
  EXPECT_EQ(ThreadPool::Shared(0)->num_threads(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

TEST(ThreadPool, WorkersSleepAfterTheirSpinAndWakeForTheNextJob) {
  // A job long after the previous one finds the workers asleep (past their spin); it must still
  // be picked up and completed, many times over.
  ThreadPool pool(2);
  for (int rep = 0; rep < 5; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::mutex mu;
    std::set<std::thread::id> threads;
    std::condition_variable both_running;
    pool.ParallelFor(2, 1, [&](int64_t, int64_t) {
      std::unique_lock<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
      both_running.notify_all();
      both_running.wait_for(lock, std::chrono::seconds(10), [&] { return threads.size() == 2; });
    });
    ASSERT_EQ(threads.size(), 2u) << "rep " << rep;
  }
}

}  // namespace
}  // namespace tob
