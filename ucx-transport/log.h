// log.h: leveled logging to stderr, every line prefixed "jobfs[<process name>]".
//
// Log where an error is decided, once; callers that only pass a Status on do not log it.
// The level comes from JOBFS_LOG (error, warn, info, debug); the default is warn.
#pragma once

#include <string_view>

namespace jobfs::log {

enum class Level { error = 0, warn = 1, info = 2, debug = 3 };

void set_name(std::string_view name);   // shown in the prefix, e.g. "jobfsd.2"
void set_level(Level level);
bool enabled(Level level);
void write(Level level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

} // namespace jobfs::log

#define JOBFS_LOG(level, ...)                                                              \
    do {                                                                                   \
        if (::jobfs::log::enabled(::jobfs::log::Level::level))                             \
            ::jobfs::log::write(::jobfs::log::Level::level, __VA_ARGS__);                  \
    } while (0)
#define JOBFS_ERROR(...) JOBFS_LOG(error, __VA_ARGS__)
#define JOBFS_WARN(...) JOBFS_LOG(warn, __VA_ARGS__)
#define JOBFS_INFO(...) JOBFS_LOG(info, __VA_ARGS__)
#define JOBFS_DEBUG(...) JOBFS_LOG(debug, __VA_ARGS__)
