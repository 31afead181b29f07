#include "client/local_cluster.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

namespace jobfs::client {
namespace {

using Clock = std::chrono::steady_clock;

// Reads from fd until a full line arrives or the deadline passes.
Result<std::string> read_line(int fd, Clock::time_point deadline) {
    std::string line;
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) return Status(Code::timeout, "no ready line in time");
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
        char c;
        ssize_t n = ::read(fd, &c, 1);
        if (n <= 0) return Status(Code::io, "jobfsd exited before it was ready");
        if (c == '\n') return line;
        line += c;
    }
}

} // namespace

// A port that binds now, picked below the kernel's ephemeral range (32768 and up by default):
// ports from bind(0) are the very ones outgoing connections of other processes are given next,
// which made concurrent test runs collide.
Result<uint16_t> pick_free_port() {
    // Ports handed out lately are not handed out again: a caller picks a few before its
    // daemons bind any, and two picks of one port (1 in 4,000 for three, seen in CI: two
    // daemons given port 25195) made the daemons refuse their list.
    constexpr size_t kRemembered = 1024;
    static std::mutex mu; // guards the three below
    static std::mt19937 rng(std::random_device{}());
    static std::array<uint16_t, kRemembered> recent{}; // a ring: the last picks, 0 where none yet
    static size_t next = 0;
    std::lock_guard lock(mu);
    for (int attempt = 0; attempt < 200; ++attempt) {
        const uint16_t port = static_cast<uint16_t>(20000 + rng() % 12000);
        if (std::find(recent.begin(), recent.end(), port) != recent.end()) continue;
        int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0) return Status::from_errno(errno, "socket");
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(port);
        int rc = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
        ::close(s);
        if (rc != 0) continue;
        recent[next] = port;
        next = (next + 1) % kRemembered;
        return port;
    }
    return Status(Code::busy, "no free port between 20000 and 32000");
}

Result<std::string> make_secret() {
    unsigned char b[16];
    if (::getrandom(b, sizeof b, 0) != sizeof b) return Status::from_errno(errno, "getrandom");
    static const char* hex = "0123456789abcdef";
    std::string s;
    for (unsigned char c : b) {
        s += hex[c >> 4];
        s += hex[c & 15];
    }
    return s;
}

Result<std::unique_ptr<LocalCluster>> LocalCluster::start(const LocalClusterOptions& options) {
    // A port picked free can still be taken by someone else before a daemon binds it: try
    // again with new ports (the failed attempt's daemons are stopped by its destructor).
    Result<std::unique_ptr<LocalCluster>> r = start_once(options);
    for (int attempt = 1; attempt < 3 && !r.ok() && r.status().code() != Code::invalid; ++attempt) r = start_once(options);
    return r;
}

Result<std::unique_ptr<LocalCluster>> LocalCluster::start_once(const LocalClusterOptions& options) {
    if (options.daemons == 0) return Status(Code::invalid, "at least one daemon");
    if (::access(options.jobfsd.c_str(), X_OK) != 0) return Status::from_errno(errno, "jobfsd at " + options.jobfsd);
    if (::mkdir(options.dir.c_str(), 0700) != 0 && errno != EEXIST) return Status::from_errno(errno, "create " + options.dir);
    std::unique_ptr<LocalCluster> c(new LocalCluster(options));
    auto secret = make_secret();
    if (!secret.ok()) return secret.status();
    c->info_.secret = *secret;
    const std::string secret_file = options.dir + "/secret";
    {
        int fd = ::open(secret_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) return Status::from_errno(errno, "create " + secret_file);
        bool ok = ::write(fd, secret->data(), secret->size()) == static_cast<ssize_t>(secret->size());
        ::close(fd);
        if (!ok) return Status::from_errno(errno, "write " + secret_file);
    }
    std::string list;
    for (uint32_t r = 0; r < options.daemons; ++r) {
        auto port = pick_free_port();
        if (!port.ok()) return port.status();
        c->info_.daemons.push_back("127.0.0.1:" + std::to_string(*port));
        list += (r ? "," : "") + c->info_.daemons.back();
    }
    std::vector<int> outs;
    for (uint32_t r = 0; r < options.daemons; ++r) {
        std::vector<std::string> args{options.jobfsd, "--data-dir", options.dir + "/data" + std::to_string(r),
                                      "--listen", "127.0.0.1",
                                      "--port", c->info_.daemons[r].substr(c->info_.daemons[r].rfind(':') + 1),
                                      "--rank", std::to_string(r),
                                      "--daemons", list,
                                      "--secret-file", secret_file,
                                      "--startup-timeout-ms", std::to_string(options.ready_timeout.count())};
        args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
        c->args_.push_back(std::move(args));
        c->pids_.push_back(-1);
        auto fd = c->spawn(r);
        if (!fd.ok()) return fd.status();
        outs.push_back(*fd);
    }
    const auto deadline = Clock::now() + options.ready_timeout + std::chrono::seconds(5);
    Status failed;
    for (uint32_t r = 0; r < options.daemons; ++r) {
        // UCX logs to stdout too: lines before "ready" that are not it are skipped.
        auto line = read_line(outs[r], deadline);
        while (line.ok() && line->rfind("ready ", 0) != 0) line = read_line(outs[r], deadline);
        if (failed.ok() && (!line.ok() || line->rfind("ready ", 0) != 0))
            failed = Status(line.ok() ? Code::io : line.status().code(),
                            "jobfsd " + std::to_string(r) + " did not start (" +
                                (line.ok() ? *line : line.status().message()) + "); see " + options.dir + "/jobfsd." +
                                std::to_string(r) + ".log");
    }
    for (int fd : outs) ::close(fd);
    if (!failed.ok()) return failed; // the destructor stops whatever did start
    Status w = write_cluster(c->descriptor_path(), c->info_);
    if (!w.ok()) return w;
    return c;
}

