// The logger of tensorpc: leveled lines on stderr.
//
// One logger for the whole project, so that every message looks alike and
// one switch quiets or opens them all. The level comes from the environment
// variable TENSORPC_LOG (error, warn, info, debug; default info) the first
// time a message is considered, or from set_level(). Thread-safe: a line is
// written whole, never interleaved with another thread's.
#pragma once

#include <string_view>

namespace tensorpc::log {

enum class Level { error = 0, warn = 1, info = 2, debug = 3 };

// True when messages of `level` are written; check it before building an
// expensive message.
bool enabled(Level level);
void set_level(Level level);
Level level();

void write(Level level, std::string_view message);
inline void error(std::string_view message) { write(Level::error, message); }
inline void warn(std::string_view message) { write(Level::warn, message); }
inline void info(std::string_view message) { write(Level::info, message); }
inline void debug(std::string_view message) { write(Level::debug, message); }

}  // namespace tensorpc::log
