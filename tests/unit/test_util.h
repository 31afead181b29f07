// test_util.h: small helpers the unit tests share.
#pragma once

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace jobfs::test {

// Deterministic bytes, different for every seed and position (splitmix64), so a misplaced
// chunk or a stale buffer shows in a comparison.
inline std::vector<uint8_t> pattern(size_t n, uint64_t seed) {
    auto mix = [](uint64_t x) {
        x += 0x9e3779b97f4a7c15ull;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        return x ^ (x >> 31);
    };
    std::vector<uint8_t> v(n);
    uint64_t x = mix(seed);
    for (size_t i = 0; i < n; i += 8) {
        x = mix(x);
        std::memcpy(v.data() + i, &x, std::min<size_t>(8, n - i));
    }
    return v;
}

// A program of this build tree, by its path from the top (e.g. "server/jobfsd"): the unit
// tests run from build/tests/unit (libtool-linked ones from its .libs/).
inline std::string build_tree_program(const std::string& relative) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    std::string dir(self);
    dir = dir.substr(0, dir.rfind('/'));
    if (dir.size() >= 6 && dir.compare(dir.size() - 6, 6, "/.libs") == 0) dir = dir.substr(0, dir.size() - 6);
    return dir + "/../../" + relative;
}

// A fresh directory under /tmp, removed with everything in it when the object goes.
class TempDir {
public:
    explicit TempDir(const std::string& prefix = "jobfs-test") {
        std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
        path_ = ::mkdtemp(tmpl.data()) ? tmpl : std::string();
    }
    ~TempDir() {
        std::error_code ec;
        if (!path_.empty()) std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

} // namespace jobfs::test
