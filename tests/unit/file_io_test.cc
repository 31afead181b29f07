// file_io_test: the client's striped data path against three real in-process daemons.
//
// Each daemon is a real transport Worker listening on 127.0.0.1 with a ChunkStore in its own
// temporary directory, served by the real ChunkService; the client connects to all three over
// UCX. Tests check the bytes read back, where the chunks landed (asking each ChunkStore
// directly), and the error codes when a daemon is gone.
#include <gtest/gtest.h>

#include <boost/asio/thread_pool.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <set>
#include <thread>

#include "client/file_io.h"
#include "client/layout.h"
#include "server/chunk_service.h"
#include "server/chunk_store.h"
#include "test_util.h"

namespace jobfs::client {
namespace {

using namespace std::chrono_literals;
using test::pattern;

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * KiB;

bool all_zero(std::span<const uint8_t> s) {
    return std::all_of(s.begin(), s.end(), [](uint8_t b) { return b == 0; });
}

// ---- placement --------------------------------------------------------------------------------

TEST(LayoutTest, HashIsSplitMix64) {
    // The placement is part of the on-disk format: pin the hash to SplitMix64's known output.
    EXPECT_EQ(splitmix64(0), 0xe220a8397b1dcdafull);
    EXPECT_EQ(splitmix64(0), splitmix64(0));
    EXPECT_NE(splitmix64(1), splitmix64(2));
}

TEST(LayoutTest, ChunksRotateOverAllDaemons) {
    const Layout all{1 * MiB, 0};
    std::set<uint32_t> starts;
    for (uint64_t ino = 1; ino <= 64; ++ino) {
        const uint32_t start = chunk_daemon(ino, 0, all, 3);
        EXPECT_EQ(start, splitmix64(ino) % 3);
        starts.insert(start);
        for (uint64_t i = 0; i < 12; ++i) EXPECT_EQ(chunk_daemon(ino, i, all, 3), (start + i) % 3) << ino << " " << i;
    }
    EXPECT_EQ(starts.size(), 3u) << "files must start on different daemons";
    for (uint64_t i = 0; i < 10; ++i) EXPECT_EQ(chunk_daemon(7, i, all, 1), 0u);
}

TEST(LayoutTest, StripeCountLimitsTheDaemons) {
    const uint32_t n = 8;
    const uint64_t ino = 42;
    const uint32_t start = splitmix64(ino) % n;
    std::set<uint32_t> used;
    for (uint64_t i = 0; i < 100; ++i) {
        const uint32_t d = chunk_daemon(ino, i, Layout{MiB, 3}, n);
        used.insert(d);
        EXPECT_EQ(d, (start + i % 3) % n);
        EXPECT_EQ(d, chunk_daemon(ino, i + 3, Layout{MiB, 3}, n));
    }
    EXPECT_EQ(used, (std::set<uint32_t>{start, (start + 1) % n, (start + 2) % n}));
    for (uint64_t i = 0; i < 20; ++i) {
        EXPECT_EQ(chunk_daemon(ino, i, Layout{MiB, 1}, n), start);
        // More than the cluster has means all of it, like 0.
        EXPECT_EQ(chunk_daemon(ino, i, Layout{MiB, 100}, n), chunk_daemon(ino, i, Layout{MiB, 0}, n));
        EXPECT_EQ(chunk_daemon(ino, i, Layout{MiB, 0}, n), (start + i) % n);
    }
    EXPECT_EQ(stripe_width(Layout{MiB, 0}, n), n);
    EXPECT_EQ(stripe_width(Layout{MiB, 5}, n), 5u);
    EXPECT_EQ(stripe_width(Layout{MiB, 9}, n), n);
}

// ---- range splitting --------------------------------------------------------------------------

TEST(SplitRangeTest, EdgeCases) {
    const uint64_t cs = 1000;
    EXPECT_TRUE(split_range(0, 0, cs).empty());
    EXPECT_TRUE(split_range(12345, 0, cs).empty());
    EXPECT_EQ(split_range(0, 10, cs), (std::vector<ChunkPiece>{{0, 0, 10, 0}}));
    EXPECT_EQ(split_range(0, cs, cs), (std::vector<ChunkPiece>{{0, 0, cs, 0}}));
    EXPECT_EQ(split_range(cs, cs, cs), (std::vector<ChunkPiece>{{1, 0, cs, 0}}));
    EXPECT_EQ(split_range(2 * cs + 100, 50, cs), (std::vector<ChunkPiece>{{2, 100, 50, 0}}));
    EXPECT_EQ(split_range(10, cs - 10, cs), (std::vector<ChunkPiece>{{0, 10, cs - 10, 0}}));
    EXPECT_EQ(split_range(10, cs - 9, cs), (std::vector<ChunkPiece>{{0, 10, cs - 10, 0}, {1, 0, 1, cs - 10}}));
    EXPECT_EQ(split_range(cs - 10, 2 * cs + 20, cs),
              (std::vector<ChunkPiece>{{0, cs - 10, 10, 0}, {1, 0, cs, 10}, {2, 0, cs, cs + 10}, {3, 0, 10, 2 * cs + 10}}));
    // At the very end of the offset space.
    const uint64_t top = std::numeric_limits<uint64_t>::max() - 5;
    EXPECT_EQ(split_range(top, 5, cs), (std::vector<ChunkPiece>{{top / cs, top % cs, 5, 0}}));
}

TEST(SplitRangeTest, PiecesTileTheRange) {
    std::mt19937_64 rng(5);
    for (int t = 0; t < 2000; ++t) {
        const uint64_t cs = 1 + rng() % 5000, off = rng() % 100000, len = rng() % 20000;
        uint64_t pos = off, buf = 0;
        for (const ChunkPiece& p : split_range(off, len, cs)) {
            ASSERT_GT(p.length, 0u);
            ASSERT_EQ(p.chunk_index * cs + p.offset_in_chunk, pos);
            ASSERT_LE(p.offset_in_chunk + p.length, cs);
            ASSERT_EQ(p.offset_in_buffer, buf);
            pos += p.length;
            buf += p.length;
        }
        ASSERT_EQ(buf, len);
    }
}

// ---- against real daemons ---------------------------------------------------------------------

// One storage daemon inside the test process.
struct Daemon {
    std::string dir;
    std::unique_ptr<server::ChunkStore> store;
    std::unique_ptr<boost::asio::thread_pool> pool;
    std::unique_ptr<transport::Worker> worker;
    std::unique_ptr<server::ChunkService> service;
    uint16_t port = 0;

