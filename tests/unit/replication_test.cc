// replication_test: chain replication (docs/replication.md) on whole small clusters of real
// jobfsd processes, 3FS style: each case names {chunk size, stripe count, replicas, daemons},
// faults are real (kill -9 of a daemon, bytes flipped in a chunk file on disk).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <csignal>
#include <cinttypes>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "client/client.h"
#include "client/layout.h"
#include "client/local_cluster.h"
#include "client/scrub.h"
#include "rpc.h"
#include "server/chunk_store.h"
#include "test_util.h"

namespace jobfs::client {
namespace {

using server::ChunkStore; // its file layout, to corrupt copies on disk
using test::pattern;
namespace fs = std::filesystem;

// The bytes a chunk file holds past its checksums (empty if it is missing or holds none).
std::vector<uint8_t> chunk_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), {});
    if (file.size() <= ChunkStore::kDataOffset) return {};
    return std::vector<uint8_t>(file.begin() + ChunkStore::kDataOffset, file.end());
}

std::string jobfsd_path() { return jobfs::test::build_tree_program("server/jobfsd"); }

// Three daemons started with `args` under `dir`, and a client of them.
struct SmallCluster {
    std::unique_ptr<LocalCluster> cluster;
    std::unique_ptr<Client> client;
};

Result<SmallCluster> start_small(const std::string& dir, std::vector<std::string> args) {
    LocalClusterOptions o;
    o.jobfsd = jobfsd_path();
    o.dir = dir;
    o.daemons = 3;
    o.extra_args = std::move(args);
    auto cluster = LocalCluster::start(o);
    if (!cluster.ok()) return cluster.status();
    auto c = Client::connect((*cluster)->info());
    if (!c.ok()) return c.status();
    return SmallCluster{std::move(*cluster), std::move(*c)};
}

// ---- placement: a pure function ----------------------------------------------------------

TEST(ChainPlacement, DistinctDaemonsHeadWhereR1PutsTheChunk) {
    for (uint32_t n = 1; n <= 8; ++n)
        for (uint32_t r = 1; r <= 3; ++r)
            for (uint64_t ino = 1; ino < 50; ++ino)
                for (uint64_t i = 0; i < 50; ++i) {
                    const Layout l{1 << 20, 0, r};
                    const Chain c = chunk_chain(ino, i, l, n);
                    ASSERT_EQ(c.length, std::min(r, n));
                    EXPECT_EQ(c.head(), chunk_daemon(ino, i, l, n));
                    std::set<uint32_t> distinct(c.ranks.begin(), c.ranks.begin() + c.length);
                    EXPECT_EQ(distinct.size(), c.length);
                    for (uint32_t k = 0; k < c.length; ++k) EXPECT_LT(c.ranks[k], n);
                    EXPECT_EQ(c, chunk_chain(ino, i, l, n)); // deterministic
                }
}

// When a daemon is lost, the surviving copies of its chunks must be spread over all the
// others, so that re-copying them loads every daemon alike (and no single one is the bottleneck).
TEST(ChainPlacement, CopiesOfOneDaemonsChunksSpreadOverAllOthers) {
    const uint32_t n = 6;
    const Layout l{1 << 20, 0, 2};
    std::map<uint32_t, uint64_t> partners;
    uint64_t total = 0;
    for (uint64_t ino = 1; ino < 200; ++ino)
        for (uint64_t i = 0; i < 64; ++i) {
            const Chain c = chunk_chain(ino, i, l, n);
            if (!c.contains(0)) continue;
            for (uint32_t k = 0; k < c.length; ++k)
                if (c.ranks[k] != 0) partners[c.ranks[k]]++;
            total++;
        }
    ASSERT_EQ(partners.size(), n - 1);
    for (auto& [rank, count] : partners) {
        EXPECT_GT(count, total / (n - 1) * 7 / 10) << "daemon " << rank;
        EXPECT_LT(count, total / (n - 1) * 13 / 10) << "daemon " << rank;
    }
}

// ---- clusters ----------------------------------------------------------------------------

struct ClusterShape {
    uint32_t chunk_size;
    uint32_t stripe_count;
    uint32_t replicas;
    uint32_t daemons;
};

std::string shape_name(const ::testing::TestParamInfo<ClusterShape>& p) {
    return "chunk" + std::to_string(p.param.chunk_size >> 10) + "k_stripe" + std::to_string(p.param.stripe_count) +
           "_r" + std::to_string(p.param.replicas) + "_n" + std::to_string(p.param.daemons);
}

class ReplicationTest : public ::testing::TestWithParam<ClusterShape> {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/jobfs-repl-XXXXXX";
        dir = ::mkdtemp(tmpl);
        start();
    }
    void start() {
        LocalClusterOptions o;
        o.jobfsd = jobfsd_path();
        o.dir = dir;
        o.daemons = GetParam().daemons;
        o.extra_args = {"--chunk-size", std::to_string(GetParam().chunk_size), "--replicas",
                        std::to_string(GetParam().replicas), "--stripe-count", std::to_string(GetParam().stripe_count)};
        auto c = LocalCluster::start(o);
        ASSERT_TRUE(c.ok()) << c.status().to_string();
        cluster = std::move(*c);
        auto cl = Client::connect(cluster->info());
        ASSERT_TRUE(cl.ok()) << cl.status().to_string();
        client = std::move(*cl);
    }
    void TearDown() override {
        client.reset();
        cluster.reset();
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
    Layout layout() const { return Layout{GetParam().chunk_size, GetParam().stripe_count, GetParam().replicas}; }
    Result<uint64_t> write_file(const std::string& path, const std::vector<uint8_t>& data) {
        auto f = client->open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (!f.ok()) return f.status();
        Status s = client->pwrite(**f, 0, data);
        if (!s.ok()) return s;
        const uint64_t ino = (*f)->ino;
        JOBFS_RETURN_IF_ERROR(client->close(**f));
        return ino;
    }
    Result<std::vector<uint8_t>> read_file(const std::string& path) {
        auto f = client->open(path, O_RDONLY);
        if (!f.ok()) return f.status();
        std::vector<uint8_t> out((*f)->size());
        auto n = client->pread(**f, 0, out);
        if (!n.ok()) return n.status();
        out.resize(*n);
        return out;
    }
    std::string chunk_path(uint32_t rank, uint64_t ino, uint64_t index) const {
        char b[64];
        std::snprintf(b, sizeof b, "/%02" PRIx64 "/%016" PRIx64 ".%08" PRIx64, ino % 256, ino, index);
        return dir + "/data" + std::to_string(rank) + "/chunks" + b;
    }
    std::string log_of(uint32_t rank) const {
        std::ifstream in(dir + "/jobfsd." + std::to_string(rank) + ".log");
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }

    std::string dir;
    std::unique_ptr<LocalCluster> cluster;
    std::unique_ptr<Client> client;
};

