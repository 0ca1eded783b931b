// Per-node timing, written as a Chrome trace (chrome://tracing, Perfetto) JSON file.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace tob {

struct ProfileEvent {
  std::string name;      // node name, or "run" / "session_initialization"
  std::string category;  // "Node" or "Session"
  std::string op_type;
  std::string provider;
  std::string shapes;    // output shapes, e.g. "[2, 3] [2]"
  int64_t start_us = 0;  // since the profiler started
  int64_t duration_us = 0;
};

class Profiler {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Profiler(bool enabled) : enabled_(enabled), origin_(Clock::now()) {}
  bool enabled() const { return enabled_; }
  int64_t NowUs() const {
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - origin_).count();
  }
  void Record(ProfileEvent e);
  // Writes "<prefix>_<unix time>.json"; returns the path ("" when disabled or empty).
  std::string WriteChromeTrace(const std::string& prefix);
  std::vector<ProfileEvent> events() const;

 private:
  bool enabled_;
  Clock::time_point origin_;
  mutable std::mutex mu_;
  std::vector<ProfileEvent> events_;
};

}  // namespace tob