    // The worker goes first (no new requests), then the pool finishes what it holds, then the
    // store those tasks use.
    void stop() {
        worker.reset();
        if (pool) pool->join();
        service.reset();
        store.reset();
    }
};

class FileIOTest : public ::testing::Test {
protected:
    static constexpr int kDaemons = 3;
    static constexpr uint64_t kStoreChunk = 4 * MiB; // the largest chunk the daemons accept

    void SetUp() override {
        transport::WorkerOptions o;
        o.secret = "file-io-test";
        for (auto& d : daemons) {
            char tmpl[] = "/tmp/jobfs-fileio-XXXXXX";
            ASSERT_NE(::mkdtemp(tmpl), nullptr);
            d.dir = tmpl;
            auto st = server::ChunkStore::open(d.dir, kStoreChunk);
            ASSERT_TRUE(st.ok()) << st.status().to_string();
            d.store = std::move(*st);
            d.pool = std::make_unique<boost::asio::thread_pool>(2);
            o.name = "jobfsd-test";
            auto w = transport::Worker::create(o);
            ASSERT_TRUE(w.ok()) << w.status().to_string();
            d.worker = std::move(*w);
            d.service = std::make_unique<server::ChunkService>(*d.worker, *d.store, *d.pool);
            auto port = d.worker->listen("127.0.0.1", 0);
            ASSERT_TRUE(port.ok()) << port.status().to_string();
            d.port = *port;
        }
        o.name = "client";
        auto c = transport::Worker::create(o);
        ASSERT_TRUE(c.ok()) << c.status().to_string();
        client = std::move(*c);
        std::vector<transport::Endpoint> eps;
        for (auto& d : daemons) {
            auto ep = client->connect("127.0.0.1", d.port);
            ASSERT_TRUE(ep.ok()) << ep.status().to_string();
            eps.push_back(*ep);
        }
        io = std::make_unique<FileIO>(std::move(eps), 20s);
    }

    void TearDown() override {
        io.reset();
        client.reset();
        for (auto& d : daemons) {
            d.stop();
            std::error_code ec;
            if (!d.dir.empty()) std::filesystem::remove_all(d.dir, ec);
        }
    }

