#include "log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace jobfs::log {
namespace {

Level level_from_env() {
    const char* v = std::getenv("JOBFS_LOG");
    if (!v) return Level::warn;
    if (!std::strcmp(v, "error")) return Level::error;
    if (!std::strcmp(v, "info")) return Level::info;
    if (!std::strcmp(v, "debug")) return Level::debug;
    return Level::warn;
}

std::atomic<int> g_level{static_cast<int>(level_from_env())};
std::mutex g_mu; // guards g_name and keeps lines whole
std::string g_name = "jobfs";

const char* level_name(Level level) {
    switch (level) {
    case Level::error: return "error";
    case Level::warn: return "warning";
    case Level::info: return "info";
    case Level::debug: return "debug";
    }
    return "?";
}

} // namespace

void set_name(std::string_view name) {
    std::lock_guard lock(g_mu);
    g_name = name;
}

void set_level(Level level) { g_level = static_cast<int>(level); }

bool enabled(Level level) { return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed); }

void write(Level level, const char* fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    std::lock_guard lock(g_mu);
    std::fprintf(stderr, "%s: %s: %s\n", g_name.c_str(), level_name(level), buf);
}

} // namespace jobfs::log
