#include "runtime/profiler.h"

#include <atomic>

#include <ctime>
#include <fstream>
#include <sstream>

#include "core/status.h"

namespace tob {

namespace {

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out;
}

}  // namespace

void Profiler::Record(ProfileEvent e) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(std::move(e));
}

std::vector<ProfileEvent> Profiler::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

std::string Profiler::WriteChromeTrace(const std::string& prefix) {
  if (!enabled_) return "";
  std::vector<ProfileEvent> events = this->events();
  // Time plus a process-wide sequence number: sessions ending their profiles in the same second
  // (a forward and a backward graph) must not overwrite each other's file.
  static std::atomic<int64_t> sequence{0};
  std::string path = StrCat(prefix, "_", static_cast<int64_t>(std::time(nullptr)), "_", sequence.fetch_add(1), ".json");
  std::ofstream f(path);
  if (!f) return "";
  f << "[\n";
  for (size_t i = 0; i < events.size(); ++i) {
    const ProfileEvent& e = events[i];
    f << "{\"name\":\"" << JsonEscape(e.name) << "\",\"cat\":\"" << e.category
      << "\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":" << e.start_us << ",\"dur\":" << e.duration_us
      << ",\"args\":{\"op_type\":\"" << JsonEscape(e.op_type) << "\",\"provider\":\"" << JsonEscape(e.provider)
      << "\",\"output_shapes\":\"" << JsonEscape(e.shapes) << "\"}}" << (i + 1 < events.size() ? ",\n" : "\n");
  }
  f << "]\n";
  return path;
}

}  // namespace tob