    // Reads [offset, offset + len) of a file of `size` into a buffer pre-filled with 0xAA, so
    // that bytes the read failed to produce (instead of zero-filling them) show.
    std::vector<uint8_t> read(uint64_t ino, const Layout& l, uint64_t size, uint64_t offset, size_t len) {
        std::vector<uint8_t> buf(len, 0xAA);
        auto n = io->pread(ino, l, size, offset, buf);
        EXPECT_TRUE(n.ok()) << n.status().to_string();
        if (!n.ok()) return {};
        EXPECT_EQ(*n, offset >= size ? 0 : std::min<uint64_t>(len, size - offset));
        buf.resize(n.ok() ? *n : 0);
        return buf;
    }

    uint64_t chunk_length(int rank, uint64_t ino, uint64_t index) {
        auto n = daemons[rank].store->length(server::ChunkId{ino, index});
        EXPECT_TRUE(n.ok()) << n.status().to_string();
        return n.ok() ? *n : ~uint64_t{0};
    }

    Daemon daemons[kDaemons];
    std::unique_ptr<transport::Worker> client;
    std::unique_ptr<FileIO> io;
};

TEST_F(FileIOTest, Write64MiBReadBackSpreadOverAllDaemons) {
    const Layout l{1 * MiB, 0};
    const uint64_t ino = 1001;
    const auto data = pattern(64 * MiB, 1);
    ASSERT_TRUE(io->pwrite(ino, l, 0, data).ok());
    EXPECT_EQ(read(ino, l, data.size(), 0, data.size()), data);

    // Every chunk sits whole on the daemon the layout names and nowhere else.
    int per_daemon[kDaemons] = {};
    for (uint64_t i = 0; i < 64; ++i) {
        const uint32_t owner = chunk_daemon(ino, i, l, kDaemons);
        for (int r = 0; r < kDaemons; ++r)
            EXPECT_EQ(chunk_length(r, ino, i), r == static_cast<int>(owner) ? 1 * MiB : 0) << "chunk " << i;
        per_daemon[owner]++;
    }
    for (int r = 0; r < kDaemons; ++r) EXPECT_GE(per_daemon[r], 21) << "daemon " << r;
}

TEST_F(FileIOTest, StripeCountOneKeepsTheFileOnOneDaemon) {
    const Layout l{256 * KiB, 1};
    const uint64_t ino = 77;
    const auto data = pattern(2 * MiB, 2);
    ASSERT_TRUE(io->pwrite(ino, l, 0, data).ok());
    const uint32_t owner = chunk_daemon(ino, 0, l, kDaemons);
    for (uint64_t i = 0; i < 8; ++i)
        for (int r = 0; r < kDaemons; ++r)
            EXPECT_EQ(chunk_length(r, ino, i), r == static_cast<int>(owner) ? 256 * KiB : 0);
    EXPECT_EQ(read(ino, l, data.size(), 0, data.size()), data);
}

TEST_F(FileIOTest, HolesAndAbsentChunksReadAsZeros) {
    const Layout l{256 * KiB, 0};
    const uint64_t ino = 5;
    const auto a = pattern(1000, 3);
    const auto b = pattern(70000, 4);
    ASSERT_TRUE(io->pwrite(ino, l, 100 * KiB, a).ok());            // inside chunk 0
    ASSERT_TRUE(io->pwrite(ino, l, 5 * 256 * KiB + 3, b).ok());   // chunk 5; 1 to 4 absent
    const uint64_t size = 2 * MiB; // the tail past the last write is a hole too
    auto all = read(ino, l, size, 0, size);
    ASSERT_EQ(all.size(), size);
    std::vector<uint8_t> expect(size, 0);
    std::copy(a.begin(), a.end(), expect.begin() + 100 * KiB);
    std::copy(b.begin(), b.end(), expect.begin() + 5 * 256 * KiB + 3);
    EXPECT_EQ(all, expect);
    // A read wholly inside an absent chunk.
    EXPECT_TRUE(all_zero(read(ino, l, size, 300 * KiB, 100 * KiB)));
}

TEST_F(FileIOTest, UnalignedRandomWritesAndReadsMatchAModel) {
    const Layout l{256 * KiB, 0};
    const uint64_t ino = 9;
    const uint64_t span = 4 * MiB;
    std::vector<uint8_t> model(span + MiB, 0);
    uint64_t size = 0;
    std::mt19937_64 rng(11);
    for (int op = 0; op < 80; ++op) {
        if (rng() % 3 != 0) {
            const uint64_t off = rng() % span, len = 1 + rng() % (700 * KiB);
            const auto d = pattern(len, op);
            ASSERT_TRUE(io->pwrite(ino, l, off, d).ok()) << "op " << op;
            std::copy(d.begin(), d.end(), model.begin() + off);
            size = std::max(size, off + len);
        } else {
            const uint64_t off = rng() % (size + 100 * KiB + 1), len = rng() % MiB;
            const auto got = read(ino, l, size, off, len);
            const uint64_t n = off >= size ? 0 : std::min(len, size - off);
            ASSERT_EQ(got.size(), n);
            ASSERT_TRUE(std::equal(got.begin(), got.end(), model.begin() + off)) << "op " << op << " at " << off;
        }
    }
    auto all = read(ino, l, size, 0, size);
    EXPECT_TRUE(std::equal(all.begin(), all.end(), model.begin()));
}

TEST_F(FileIOTest, EightThreadsWriteDisjointRegions) {
    const Layout l{1 * MiB, 0};
    const uint64_t ino = 12;
    const uint64_t region = 3 * MiB + 4097; // unaligned: neighbours share chunks
    constexpr int kThreads = 8;
    std::vector<std::vector<uint8_t>> parts;
    for (int t = 0; t < kThreads; ++t) parts.push_back(pattern(region, 100 + t));
    std::vector<Status> results(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] { results[t] = io->pwrite(ino, l, t * region, parts[t]); });
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) ASSERT_TRUE(results[t].ok()) << t << ": " << results[t].to_string();
    const auto all = read(ino, l, kThreads * region, 0, kThreads * region);
    ASSERT_EQ(all.size(), kThreads * region);
    for (int t = 0; t < kThreads; ++t)
        EXPECT_TRUE(std::equal(parts[t].begin(), parts[t].end(), all.begin() + t * region)) << "region " << t;
}

