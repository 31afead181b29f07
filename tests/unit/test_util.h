// test_util.h: small helpers the unit tests share.
#pragma once

#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
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

// The fields of a /proc/PID/stat or /proc/PID/task/TID/stat file from field 3 (the state) on;
// empty if it cannot be read (the thread or process ended). The command name before them may
// hold spaces and parentheses: the fields start after its last ')'.
inline std::vector<std::string> proc_stat_fields(const std::filesystem::path& stat_file) {
    std::ifstream f(stat_file);
    const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t paren = all.rfind(')');
    std::vector<std::string> fields;
    if (paren == std::string::npos) return fields;
    std::istringstream in(all.substr(paren + 1));
    for (std::string x; in >> x;) fields.push_back(x);
    return fields;
}

// Stops process pid (SIGSTOP) and returns once every thread of it is stopped (false if that
// did not happen within the timeout). kill() returning is not enough: the stop reaches the
// other threads only once the thread the signal went to runs and takes it, which on a loaded
// machine took milliseconds, while another thread of the process (its transport's) still
// answered requests (attr_lease_test saw a "stopped" lease holder answer its recall).
inline bool stop_process(pid_t pid, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    if (::kill(pid, SIGSTOP) != 0) return false;
    const auto give_up = std::chrono::steady_clock::now() + timeout;
    const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
    for (;;) {
        bool all = true;
        std::error_code ec;
        for (const auto& t : std::filesystem::directory_iterator(tasks, ec)) {
            const auto fields = proc_stat_fields(t.path() / "stat");
            if (fields.empty()) continue; // the thread ended
            if (fields[0] != "T" && fields[0] != "t" && fields[0] != "Z" && fields[0] != "X") all = false;
        }
        if (ec) return false;
        if (all) return true;
        if (std::chrono::steady_clock::now() > give_up) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
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
