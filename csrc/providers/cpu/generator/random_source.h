// Deterministic random streams for Dropout and the Random* ops.
//
// A kernel draws one stream per Compute call: (seed, call). With a seed attribute the seed is
// fixed and `call` counts the kernel's runs, so a model is reproducible yet each training step
// gets a new mask; without one, seeds come from a process-wide counter. A tensor is filled in
// blocks of kRandomBlock elements, each from its own std::mt19937, so it fills in parallel and
// the values do not depend on the thread count. Block 0 of call 0 of a seeded kernel is
// std::mt19937(seed) itself and uniforms use the 53-bit recipe of numpy's RandomState, so small
// tensors reproduce numpy.random.seed(seed); np.random.uniform(...) (the ONNX node tests).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <random>

namespace tob::cpu {

inline constexpr int64_t kRandomBlock = 1 << 16;

struct RandomStream {
  uint32_t seed = 0;
  uint64_t call = 0;
};

// A fresh seed for kernels without a seed attribute.
uint32_t NextGlobalRandomSeed();

class RandomSeeder {
 public:
  explicit RandomSeeder(std::optional<uint32_t> seed) : seed_(seed) {}
  RandomSeeder(const RandomSeeder& other) : seed_(other.seed_) {}

  // Thread-safe: concurrent runs of one kernel get distinct streams.
  RandomStream Next() const {
    if (seed_) return RandomStream{*seed_, calls_.fetch_add(1, std::memory_order_relaxed)};
    return RandomStream{NextGlobalRandomSeed(), 1};
  }

 private:
  std::optional<uint32_t> seed_;
  mutable std::atomic<uint64_t> calls_{0};
};

inline std::mt19937 BlockEngine(const RandomStream& stream, int64_t block) {
  if (stream.call == 0 && block == 0) return std::mt19937(stream.seed);
  std::seed_seq seq{stream.seed, static_cast<uint32_t>(stream.call), static_cast<uint32_t>(stream.call >> 32),
                    static_cast<uint32_t>(block), static_cast<uint32_t>(static_cast<uint64_t>(block) >> 32)};
  return std::mt19937(seq);
}

// Uniform in [0, 1) with 53 random bits (numpy's random_standard_uniform / genrand_res53).
inline double Uniform53(std::mt19937& engine) {
  uint32_t a = engine() >> 5, b = engine() >> 6;
  return (static_cast<double>(a) * 67108864.0 + static_cast<double>(b)) / 9007199254740992.0;
}

}  // namespace tob::cpu