TEST_F(FileIOTest, StridedWritersReadBack) {
    // Checkpoint pattern: writer w writes every 8th MiB starting at MiB w, into 4 MiB chunks
    // that several writers fill at once.
    const Layout l{4 * MiB, 0};
    const uint64_t ino = 13;
    constexpr int kWriters = 8;
    const auto data = pattern(64 * MiB, 6);
    std::vector<Status> results(kWriters);
    std::vector<std::thread> threads;
    for (int w = 0; w < kWriters; ++w)
        threads.emplace_back([&, w] {
            for (uint64_t m = w; m < 64 && results[w].ok(); m += kWriters)
                results[w] = io->pwrite(ino, l, m * MiB, std::span(data).subspan(m * MiB, MiB));
        });
    for (auto& th : threads) th.join();
    for (int w = 0; w < kWriters; ++w) ASSERT_TRUE(results[w].ok()) << w << ": " << results[w].to_string();
    EXPECT_EQ(read(ino, l, data.size(), 0, data.size()), data);
}

TEST_F(FileIOTest, ReadAtAndPastEndOfFile) {
    const Layout l{64 * KiB, 0};
    const uint64_t ino = 14;
    const auto d = pattern(1000, 7);
    ASSERT_TRUE(io->pwrite(ino, l, 0, d).ok());
    std::vector<uint8_t> buf(500, 0xAA);
    auto n = io->pread(ino, l, 1000, 1000, buf);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 0u);
    n = io->pread(ino, l, 1000, 1u << 30, buf);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 0u);
    n = io->pread(ino, l, 1000, 900, buf);
    ASSERT_TRUE(n.ok());
    ASSERT_EQ(*n, 100u);
    EXPECT_TRUE(std::equal(buf.begin(), buf.begin() + 100, d.begin() + 900));
    EXPECT_EQ(buf[100], 0xAA) << "nothing past EOF is written";
    n = io->pread(ino, l, 1000, 0, std::span<uint8_t>());
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 0u);
    // A file whose size is ahead of its chunks (data written elsewhere not yet, or a hole).
    EXPECT_TRUE(all_zero(read(ino, l, 10 * MiB, 9 * MiB, MiB)));
}

