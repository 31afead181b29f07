// jobfs-bench-meta: metadata rate through libjobfs next to the same work on the local disk.
//
//   jobfs-bench-meta [--files N] [--threads T] [--dir /jobfs/dir] [--local-dir D] [--breakdown]
//
// T threads share one Client and work in one directory: create (open O_CREAT|O_EXCL + close)
// N files, stat each, unlink each, every phase timed on its own (a phase of creates or unlinks
// ends once they are at the daemons: Client::sync_namespace); then the same with T threads,
// open/close, stat and unlink in a fresh directory under D (the baseline). Prints
//   bench meta/create: jobfs X ops/s, baseline Y ops/s, ratio R      (and meta/stat, meta/unlink)
//   bench meta: …                                                    (the lowest ratio, last)
// on stdout; progress on stderr. --breakdown also times, on a second set of files, the single
// RPC that does each phase's work (Create, Lookup, Unlink sent straight to the directory's
// daemon with its inode known, no path walk, no chunk removal), the chunk removal unlink adds,
// a bare round trip (DaemonStats, answered on the progress thread) and Getattr of the root
// (the first step of every path walk), to show how much of a phase is path resolution and
// round trips.
// Needs $JOBFS_CLUSTER (bench/meta starts three daemons and sets it).
#include <boost/program_options.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "log.h"

namespace po = boost::program_options;
using namespace jobfs;
using namespace jobfs::client;
using Clock = std::chrono::steady_clock;

namespace {

void progress(const std::string& s) { std::fprintf(stderr, "bench: meta: %s\n", s.c_str()); }

// Runs op(i) for i in [0, n) on T threads (thread t takes i = t, t + T, …); ops per second, or
// a negative number after the first failure (op prints why).
double run(uint32_t threads, uint64_t n, const std::function<bool(uint64_t)>& op,
           const std::function<bool()>& settle = nullptr) {
    std::atomic<bool> failed{false};
    const auto t0 = Clock::now();
    std::vector<std::thread> ts;
    for (uint32_t t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
            for (uint64_t i = t; i < n && !failed.load(std::memory_order_relaxed); i += threads)
                if (!op(i)) failed = true;
        });
    for (auto& t : ts) t.join();
    if (settle && !failed && !settle()) failed = true;
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    return failed ? -1 : n / secs;
}

std::string name_of(uint64_t i) {
    char b[32];
    std::snprintf(b, sizeof b, "f%07llu", static_cast<unsigned long long>(i));
    return b;
}

bool report(const Status& s) {
    std::fprintf(stderr, "jobfs-bench-meta: %s\n", s.to_string().c_str());
    return false;
}

bool report_errno(const std::string& what) {
    std::fprintf(stderr, "jobfs-bench-meta: %s: %s\n", what.c_str(), std::strerror(errno));
    return false;
}

} // namespace