// Every chunk is on exactly the daemons of its chain, byte for byte, and reads back exactly
// (reads are spread over the replicas, so every copy gets read).
TEST_P(ReplicationTest, EveryChunkIsStoredOnEveryDaemonOfItsChain) {
    const uint64_t cs = GetParam().chunk_size;
    const auto data = pattern(cs * 7 + 12345, 1);
    auto ino = write_file("/ckpt", data);
    ASSERT_TRUE(ino.ok()) << ino.status().to_string();
    auto st = client->stat("/ckpt");
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->replicas, GetParam().replicas);
    const uint32_t n = GetParam().daemons;
    for (uint64_t i = 0; i < 8; ++i) {
        const Chain c = chunk_chain(*ino, i, layout(), n);
        ASSERT_EQ(c.length, std::min(GetParam().replicas, n));
        const uint64_t len = std::min<uint64_t>(cs, data.size() - i * cs);
        for (uint32_t rank = 0; rank < n; ++rank) {
            const std::string p = chunk_path(rank, *ino, i);
            if (!c.contains(rank)) {
                EXPECT_FALSE(fs::exists(p)) << p;
                continue;
            }
            const auto disk = chunk_bytes(p);
            ASSERT_EQ(disk.size(), len) << p;
            EXPECT_TRUE(std::equal(disk.begin(), disk.end(), data.begin() + i * cs)) << p;
        }
    }
    for (int k = 0; k < 3; ++k) {
        auto back = read_file("/ckpt");
        ASSERT_TRUE(back.ok()) << back.status().to_string();
        EXPECT_EQ(*back, data);
    }
}

// Bytes flipped in one copy on disk: the read still returns the right data, the daemon logs
// the mismatch and repairs its copy from another replica.
TEST_P(ReplicationTest, CorruptCopyIsDetectedServedFromAnotherAndRepaired) {
    const uint64_t cs = GetParam().chunk_size;
    const auto data = pattern(cs * 4, 2);
    auto ino = write_file("/f", data);
    ASSERT_TRUE(ino.ok()) << ino.status().to_string();
    const uint32_t n = GetParam().daemons;
    if (GetParam().replicas < 2) {
        // A single copy has nothing to be repaired from: the read fails with EIO, never
        // returning the flipped byte.
        const std::string p = chunk_path(chunk_daemon(*ino, 1, layout(), n), *ino, 1);
        std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
        ASSERT_TRUE(f) << p;
        f.seekp(static_cast<std::streamoff>(ChunkStore::kDataOffset + cs / 2));
        f.put('\x5a');
        f.close();
        auto back = read_file("/f");
        ASSERT_FALSE(back.ok());
        EXPECT_EQ(back.status().to_errno(), EIO) << back.status().to_string();
        return;
    }
    // One read first: reads over the transport rotate over the copies read after read, and
    // the next one must not happen to start at the copy that local reads take.
    ASSERT_TRUE(read_file("/f").ok());
    // Corrupt every copy but the last of every chunk in turn: whichever replica a read goes to,
    // a good one exists.
    std::vector<std::pair<uint32_t, uint64_t>> corrupted;
    for (uint64_t i = 0; i < 4; ++i) {
        const Chain c = chunk_chain(*ino, i, layout(), n);
        for (uint32_t k = 0; k + 1 < c.length; ++k) {
            const std::string p = chunk_path(c.ranks[k], *ino, i);
            std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
            ASSERT_TRUE(f) << p;
            f.seekp(static_cast<std::streamoff>(ChunkStore::kDataOffset + cs / 2 + 17));
            f.put('\x5a').put('\xa5');
            corrupted.emplace_back(c.ranks[k], i);
        }
    }
    // Local reads (client/local_reads.h) read one copy on this node, always the same: a corrupt
    // one is repaired by the daemon the read then asks over the transport.
    auto back = read_file("/f");
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, data);
    const uint64_t local_before = client->io().local_reads();
    auto again = read_file("/f");
    ASSERT_TRUE(again.ok()) << again.status().to_string();
    EXPECT_EQ(*again, data);
    EXPECT_EQ(client->io().local_reads() - local_before, 4u) << "the copies read locally are whole again";
    // A client without local reads, as on another node, rotates over the copies: every copy
    // is read, all repaired.
    ClientOptions remote;
    remote.local_reads = false;
    auto far = Client::connect(cluster->info(), remote);
    ASSERT_TRUE(far.ok()) << far.status().to_string();
    for (int k = 0; k < 3; ++k) {
        auto f = (*far)->open("/f", O_RDONLY);
        ASSERT_TRUE(f.ok());
        std::vector<uint8_t> out(data.size());
        auto n = (*far)->pread(**f, 0, out);
        ASSERT_TRUE(n.ok()) << n.status().to_string();
        EXPECT_EQ(out, data);
    }
    size_t repaired = 0;
    for (auto& [rank, i] : corrupted) {
        const auto disk = chunk_bytes(chunk_path(rank, *ino, i));
        if (disk.size() == cs && std::equal(disk.begin(), disk.end(), data.begin() + i * cs)) repaired++;
    }
    EXPECT_EQ(repaired, corrupted.size());
    std::string logs;
    for (uint32_t r = 0; r < n; ++r) logs += log_of(r);
    EXPECT_NE(logs.find("checksum mismatch"), std::string::npos);
    EXPECT_NE(logs.find("repaired chunk"), std::string::npos);
}

// The daemons run on this node: every chunk is read from
// a chunk file of one of its copies (local reads, client/local_reads.h), replicated or not.
TEST_P(ReplicationTest, ChunksOfThisNodesDaemonsAreReadFromTheirFiles) {
    const uint64_t cs = GetParam().chunk_size;
    const auto data = pattern(cs * 6, 4);
    ASSERT_TRUE(write_file("/f", data).ok());
    const uint64_t before = client->io().local_reads();
    for (int k = 0; k < 3; ++k) {
        auto back = read_file("/f");
        ASSERT_TRUE(back.ok()) << back.status().to_string();
        EXPECT_EQ(*back, data);
    }
    EXPECT_EQ(client->io().local_reads() - before, 3 * 6u);
}

// A daemon killed: with R >= 2 every byte still reads back from the surviving copies; with
// R = 1 its chunks fail promptly with an error, never with wrong data.
TEST_P(ReplicationTest, KilledDaemonReadsFromSurvivorsOrFailsPromptly) {
    const uint64_t cs = GetParam().chunk_size;
    const auto data = pattern(cs * 9 + 4321, 3);
    ASSERT_TRUE(write_file("/f", data).ok());
    cluster->kill(1);
    const auto t0 = std::chrono::steady_clock::now();
    auto back = read_file("/f");
    if (GetParam().replicas >= 2) {
        ASSERT_TRUE(back.ok()) << back.status().to_string();
        EXPECT_EQ(*back, data);
    } else {
        ASSERT_FALSE(back.ok());
        const int e = back.status().to_errno();
        EXPECT_TRUE(e == ENOTCONN || e == ECONNREFUSED || e == EIO || e == ECANCELED) << back.status().to_string();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) // before any 30 s call deadline
        << (back.ok() ? std::string("read back") : back.status().to_string());
}

INSTANTIATE_TEST_SUITE_P(Shapes, ReplicationTest,
                         ::testing::Values(ClusterShape{1 << 20, 0, 1, 3}, ClusterShape{1 << 20, 0, 2, 3},
                                           ClusterShape{256 << 10, 2, 2, 3}, ClusterShape{1 << 20, 0, 3, 3},
                                           ClusterShape{512 << 10, 0, 2, 4}),
                         shape_name);

// ---- scrub ---------------------------------------------------------------------------------

std::string jobfs_cli_path() {
    const std::string d = jobfsd_path();
    return d.substr(0, d.rfind("/server/")) + "/client/jobfs";
}

