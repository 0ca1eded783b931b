// ThreadPool: every index exactly once, chunking bounds, nesting runs inline, shared pools.
#include <gtest/gtest.h>

#include <atomic>
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
  pool.ParallelFor(1000, 100, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    chunks.emplace_back(b, e);
    threads.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(chunks.size(), 2u);
  EXPECT_EQ(threads.size(), 2u);
  chunks.clear();
  pool.ParallelFor(150, 100, [&](int64_t b, int64_t e) { chunks.emplace_back(b, e); });
  ASSERT_EQ(chunks.size(), 1u) << "below two grains the work must stay on the caller";
  EXPECT_EQ(chunks[0].first, 0);
  EXPECT_EQ(chunks[0].second, 150);
}

TEST(ThreadPool, NestedParallelForRunsInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  pool.ParallelFor(4, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.ParallelFor(10, 1, [&](int64_t ib, int64_t ie) { total += ie - ib; });
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

}  // namespace
}  // namespace tob
