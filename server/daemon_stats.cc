#include "server/daemon_stats.h"

#include <sys/resource.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

namespace jobfs::server {

namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point started() {
    static const Clock::time_point t = Clock::now();
    return t;
}

uint64_t timeval_us(const timeval& tv) {
    return static_cast<uint64_t>(tv.tv_sec) * 1000000u + static_cast<uint64_t>(tv.tv_usec);
}

} // namespace

Result<proto::DaemonStatsResponse> daemon_stats() {
    proto::DaemonStatsResponse out;
    std::ifstream status("/proc/self/status");
    if (!status) return Status(Code::io, "cannot read /proc/self/status");
    bool rss = false;
    for (std::string line; std::getline(status, line);) {
        std::istringstream in(line);
        std::string key;
        in >> key;
        if (key == "VmRSS:") {
            uint64_t kib = 0;
            in >> kib;
            out.rss_bytes = kib * 1024;
            rss = true;
        } else if (key == "Threads:") {
            in >> out.threads;
        }
    }
    if (!rss) return Status(Code::io, "no VmRSS in /proc/self/status");
    rusage ru{};
    if (getrusage(RUSAGE_SELF, &ru) != 0) return Status::from_errno(errno, "getrusage");
    out.cpu_user_us = timeval_us(ru.ru_utime);
    out.cpu_system_us = timeval_us(ru.ru_stime);
    out.uptime_ms = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started()).count());
    return out;
}

void serve_daemon_stats(transport::Worker& worker, std::function<void(proto::DaemonStatsResponse&)> add) {
    (void)started();
    transport::rpc::serve<proto::DaemonStats>(worker, [add = std::move(add)](transport::ServerCall call, proto::Empty&&) {
        auto s = daemon_stats();
        if (!s.ok()) return call.reply(s.status());
        if (add) add(*s);
        transport::rpc::reply<proto::DaemonStats>(call, *s);
    });
}

} // namespace jobfs::server