// A flipped byte in one copy and a copy that lost its second half (a write it missed, with its
// checksums consistent): the scrub finds both, repairs both from the other replica and says
// so; a second scrub finds nothing. `jobfs scrub` prints the report and exits 0.
TEST(ReplicationScrub, FindsAndRepairsCorruptAndDifferingCopies) {
    test::TempDir dir("jobfs-repl-scrub");
    auto sc = start_small(dir.path(), {"--chunk-size", "1M", "--replicas", "2"});
    ASSERT_TRUE(sc.ok()) << sc.status().to_string();
    auto* cluster = &sc->cluster;
    Client& cl = *sc->client;
    ASSERT_TRUE(cl.mkdir("/d").ok());
    const auto data = pattern(5 << 20, 11);
    auto f = cl.open("/d/f", O_CREAT | O_WRONLY, 0644);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(cl.pwrite(**f, 0, data).ok());
    const uint64_t ino = (*f)->ino;
    const Layout l = cl.layout(**f);
    ASSERT_TRUE(cl.close(**f).ok());
    auto chunk_file = [&](uint32_t rank, uint64_t index) {
        char b[64];
        std::snprintf(b, sizeof b, "/%02" PRIx64 "/%016" PRIx64 ".%08" PRIx64, ino % 256, ino, index);
        return dir.path() + "/data" + std::to_string(rank) + "/chunks" + b;
    };
    const Chain c0 = chunk_chain(ino, 0, l, 3), c3 = chunk_chain(ino, 3, l, 3);
    {
        std::fstream bad(chunk_file(c0.head(), 0), std::ios::in | std::ios::out | std::ios::binary);
        bad.seekp(ChunkStore::kDataOffset + 300000);
        bad.put('\x01');
    }
    // Half of chunk 3 gone on its head: data and checksums cut together (the entries of the
    // blocks cut off say "never written"), so the copy checks out.
    fs::resize_file(chunk_file(c3.head(), 3), ChunkStore::kDataOffset + (512 << 10));
    {
        std::fstream cut(chunk_file(c3.head(), 3), std::ios::in | std::ios::out | std::ios::binary);
        cut.seekp((512 << 10) / (64 << 10) * 8);
        const std::string zeros((512 << 10) / (64 << 10) * 8, '\0');
        cut.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
    }

    auto rep = scrub(cl, "/");
    ASSERT_TRUE(rep.ok()) << rep.status().to_string();
    EXPECT_EQ(rep->files, 1u);
    EXPECT_EQ(rep->chunks, 5u);
    EXPECT_EQ(rep->copies, 10u);
    EXPECT_EQ(rep->corrupt, 1u);
    EXPECT_EQ(rep->mismatched, 1u);
    EXPECT_EQ(rep->repaired, 2u);
    EXPECT_EQ(rep->unrepaired, 0u);
    EXPECT_EQ(rep->unreachable, 0u);
    for (auto [rank, index] : {std::pair{c0.head(), uint64_t{0}}, std::pair{c3.head(), uint64_t{3}}}) {
        const auto disk = chunk_bytes(chunk_file(rank, index));
        ASSERT_EQ(disk.size(), 1u << 20);
        EXPECT_TRUE(std::equal(disk.begin(), disk.end(), data.begin() + (index << 20))) << "chunk " << index;
    }
    auto again = scrub(cl, "/d");
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->corrupt + again->mismatched + again->repaired, 0u);
    EXPECT_EQ(again->bytes, 2 * data.size());

    const std::string cmd = "JOBFS_CLUSTER=" + (*cluster)->descriptor_path() + " " + jobfs_cli_path() + " scrub -q / 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    EXPECT_EQ(::pclose(p), 0) << out;
    EXPECT_NE(out.find("scrub /: 1 files, 5 chunks, 10 copies"), std::string::npos) << out;
    EXPECT_NE(out.find("0 corrupt, 0 differing, 0 repaired"), std::string::npos) << out;
}

// ---- failures: kill -9 in the middle of a checkpoint ---------------------------------------

// R=2 on 3 daemons: a daemon killed while four writers write a 1 GiB checkpoint. Every write
// call returns success (the client writes a piece again once the manager's new chain table
// leaves the dead daemon out), the table says so, and every byte reads back exactly.
TEST(ReplicationFailover, KillDuringCheckpointLosesNoAcknowledgedByte) {
    test::TempDir dir("jobfs-repl-kill");
    auto sc = start_small(dir.path(), {"--chunk-size", "1M", "--replicas", "2", "--failure-timeout-ms", "800", "--heartbeat-ms", "100"});
    ASSERT_TRUE(sc.ok()) << sc.status().to_string();
    auto* cluster = &sc->cluster;
    Client& cl = *sc->client;
    auto before = cl.chain_table();
    ASSERT_TRUE(before.ok()) << before.status().to_string();
    EXPECT_EQ(before->version, 1u);

    // Issue #8's checkpoint: 1 GiB, written by 4 writers at once (as 4 ranks would), each its
    // own quarter in 4 MiB pieces; daemon 2 (it holds chunks and copies; the root is on 0) is
    // killed once a third of the pieces are acknowledged. Each piece's bytes come from its
    // number, so nothing of 1 GiB is held in memory.
    const size_t piece = 4 << 20, pieces = 256, writers = 4;
    auto f = cl.open("/ckpt", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ASSERT_TRUE(f.ok());
    std::atomic<size_t> acknowledged{0};
    std::once_flag killed;
    std::vector<std::string> failures(writers);
    std::vector<std::thread> ranks;
    for (size_t w = 0; w < writers; ++w)
        ranks.emplace_back([&, w] {
            for (size_t i = w * pieces / writers; i < (w + 1) * pieces / writers; ++i) {
                if (acknowledged >= pieces / 3) std::call_once(killed, [&] { (*cluster)->kill(2); });
                const auto data = pattern(piece, 1000 + i);
                Status s = cl.pwrite(**f, i * piece, data);
                if (!s.ok()) {
                    failures[w] = "piece " + std::to_string(i) + ": " + s.to_string();
                    return;
                }
                acknowledged++;
            }
        });
    for (auto& t : ranks) t.join();
    for (const auto& why : failures) ASSERT_EQ(why, "");
    ASSERT_TRUE(cl.close(**f).ok());
    auto after = cl.chain_table();
    ASSERT_TRUE(after.ok());
    EXPECT_GT(after->version, 1u);
    ASSERT_EQ(after->states.size(), 3u);
    EXPECT_EQ(after->states[2], proto::kDaemonOffline);
    EXPECT_EQ(after->states[0], proto::kDaemonServing);

    // jobfs status shows the table and the lost daemon, and says something is wrong (exit 1).
    const std::string cmd = "JOBFS_CLUSTER=" + (*cluster)->descriptor_path() + " " + jobfs_cli_path() + " status 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char line[512];
    while (std::fgets(line, sizeof line, p)) out += line;
    EXPECT_EQ(WEXITSTATUS(::pclose(p)), 1) << out;
    EXPECT_NE(out.find("chain table: version " + std::to_string(after->version)), std::string::npos) << out;
    EXPECT_NE(out.find("offline"), std::string::npos) << out;
    EXPECT_NE(out.find("serving"), std::string::npos) << out;

    auto r = cl.open("/ckpt", O_RDONLY);
    ASSERT_TRUE(r.ok());
    std::vector<uint8_t> back(piece);
    for (size_t i = 0; i < pieces; ++i) {
        auto n = cl.pread(**r, i * piece, back);
        ASSERT_TRUE(n.ok()) << "piece " << i << ": " << n.status().to_string();
        ASSERT_EQ(*n, piece);
        ASSERT_TRUE(back == pattern(piece, 1000 + i)) << "piece " << i;
    }
}

// R=1: a killed daemon's chunks fail promptly (writes and reads), never wrong data, no hang.
TEST(ReplicationFailover, SingleCopyLossGivesPromptErrors) {
    test::TempDir dir("jobfs-repl-r1");
    auto sc = start_small(dir.path(), {"--chunk-size", "1M", "--replicas", "1"});
    ASSERT_TRUE(sc.ok()) << sc.status().to_string();
    auto* cluster = &sc->cluster;
    Client& cl = *sc->client;
    const auto data = pattern(6 << 20, 4);
    auto f = cl.open("/f", O_CREAT | O_RDWR, 0644);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(cl.pwrite(**f, 0, data).ok());
    ASSERT_TRUE(cl.fsync(**f).ok());
    (*cluster)->kill(1);
    const auto t0 = std::chrono::steady_clock::now();
    Status w = cl.pwrite(**f, 0, data);
    EXPECT_FALSE(w.ok());
    std::vector<uint8_t> back(data.size());
    auto n = cl.pread(**f, 0, back);
    EXPECT_FALSE(n.ok());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)); // before any 30 s call deadline
    // The chunks of the surviving daemons still read back exactly.
    const Layout l = cl.layout(**f);
    for (uint64_t i = 0; i < 6; ++i) {
        if (chunk_daemon((*f)->ino, i, l, 3) == 1) continue;
        std::vector<uint8_t> part(1 << 20);
        auto m = cl.pread(**f, i << 20, part);
        ASSERT_TRUE(m.ok()) << m.status().to_string();
        EXPECT_TRUE(std::equal(part.begin(), part.end(), data.begin() + (i << 20)));
    }
}