TEST_F(FileIOTest, TruncateShrinkCutsChunksAndRegrowReadsZeros) {
    const Layout l{1 * MiB, 0};
    const uint64_t ino = 15;
    const uint64_t old_size = 5 * MiB + MiB / 2;
    const auto data = pattern(old_size, 8);
    ASSERT_TRUE(io->pwrite(ino, l, 0, data).ok());

    const uint64_t new_size = 2 * MiB + MiB / 4;
    ASSERT_TRUE(io->truncate_chunks(ino, l, old_size, new_size).ok());
    EXPECT_EQ(chunk_length(chunk_daemon(ino, 1, l, kDaemons), ino, 1), MiB);
    EXPECT_EQ(chunk_length(chunk_daemon(ino, 2, l, kDaemons), ino, 2), MiB / 4);
    for (uint64_t i = 3; i <= 5; ++i) EXPECT_EQ(chunk_length(chunk_daemon(ino, i, l, kDaemons), ino, i), 0u);
    EXPECT_EQ(read(ino, l, new_size, 0, old_size), std::vector<uint8_t>(data.begin(), data.begin() + new_size));
    // Growing again (a truncate up, or a write far out) must not resurrect the old bytes.
    ASSERT_TRUE(io->truncate_chunks(ino, l, new_size, old_size).ok());
    auto regrown = read(ino, l, old_size, 0, old_size);
    ASSERT_EQ(regrown.size(), old_size);
    EXPECT_TRUE(std::equal(regrown.begin(), regrown.begin() + new_size, data.begin()));
    EXPECT_TRUE(all_zero(std::span(regrown).subspan(new_size)));

    // To a chunk boundary: the chunk at the new size goes entirely.
    ASSERT_TRUE(io->truncate_chunks(ino, l, old_size, MiB).ok());
    EXPECT_EQ(chunk_length(chunk_daemon(ino, 0, l, kDaemons), ino, 0), MiB);
    EXPECT_EQ(chunk_length(chunk_daemon(ino, 1, l, kDaemons), ino, 1), 0u);
    EXPECT_EQ(chunk_length(chunk_daemon(ino, 2, l, kDaemons), ino, 2), 0u);
    auto one = read(ino, l, 3 * MiB, 0, 3 * MiB);
    EXPECT_TRUE(std::equal(one.begin(), one.begin() + MiB, data.begin()));
    EXPECT_TRUE(all_zero(std::span(one).subspan(MiB)));

    // To zero: nothing is left anywhere.
    ASSERT_TRUE(io->truncate_chunks(ino, l, MiB, 0).ok());
    for (int r = 0; r < kDaemons; ++r) EXPECT_EQ(chunk_length(r, ino, 0), 0u);
    EXPECT_TRUE(all_zero(read(ino, l, MiB, 0, MiB)));
}

TEST_F(FileIOTest, RemoveFileLeavesNoChunkAndSparesOthers) {
    const Layout l{1 * MiB, 0};
    const auto a = pattern(8 * MiB, 9), b = pattern(3 * MiB, 10);
    ASSERT_TRUE(io->pwrite(20, l, 0, a).ok());
    ASSERT_TRUE(io->pwrite(21, l, 0, b).ok());
    ASSERT_TRUE(io->remove_file(20).ok());
    for (int r = 0; r < kDaemons; ++r)
        for (uint64_t i = 0; i < 8; ++i) EXPECT_EQ(chunk_length(r, 20, i), 0u) << r << " " << i;
    EXPECT_TRUE(all_zero(read(20, l, 8 * MiB, 0, 8 * MiB)));
    EXPECT_EQ(read(21, l, b.size(), 0, b.size()), b);
    EXPECT_TRUE(io->remove_file(20).ok()) << "removing twice is fine";
}

TEST_F(FileIOTest, SyncCoversEveryChunkIncludingAbsentOnes) {
    const Layout l{1 * MiB, 0};
    const auto d = pattern(MiB + 10, 11);
    ASSERT_TRUE(io->pwrite(22, l, 3 * MiB, d).ok());
    EXPECT_TRUE(io->sync(22, l, 8 * MiB).ok());
    EXPECT_TRUE(io->sync(22, l, 0).ok());
    // Sync reaches the daemons: with one of them gone, the chunks it holds cannot be synced.
    daemons[chunk_daemon(22, 3, l, kDaemons)].stop();
    Status s = io->sync(22, l, 8 * MiB);
    EXPECT_TRUE(s.code() == Code::peer_gone || s.code() == Code::cancelled) << s.to_string();
}

