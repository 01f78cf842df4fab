// The logger: see log.h.
#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>

namespace tensorpc::log {
namespace {

Level level_from_env() {
  const char* env = std::getenv("TENSORPC_LOG");
  if (env == nullptr) return Level::info;
  const std::string v(env);
  if (v == "error") return Level::error;
  if (v == "warn" || v == "warning") return Level::warn;
  if (v == "debug") return Level::debug;
  return Level::info;
}

// The one piece of process-wide state of the logger: read once, then only
// changed by set_level().
std::atomic<int>& current() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

const char* tag(Level level) {
  switch (level) {
    case Level::error: return "error";
    case Level::warn: return "warn";
    case Level::info: return "info";
    case Level::debug: return "debug";
  }
  return "?";
}

}  // namespace

bool enabled(Level level) { return static_cast<int>(level) <= current().load(std::memory_order_relaxed); }
void set_level(Level level) { current().store(static_cast<int>(level)); }
Level level() { return static_cast<Level>(current().load()); }

void write(Level level, std::string_view message) {
  if (!enabled(level)) return;
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  ::localtime_r(&secs, &tm);
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  // One fprintf per line under a lock, so lines of several threads never mix.
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "%s tensorpc %s: %.*s\n", stamp, tag(level), static_cast<int>(message.size()), message.data());
}

}  // namespace tensorpc::log