// A daemon a test stopped (SIGSTOP) is continued when the test ends, however it ends: a
// stopped daemon would not stop on SIGTERM.
struct ResumeAtEnd {
    pid_t pid;
    ~ResumeAtEnd() { ::kill(pid, SIGCONT); }
};

// R=2: a daemon that stops answering without its connections breaking (SIGSTOP: a hung node,
// or one cut off by a network partition) in the middle of a checkpoint. Once the manager takes
// it offline, the calls waiting for it fail at once, on the daemons (a chain forward to it) and
// on the client (a chunk it heads, or a read it was asked for), and are retried on the chains
// without it: no write or read waits for the 30 s call deadline. After SIGCONT it resyncs and
// serves again, and every byte reads back exactly.
TEST(ReplicationFailover, HungDaemonIsLeftOutWithoutWaitingForCallDeadlines) {
    test::TempDir dir("jobfs-repl-hung");
    auto sc = start_small(dir.path(), {"--chunk-size", "1M", "--replicas", "2", "--failure-timeout-ms", "800",
                                       "--heartbeat-ms", "100"});
    ASSERT_TRUE(sc.ok()) << sc.status().to_string();
    auto* cluster = &sc->cluster;
    Client& cl = *sc->client;
    const pid_t hung = (*cluster)->pid(2); // holds chunks and copies; the root's shard is daemon 0's
    ResumeAtEnd resume{hung};

    const size_t piece = 4 << 20, pieces = 24; // 96 MiB
    const auto data = pattern(piece * pieces, 21);
    auto f = cl.open("/ckpt", O_CREAT | O_RDWR | O_TRUNC, 0644);
    ASSERT_TRUE(f.ok());
    const auto bound = std::chrono::seconds(10); // well below the call deadline (30 s)
    for (size_t i = 0; i < pieces; ++i) {
        if (i == pieces / 3) {
            ASSERT_TRUE(test::stop_process(hung));
        }
        const auto t0 = std::chrono::steady_clock::now();
        Status s = cl.pwrite(**f, i * piece, std::span<const uint8_t>(data.data() + i * piece, piece));
        ASSERT_TRUE(s.ok()) << "piece " << i << ": " << s.to_string();
        EXPECT_LT(std::chrono::steady_clock::now() - t0, bound) << "piece " << i;
    }
    // Reads while it is still stopped: every chunk from the copy that answers.
    std::vector<uint8_t> back(data.size());
    const auto t0 = std::chrono::steady_clock::now();
    auto n = cl.pread(**f, 0, back);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    ASSERT_EQ(*n, data.size());
    EXPECT_TRUE(back == data);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, bound);
    auto t = cl.chain_table();
    ASSERT_TRUE(t.ok());
    ASSERT_EQ(t->states.size(), 3u);
    EXPECT_EQ(t->states[2], proto::kDaemonOffline);

    // Resumed: it learns that it was left out, resyncs, serves; the data is whole.
    ASSERT_EQ(::kill(hung, SIGCONT), 0);
    bool serving = false;
    for (int i = 0; i < 600 && !serving; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        auto now = cl.chain_table();
        serving = now.ok() && now->states.size() == 3 && now->states[2] == proto::kDaemonServing;
    }
    ASSERT_TRUE(serving) << "daemon 2 never served again";
    ASSERT_TRUE(cl.close(**f).ok());
    auto r = cl.open("/ckpt", O_RDONLY);
    ASSERT_TRUE(r.ok());
    std::fill(back.begin(), back.end(), 0);
    n = cl.pread(**r, 0, back);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    EXPECT_TRUE(back == data);
}

// A client that starts while a daemon hangs (SIGSTOP: a node that failed with its link gone
// silent), which the others have taken offline, does not wait the connect timeout (10 s) for
// it: the daemons that answered have it offline, and it is left unconnected (client/cluster.h,
// kFirstConnectTry). The client then writes and reads on the chains without it. (Waiting for
// the whole connect timeout cannot pass the bound.)
TEST(ReplicationFailover, AClientStartingWhileADaemonHangsDoesNotWaitForIt) {
    test::TempDir dir("jobfs-repl-start-hung");
    auto sc = start_small(dir.path(), {"--chunk-size", "1M", "--replicas", "2", "--failure-timeout-ms", "800",
                                       "--heartbeat-ms", "100"});
    ASSERT_TRUE(sc.ok()) << sc.status().to_string();
    const pid_t hung = sc->cluster->pid(2);
    ResumeAtEnd resume{hung};
    ASSERT_TRUE(test::stop_process(hung));
    bool offline = false;
    for (int i = 0; i < 100 && !offline; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        auto t = sc->client->chain_table();
        offline = t.ok() && t->states.size() == 3 && t->states[2] == proto::kDaemonOffline;
    }
    ASSERT_TRUE(offline) << "daemon 2 was never taken offline";

    const auto t0 = std::chrono::steady_clock::now();
    auto c = Client::connect(sc->cluster->info());
    const auto took = std::chrono::steady_clock::now() - t0;
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_LT(took, std::chrono::seconds(6)) << "the client waited for the hung daemon";
    const auto data = pattern(6 << 20, 5);
    auto f = (*c)->open("/started-later", O_CREAT | O_RDWR | O_TRUNC, 0644);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    ASSERT_TRUE((*c)->pwrite(**f, 0, data).ok());
    std::vector<uint8_t> back(data.size());
    auto n = (*c)->pread(**f, 0, back);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    EXPECT_TRUE(back == data);
    EXPECT_TRUE((*c)->close(**f).ok());
}

