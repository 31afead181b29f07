// daemon_test: real jobfsd processes on loopback, started, used, stopped and killed by the test.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "child_process.h"
#include "client/cluster.h"
#include "client/local_cluster.h"
#include "daemon_protocol.h"
#include "test_util.h"
#include "worker.h"

namespace jobfs {
namespace {

using namespace std::chrono_literals;
using test::pattern;
using test::ChildProcess;
namespace rpc = transport::rpc;

uint16_t free_port() {
    auto p = client::pick_free_port();
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    return p.ok() ? *p : 0;
}

class DaemonTest : public ::testing::Test {
protected:
    static constexpr int kDaemons = 3;

    void SetUp() override {
        char tmpl[] = "/tmp/jobfs-daemons-XXXXXX";
        dir = ::mkdtemp(tmpl);
        std::ofstream(dir + "/secret") << "job-secret-123\n";
        for (int r = 0; r < kDaemons; ++r) {
            ports.push_back(free_port());
            list += (r ? "," : "") + std::string("127.0.0.1:") + std::to_string(ports.back());
        }
        daemons.resize(kDaemons);
    }
    void TearDown() override {
        daemons.clear(); // SIGKILL whatever is left
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }

    void start(int r, int startup_timeout_ms = 20000, std::vector<std::string> extra = {}) {
        std::vector<std::string> argv{ChildProcess::beside_test("../../server/jobfsd"),
                                      "--data-dir", dir + "/d" + std::to_string(r),
                                      "--listen", "127.0.0.1",
                                      "--port", std::to_string(ports[r]),
                                      "--daemons", list,
                                      "--secret-file", dir + "/secret",
                                      "--startup-timeout-ms", std::to_string(startup_timeout_ms)};
        argv.insert(argv.end(), extra.begin(), extra.end());
        daemons[r] = std::make_unique<ChildProcess>(argv);
    }
    void expect_ready(int r) {
        auto line = daemons[r]->read_line(30s);
        while (line && line->rfind("ready ", 0) != 0) line = daemons[r]->read_line(30s); // UCX's own log lines
        ASSERT_TRUE(line.has_value()) << "daemon " << r << " never became ready";
        EXPECT_EQ(*line, "ready rank=" + std::to_string(r) + " size=3 port=" + std::to_string(ports[r]));
    }
    // Whether daemon r prints its ready line within the timeout (other lines are UCX's log).
    bool says_ready(int r, std::chrono::milliseconds timeout) {
        auto until = std::chrono::steady_clock::now() + timeout;
        for (;;) {
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
            if (left.count() <= 0) return false;
            auto line = daemons[r]->read_line(left);
            if (!line) return false;
            if (line->rfind("ready ", 0) == 0) return true;
        }
    }
    void start_all() {
        for (int r = 0; r < kDaemons; ++r) start(r);
        for (int r = 0; r < kDaemons; ++r) expect_ready(r);
    }

    std::unique_ptr<transport::Worker> client(const std::string& secret = "job-secret-123") {
        transport::WorkerOptions o;
        o.name = "test-client";
        o.secret = secret;
        o.call_timeout = 10s;
        auto w = transport::Worker::create(o);
        EXPECT_TRUE(w.ok());
        return std::move(*w);
    }

    Status write(const transport::Endpoint& ep, proto::ChunkRef c, const std::vector<uint8_t>& data) {
        transport::CallOptions o;
        o.bulk_out = data;
        return rpc::call<proto::ChunkWrite>(ep, proto::ChunkWriteRequest{c, 0, data.size(), {}, {}}, o).status();
    }
    Result<std::vector<uint8_t>> read(const transport::Endpoint& ep, proto::ChunkRef c, size_t len) {
        std::vector<uint8_t> buf(len);
        transport::CallOptions o;
        o.bulk_in = buf;
        auto r = rpc::call<proto::ChunkRead>(ep, proto::ChunkReadRequest{c, 0, len, {}}, o);
        if (!r.ok()) return r.status();
        buf.resize(r->length);
        return buf;
    }

