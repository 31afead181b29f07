// chunk_service_test: the chunk RPCs over real UCX endpoints, served from a real ChunkStore.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <unistd.h>

#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "block_crc.h"
#include "daemon_protocol.h"
#include "test_util.h"
#include "server/chunk_service.h"
#include "server/write_arenas.h"

namespace jobfs::server {
namespace {

using namespace std::chrono_literals;
using test::pattern;
namespace rpc = transport::rpc;

class ChunkServiceTest : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/jobfs-chunksvc-XXXXXX";
        dir = ::mkdtemp(tmpl);
        start(dir);
    }
    void start(const std::string& data_dir, ChunkService::PeerFn peer = {}, ChunkService::TableVersionFn table_version = {}) {
        auto st = ChunkStore::open(data_dir, kChunk);
        ASSERT_TRUE(st.ok()) << st.status().to_string();
        store = std::move(*st);
        transport::WorkerOptions o;
        o.name = "jobfsd-test";
        o.secret = "s";
        auto w = transport::Worker::create(o);
        ASSERT_TRUE(w.ok());
        server = std::move(*w);
        service = std::make_unique<ChunkService>(*server, *store, pool, 0, std::move(peer), std::move(table_version));
        auto port = server->listen("127.0.0.1", 0);
        ASSERT_TRUE(port.ok());
        o.name = "client";
        auto c = transport::Worker::create(o);
        ASSERT_TRUE(c.ok());
        client = std::move(*c);
        auto ep = client->connect("127.0.0.1", *port);
        ASSERT_TRUE(ep.ok()) << ep.status().to_string();
        conn = *ep;
    }
    // Stops client, service and store but keeps the data directory (a daemon restart).
    void TearDownKeepDir() {
        conn = {};
        client.reset();
        server.reset();
        service.reset();
        store.reset();
    }
    void TearDown() override {
        TearDownKeepDir();
        pool.join();
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }

    Status write(proto::ChunkRef c, uint64_t off, const std::vector<uint8_t>& data) {
        transport::CallOptions o;
        o.bulk_out = data;
        return rpc::call<proto::ChunkWrite>(conn, proto::ChunkWriteRequest{c, off, data.size(), {}, {}}, o).status();
    }
    Result<std::vector<uint8_t>> read(proto::ChunkRef c, uint64_t off, uint64_t len) {
        std::vector<uint8_t> buf(len);
        transport::CallOptions o;
        o.bulk_in = buf;
        auto r = rpc::call<proto::ChunkRead>(conn, proto::ChunkReadRequest{c, off, len, {}}, o);
        if (!r.ok()) return r.status();
        buf.resize(r->length);
        return buf;
    }

    static constexpr uint64_t kChunk = 4 << 20;
    std::string dir;
    boost::asio::thread_pool pool{4};
    std::unique_ptr<ChunkStore> store;
    std::unique_ptr<transport::Worker> server, client;
    std::unique_ptr<ChunkService> service;
    transport::Endpoint conn;
};

TEST_F(ChunkServiceTest, WholeChunkWriteAndReadBack) {
    auto data = pattern(kChunk, 1);
    ASSERT_TRUE(write({1, 0}, 0, data).ok());
    auto back = read({1, 0}, 0, kChunk);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, data);
}

TEST_F(ChunkServiceTest, SmallUnalignedWritesAndShortReads) {
    auto a = pattern(100, 2);
    ASSERT_TRUE(write({2, 5}, 70000, a).ok());
    auto back = read({2, 5}, 69990, 1000); // starts in a hole, ends past the chunk's end
    ASSERT_TRUE(back.ok());
    ASSERT_EQ(back->size(), 110u);
    EXPECT_TRUE(std::all_of(back->begin(), back->begin() + 10, [](uint8_t c) { return c == 0; }));
    EXPECT_TRUE(std::equal(a.begin(), a.end(), back->begin() + 10));
    auto none = read({99, 0}, 0, 4096);
    ASSERT_TRUE(none.ok());
    EXPECT_TRUE(none->empty());
}