// R=2 metadata: the primary of the root's shard hangs (SIGSTOP) while a client's create waits
// for it. The others take it offline and its replica serves the shard within a second. The
// create does not wait out its call deadline (25 s here): once it has waited 2 s, the client
// looks at the chain table, gives up on the offline daemon's connection and asks the new
// primary, and the create succeeds within a few seconds. (It waited the whole 25 s before,
// and before that failed with a timeout: the retries had run out while the one call waited.)
TEST(ReplicationMetadata, ACallToAHungPrimaryIsAskedOfTheNewOneWithoutWaitingItsDeadline) {
    test::TempDir dir("jobfs-repl-meta-hung");
    auto sc = start_small(dir.path(), {"--replicas", "2", "--failure-timeout-ms", "800", "--heartbeat-ms", "100"});
    ASSERT_TRUE(sc.ok()) << sc.status().to_string();
    ClientOptions co;
    co.timeout = std::chrono::seconds(25);
    auto c = Client::connect(sc->cluster->info(), co);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    auto before = (*c)->open("/before", O_CREAT | O_WRONLY, 0644);
    ASSERT_TRUE(before.ok()) << before.status().to_string();
    ASSERT_TRUE((*c)->close(**before).ok());
    const pid_t hung = sc->cluster->pid(0); // the root's shard
    ResumeAtEnd resume{hung};
    ASSERT_TRUE(test::stop_process(hung));
    const auto t0 = std::chrono::steady_clock::now();
    auto during = (*c)->open("/during", O_CREAT | O_WRONLY, 0644);
    const auto waited = std::chrono::steady_clock::now() - t0;
    ASSERT_TRUE(during.ok()) << during.status().to_string();
    EXPECT_LT(waited, std::chrono::seconds(12)) << "the create waited for the hung primary's deadline (25 s)";
    ASSERT_TRUE((*c)->close(**during).ok());
    auto t = (*c)->chain_table();
    ASSERT_TRUE(t.ok());
    ASSERT_EQ(t->states.size(), 3u);
    EXPECT_EQ(t->states[0], proto::kDaemonOffline);
    EXPECT_TRUE((*c)->stat("/during").ok());
    EXPECT_TRUE((*c)->stat("/before").ok());
}

// ---- forwards between daemons of one node ----------------------------------------------------

// The bytes forwarded down the chains (daemon stats) and the shared-memory connections made.
std::pair<uint64_t, uint64_t> shm_forwards(Client& cl) {
    uint64_t bytes = 0, connections = 0;
    for (const auto& ep : cl.daemons()) {
        auto s = jobfs::transport::rpc::call<proto::DaemonStats>(ep, proto::Empty{});
        EXPECT_TRUE(s.ok()) << s.status().to_string();
        if (!s.ok()) continue;
        bytes += s->shm_forward_bytes;
        connections += s->shm_connections;
    }
    return {bytes, connections};
}

// The daemons of one node forward chain writes to each other through shared memory, not
// loopback tcp (server/same_node_peers.h): at R=2 every byte written goes once from head to
// tail that way, and reads back whole from either copy. Daemons that cannot tell their peers
// are on this node (no local-read sockets) forward over their ordinary connections, just as
// correctly.
TEST(ReplicationSameNode, ChainForwardsGoThroughSharedMemoryAndReadBack) {
    const size_t size = (16 << 20) + 4321;
    const auto data = pattern(size, 77);
    for (const bool local_reads : {true, false}) {
        SCOPED_TRACE(local_reads ? "local reads on" : "local reads off");
        test::TempDir dir("jobfs-repl-shm");
        auto sc = start_small(dir.path(), {"--chunk-size", "1M", "--replicas", "2", "--local-reads",
                                           local_reads ? "true" : "false"});
        ASSERT_TRUE(sc.ok()) << sc.status().to_string();
        Client& cl = *sc->client;
        auto f = cl.open("/ckpt", O_CREAT | O_RDWR | O_TRUNC, 0644);
        ASSERT_TRUE(f.ok()) << f.status().to_string();
        // The first forward to each peer finds out whether it is on this node and connects;
        // forwards meanwhile take the ordinary connection. Once the first write returns those
        // are done, so the same write again (the same chains) goes through shared memory whole.
        ASSERT_TRUE(cl.pwrite(**f, 0, data).ok());
        const auto before = shm_forwards(cl);
        ASSERT_TRUE(cl.pwrite(**f, 0, data).ok());
        ASSERT_TRUE(cl.close(**f).ok());
        const auto after = shm_forwards(cl);
        const uint64_t bytes = after.first - before.first, connections = after.second;
        if (local_reads) {
            EXPECT_GE(bytes, size) << "every byte once from head to tail";
            EXPECT_LE(bytes, 2 * size);
            EXPECT_GE(connections, 3u) << "each daemon is the head of chains to both others";
        } else {
            EXPECT_EQ(bytes, 0u);
            EXPECT_EQ(connections, 0u);
        }
        for (int k = 0; k < 2; ++k) { // reads rotate over the copies
            auto r = cl.open("/ckpt", O_RDONLY);
            ASSERT_TRUE(r.ok());
            std::vector<uint8_t> back(size);
            auto n = cl.pread(**r, 0, back);
            ASSERT_TRUE(n.ok()) << n.status().to_string();
            ASSERT_EQ(*n, size);
            EXPECT_TRUE(back == data);
        }
    }
}

// ---- membership at rest ----------------------------------------------------------------------