Result<int> LocalCluster::spawn(uint32_t r) {
    std::vector<char*> argv;
    for (auto& a : args_[r]) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return Status::from_errno(errno, "pipe");
    std::string log = options_.dir + "/jobfsd." + std::to_string(r) + ".log";
    pid_t pid = ::fork();
    if (pid == 0) {
        ::setsid(); // its own session: a terminal's Ctrl-C for the starter does not reach it
        // The daemons talk over loopback only: they must not offer UCX lanes on the host's other
        // interfaces (which may come and go, as a test's bridge does). The user's setting wins.
        ::setenv("UCX_NET_DEVICES", "lo", 0);
        ::dup2(fds[1], STDOUT_FILENO);
        int lf = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (lf >= 0) ::dup2(lf, STDERR_FILENO);
        ::execv(argv[0], argv.data());
        _exit(127);
    }
    ::close(fds[1]);
    if (pid < 0) {
        ::close(fds[0]);
        return Status::from_errno(errno, "fork");
    }
    pids_[r] = pid;
    return fds[0];
}

Status LocalCluster::restart(uint32_t rank) {
    if (rank >= pids_.size()) return Status(Code::invalid, "no daemon " + std::to_string(rank));
    if (pids_[rank] > 0) return Status(Code::busy, "daemon " + std::to_string(rank) + " is running");
    auto fd = spawn(rank);
    if (!fd.ok()) return fd.status();
    const auto deadline = Clock::now() + options_.ready_timeout + std::chrono::seconds(5);
    auto line = read_line(*fd, deadline);
    while (line.ok() && line->rfind("ready ", 0) != 0) line = read_line(*fd, deadline);
    ::close(*fd);
    if (!line.ok()) return line.status().with_context("restart of jobfsd " + std::to_string(rank));
    return Status::OK();
}

LocalCluster::~LocalCluster() { (void)stop(std::chrono::milliseconds(5000)); }

Status LocalCluster::stop(std::chrono::milliseconds grace) {
    for (pid_t p : pids_)
        if (p > 0) ::kill(p, SIGTERM);
    Status result;
    const auto deadline = Clock::now() + grace;
    for (pid_t& p : pids_) {
        if (p <= 0) continue;
        int status = 0;
        for (;;) {
            pid_t r = ::waitpid(p, &status, WNOHANG);
            if (r == p) break;
            if (Clock::now() >= deadline) {
                ::kill(p, SIGKILL);
                ::waitpid(p, &status, 0);
                if (result.ok()) result = Status(Code::timeout, "jobfsd pid " + std::to_string(p) + " ignored SIGTERM");
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        if (result.ok() && (!WIFEXITED(status) || WEXITSTATUS(status) != 0) && !WIFSIGNALED(status))
            result = Status(Code::io, "jobfsd pid " + std::to_string(p) + " exited with " + std::to_string(WEXITSTATUS(status)));
        p = -1;
    }
    return result;
}

Status LocalCluster::detach() {
    const std::string path = options_.dir + "/pids";
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) return Status::from_errno(errno, "write " + path);
    for (pid_t p : pids_) std::fprintf(f, "%d\n", static_cast<int>(p));
    std::fclose(f);
    pids_.clear();
    return Status::OK();
}

Status LocalCluster::stop_detached(const std::string& dir, std::chrono::milliseconds grace) {
    const std::string path = dir + "/pids";
    FILE* f = std::fopen(path.c_str(), "r");
    if (!f) return Status::from_errno(errno, "no local file system in " + dir + " (" + path + ")");
    std::vector<pid_t> pids;
    int p = 0;
    while (std::fscanf(f, "%d", &p) == 1) pids.push_back(p);
    std::fclose(f);
    for (pid_t q : pids) ::kill(q, SIGTERM);
    // Not our children any more: poll for them to be gone.
    const auto deadline = Clock::now() + grace;
    for (pid_t q : pids) {
        while (::kill(q, 0) == 0 && Clock::now() < deadline) {
            // A zombie answers kill(0) until reaped; /proc tells the difference.
            char stat[64];
            std::snprintf(stat, sizeof stat, "/proc/%d/stat", q);
            FILE* s = std::fopen(stat, "r");
            char state = 0;
            if (s) {
                if (std::fscanf(s, "%*d %*s %c", &state) != 1) state = 0;
                std::fclose(s);
            }
            if (!s || state == 'Z') break;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        if (Clock::now() >= deadline) {
            ::kill(q, SIGKILL);
            return Status(Code::timeout, "jobfsd pid " + std::to_string(q) + " ignored SIGTERM; killed");
        }
    }
    ::unlink(path.c_str());
    return Status::OK();
}

void LocalCluster::kill(uint32_t rank) {
    if (rank >= pids_.size() || pids_[rank] <= 0) return;
    ::kill(pids_[rank], SIGKILL);
    int status;
    ::waitpid(pids_[rank], &status, 0);
    pids_[rank] = -1;
}

} // namespace jobfs::client