    std::string dir, list;
    std::vector<uint16_t> ports;
    std::vector<std::unique_ptr<ChildProcess>> daemons;
};

TEST_F(DaemonTest, ThreeDaemonsBecomeReadyAndServeChunks) {
    start_all();
    auto c = client();
    for (int r = 0; r < kDaemons; ++r) {
        auto ep = c->connect("127.0.0.1", ports[r]);
        ASSERT_TRUE(ep.ok()) << ep.status().to_string();
        EXPECT_EQ(ep->peer_name(), "jobfsd." + std::to_string(r));
        auto data = pattern(1 << 20, static_cast<uint32_t>(r));
        ASSERT_TRUE(write(*ep, {10, static_cast<uint64_t>(r)}, data).ok());
        auto back = read(*ep, {10, static_cast<uint64_t>(r)}, 1 << 20);
        ASSERT_TRUE(back.ok()) << back.status().to_string();
        EXPECT_EQ(*back, data);
    }
}

TEST_F(DaemonTest, NamespaceSpreadsOverTheDaemons) {
    start_all();
    auto c = client();
    std::vector<transport::Endpoint> eps;
    for (int r = 0; r < kDaemons; ++r) eps.push_back(*c->connect("127.0.0.1", ports[r]));
    const proto::Cred root{0, 0, {}};
    std::set<uint32_t> shards;
    for (int i = 0; i < 12; ++i) {
        auto d = rpc::call<proto::Mkdir>(eps[0], proto::MkdirRequest{root, 1, "d" + std::to_string(i), 0755});
        ASSERT_TRUE(d.ok()) << d.status().to_string();
        shards.insert(proto::shard_of(d->ino));
        auto f = rpc::call<proto::Create>(eps[proto::shard_of(d->ino)],
                                          proto::CreateRequest{root, d->ino, "f", 0644, true, 0, 0, 0, 0, {}});
        ASSERT_TRUE(f.ok()) << f.status().to_string();
        auto back = rpc::call<proto::Lookup>(eps[0], proto::NameRequest{root, 1, "d" + std::to_string(i)});
        ASSERT_TRUE(back.ok()) << back.status().to_string();
        EXPECT_EQ(back->ino, d->ino);
    }
    EXPECT_GT(shards.size(), 1u) << "every directory on one daemon";
}

TEST_F(DaemonTest, GracefulStopAndRestartKeepData) {
    start_all();
    std::vector<uint64_t> dirs;
    {
        auto c = client();
        for (int r = 0; r < kDaemons; ++r) {
            auto ep = c->connect("127.0.0.1", ports[r]);
            ASSERT_TRUE(ep.ok());
            ASSERT_TRUE(write(*ep, {20, 0}, pattern(300000, 100 + static_cast<uint32_t>(r))).ok());
        }
        auto ep0 = c->connect("127.0.0.1", ports[0]);
        for (int i = 0; i < 6; ++i) {
            auto d = rpc::call<proto::Mkdir>(*ep0, proto::MkdirRequest{{0, 0, {}}, 1, "keep" + std::to_string(i), 0700});
            ASSERT_TRUE(d.ok()) << d.status().to_string();
            dirs.push_back(d->ino);
        }
    }
    for (int r = 0; r < kDaemons; ++r) daemons[r]->signal(SIGTERM);
    for (int r = 0; r < kDaemons; ++r) {
        auto code = daemons[r]->wait(15s);
        ASSERT_TRUE(code.has_value()) << "daemon " << r << " ignored SIGTERM";
        EXPECT_EQ(*code, 0) << "daemon " << r;
    }
    start_all();
    auto c = client();
    for (int r = 0; r < kDaemons; ++r) {
        auto ep = c->connect("127.0.0.1", ports[r]);
        ASSERT_TRUE(ep.ok()) << ep.status().to_string();
        auto back = read(*ep, {20, 0}, 300000);
        ASSERT_TRUE(back.ok()) << back.status().to_string();
        EXPECT_EQ(*back, pattern(300000, 100 + static_cast<uint32_t>(r))) << "daemon " << r;
    }
    auto ep0 = c->connect("127.0.0.1", ports[0]);
    for (int i = 0; i < 6; ++i) {
        auto d = rpc::call<proto::Lookup>(*ep0, proto::NameRequest{{0, 0, {}}, 1, "keep" + std::to_string(i)});
        ASSERT_TRUE(d.ok()) << d.status().to_string();
        EXPECT_EQ(d->ino, dirs[i]);
        EXPECT_EQ(d->mode & 0777, 0700u);
    }
}

TEST_F(DaemonTest, RankZeroWritesTheClusterFileAndRemovesItWhenStopped) {
    const std::string cluster = dir + "/cluster";
    for (int r = 0; r < kDaemons; ++r) start(r, 20000, {"--cluster-file", cluster});
    for (int r = 0; r < kDaemons; ++r) expect_ready(r);
    auto info = client::read_cluster(cluster);
    ASSERT_TRUE(info.ok()) << info.status().to_string();
    std::string joined;
    for (auto& d : info->daemons) joined += (joined.empty() ? "" : ",") + d;
    EXPECT_EQ(joined, list);
    EXPECT_EQ(info->secret, "job-secret-123");
    struct stat st {};
    ASSERT_EQ(::stat(cluster.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_FALSE(std::filesystem::exists(cluster + ".tmp"));
    daemons[0]->signal(SIGTERM);
    EXPECT_EQ(daemons[0]->wait(15s), std::optional<int>(0));
    EXPECT_FALSE(std::filesystem::exists(cluster)) << "a stopped group's descriptor must not stay";
}

TEST_F(DaemonTest, DataDirRankSubstitution) {
    // rank=R is given here, so %r is known before start; under PMIx it comes from PMIx.
    list = "127.0.0.1:" + std::to_string(ports[0]);
    ChildProcess p({ChildProcess::beside_test("../../server/jobfsd"), "--data-dir", dir + "/rank%r",
                    "--listen", "127.0.0.1", "--port", std::to_string(ports[0]), "--daemons", list,
                    "--secret-file", dir + "/secret"});
    auto line = p.read_line(30s);
    while (line && line->rfind("ready ", 0) != 0) line = p.read_line(30s);
    ASSERT_TRUE(line.has_value());
    EXPECT_TRUE(std::filesystem::exists(dir + "/rank0/meta.db"));
    p.signal(SIGTERM);
    EXPECT_EQ(p.wait(15s), std::optional<int>(0));
}

TEST_F(DaemonTest, PmixWithoutLauncherFailsPromptly) {
    ChildProcess p({ChildProcess::beside_test("../../server/jobfsd"), "--bootstrap", "pmix", "--data-dir", dir + "/%r"});
    auto code = p.wait(10s);
    ASSERT_TRUE(code.has_value()) << "jobfsd waited for a PMIx server that is not there";
    EXPECT_EQ(*code, 1);
    EXPECT_FALSE(std::filesystem::exists(dir + "/0")) << "no data directory before the group is known";
}

TEST_F(DaemonTest, WaitsForLatePeersThenBecomesReady) {
    start(0);
    EXPECT_FALSE(says_ready(0, 1500ms)) << "ready before its peers exist";
    start(1);
    start(2);
    for (int r = 0; r < kDaemons; ++r) expect_ready(r);
}

// A static group has no start-up barrier: a client may reach a daemon that is still connecting
// to its peers (another daemon said ready). Its requests that need such a peer wait for it.
TEST_F(DaemonTest, RequestsReachingADaemonStillStartingWaitForItsPeers) {
    start(0);
    start(1);
    auto c = client();
    Result<transport::Endpoint> ep = Status(Code::refused, "not tried");
    for (int i = 0; i < 100 && !ep.ok(); ++i, std::this_thread::sleep_for(100ms)) ep = c->connect("127.0.0.1", ports[0]);
    ASSERT_TRUE(ep.ok()) << ep.status().to_string();
    std::thread late([this] {
        std::this_thread::sleep_for(1500ms);
        start(2);
    });
    const proto::Cred root{0, 0, {}};
    std::set<uint32_t> shards;
    for (int i = 0; i < 12; ++i) {
        auto d = rpc::call<proto::Mkdir>(*ep, proto::MkdirRequest{root, 1, "early" + std::to_string(i), 0755});
        EXPECT_TRUE(d.ok()) << "early" << i << ": " << d.status().to_string();
        if (d.ok()) shards.insert(proto::shard_of(d->ino));
    }
    late.join();
    EXPECT_TRUE(shards.count(2)) << "no directory went to the late daemon: the case was not tried";
    for (int r = 0; r < kDaemons; ++r) expect_ready(r);
}

TEST_F(DaemonTest, FailsToStartWhenPeersNeverCome) {
    start(0, 1000);
    EXPECT_FALSE(says_ready(0, 10s));
    auto code = daemons[0]->wait(10s);
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, 1);
}

TEST_F(DaemonTest, BadConfigurationExitsTwo) {
    ChildProcess p({ChildProcess::beside_test("../../server/jobfsd"), "--data-dir", dir + "/x"});
    auto code = p.wait(10s);
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, 2);
    ChildProcess q({ChildProcess::beside_test("../../server/jobfsd"), "--no-such-flag"});
    EXPECT_EQ(q.wait(10s), std::optional<int>(2));
}

TEST_F(DaemonTest, ClientWithWrongSecretIsRefused) {
    start_all();
    auto c = client("not-the-secret");
    auto ep = c->connect("127.0.0.1", ports[0]);
    ASSERT_FALSE(ep.ok());
    EXPECT_EQ(ep.status().code(), Code::permission);
}

// utime + stime of a process, in seconds, read from /proc/PID/stat (fields 14 and 15).
double cpu_seconds(pid_t pid) {
    const auto fields = test::proc_stat_fields("/proc/" + std::to_string(pid) + "/stat");
    EXPECT_GT(fields.size(), 12u) << "no /proc/" << pid << "/stat";
    if (fields.size() <= 12) return 0;
    return (std::stod(fields[11]) + std::stod(fields[12])) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

TEST_F(DaemonTest, DaemonsUseNoCpuAtRestAndReportTheirRss) {
    start_all();
    // A client stays connected to every daemon while they rest, as a job's mounts would.
    auto c = client();
    std::vector<transport::Endpoint> eps;
    for (int r = 0; r < kDaemons; ++r) {
        auto ep = c->connect("127.0.0.1", ports[r]);
        ASSERT_TRUE(ep.ok()) << ep.status().to_string();
        eps.push_back(*ep);
    }
    std::this_thread::sleep_for(1s);
    std::vector<double> before;
    for (int r = 0; r < kDaemons; ++r) before.push_back(cpu_seconds(daemons[r]->pid()));
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(2s);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int r = 0; r < kDaemons; ++r) {
        const double used = cpu_seconds(daemons[r]->pid()) - before[static_cast<size_t>(r)];
        EXPECT_LT(used / wall, 0.02) << "daemon " << r << " used " << used << " s of CPU in " << wall << " s at rest";
    }
    for (int r = 0; r < kDaemons; ++r) {
        auto st = rpc::call<proto::DaemonStats>(eps[static_cast<size_t>(r)], proto::Empty{});
        ASSERT_TRUE(st.ok()) << st.status().to_string();
        EXPECT_GT(st->rss_bytes, 1ull << 20) << "daemon " << r;
        EXPECT_LT(st->rss_bytes, 1ull << 30) << "daemon " << r;
        EXPECT_GT(st->threads, 0u);
        EXPECT_GT(st->uptime_ms, 1000u);
        EXPECT_LT(st->cpu_user_us + st->cpu_system_us, 60'000'000u) << "a minute of CPU to start and rest?";
    }
}

// The nice value of every thread of a process (field 19 of /proc/PID/task/TID/stat).
std::vector<int> thread_nice_values(pid_t pid) {
    std::vector<int> out;
    for (const auto& t : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
        const auto fields = test::proc_stat_fields(t.path() / "stat"); // empty: the thread ended meanwhile
        if (fields.size() > 16) out.push_back(std::stoi(fields[16]));
    }
    return out;
}

// The daemons run ahead of MPI ranks that busy-wait (ucx-transport/priority.h): every thread, the
// transport's and the pool's too, at the configured nice value.
TEST_F(DaemonTest, EveryThreadRunsAtTheConfiguredNiceValue) {
    if (::geteuid() != 0) GTEST_SKIP() << "a negative nice value needs root";
    for (int r = 0; r < kDaemons; ++r) start(r, 20000, r == 0 ? std::vector<std::string>{"--nice", "-7"} : std::vector<std::string>{});
    for (int r = 0; r < kDaemons; ++r) expect_ready(r);
    auto nice0 = thread_nice_values(daemons[0]->pid()), nice1 = thread_nice_values(daemons[1]->pid());
    ASSERT_GT(nice0.size(), 3u); // main, transport, pool, ...
    for (int n : nice0) EXPECT_EQ(n, -7);
    for (int n : nice1) EXPECT_EQ(n, -10); // the default
}

// A daemon holds up to three descriptors per open chunk and one per client connection: it
// raises its soft limit of open files to the hard one (Slurm jobs often start with 1024).
TEST_F(DaemonTest, RaisesItsOpenFileLimitToTheHardLimit) {
    rlimit mine{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &mine), 0);
    if (mine.rlim_max <= 256) GTEST_SKIP() << "hard limit " << mine.rlim_max << " leaves nothing to raise";
    rlimit low = mine;
    low.rlim_cur = 256; // the daemons inherit this
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
    for (int r = 0; r < kDaemons; ++r) start(r);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &mine), 0);
    for (int r = 0; r < kDaemons; ++r) expect_ready(r);
    std::ifstream limits("/proc/" + std::to_string(daemons[0]->pid()) + "/limits");
    std::string line, soft, hard;
    while (std::getline(limits, line))
        if (line.rfind("Max open files", 0) == 0) {
            std::istringstream in(line.substr(std::string("Max open files").size()));
            in >> soft >> hard;
        }
    const std::string want = mine.rlim_max == RLIM_INFINITY ? "unlimited" : std::to_string(mine.rlim_max);
    EXPECT_EQ(soft, want);
    EXPECT_EQ(hard, want);
}

TEST_F(DaemonTest, KilledDaemonGivesPromptErrorsOthersServe) {
    start_all();
    auto c = client();
    auto ep1 = c->connect("127.0.0.1", ports[1]);
    auto ep2 = c->connect("127.0.0.1", ports[2]);
    ASSERT_TRUE(ep1.ok() && ep2.ok());
    daemons[1]->kill_hard();
    auto t0 = std::chrono::steady_clock::now();
    auto r = read(*ep1, {1, 0}, 4096);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.status().code() == Code::peer_gone || r.status().code() == Code::refused) << r.status().to_string();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
    EXPECT_TRUE(read(*ep2, {1, 0}, 4096).ok());
}

} // namespace
} // namespace jobfs