// Daemons nobody uses send heartbeats every failure_timeout / 4 (here 500 ms), not every
// heartbeat-ms (100 ms): their CPU at rest was all heartbeats; and a pair makes one exchange,
// from the lower rank. A status query leaves them at rest; requests put the daemon that serves
// them back on the short interval. The manager killed while all are at rest is still taken
// offline within failure_timeout plus that interval.
TEST(ReplicationMembership, DaemonsAtRestHeartbeatLessOftenAndStillTakeALostOneOffline) {
    test::TempDir dir("jobfs-repl-rest");
    auto sc = start_small(dir.path(), {"--heartbeat-ms", "100", "--failure-timeout-ms", "2000"});
    ASSERT_TRUE(sc.ok()) << sc.status().to_string();
    Client& cl = *sc->client;
    auto beats = [&](uint32_t rank) -> uint64_t {
        auto s = jobfs::transport::rpc::call<proto::DaemonStats>(cl.daemons()[rank], proto::Empty{});
        EXPECT_TRUE(s.ok()) << s.status().to_string();
        return s.ok() ? s->heartbeats_sent : 0;
    };
    const auto window = std::chrono::seconds(2);
    // At rest: the client's connection is more than 2 s (kRestAfter) old.
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    uint64_t b0 = beats(0);
    const uint64_t b2 = beats(2);
    std::this_thread::sleep_for(window);
    const uint64_t at_rest = beats(0) - b0;
    const uint64_t b2_at_rest = beats(2) - b2;
    EXPECT_LE(at_rest, 2u * (2000 / 500 + 1)) << "two peers every 500 ms; every 100 ms would be 40";
    EXPECT_GE(at_rest, 2u) << "daemons at rest still send heartbeats";
    // Daemon 2 hears from 0 and 1 (lower ranks) at rest and sends them none: one exchange per pair.
    EXPECT_LE(b2_at_rest, 1u) << "daemon 2 sent heartbeats at rest to peers whose own told both sides";

    // In use: the root's shard (daemon 0) answers a stat every 20 ms.
    std::atomic<bool> stop{false};
    std::thread user([&] {
        while (!stop) {
            (void)cl.stat("/");
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(700)); // its next heartbeat round sees the work
    b0 = beats(0);
    std::this_thread::sleep_for(window);
    const uint64_t in_use = beats(0) - b0;
    stop = true;
    user.join();
    EXPECT_GE(in_use, 24u) << "two peers every 100 ms would be 40";
    std::printf("# heartbeats daemon 0 sent in 2 s: %llu at rest, %llu in use\n", static_cast<unsigned long long>(at_rest),
                static_cast<unsigned long long>(in_use));

    // All at rest again, daemon 0 is killed: the manager, to which the others send no
    // heartbeats while they hear its own. Offline within 2000 + 500 ms (and a second of slack).
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    sc->cluster->kill(0);
    std::this_thread::sleep_for(std::chrono::milliseconds(3500));
    auto t = cl.chain_table();
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    ASSERT_EQ(t->states.size(), 3u);
    EXPECT_EQ(t->states[0], proto::kDaemonOffline);
}

// ---- metadata shards: replicated, failed over, caught up -----------------------------------

// Metadata replicated (R=2: shard s is kept by daemons s and s+1). Daemon 0 (the root's shard,
// and here the shard of directory /src) is killed with SIGKILL while a client creates files in
// /src and renames them to /dst on another shard (cross-shard renames: intents). Every
// operation the client saw succeed is there afterwards, served by daemon 1, and the client goes
// on without an error (its calls move to the new primary). Daemon 0 restarted catches up (a
// snapshot), serves its shard again, and a new client sees everything; a third round with
// daemon 1 killed shows shard 0 survives that too.
TEST(ReplicationMetadata, PrimaryKilledWhileCreatingAndRenamingLosesNoAcknowledgedChange) {
    test::TempDir dir("jobfs-repl-meta");
    auto sc = start_small(dir.path(), {"--chunk-size", "1M", "--replicas", "2", "--failure-timeout-ms", "800",
                                       "--heartbeat-ms", "100", "--log-level", "info"});
    ASSERT_TRUE(sc.ok()) << sc.status().to_string();
    auto* cluster = &sc->cluster;
    Client& cl = *sc->client;
    auto t0 = cl.chain_table();
    ASSERT_TRUE(t0.ok());
    EXPECT_EQ(t0->meta_replicas, 2u);
    // /src on shard 0 (daemon 0's), /dst elsewhere.
    std::string src, dst;
    for (int i = 0; i < 64 && (src.empty() || dst.empty()); ++i) {
        const std::string d = "/d" + std::to_string(i);
        auto a = cl.mkdir(d);
        ASSERT_TRUE(a.ok()) << a.status().to_string();
        const uint32_t shard = static_cast<uint32_t>(a->ino >> 48);
        if (shard == 0 && src.empty()) src = d;
        else if (shard != 0 && dst.empty()) dst = d;
    }
    ASSERT_FALSE(src.empty() || dst.empty());

    std::mutex mu;
    std::vector<std::string> acked, failed;
    auto round = [&](Client& c, int from, int to) {
        for (int i = from; i < to; ++i) {
            const std::string n = "f" + std::to_string(i);
            auto f = c.open(src + "/" + n, O_CREAT | O_WRONLY, 0644); // not O_EXCL: a retry finds it
            Status s = f.ok() ? c.close(**f) : f.status();
            if (s.ok()) s = c.rename(src + "/" + n, dst + "/" + n);
            // A rename whose answer was lost with the old primary: done all the same.
            if (!s.ok() && s.code() == Code::not_found && c.stat(dst + "/" + n).ok()) s = Status::OK();
            std::lock_guard l(mu);
            (s.ok() ? acked : failed).push_back(n + (s.ok() ? "" : ": " + s.to_string()));
        }
    };
    auto count = [&] {
        std::lock_guard l(mu);
        return acked.size() + failed.size();
    };
    auto wait_count = [&](size_t n) {
        for (int i = 0; i < 600 && count() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    };
    auto serving = [&](Client& c, uint32_t rank) {
        for (int i = 0; i < 600; ++i) {
            auto t = c.chain_table();
            if (t.ok() && t->states.size() == 3 && t->states[rank] == proto::kDaemonServing) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        return false;
    };
    auto all_there = [&](Client& c) {
        std::lock_guard l(mu);
        size_t missing = 0;
        for (const auto& n : acked)
            if (!c.stat(dst + "/" + n).ok()) ++missing;
        auto list = c.list(dst);
        EXPECT_TRUE(list.ok()) << list.status().to_string();
        if (list.ok()) {
            EXPECT_EQ(list->size(), acked.size());
        }
        return missing;
    };

    // Operations from..to, daemon `rank` killed once `at` of them are done: none may fail.
    auto kill_during = [&](int from, int to, int at, uint32_t rank) {
        std::thread writer([&] { round(cl, from, to); });
        wait_count(size_t(at));
        (*cluster)->kill(rank);
        writer.join();
        std::lock_guard l(mu);
        EXPECT_TRUE(failed.empty()) << failed.size() << " failed, first: " << failed.front();
        EXPECT_EQ(acked.size(), size_t(to));
    };

    kill_during(0, 120, 30, 0);
    EXPECT_EQ(all_there(cl), 0u);
    auto t1 = cl.chain_table();
    ASSERT_TRUE(t1.ok());
    EXPECT_EQ(t1->states[0], proto::kDaemonOffline);

    // Daemon 0 back: it catches up before it serves, then serves shard 0 again.
    ASSERT_TRUE((*cluster)->restart(0).ok());
    ASSERT_TRUE(serving(cl, 0)) << "daemon 0 never served again";
    round(cl, 120, 140);
    auto fresh = Client::connect((*cluster)->info());
    ASSERT_TRUE(fresh.ok());
    EXPECT_EQ(all_there(**fresh), 0u);

    // Daemon 1 (shard 0's other copy, and shard 1's primary) killed: shard 1 moves to daemon 2,
    // shard 0 stays with daemon 0.
    kill_during(140, 200, 160, 1);
    EXPECT_EQ(all_there(cl), 0u);
}

// ---- resync: a restarted daemon catches up, then serves ----------------------------------

// R=2: daemon 2 killed, files written and overwritten while it is down, daemon 2 restarted on
// its old data directory: it resyncs what it missed (its log says so, the table shows it
// serving again), its chunk files then hold exactly the current bytes, and clients read them.
// Waits until the chain table has daemon `rank` in state `want`.
bool wait_daemon_state(Client& cl, uint32_t rank, uint8_t want, std::chrono::seconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
        auto t = cl.chain_table();
        if (t.ok() && t->states.size() > rank && t->states[rank] == want) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
}

// The bytes of chunk `index` of inode `ino` in daemon `rank`'s store under `dir` (empty if it
// has none): its file past the checksums.
std::vector<uint8_t> chunk_on_disk(const std::string& dir, uint32_t rank, uint64_t ino, uint64_t index) {
    char name[64];
    std::snprintf(name, sizeof name, "/%02" PRIx64 "/%016" PRIx64 ".%08" PRIx64, ino % 256, ino, index);
    return chunk_bytes(dir + "/data" + std::to_string(rank) + "/chunks" + name);
}

// Checks that daemon 2 of 3 (1 MiB chunks, 2 copies) holds, for every chunk of inode `ino` its
// chains give it, exactly the bytes of `data` there; how many such chunks it checked.
size_t expect_copies_on_daemon2(const std::string& dir, uint64_t ino, const std::vector<uint8_t>& data) {
    const Layout l{1 << 20, 0, 2};
    size_t checked = 0;
    for (uint64_t i = 0; i * (1 << 20) < data.size(); ++i) {
        if (!chunk_chain(ino, i, l, 3).contains(2)) continue;
        const auto disk = chunk_on_disk(dir, 2, ino, i);
        EXPECT_EQ(disk.size(), 1u << 20) << "inode " << ino << " chunk " << i;
        EXPECT_TRUE(disk.size() == 1u << 20 && std::equal(disk.begin(), disk.end(), data.begin() + (i << 20)))
            << "inode " << ino << " chunk " << i << " is stale";
        checked++;
    }
    return checked;
}

// The resync cases' daemons: 1 MiB chunks, 2 copies, a lost daemon noticed within a second.
const std::vector<std::string> kResyncArgs = {"--chunk-size", "1M", "--replicas", "2", "--failure-timeout-ms", "800",
                                              "--heartbeat-ms", "100", "--log-level", "info"};

// Writes d at off of path (created if needed, with flags) and closes it; the file's inode.
uint64_t write_file(Client& cl, const std::string& path, uint64_t off, const std::vector<uint8_t>& d, int flags = 0) {
    auto f = cl.open(path, O_WRONLY | O_CREAT | flags, 0644);
    EXPECT_TRUE(f.ok()) << path;
    if (!f.ok()) return 0;
    Status s = cl.pwrite(**f, off, d);
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_TRUE(cl.close(**f).ok());
    return (*f)->ino;
}

TEST(ReplicationResync, RestartedDaemonCopiesWhatItMissedThenServes) {
    test::TempDir dir("jobfs-repl-resync");
    auto sc = start_small(dir.path(), kResyncArgs);
    ASSERT_TRUE(sc.ok()) << sc.status().to_string();
    auto* cluster = &sc->cluster;
    Client& cl = *sc->client;
    auto a_data = pattern(8 << 20, 21);
    const uint64_t a = write_file(cl, "/a", 0, a_data, 0);
    (*cluster)->kill(2);
    // (up to 5 s of silence, then the manager; slower under ASan on a loaded machine)
    ASSERT_TRUE(wait_daemon_state(cl, 2, proto::kDaemonOffline, std::chrono::seconds(30)));
    // Missed by daemon 2: a new file, and the first 3 MiB of /a rewritten.
    auto b_data = pattern(6 << 20, 22);
    const uint64_t b = write_file(cl, "/b", 0, b_data, 0);
    const auto patch = pattern(3 << 20, 23);
    write_file(cl, "/a", 0, patch, 0);
    std::copy(patch.begin(), patch.end(), a_data.begin());

    ASSERT_TRUE((*cluster)->restart(2).ok());
    ASSERT_TRUE(wait_daemon_state(cl, 2, proto::kDaemonServing, std::chrono::seconds(30)));
    std::ifstream logf(dir.path() + "/jobfsd.2.log");
    std::stringstream log;
    log << logf.rdbuf();
    EXPECT_NE(log.str().find("resync done"), std::string::npos) << log.str();

    const size_t checked = expect_copies_on_daemon2(dir.path(), a, a_data) + expect_copies_on_daemon2(dir.path(), b, b_data);
    EXPECT_GT(checked, 3u);
    // A new client reads everything, every copy in turn (daemon 2's included).
    auto c2 = Client::connect((*cluster)->info());
    ASSERT_TRUE(c2.ok());
    for (int k = 0; k < 2; ++k)
        for (auto [path, data] : {std::pair{"/a", &a_data}, std::pair{"/b", &b_data}}) {
            auto f = (*c2)->open(path, O_RDONLY);
            ASSERT_TRUE(f.ok());
            std::vector<uint8_t> back(data->size());
            auto n = (*c2)->pread(**f, 0, back);
            ASSERT_TRUE(n.ok()) << n.status().to_string();
            EXPECT_TRUE(back == *data) << path;
        }
}

// A file still open for writing has no settled size in its inode: the chunks written into it
// while a daemon was away must be found by what the daemons hold, not by the size (seen in
// the Slurm partition test: a file cp was writing when the partition healed read back wrong
// from the daemon that had resynced).
TEST(ReplicationResync, ChunksOfAFileStillOpenAreCopiedToo) {
    test::TempDir dir("jobfs-repl-resync-open");
    auto sc = start_small(dir.path(), kResyncArgs);
    ASSERT_TRUE(sc.ok()) << sc.status().to_string();
    auto* cluster = &sc->cluster;
    Client& cl = *sc->client;
    auto f = cl.open("/open", O_WRONLY | O_CREAT, 0644);
    ASSERT_TRUE(f.ok());
    // And one cut to nothing while daemon 2 is away: its old copies there must not survive
    // to be read back when the file is extended again.
    auto cut = cl.open("/cut", O_WRONLY | O_CREAT, 0644);
    ASSERT_TRUE(cut.ok());
    ASSERT_TRUE(cl.pwrite(**cut, 0, pattern(6 << 20, 32)).ok());
    ASSERT_TRUE(cl.close(**cut).ok());
    (*cluster)->kill(2);
    ASSERT_TRUE(wait_daemon_state(cl, 2, proto::kDaemonOffline, std::chrono::seconds(30)));
    const auto data = pattern(6 << 20, 31);
    Status s = cl.pwrite(**f, 0, data);
    ASSERT_TRUE(s.ok()) << s.to_string();
    s = cl.truncate("/cut", 0);
    ASSERT_TRUE(s.ok()) << s.to_string();
    ASSERT_TRUE((*cluster)->restart(2).ok());
    ASSERT_TRUE(wait_daemon_state(cl, 2, proto::kDaemonServing, std::chrono::seconds(30)));
    ASSERT_TRUE(cl.close(**f).ok());

    const uint64_t ino = (*f)->ino;
    EXPECT_GE(expect_copies_on_daemon2(dir.path(), ino, data), 3u);
    ASSERT_TRUE(cl.truncate("/cut", 6 << 20).ok());
    std::vector<uint8_t> back(6 << 20, 0xff);
    auto r = cl.open("/cut", O_RDONLY);
    ASSERT_TRUE(r.ok());
    // Every copy in turn: daemon 2's included.
    for (int k = 0; k < 2; ++k) {
        auto n = cl.pread(**r, 0, back);
        ASSERT_TRUE(n.ok()) << n.status().to_string();
        ASSERT_EQ(*n, back.size());
        EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](uint8_t b) { return b == 0; })) << "pass " << k;
    }
    const uint64_t cut_ino = (*r)->ino;
    for (uint64_t i = 0; i < 6; ++i) {
        const auto disk = chunk_on_disk(dir.path(), 2, cut_ino, i);
        EXPECT_TRUE(std::all_of(disk.begin(), disk.end(), [](uint8_t b) { return b == 0; })) << "chunk " << i;
    }
}

// Files deleted while daemon 2 was away leave their chunks there (the client's removal leaves
// offline daemons out): the resync walk removes them. A file unlinked while this client still
// has it open has no inode either, but its chunks stay on the serving daemons, so its copies
// on daemon 2 must stay too (the open handle reads them); a file that lives on keeps its own.
TEST(ReplicationResync, ChunksOfFilesDeletedMeanwhileAreRemovedOpenOnesKept) {
    test::TempDir dir("jobfs-repl-resync-gc");
    auto sc = start_small(dir.path(), kResyncArgs);
    ASSERT_TRUE(sc.ok()) << sc.status().to_string();
    auto* cluster = &sc->cluster;
    Client& cl = *sc->client;
    const Layout l{1 << 20, 0, 2};
    struct Written {
        uint64_t ino;
        std::vector<uint8_t> data;
    };
    auto write = [&](const std::string& path, uint8_t seed) -> Written {
        Written w{0, pattern(6 << 20, seed)};
        w.ino = write_file(cl, path, 0, w.data);
        return w;
    };
    // The chunks of `ino` that daemon 2 holds on its disk, of those its chains give it.
    auto on_daemon2 = [&](uint64_t ino, size_t* placed) {
        size_t n = 0;
        *placed = 0;
        for (uint64_t i = 0; i < 6; ++i) {
            if (!chunk_chain(ino, i, l, 3).contains(2)) continue;
            ++*placed;
            if (!chunk_on_disk(dir.path(), 2, ino, i).empty()) n++;
        }
        return n;
    };
    const Written gone = write("/gone", 41), kept = write("/kept", 42), held = write("/held", 43);
    auto open_held = cl.open("/held", O_RDONLY);
    ASSERT_TRUE(open_held.ok());
    size_t placed = 0;
    ASSERT_GE(on_daemon2(gone.ino, &placed), 3u); // the test needs copies there to start with
    ASSERT_EQ(on_daemon2(gone.ino, &placed), placed);

    (*cluster)->kill(2);
    ASSERT_TRUE(wait_daemon_state(cl, 2, proto::kDaemonOffline, std::chrono::seconds(30)));
    ASSERT_TRUE(cl.unlink("/gone").ok());
    ASSERT_TRUE(cl.unlink("/held").ok()); // still open here: its chunks stay on daemons 0 and 1
    EXPECT_EQ(on_daemon2(gone.ino, &placed), placed) << "daemon 2 was down: the removal cannot have reached it";

    ASSERT_TRUE((*cluster)->restart(2).ok());
    ASSERT_TRUE(wait_daemon_state(cl, 2, proto::kDaemonServing, std::chrono::seconds(30)));
    EXPECT_EQ(on_daemon2(gone.ino, &placed), 0u) << "the deleted file's chunks are garbage on daemon 2";
    EXPECT_EQ(on_daemon2(kept.ino, &placed), placed);
    EXPECT_EQ(on_daemon2(held.ino, &placed), placed) << "the unlinked file still open keeps its copies";
    std::ifstream logf(dir.path() + "/jobfsd.2.log");
    std::stringstream log;
    log << logf.rdbuf();
    EXPECT_NE(log.str().find("chunks of 1 deleted files removed"), std::string::npos) << log.str();

    // Every copy in turn (daemon 2's included) still reads right, through the open handle too.
    for (int k = 0; k < 2; ++k) {
        std::vector<uint8_t> back(6 << 20);
        auto n = cl.pread(**open_held, 0, back);
        ASSERT_TRUE(n.ok()) << n.status().to_string();
        EXPECT_TRUE(back == held.data) << "pass " << k;
        auto f = cl.open("/kept", O_RDONLY);
        ASSERT_TRUE(f.ok());
        n = cl.pread(**f, 0, back);
        ASSERT_TRUE(n.ok()) << n.status().to_string();
        EXPECT_TRUE(back == kept.data) << "pass " << k;
    }
    // Its last close removes it everywhere, daemon 2 included.
    ASSERT_TRUE(cl.close(**open_held).ok());
    EXPECT_EQ(on_daemon2(held.ino, &placed), 0u);
}

// A file unlinked while open here has no inode, but this client goes on writing it: what it
// wrote while daemon 2 was away must reach daemon 2's copies when it resyncs, or reads served
// there return the old bytes. (The shard keeps the layout of removed replicated files.)
TEST(ReplicationResync, WritesToAnUnlinkedOpenFileAreCopiedToo) {
    test::TempDir dir("jobfs-repl-resync-orphan");
    auto sc = start_small(dir.path(), kResyncArgs);
    ASSERT_TRUE(sc.ok()) << sc.status().to_string();
    auto* cluster = &sc->cluster;
    Client& cl = *sc->client;
    auto f = cl.open("/orphan", O_RDWR | O_CREAT, 0644);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(cl.pwrite(**f, 0, pattern(6 << 20, 51)).ok());
    ASSERT_TRUE(cl.unlink("/orphan").ok());
    (*cluster)->kill(2);
    ASSERT_TRUE(wait_daemon_state(cl, 2, proto::kDaemonOffline, std::chrono::seconds(30)));
    const auto data = pattern(6 << 20, 52);
    Status s = cl.pwrite(**f, 0, data);
    ASSERT_TRUE(s.ok()) << s.to_string();
    ASSERT_TRUE((*cluster)->restart(2).ok());
    ASSERT_TRUE(wait_daemon_state(cl, 2, proto::kDaemonServing, std::chrono::seconds(30)));

    const uint64_t ino = (*f)->ino;
    EXPECT_GE(expect_copies_on_daemon2(dir.path(), ino, data), 3u);
    // Every copy in turn (daemon 2's included), through the open handle.
    for (int k = 0; k < 2; ++k) {
        std::vector<uint8_t> back(6 << 20);
        auto n = cl.pread(**f, 0, back);
        ASSERT_TRUE(n.ok()) << n.status().to_string();
        EXPECT_TRUE(back == data) << "pass " << k;
    }
    // Its last close removes it everywhere, daemon 2 included.
    Status closed = cl.close(**f);
    ASSERT_TRUE(closed.ok()) << closed.to_string();
    for (uint64_t i = 0; i < 6; ++i) EXPECT_TRUE(chunk_on_disk(dir.path(), 2, ino, i).empty()) << "chunk " << i;
}

// ---- layout: R per file and per directory -------------------------------------------------

TEST(ReplicationLayout, ConfigDefaultDirectoryInheritanceAndBadValues) {
    test::TempDir dir("jobfs-repl-layout");
    auto sc = start_small(dir.path(), {"--chunk-size", "1M", "--replicas", "2"});
    ASSERT_TRUE(sc.ok()) << sc.status().to_string();
    Client& cl = *sc->client;
    auto f = cl.open("/default", O_CREAT | O_WRONLY, 0644);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(cl.layout(**f).replicas, 2u); // the daemons' replicas=
    ASSERT_TRUE(cl.close(**f).ok());
    ASSERT_TRUE(cl.mkdir("/three").ok());
    auto d = cl.set_layout("/three", Layout{0, 0, 3});
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_EQ(d->replicas, 3u);
    auto g = cl.open("/three/g", O_CREAT | O_WRONLY, 0644);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(cl.layout(**g).replicas, 3u); // inherited from the directory
    ASSERT_TRUE(cl.close(**g).ok());
    auto h = cl.open("/three/h", O_CREAT | O_WRONLY, 0644, Layout{0, 0, 1});
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(cl.layout(**h).replicas, 1u); // the file's own choice wins
    ASSERT_TRUE(cl.close(**h).ok());
    ASSERT_TRUE(cl.mkdir("/three/sub").ok());
    EXPECT_EQ(cl.stat("/three/sub")->replicas, 3u); // new directories inherit it too
    auto bad = cl.set_layout("/three", Layout{0, 0, 4});
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), Code::invalid);
    // A file with data keeps its replication: changing it would need a copy.
    auto w = cl.open("/w", O_CREAT | O_WRONLY, 0644);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(cl.pwrite(**w, 0, pattern(1000, 5)).ok());
    ASSERT_TRUE(cl.close(**w).ok());
    auto busy = cl.set_layout("/w", Layout{0, 0, 3});
    ASSERT_FALSE(busy.ok());
    EXPECT_EQ(busy.status().code(), Code::busy);
}

} // namespace
} // namespace jobfs::client