TEST_F(ChunkServiceTest, ManyWritesInFlight) {
    constexpr int kCalls = 32;
    std::vector<std::vector<uint8_t>> bufs;
    for (int i = 0; i < kCalls; ++i) bufs.push_back(pattern(1 << 20, 100 + i));
    std::atomic<int> ok{0}, done{0};
    for (int i = 0; i < kCalls; ++i) {
        transport::CallOptions o;
        o.bulk_out = bufs[i];
        proto::ChunkWriteRequest req{{3, static_cast<uint64_t>(i / 4)}, static_cast<uint64_t>(i % 4) << 20, 1 << 20, {}, {}};
        rpc::call_async<proto::ChunkWrite>(conn, req, o, [&](Result<proto::Empty> r, size_t) {
            ok += r.ok();
            ++done;
        });
    }
    auto until = std::chrono::steady_clock::now() + 30s;
    while (done < kCalls && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    ASSERT_EQ(ok.load(), kCalls);
    for (int i = 0; i < kCalls; ++i) {
        auto back = read({3, static_cast<uint64_t>(i / 4)}, static_cast<uint64_t>(i % 4) << 20, 1 << 20);
        ASSERT_TRUE(back.ok());
        ASSERT_EQ(*back, bufs[i]) << "write " << i;
    }
}

TEST_F(ChunkServiceTest, TruncateRemoveAndSpace) {
    ASSERT_TRUE(write({4, 0}, 0, pattern(300000, 3)).ok());
    ASSERT_TRUE(rpc::call<proto::ChunkTruncate>(conn, proto::ChunkTruncateRequest{{4, 0}, 1000}).ok());
    EXPECT_EQ(read({4, 0}, 0, kChunk)->size(), 1000u);
    ASSERT_TRUE(rpc::call<proto::ChunkSync>(conn, proto::ChunkRef{4, 0}).ok());
    ASSERT_TRUE(rpc::call<proto::FileSync>(conn, proto::FileChunksRequest{4}).ok());
    auto space = rpc::call<proto::DiskSpace>(conn, proto::Empty{});
    ASSERT_TRUE(space.ok());
    EXPECT_GT(space->total_bytes, 0u);
    EXPECT_GE(space->chunk_files, 1u);
    ASSERT_TRUE(rpc::call<proto::FileRemoveChunks>(conn, proto::FileChunksRequest{4}).ok());
    EXPECT_TRUE(read({4, 0}, 0, 100)->empty());
}

TEST_F(ChunkServiceTest, BadRequestsGetClearErrors) {
    auto past = write({5, 0}, kChunk - 10, pattern(100, 4));
    EXPECT_EQ(past.code(), Code::invalid) << past.to_string();
    // A write whose message and bulk disagree is a protocol error, and nothing is written.
    std::vector<uint8_t> data(1000, 1);
    transport::CallOptions o;
    o.bulk_out = data;
    auto lie = rpc::call<proto::ChunkWrite>(conn, proto::ChunkWriteRequest{{5, 0}, 0, 2000, {}, {}}, o);
    EXPECT_EQ(lie.status().code(), Code::protocol);
    EXPECT_TRUE(read({5, 0}, 0, 100)->empty());
    auto big = rpc::call<proto::ChunkRead>(conn, proto::ChunkReadRequest{{5, 0}, 0, kChunk + 1, {}});
    EXPECT_EQ(big.status().code(), Code::invalid);
}

TEST_F(ChunkServiceTest, CorruptChunkReadsAsIoErrorAtTheClient) {
    auto data = pattern(200000, 5);
    ASSERT_TRUE(write({6, 0}, 0, data).ok());
    // Restart the service on the same directory so nothing is cached, after corrupting a byte.
    TearDownKeepDir();
    {
        std::fstream f(dir + "/chunks/06/0000000000000006.00000000", std::ios::in | std::ios::out | std::ios::binary);
        ASSERT_TRUE(f.good());
        f.seekp(ChunkStore::kDataOffset + 5);
        char c = static_cast<char>(data[5] ^ 1);
        f.write(&c, 1);
    }
    start(dir);
    auto back = read({6, 0}, 0, 100);
    ASSERT_FALSE(back.ok());
    EXPECT_EQ(back.status().code(), Code::io);
    EXPECT_EQ(back.status().to_errno(), EIO);
}

// The gate of local reads (ChunkService::read_gate: readers that read the chunk file themselves)
// lets through what CRAQ lets a replica serve: not a reader with an older chain table, not a
// daemon outside the reader's chain, and, while a write of the chunk is on its way down the
// chain (the replica is dirty), only the tail.
TEST_F(ChunkServiceTest, ReadGateServesOnlyWhatCraqAllows) {
    const auto ranks = [](std::initializer_list<uint32_t> l) { return std::vector<uint32_t>(l); };
    TearDownKeepDir();
    // Daemon 1, this daemon's successor: holds every write passed to it until told to answer.
    transport::WorkerOptions o;
    o.name = "successor";
    o.secret = "s";
    auto succ = transport::Worker::create(o);
    ASSERT_TRUE(succ.ok());
    std::mutex mu;
    std::vector<transport::ServerCall> held;
    auto bytes = std::make_shared<std::vector<uint8_t>>(kChunk);
    rpc::serve<proto::ChunkWrite>(**succ, [&mu, &held, bytes](transport::ServerCall call, proto::ChunkWriteRequest&&) {
        call.receive_bulk(std::span<uint8_t>(bytes->data(), call.bulk_length()), [&mu, &held, call](Status) {
            std::lock_guard l(mu);
            held.push_back(call);
        });
    });
    auto succ_port = (*succ)->listen("127.0.0.1", 0);
    ASSERT_TRUE(succ_port.ok());
    transport::Endpoint to_succ;
    start(dir, [&to_succ](uint32_t) -> Result<transport::Endpoint> { return to_succ; }, [] { return uint64_t{5}; });
    auto ep = server->connect("127.0.0.1", *succ_port);
    ASSERT_TRUE(ep.ok()) << ep.status().to_string();
    to_succ = *ep;

    const ChunkId id{9, 0};
    EXPECT_TRUE(service->read_gate(id, ranks({0, 1}), 5).ok());
    EXPECT_TRUE(service->read_gate(id, ranks({}), 0).ok()) << "unreplicated: nothing to check";
    EXPECT_EQ(service->read_gate(id, ranks({0, 1}), 4).code(), Code::again) << "an older table";
    EXPECT_EQ(service->read_gate(id, ranks({1, 2}), 5).code(), Code::again) << "not in the chain";

    // A write enters here as head and waits at the successor: dirty here.
    const auto data = pattern(1 << 20, 8);
    std::atomic<int> written{0};
    transport::CallOptions co;
    co.bulk_out = data;
    rpc::call_async<proto::ChunkWrite>(conn, proto::ChunkWriteRequest{{9, 0}, 0, data.size(), {0, 1}, {}, 0, 5}, co,
                                       [&written](Result<proto::Empty> r, size_t) { written = r.ok() ? 1 : -1; });
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < until) {
        {
            std::lock_guard l(mu);
            if (!held.empty()) break;
        }
        std::this_thread::sleep_for(5ms);
    }
    {
        std::lock_guard l(mu);
        ASSERT_EQ(held.size(), 1u) << "the write never reached the successor";
    }
    EXPECT_EQ(service->read_gate(id, ranks({0, 1}), 5).code(), Code::again) << "dirty, and not the tail";
    EXPECT_TRUE(service->read_gate(id, ranks({1, 0}), 5).ok()) << "the tail serves what it holds";
    EXPECT_TRUE(service->read_gate(ChunkId{9, 1}, ranks({0, 1}), 5).ok()) << "another chunk is clean";
    {
        std::lock_guard l(mu);
        held[0].reply(Status::OK());
        held.clear();
    }
    while (written == 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
    ASSERT_EQ(written, 1);
    EXPECT_TRUE(service->read_gate(id, ranks({0, 1}), 5).ok()) << "committed: clean again";
    to_succ = {};
    TearDownKeepDir();
    succ->reset();
}

// Local writes: a write naming a client's arena (server/write_arenas.h) takes its bytes from
// there, checked against the writer's CRCs; an unknown token is not_found (the client sends
// the bytes instead), a range outside the arena invalid, an arena write with a bulk malformed.
TEST_F(ChunkServiceTest, WritesFromAClientsArenaAreCheckedAndStored) {
    const int fd = ::memfd_create("arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_GE(fd, 0);
    const size_t size = 4 << 20;
    ASSERT_EQ(::ftruncate(fd, size), 0);
    ASSERT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    auto* base = static_cast<uint8_t*>(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ASSERT_NE(base, MAP_FAILED);
    WriteArenas arenas;
    auto token = arenas.map(fd);
    ::close(fd);
    ASSERT_TRUE(token.ok()) << token.status().to_string();
    const auto data = pattern(1 << 20, 12);
    std::memcpy(base + (1 << 20), data.data(), data.size());
    auto write_from_arena = [&](uint64_t tok, uint64_t off, uint64_t len, std::vector<uint32_t> crcs, proto::ChunkRef c) {
        proto::ChunkWriteRequest req{c, 0, len, {}, std::move(crcs)};
        req.arena = tok;
        req.arena_offset = off;
        return rpc::call<proto::ChunkWrite>(conn, req).status();
    };
    const auto crcs = transport::block_crcs(0, data);
    EXPECT_EQ(write_from_arena(*token, 1 << 20, data.size(), crcs, {21, 0}).code(), Code::not_found)
        << "the service takes no arenas yet";
    service->accept_arenas(&arenas);
    Status s = write_from_arena(*token, 1 << 20, data.size(), crcs, {21, 0});
    ASSERT_TRUE(s.ok()) << s.to_string();
    auto back = read({21, 0}, 0, data.size());
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, data);
    EXPECT_EQ(write_from_arena(*token + 1, 0, 4096, {}, {21, 1}).code(), Code::not_found);
    EXPECT_EQ(write_from_arena(*token, size - 4096, 8192, {}, {21, 1}).code(), Code::invalid);
    // The bytes changed under the CRCs: refused, nothing stored.
    base[(1 << 20) + 5] ^= 1;
    EXPECT_EQ(write_from_arena(*token, 1 << 20, data.size(), crcs, {21, 2}).code(), Code::io);
    EXPECT_TRUE(read({21, 2}, 0, 100)->empty());
    // An arena write that also carries a bulk.
    proto::ChunkWriteRequest both{{21, 3}, 0, 4096, {}, {}};
    both.arena = *token;
    transport::CallOptions o;
    o.bulk_out = std::span<const uint8_t>(data.data(), 4096);
    EXPECT_EQ(rpc::call<proto::ChunkWrite>(conn, both, o).status().code(), Code::protocol);
    service->accept_arenas(nullptr);
    ::munmap(base, size);
}

TEST_F(ChunkServiceTest, FullDiskIsNoSpaceAtTheClient) {
    TearDownKeepDir();
    std::string small = dir + "/small";
    std::filesystem::create_directory(small);
    if (::mount("jobfs-test", small.c_str(), "tmpfs", 0, "size=2m") != 0) GTEST_SKIP() << "cannot mount a tmpfs (needs root)";
    struct Unmount {
        std::function<void()> stop;
        std::string p;
        ~Unmount() {
            stop(); // nothing may hold files on the tmpfs when it goes
            ::umount2(p.c_str(), MNT_DETACH);
        }
    } unmount{[this] { TearDownKeepDir(); }, small};
    start(small);
    auto a = pattern(1 << 20, 6);
    ASSERT_TRUE(write({7, 0}, 0, a).ok());
    Status s = write({8, 0}, 0, pattern(3 << 20, 7));
    EXPECT_EQ(s.code(), Code::no_space) << s.to_string();
    EXPECT_TRUE(read({8, 0}, 0, 100)->empty());
    EXPECT_EQ(*read({7, 0}, 0, 1 << 20), a);
}

} // namespace
} // namespace jobfs::server