TEST_F(FileIOTest, BadLayoutsAndDaemonErrorsPassThroughWithContext) {
    const auto d = pattern(100, 12);
    EXPECT_EQ(io->pwrite(30, Layout{0, 0}, 0, d).code(), Code::invalid);
    std::vector<uint8_t> ten(10);
    EXPECT_EQ(io->pread(30, Layout{0, 0}, 100, 0, ten).status().code(), Code::invalid);
    EXPECT_EQ(io->pwrite(30, Layout{MiB, 0}, std::numeric_limits<uint64_t>::max() - 10, d).code(), Code::too_large);
    // Chunks larger than the daemons accept: their error comes back unchanged, with context.
    const Layout huge{2 * kStoreChunk, 0};
    const auto big = pattern(3 * kStoreChunk, 13);
    Status s = io->pwrite(30, huge, 0, big);
    ASSERT_EQ(s.code(), Code::invalid) << s.to_string();
    EXPECT_NE(s.message().find("chunk write of inode 30 chunk "), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("on daemon "), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("past the chunk size"), std::string::npos) << s.message();
    std::vector<uint8_t> out(big.size());
    auto r = io->pread(30, huge, big.size(), 0, out);
    EXPECT_EQ(r.status().code(), Code::invalid) << r.status().to_string();
    FileIO none({}, 1s);
    EXPECT_EQ(none.pwrite(1, Layout{}, 0, d).code(), Code::invalid);
    EXPECT_EQ(none.remove_file(1).code(), Code::invalid);
}

TEST_F(FileIOTest, StoppedDaemonFailsCallsQuicklyAndSparesTheOthers) {
    const Layout l{1 * MiB, 0};
    const uint64_t ino = 40;
    const auto data = pattern(9 * MiB, 14);
    ASSERT_TRUE(io->pwrite(ino, l, 0, data).ok());
    const int dead = 1;
    daemons[dead].stop();

    auto transport_failure = [](Code c) { return c == Code::peer_gone || c == Code::cancelled || c == Code::refused; };
    auto t0 = std::chrono::steady_clock::now();
    Status w = io->pwrite(ino, l, 0, data);
    EXPECT_TRUE(transport_failure(w.code())) << w.to_string();
    EXPECT_NE(w.message().find("on daemon 1 "), std::string::npos) << w.message();
    std::vector<uint8_t> out(data.size());
    auto r = io->pread(ino, l, data.size(), 0, out);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(transport_failure(r.status().code())) << r.status().to_string();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "a dead daemon must not cost the call timeout (20 s)";

    // Chunks on the live daemons are still served.
    for (uint64_t i = 0; i < 9; ++i) {
        if (chunk_daemon(ino, i, l, kDaemons) == dead) continue;
        auto back = read(ino, l, data.size(), i * MiB, MiB);
        EXPECT_TRUE(std::equal(back.begin(), back.end(), data.begin() + i * MiB)) << "chunk " << i;
        EXPECT_TRUE(io->pwrite(ino, l, i * MiB, std::span(data).subspan(i * MiB, MiB)).ok());
    }
}

// Disabled: a daemon dying while a client's rendezvous write to it is in flight.
// Destroying the daemon's Worker used to abort in about 1 run of 5 with UCX 1.13's
//   ucp_ep.c:437 Assertion `ucs_hlist_is_empty(&ucp_ep_ext_gen(ep)->proto_reqs)' failed
// (a flush close with a bulk receive pending); the transport's teardown now force-closes and
// that is gone. About 1 run in 40 still aborts, now on the client's side, inside UCX's tcp
// transport: tcp_ep.c:939 Assertion `ep->flags & UCT_TCP_EP_FLAG_PUT_TX_WAITING_ACK' failed,
// from ucp_worker_progress while the connection breaks under a rendezvous put. Enable it when
// that is avoided (run: --gtest_also_run_disabled_tests --gtest_repeat=40).
TEST_F(FileIOTest, DISABLED_DaemonDyingMidWriteFailsTheWriteWithoutHanging) {
    // A writer keeps writing 32 MiB while a daemon stops under it: the write in flight then
    // returns a transport error once every piece has completed (the buffer stays valid until
    // the thread ends; the sanitizer build would see a late access to a freed one).
    const Layout l{1 * MiB, 0};
    const uint64_t ino = 41;
    Status last;
    int writes = 0;
    std::atomic<bool> started{false};
    std::thread writer([&] {
        auto data = std::make_unique<std::vector<uint8_t>>(pattern(32 * MiB, 15));
        for (; writes < 1000 && last.ok(); ++writes) {
            last = io->pwrite(ino, l, 0, *data);
            started = true;
        }
        data.reset();
    });
    while (!started) std::this_thread::sleep_for(1ms);
    auto t0 = std::chrono::steady_clock::now();
    daemons[2].stop();
    writer.join();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
    EXPECT_TRUE(last.code() == Code::peer_gone || last.code() == Code::cancelled) << last.to_string();
    EXPECT_NE(last.message().find("on daemon 2 "), std::string::npos) << last.message();
}

} // namespace
} // namespace jobfs::client