int main(int argc, char** argv) {
    log::set_name("jobfs-bench-meta");
    po::options_description desc("options");
    uint64_t files = 10000;
    uint32_t threads = 4;
    std::string dir, local_dir;
    desc.add_options()("help,h", "this help")
        ("files", po::value(&files)->default_value(10000), "files per phase")
        ("threads", po::value(&threads)->default_value(4), "threads (one shared Client for jobfs)")
        ("dir", po::value(&dir)->default_value("/meta-bench"), "directory in jobfs (made, emptied, removed)")
        ("local-dir", po::value(&local_dir)->default_value("/var/tmp"), "where the local-disk baseline works")
        ("breakdown", "also time the single RPC behind each phase (progress lines)");
    po::variables_map vm;
    try {
        po::store(po::parse_command_line(argc, argv, desc), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        std::fprintf(stderr, "jobfs-bench-meta: %s\n", e.what());
        return 2;
    }
    if (vm.count("help")) {
        std::cout << "usage: jobfs-bench-meta [options]\n\n" << desc;
        return 0;
    }
    if (files == 0 || threads == 0) {
        std::fprintf(stderr, "jobfs-bench-meta: --files and --threads must be positive\n");
        return 2;
    }

    auto c = Client::connect_env();
    if (!c.ok()) return report(c.status()), 1;
    Client& cl = **c;
    auto d = cl.mkdir(dir);
    if (!d.ok()) return report(d.status()), 1;
    const std::string prefix = dir + "/";

    // ---- jobfs ----
    const char* phases[3] = {"create", "stat", "unlink"};
    double jobfs_rate[3], local_rate[3];
    progress("jobfs: " + std::to_string(files) + " files in one directory, " + std::to_string(threads) +
             " threads, 1 client, " + std::to_string(cl.daemon_count()) + " daemons");
    // Creates and unlinks answered by the client in a delegated directory count once they
    // are at the daemons (part of each phase's time).
    const auto settled = [&] {
        Status s = cl.sync_namespace();
        return s.ok() || report(s);
    };
    jobfs_rate[0] = run(threads, files, [&](uint64_t i) {
        auto f = cl.open(prefix + name_of(i), O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (!f.ok()) return report(f.status());
        Status s = cl.close(**f);
        return s.ok() || report(s);
    }, settled);
    jobfs_rate[1] = jobfs_rate[0] < 0 ? -1 : run(threads, files, [&](uint64_t i) {
        auto a = cl.stat(prefix + name_of(i));
        return a.ok() || report(a.status());
    });
    jobfs_rate[2] = jobfs_rate[1] < 0 ? -1 : run(threads, files, [&](uint64_t i) {
        Status s = cl.unlink(prefix + name_of(i));
        return s.ok() || report(s);
    }, settled);
    for (int p = 0; p < 3; ++p)
        if (jobfs_rate[p] < 0) return std::fprintf(stderr, "jobfs-bench-meta: jobfs %s failed\n", phases[p]), 1;
    const DirDelegations::Stats ds = cl.delegation_stats();
    progress("jobfs: directory delegations: " + std::to_string(ds.granted) + " granted, " + std::to_string(ds.ops) +
             " operations answered by the client in " + std::to_string(ds.batches) + " batches, " +
             std::to_string(ds.recalled) + " recalls, " + std::to_string(ds.lost) + " lost");
    progress("jobfs: create " + std::to_string(int(jobfs_rate[0])) + ", stat " + std::to_string(int(jobfs_rate[1])) +
             ", unlink " + std::to_string(int(jobfs_rate[2])) + " ops/s");

    if (vm.count("breakdown")) {
        // The same phases as single RPCs to the directory's daemon, its inode known.
        namespace rpc = transport::rpc;
        const transport::Endpoint& ep = cl.daemons()[proto::shard_of(d->ino) % cl.daemon_count()];
        const transport::Endpoint& root = cl.daemons()[0];
        const proto::Cred cred = cl.cred();
        const uint64_t parent = d->ino;
        double ping = run(threads, files, [&](uint64_t) {
            auto r = rpc::call<proto::Getattr>(root, proto::InoRequest{1});
            return r.ok() || report(r.status());
        });
        double stats = run(threads, files, [&](uint64_t) {
            auto r = rpc::call<proto::DaemonStats>(ep, proto::Empty{});
            return r.ok() || report(r.status());
        });
        double create = run(threads, files, [&](uint64_t i) {
            auto r = rpc::call<proto::Create>(ep, proto::CreateRequest{cred, parent, "r" + name_of(i), 0644, true, 0, 0, 0, 0, {}});
            return r.ok() || report(r.status());
        });
        double lookup = run(threads, files, [&](uint64_t i) {
            auto r = rpc::call<proto::Lookup>(ep, proto::NameRequest{cred, parent, "r" + name_of(i)});
            return r.ok() || report(r.status());
        });
        double unlink = run(threads, files, [&](uint64_t i) {
            auto r = rpc::call<proto::Unlink>(ep, proto::NameRequest{cred, parent, "r" + name_of(i)});
            return r.ok() || report(r.status());
        });
        // FileRemoveChunks of never-written files to every daemon, as unlink sends it.
        double remove = run(threads, files, [&](uint64_t i) {
            for (const auto& e : cl.daemons()) {
                auto r = rpc::call<proto::FileRemoveChunks>(e, proto::FileChunksRequest{(uint64_t{9} << 40) + i});
                if (!r.ok()) return report(r.status());
            }
            return true;
        });
        char b[512];
        std::snprintf(b, sizeof b,
                      "breakdown (single RPCs, ops/s): DaemonStats (no disk, no pool) %.0f, Getattr(root) %.0f, "
                      "Create %.0f, Lookup %.0f, Unlink %.0f, FileRemoveChunks to all %u daemons %.0f",
                      stats, ping, create, lookup, unlink, cl.daemon_count(), remove);
        progress(b);
    }
    (void)cl.rmdir(dir);

    // ---- local disk ----
    std::string tmpl = local_dir + "/jobfs-bench-meta-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back(0);
    if (!::mkdtemp(buf.data())) return report_errno("mkdtemp in " + local_dir), 1;
    const std::string local = std::string(buf.data()) + "/";
    progress("local disk: " + std::to_string(files) + " files in " + local + ", " + std::to_string(threads) + " threads");
    local_rate[0] = run(threads, files, [&](uint64_t i) {
        int fd = ::open((local + name_of(i)).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) return report_errno("create " + local + name_of(i));
        return ::close(fd) == 0 || report_errno("close");
    });
    local_rate[1] = run(threads, files, [&](uint64_t i) {
        struct stat st {};
        return ::stat((local + name_of(i)).c_str(), &st) == 0 || report_errno("stat " + local + name_of(i));
    });
    local_rate[2] = run(threads, files, [&](uint64_t i) {
        return ::unlink((local + name_of(i)).c_str()) == 0 || report_errno("unlink " + local + name_of(i));
    });
    ::rmdir(buf.data());
    for (int p = 0; p < 3; ++p)
        if (local_rate[p] < 0) return std::fprintf(stderr, "jobfs-bench-meta: local %s failed\n", phases[p]), 1;

    int worst = 0;
    for (int p = 0; p < 3; ++p) {
        const double ratio = jobfs_rate[p] / local_rate[p];
        std::printf("bench meta/%s: jobfs %.0f ops/s, baseline %.0f ops/s, ratio %.2f\n", phases[p], jobfs_rate[p],
                    local_rate[p], ratio);
        if (ratio < jobfs_rate[worst] / local_rate[worst]) worst = p;
    }
    std::fflush(stdout);
    progress(std::string("headline: the lowest ratio, ") + phases[worst]);
    std::printf("bench meta: jobfs %.0f ops/s, baseline %.0f ops/s, ratio %.2f\n", jobfs_rate[worst], local_rate[worst],
                jobfs_rate[worst] / local_rate[worst]);
    return 0;
}
