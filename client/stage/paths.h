// The lexical path pieces staging takes apart (jobfs and local paths, '/'-separated); no file
// system is asked.
#pragma once

#include <string>

namespace jobfs::stage {

// "a/b/c" -> "a/b", "/c" -> "/", "c" -> ".".
inline std::string dirname_of(const std::string& p) {
    const auto s = p.rfind('/');
    return s == std::string::npos ? "." : (s == 0 ? "/" : p.substr(0, s));
}

// "a/b/c" -> "c", "c" -> "c".
inline std::string basename_of(const std::string& p) {
    const auto s = p.rfind('/');
    return s == std::string::npos ? p : p.substr(s + 1);
}

// "a/b/c" -> "a/b/", "c" -> "": the directory part with its slash, to put another name after.
inline std::string dir_prefix_of(const std::string& p) {
    const auto s = p.rfind('/');
    return s == std::string::npos ? std::string() : p.substr(0, s + 1);
}

} // namespace jobfs::stage
