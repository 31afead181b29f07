// local_reads_test: a reader on the daemon's node reads chunk files itself (client/local_reads.h)
// through a real LocalReadServer (its abstract Unix socket) over a real ChunkStore, and takes
// nothing that does not match what the daemon described: corrupt blocks, data where the daemon
// recorded a hole, a chunk file replaced since, a wrong secret.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "client/local_reads.h"
#include "local_read_socket.h"
#include "server/chunk_stamps.h"
#include "server/chunk_store.h"
#include "server/local_read_server.h"
#include "server/write_arenas.h"
#include "test_util.h"

namespace jobfs {
namespace {

using client::LocalReads;
using server::ChunkId;
using server::ChunkStore;
using server::LocalReadServer;
using test::pattern;
using test::TempDir;

constexpr uint64_t kChunk = 1 << 20;
constexpr uint64_t kBlock = ChunkStore::kBlockSize;

std::string chunk_file(const std::string& dir, ChunkId id) {
    char b[64];
    std::snprintf(b, sizeof b, "/chunks/%02llx/%016llx.%08llx", static_cast<unsigned long long>(id.ino % 256),
                  static_cast<unsigned long long>(id.ino), static_cast<unsigned long long>(id.index));
    return dir + b;
}

class LocalReadsTest : public ::testing::Test {
protected:
    void SetUp() override {
        // A secret of this test alone: the socket's name comes from it, and tests may run at once.
        secret = "local-reads-test-" + std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}());
        auto st = ChunkStore::open(dir.path(), kChunk);
        ASSERT_TRUE(st.ok()) << st.status().to_string();
        store = std::move(*st);
        auto srv = LocalReadServer::start(
            *store, secret, 0,
            [this](ChunkId, std::span<const uint32_t> chain, uint64_t v) {
                gate_calls++;
                gate_chain.assign(chain.begin(), chain.end());
                gate_version = v;
                return gate_answer;
            },
            &arenas);
        ASSERT_TRUE(srv.ok()) << srv.status().to_string();
        server = std::move(*srv);
        reader = std::make_unique<LocalReads>(secret, 1);
    }

    // Takes chunk id's file out of the page cache: the next local read of it is a cold one.
    void drop_cache(ChunkId id) {
        int fd = ::open(chunk_file(dir.path(), id).c_str(), O_RDONLY);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::fdatasync(fd), 0);
        ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
        ::close(fd);
    }

    // Reads [offset, offset + size) of chunk id locally: out gets what the chunk holds there.
    Status read_locally(ChunkId id, uint64_t offset, uint64_t size, std::vector<uint8_t>& out) {
        out.assign(size, 0xee);
        if (!reader->available(0)) return Status(Code::peer_gone, "daemon 0 is not available for local reads");
        bool cold = false;
        auto n = reader->read_range({0, id.ino, id.index, offset, size}, out, &cold);
        if (!n.ok()) return n.status();
        out.resize(*n);
        return Status::OK();
    }

    // The daemon's gate for replicated chunks (ChunkService::read_gate in jobfsd): what it was asked.
    Status gate_answer;
    int gate_calls = 0;
    std::vector<uint32_t> gate_chain;
    uint64_t gate_version = 0;
    TempDir dir;
    std::string secret;
    server::WriteArenas arenas; // outlives the server
    std::unique_ptr<ChunkStore> store;
    std::unique_ptr<LocalReadServer> server;
    std::unique_ptr<LocalReads> reader;
};

// The descriptors that travel over the socket (LocalReply's, the chunk files') are closed on
// both ends whatever the answer: reads, refusals, prefetches and absent chunks leave this
// process (client and daemon side) with as many open descriptors as before.
TEST_F(LocalReadsTest, NoDescriptorIsLeftOpenByAnyAnswer) {
    const ChunkId id{0x2002, 1};
    const auto data = pattern(4 * kBlock, 9);
    ASSERT_TRUE(store->write(id, 0, data).ok());
    ASSERT_TRUE(reader->available(0));
    auto open_fds = [] {
        size_t n = 0;
        for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
        return n;
    };
    std::vector<uint8_t> got;
    ASSERT_TRUE(read_locally(id, 0, kBlock, got).ok()); // the connection is made before counting
    // The daemon's threads close their copy of a reply's descriptor just after sending the
    // reply, so it may still be open when the read returns, and a round trip over another
    // connection (another of the daemon's threads) does not wait for that: the count is the
    // lowest seen over a while, and the last one may take a while to come down to it.
    const auto settled_fds = [&](size_t floor, int tries) {
        size_t n = open_fds();
        for (int i = 0; i < tries && n > floor; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            n = std::min(n, open_fds());
        }
        return n;
    };
    std::vector<uint8_t> none;
    (void)read_locally({0x2003, 9}, 0, kBlock, none);
    const size_t before = settled_fds(0, 10);
    const std::vector<uint32_t> chain{0, 1};
    for (int i = 0; i < 50; ++i) {
        ASSERT_TRUE(read_locally(id, static_cast<uint64_t>(i % 4) * kBlock, kBlock, got).ok());
        gate_answer = Status(Code::again, "dirty");
        std::vector<uint8_t> buf(kBlock);
        bool cold = false;
        auto refused = reader->read_range({0, id.ino, id.index, 0, kBlock, chain, 7}, buf, &cold);
        EXPECT_EQ(refused.status().code(), Code::again);
        gate_answer = Status::OK();
        reader->prefetch(0, id.ino, id.index, 0, kBlock);
        (void)read_locally({0x2003, 9}, 0, kBlock, none); // no such chunk
    }
    EXPECT_EQ(settled_fds(before, 250), before);
}

// Ranges with edges inside blocks and on them, a hole in the middle and a short last block:
// byte for byte what the daemon's own read returns.
TEST_F(LocalReadsTest, RangesReadBackByteExactWithHolesAndAShortLastBlock) {
    const ChunkId id{0x2001, 4};
    const uint64_t length = 9 * kBlock + 1234; // block 9 is short
    const auto data = pattern(length, 7);
    // Blocks 3 and 4 are never written: a hole.
    ASSERT_TRUE(store->write(id, 0, std::span(data).first(3 * kBlock)).ok());
    ASSERT_TRUE(store->write(id, 5 * kBlock, std::span(data).subspan(5 * kBlock)).ok());
    ASSERT_TRUE(reader->available(0));
    const std::vector<std::pair<uint64_t, uint64_t>> ranges = {
        {0, length}, {0, kBlock}, {1, kBlock}, {kBlock - 1, 2}, {100, 3 * kBlock},
        {2 * kBlock + 5, 4 * kBlock}, {3 * kBlock, 2 * kBlock}, {8 * kBlock + 77, kChunk}, {length - 1, 1},
    };
    // Each range twice: from the page cache (the file mapped, or with pread when the reader
    // reads cached ranges so), and cold (read into the page cache first, then the same). A
    // first read puts the hole's pages in the page cache too (a read of a hole caches zeros).
    for (const auto mode : {LocalReads::CachedReads::mapped, LocalReads::CachedReads::copied}) {
        SCOPED_TRACE(mode == LocalReads::CachedReads::mapped ? "cached ranges mapped" : "cached ranges copied");
        reader = std::make_unique<LocalReads>(secret, 1, LocalReads::kArenaBytes, mode);
        std::vector<uint8_t> all;
        ASSERT_TRUE(read_locally(id, 0, length, all).ok());
        const uint64_t first_reads = reader->reads(), first_mapped = reader->mapped_reads();
        const uint64_t server_first = server->reads();
        for (const bool cold : {false, true}) {
            for (auto [off, size] : ranges) {
                if (cold) drop_cache(id);
                std::vector<uint8_t> got;
                Status s = read_locally(id, off, size, got);
                ASSERT_TRUE(s.ok()) << off << "+" << size << (cold ? " cold: " : ": ") << s.to_string();
                std::vector<uint8_t> want(size);
                auto n = store->read(id, off, want);
                ASSERT_TRUE(n.ok());
                ASSERT_EQ(*n, got.size());
                want.resize(*n);
                EXPECT_EQ(got, want) << off << "+" << size << (cold ? " cold" : "");
            }
            // A cold range is read into the page cache first, and then as a cached one (with
            // pread where the host takes huge pages back: page_cache_filler.h).
            const bool cold_mapped = client::PageCacheFiller::huge_pages();
            EXPECT_EQ(reader->mapped_reads() - first_mapped,
                      mode == LocalReads::CachedReads::mapped ? ranges.size() * (cold && cold_mapped ? 2 : 1) : 0u)
                << "ranges are read from a mapping in mapped mode alone";
        }
        EXPECT_EQ(reader->reads(), first_reads + 2 * ranges.size());
        EXPECT_EQ(server->reads(), server_first + 2 * ranges.size());
        // A range past the chunk's end reads as nothing, from no file: neither side counts a read.
        std::vector<uint8_t> none;
        ASSERT_TRUE(read_locally(id, length + kBlock, kBlock, none).ok());
        EXPECT_TRUE(none.empty());
        EXPECT_EQ(reader->reads(), first_reads + 2 * ranges.size());
        EXPECT_EQ(server->reads(), server_first + 2 * ranges.size());
    }
}

TEST_F(LocalReadsTest, CorruptBlockIsRefusedAndNothingCounted) {
    const ChunkId id{0x2002, 0};
    const auto data = pattern(4 * kBlock, 3);
    ASSERT_TRUE(store->write(id, 0, data).ok());
    {
        std::fstream f(chunk_file(dir.path(), id), std::ios::in | std::ios::out | std::ios::binary);
        ASSERT_TRUE(f);
        f.seekp(static_cast<std::streamoff>(ChunkStore::kDataOffset + 2 * kBlock + 99));
        f.put('\x5a');
    }
    // From the page cache and cold alike, read from a mapping and with pread.
    for (const auto mode : {LocalReads::CachedReads::mapped, LocalReads::CachedReads::copied}) {
        SCOPED_TRACE(mode == LocalReads::CachedReads::mapped ? "mapped" : "copied");
        reader = std::make_unique<LocalReads>(secret, 1, LocalReads::kArenaBytes, mode);
        for (const bool cold : {false, true}) {
            if (cold) drop_cache(id);
            std::vector<uint8_t> got;
            Status s = read_locally(id, 0, 4 * kBlock, got);
            ASSERT_FALSE(s.ok());
            EXPECT_EQ(s.code(), Code::io) << s.to_string();
            EXPECT_NE(s.message().find("block 2"), std::string::npos) << s.to_string();
            // A range that avoids the bad block is fine.
            if (cold) drop_cache(id);
            EXPECT_TRUE(read_locally(id, 0, 2 * kBlock, got).ok());
            EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
        }
        EXPECT_EQ(reader->reads(), 2u);
        const bool cold_mapped = client::PageCacheFiller::huge_pages();
        EXPECT_EQ(reader->mapped_reads(), mode == LocalReads::CachedReads::mapped ? (cold_mapped ? 2u : 1u) : 0u);
    }
}

// Bytes where the daemon has no write recorded (a write that had not updated its checksums
// when the daemon answered, or garbage): not taken as the zeros of a hole.
TEST_F(LocalReadsTest, DataWhereTheDaemonSaidHoleIsRefused) {
    const ChunkId id{0x2003, 1};
    const auto data = pattern(3 * kBlock, 5);
    ASSERT_TRUE(store->write(id, 2 * kBlock, std::span(data).subspan(2 * kBlock)).ok());
    auto v = store->describe(id, 0, 3 * kBlock);
    ASSERT_TRUE(v.ok());
    ASSERT_EQ(v->holes, (std::vector<uint32_t>{0, 1}));
    std::vector<uint8_t> got;
    ASSERT_TRUE(read_locally(id, 0, 3 * kBlock, got).ok());
    EXPECT_TRUE(std::all_of(got.begin(), got.begin() + 2 * kBlock, [](uint8_t c) { return c == 0; }));
    {
        std::fstream f(chunk_file(dir.path(), id), std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(ChunkStore::kDataOffset + kBlock + 1));
        f.put('\x01');
    }
    Status s = read_locally(id, 0, 3 * kBlock, got);
    EXPECT_EQ(s.code(), Code::io) << s.to_string();
    drop_cache(id);
    s = read_locally(id, 0, 3 * kBlock, got);
    EXPECT_EQ(s.code(), Code::io) << "cold: " << s.to_string();
}

// A chunk file replaced since the daemon looked at it (it describes its open copy, then opens
// the name for the reader): a descriptor of another file than the one described is never read.
TEST_F(LocalReadsTest, ChunkFileReplacedSinceTheDescriptionIsRefused) {
    const ChunkId id{0x2004, 2};
    const auto data = pattern(2 * kBlock, 9);
    ASSERT_TRUE(store->write(id, 0, data).ok()); // the store keeps the file open
    const std::string p = chunk_file(dir.path(), id);
    std::filesystem::copy_file(p, p + ".new");
    std::filesystem::rename(p + ".new", p);
    std::vector<uint8_t> got;
    Status s = read_locally(id, 0, 2 * kBlock, got);
    EXPECT_EQ(s.code(), Code::again) << s.to_string();
    EXPECT_EQ(reader->reads(), 0u);
}

// A replicated chunk is described only if the daemon's gate (CRAQ: table, chain, no write in
// flight) lets it, with the reader's chain and table; else EAGAIN, and the connection goes on.
// A daemon without a gate reads replicated chunks over the transport only.
TEST_F(LocalReadsTest, ReplicatedChunksAreReadLocallyOnlyWhenTheDaemonsGateAllows) {
    const ChunkId id{0x2005, 1};
    const auto data = pattern(3 * kBlock, 1);
    ASSERT_TRUE(store->write(id, 0, data).ok());
    ASSERT_TRUE(reader->available(0));
    const std::vector<uint32_t> chain{2, 0};
    const LocalReads::Range r{0, id.ino, id.index, 0, 3 * kBlock, chain, 7};
    std::vector<uint8_t> got(3 * kBlock);
    bool cold = false;
    auto n = reader->read_range(r, got, &cold);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    EXPECT_EQ(got, data);
    EXPECT_EQ(gate_calls, 1);
    EXPECT_EQ(gate_chain, chain);
    EXPECT_EQ(gate_version, 7u);
    gate_answer = Status(Code::again, "dirty");
    n = reader->read_range(r, got, &cold);
    ASSERT_FALSE(n.ok());
    EXPECT_EQ(n.status().code(), Code::again) << n.status().to_string();
    EXPECT_EQ(gate_calls, 2);
    EXPECT_EQ(server->reads(), 1u) << "the daemon counts the reads it described, not the refused one";
    // Unreplicated: no gate asked (such a chunk may always be read here), even while it
    // would refuse. The connection is still good.
    n = reader->read_range({0, id.ino, id.index, 0, 3 * kBlock}, got, &cold);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    EXPECT_EQ(gate_calls, 2);
    EXPECT_EQ(reader->reads(), 2u);
    EXPECT_EQ(server->reads(), 2u);
    gate_answer = Status::OK();
    // A chain longer than any chain is refused before anything is sent.
    const std::vector<uint32_t> four{0, 1, 2, 3};
    n = reader->read_range({0, id.ino, id.index, 0, kBlock, four, 7}, got, &cold);
    EXPECT_EQ(n.status().code(), Code::invalid) << n.status().to_string();

    server.reset();
    auto plain = LocalReadServer::start(*store, secret, 0);
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    LocalReads fresh(secret, 1);
    ASSERT_TRUE(fresh.available(0));
    n = fresh.read_range(r, got, &cold);
    EXPECT_EQ(n.status().code(), Code::again) << n.status().to_string();
    n = fresh.read_range({0, id.ino, id.index, 0, 3 * kBlock}, got, &cold);
    EXPECT_TRUE(n.ok()) << n.status().to_string();
}

// A describe that waits (for the disk, in jobfsd: the checksums of a chunk not read lately;
// here the gate of a replicated chunk, held for up to 10 s) holds up no other reader of the
// node: another thread of the same client gets its answer meanwhile, over another connection
// the daemon serves on another thread. With one connection per daemon, or one thread in the
// daemon, the second read waited for the first.
TEST_F(LocalReadsTest, ADescribeThatWaitsHoldsUpNoOtherReader) {
    std::mutex mu;
    std::condition_variable cv;
    bool entered = false, released = false, waited_out = false;
    server.reset();
    auto srv = LocalReadServer::start(*store, secret, 0, [&](ChunkId, std::span<const uint32_t>, uint64_t) {
        std::unique_lock lock(mu);
        entered = true;
        cv.notify_all();
        if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return released; })) waited_out = true;
        return Status::OK();
    });
    ASSERT_TRUE(srv.ok()) << srv.status().to_string();
    server = std::move(*srv);
    const auto a = pattern(kBlock, 31), b = pattern(2 * kBlock, 32);
    ASSERT_TRUE(store->write({0x2010, 1}, 0, a).ok());
    ASSERT_TRUE(store->write({0x2010, 2}, 0, b).ok());
    ASSERT_TRUE(reader->available(0));
    const std::vector<uint32_t> chain{0, 1};
    std::vector<uint8_t> held(kBlock);
    Result<uint64_t> first = Status(Code::internal, "not read");
    std::thread waiting([&] {
        bool cold = false;
        first = reader->read_range({0, 0x2010, 1, 0, kBlock, chain, 3}, held, &cold);
    });
    {
        std::unique_lock lock(mu);
        ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return entered; }));
    }
    std::vector<uint8_t> got;
    const Status second = read_locally({0x2010, 2}, 0, 2 * kBlock, got);
    bool first_still_waiting = false;
    {
        std::lock_guard lock(mu);
        first_still_waiting = !released && !waited_out;
        released = true;
    }
    cv.notify_all();
    waiting.join();
    ASSERT_TRUE(second.ok()) << second.to_string();
    EXPECT_EQ(got, b);
    EXPECT_TRUE(first_still_waiting) << "the second read was answered only after the first";
    EXPECT_EQ(server->connections(), 2u); // the second made one while the first held its own
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    EXPECT_EQ(*first, kBlock);
    EXPECT_EQ(held, a);
}

// A client that reads with one thread at a time keeps one connection to the daemon: others
// are made only while it is busy (a node's MPI ranks would otherwise hold four each).
TEST_F(LocalReadsTest, OneReaderAtATimeKeepsOneConnection) {
    const auto data = pattern(2 * kBlock, 33);
    ASSERT_TRUE(store->write({0x2011, 0}, 0, data).ok());
    std::vector<uint8_t> got;
    for (int i = 0; i < 20; ++i) {
        ASSERT_TRUE(read_locally({0x2011, 0}, 0, 2 * kBlock, got).ok());
        EXPECT_EQ(got, data);
        (void)reader->prefetch(0, 0x2011, 0, 0, kBlock); // over a connection too
    }
    // The acceptor counts a connection as it takes it; the reads above were answered, so all
    // their connections were taken.
    EXPECT_EQ(server->connections(), 1u);
}

// A read of several ranges asks every daemon before it waits for the first answer: daemon 0
// answers only once daemon 1 was asked (its gate holds the answer back until then, for at most
// 10 s), which a reader that waits for each answer before the next question never gets to.
// Each range still gets its own answer: the bytes, a refusal, a chunk that is not there.
TEST_F(LocalReadsTest, SeveralRangesAskEveryDaemonBeforeTheFirstAnswer) {
    TempDir dir1;
    auto st1 = ChunkStore::open(dir1.path(), kChunk);
    ASSERT_TRUE(st1.ok()) << st1.status().to_string();
    std::mutex mu;
    std::condition_variable cv;
    bool asked1 = false, waited_out = false;
    server.reset();
    auto srv0 = LocalReadServer::start(*store, secret, 0, [&](ChunkId, std::span<const uint32_t>, uint64_t) {
        std::unique_lock lock(mu);
        if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return asked1; })) waited_out = true;
        return Status::OK();
    });
    ASSERT_TRUE(srv0.ok()) << srv0.status().to_string();
    auto srv1 = LocalReadServer::start(**st1, secret, 1, [&](ChunkId id, std::span<const uint32_t>, uint64_t) {
        {
            std::lock_guard lock(mu);
            asked1 = true;
        }
        cv.notify_all();
        return id.index == 9 ? Status(Code::again, "dirty") : Status::OK();
    });
    ASSERT_TRUE(srv1.ok()) << srv1.status().to_string();
    const auto a = pattern(2 * kBlock, 21), b = pattern(3 * kBlock, 22);
    ASSERT_TRUE(store->write({0x2009, 0}, 0, a).ok());
    ASSERT_TRUE((*st1)->write({0x2009, 1}, 0, b).ok());
    ASSERT_TRUE((*st1)->write({0x2009, 9}, 0, b).ok());
    LocalReads two(secret, 2);
    ASSERT_TRUE(two.available(0));
    ASSERT_TRUE(two.available(1));
    const std::vector<uint32_t> chain{0, 1};
    const std::vector<LocalReads::Range> ranges{{0, 0x2009, 0, 0, 2 * kBlock, chain, 3},
                                                {1, 0x2009, 1, kBlock, 2 * kBlock, chain, 3},
                                                {1, 0x2009, 9, 0, kBlock, chain, 3},
                                                {0, 0x2009, 5, 0, kBlock, chain, 3}};
    auto opened = two.open(ranges);
    ASSERT_EQ(opened.size(), ranges.size());
    EXPECT_FALSE(waited_out) << "daemon 1 was asked only after daemon 0 had answered";
    ASSERT_TRUE(opened[0].ok()) << opened[0].status().to_string();
    ASSERT_TRUE(opened[1].ok()) << opened[1].status().to_string();
    std::vector<uint8_t> got0(opened[0]->length()), got1(opened[1]->length());
    ASSERT_TRUE(two.read(*opened[0], got0).ok());
    ASSERT_TRUE(two.read(*opened[1], got1).ok());
    EXPECT_EQ(got0, a);
    EXPECT_TRUE(std::equal(got1.begin(), got1.end(), b.begin() + kBlock)) << "the second range's bytes";
    EXPECT_EQ(opened[2].status().code(), Code::again) << opened[2].status().to_string();
    ASSERT_TRUE(opened[3].ok()) << opened[3].status().to_string();
    EXPECT_EQ(opened[3]->length(), 0u) << "no such chunk: nothing held";
}

// One question to the daemon's socket (LocalOp::describe) and the reader has all it needs: the
// same bytes as the daemon's own read, nothing where it holds nothing (no chunk, or past its
// end), whether it was in the page cache, and a corrupt block refused.
TEST_F(LocalReadsTest, RangesAreReadWithOneQuestionToTheSocket) {
    const ChunkId id{0x2006, 3};
    const uint64_t length = 5 * kBlock + 999;
    const auto data = pattern(length, 11);
    ASSERT_TRUE(store->write(id, 0, std::span(data).first(kBlock)).ok());
    ASSERT_TRUE(store->write(id, 3 * kBlock, std::span(data).subspan(3 * kBlock)).ok());
    ASSERT_TRUE(reader->available(0));
    for (auto [off, size] : std::vector<std::pair<uint64_t, uint64_t>>{
             {0, kChunk}, {7, 2 * kBlock}, {kBlock, 2 * kBlock}, {length - 10, 100}, {length, kBlock}}) {
        std::vector<uint8_t> got(size, 0xee), want(size, 0);
        bool cold = false;
        auto n = reader->read_range({0, id.ino, id.index, off, size}, got, &cold);
        ASSERT_TRUE(n.ok()) << off << "+" << size << ": " << n.status().to_string();
        auto m = store->read(id, off, want);
        ASSERT_TRUE(m.ok());
        ASSERT_EQ(*n, *m) << off << "+" << size;
        EXPECT_TRUE(std::equal(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(*n), want.begin())) << off;
    }
    std::vector<uint8_t> got(kBlock);
    bool cold = false;
    auto none = reader->read_range({0, 0x2007, 0, 0, kBlock}, got, &cold);
    ASSERT_TRUE(none.ok()) << none.status().to_string();
    EXPECT_EQ(*none, 0u);
    // Whether the bytes were in the page cache is told (read-ahead goes by it).
    std::vector<uint8_t> all(kChunk);
    ASSERT_TRUE(reader->read_range({0, id.ino, id.index, 0, kChunk}, all, &cold).ok());
    // (Without cachestat(2), Linux before 6.5, nothing is known to be cached.)
    struct {
        uint64_t off, len;
    } range{0, 0};
    uint64_t stat[5];
    const int probe = ::open(chunk_file(dir.path(), id).c_str(), O_RDONLY | O_CLOEXEC);
    const bool can_tell = ::syscall(451, probe, &range, stat, 0) == 0; // cachestat
    ::close(probe);
    if (can_tell) {
        EXPECT_FALSE(cold);
    }
    {
        int fd = ::open(chunk_file(dir.path(), id).c_str(), O_RDONLY);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::fdatasync(fd), 0);
        ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
        ::close(fd);
    }
    ASSERT_TRUE(reader->read_range({0, id.ino, id.index, 0, kChunk}, all, &cold).ok());
    EXPECT_TRUE(cold);
    {
        std::fstream f(chunk_file(dir.path(), id), std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(ChunkStore::kDataOffset + 4 * kBlock + 3));
        f.put('\x77');
    }
    auto bad = reader->read_range({0, id.ino, id.index, 0, kChunk}, all, &cold);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), Code::io) << bad.status().to_string();
}

// The "not in the page cache" of an open (read-ahead goes by it) survives moving the file,
// by construction and by assignment.
TEST_F(LocalReadsTest, AnOpenedFileTellsItWasColdAfterBeingMoved) {
    const ChunkId id{0x2008, 0};
    const auto data = pattern(2 * kBlock, 13);
    ASSERT_TRUE(store->write(id, 0, data).ok());
    drop_cache(id);
    ASSERT_TRUE(reader->available(0));
    Result<LocalReads::Opened> slot = Status(Code::invalid, "not yet");
    slot = reader->open({0, id.ino, id.index, 0, 2 * kBlock});
    ASSERT_TRUE(slot.ok()) << slot.status().to_string();
    EXPECT_TRUE(slot->cold());
    LocalReads::Opened kept;
    kept = std::move(*slot);
    EXPECT_TRUE(kept.cold());
    EXPECT_EQ(kept.length(), 2 * kBlock);
    LocalReads::Opened moved(std::move(kept));
    std::vector<uint8_t> got(2 * kBlock);
    ASSERT_TRUE(reader->read(moved, got).ok());
    EXPECT_EQ(got, data);
}

// A direct reader (ColdReads::direct, as jobfs-fuse is) reads cold ranges with O_DIRECT into
// an aligned buffer: byte-exact with holes and a last block that ends off the file system's
// alignment (its last bytes read buffered), the page cache left as it was (a second read is
// cold again), corrupt blocks refused as ever, and an unaligned buffer read buffered.
TEST_F(LocalReadsTest, ColdRangesOfADirectReaderAreReadPastThePageCache) {
    const ChunkId id{0x2009, 2};
    const uint64_t length = 9 * kBlock + 1234; // block 9 is short, and ends off any alignment
    const auto data = pattern(length, 21);
    // Blocks 3 and 4 are never written: a hole.
    ASSERT_TRUE(store->write(id, 0, std::span(data).first(3 * kBlock)).ok());
    ASSERT_TRUE(store->write(id, 5 * kBlock, std::span(data).subspan(5 * kBlock)).ok());
    reader = std::make_unique<LocalReads>(secret, 1, LocalReads::kArenaBytes, LocalReads::CachedReads::copied,
                                          LocalReads::ColdReads::direct);
    ASSERT_TRUE(reader->available(0));
    struct Free {
        void operator()(uint8_t* p) const { std::free(p); }
    };
    const std::unique_ptr<uint8_t[], Free> buf(static_cast<uint8_t*>(std::aligned_alloc(4096, kChunk + 4096)));
    ASSERT_TRUE(buf);
    struct Case {
        uint64_t offset, size;
        bool direct; // some whole block starts at an aligned place in the buffer
    };
    const std::vector<Case> cases = {
        {0, length, true},           {0, kBlock, true},         {3 * kBlock, 2 * kBlock, true}, {4 * kBlock, 2 * kBlock, true},
        {1, kBlock, false},          {kBlock - 1, 2, false},    {100, 3 * kBlock, false},       {length - 1, 1, false},
        {8 * kBlock, kChunk, true},
    };
    uint64_t direct_before = reader->direct_reads();
    for (const auto& c : cases) {
        for (const uint64_t shift : {uint64_t{0}, uint64_t{1}}) { // the buffer aligned, and not
            SCOPED_TRACE(std::to_string(c.offset) + "+" + std::to_string(c.size) + (shift ? ", buffer unaligned" : ""));
            drop_cache(id);
            std::span<uint8_t> out(buf.get() + shift, c.size);
            std::fill(out.begin(), out.end(), 0xee);
            bool cold = false;
            auto n = reader->read_range({0, id.ino, id.index, c.offset, c.size}, out, &cold);
            ASSERT_TRUE(n.ok()) << n.status().to_string();
            EXPECT_TRUE(cold);
            const bool direct = c.direct && shift == 0;
            EXPECT_EQ(reader->direct_reads() - direct_before, direct ? 1u : 0u);
            if (direct && c.offset + c.size <= 9 * kBlock) {
                // Nothing of it went into the page cache: read again, it is still cold.
                std::vector<uint8_t> again(c.size);
                bool still_cold = false;
                auto n2 = reader->read_range({0, id.ino, id.index, c.offset, c.size}, again, &still_cold);
                ASSERT_TRUE(n2.ok()) << n2.status().to_string();
                EXPECT_TRUE(still_cold) << "a direct read filled the page cache";
            }
            direct_before = reader->direct_reads();
            std::vector<uint8_t> want(c.size); // (the store's read fills the page cache)
            auto m = store->read(id, c.offset, want);
            ASSERT_TRUE(m.ok());
            ASSERT_EQ(*n, *m);
            EXPECT_TRUE(std::equal(want.begin(), want.begin() + static_cast<long>(*m), out.begin()));
        }
    }
    // A corrupt block read direct is refused as one read buffered is.
    {
        std::fstream f(chunk_file(dir.path(), id), std::ios::in | std::ios::out | std::ios::binary);
        ASSERT_TRUE(f);
        f.seekp(static_cast<std::streamoff>(ChunkStore::kDataOffset + 6 * kBlock + 99));
        f.put('\x5a');
    }
    drop_cache(id);
    bool cold = false;
    auto bad = reader->read_range({0, id.ino, id.index, 0, length}, std::span(buf.get(), length), &cold);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), Code::io) << bad.status().to_string();
    EXPECT_NE(bad.status().message().find("block 6"), std::string::npos) << bad.status().to_string();
}

// The write arena (local writes): regions are page-aligned and disjoint, freed ones are
// reused, retired ones (a call without an answer: the daemon may still read them) never.
TEST(WriteArena, DisjointAlignedRegionsAndRetiredOnesAreNeverReused) {
    constexpr uint64_t kUnit = client::WriteArena::kUnit;
    auto a = client::WriteArena::create(8 * kUnit);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    auto& arena = **a;
    EXPECT_EQ(arena.size(), 8 * kUnit);
    auto r1 = arena.allocate(kUnit + 1); // two units
    auto r2 = arena.allocate(3 * kUnit);
    auto r3 = arena.allocate(3 * kUnit);
    ASSERT_TRUE(r1 && r2 && r3);
    EXPECT_EQ(r1->length, 2 * kUnit);
    EXPECT_FALSE(arena.allocate(1)) << "full";
    for (const auto& r : {*r1, *r2, *r3}) EXPECT_EQ(r.offset % 4096, 0u);
    EXPECT_LE(r1->offset + r1->length, r2->offset);
    EXPECT_LE(r2->offset + r2->length, r3->offset);
    std::memset(r2->data, 0x5a, r2->length);
    arena.release(*r2);
    auto r4 = arena.allocate(2 * kUnit);
    ASSERT_TRUE(r4);
    EXPECT_EQ(r4->offset, r2->offset) << "a freed region is used again";
    arena.retire(*r1);
    arena.release(*r3);
    arena.release(*r4);
    EXPECT_EQ(arena.retired(), 2 * kUnit);
    // 6 units free, but none of them are r1's.
    for (int k = 0; k < 6; ++k) {
        auto r = arena.allocate(kUnit);
        ASSERT_TRUE(r) << k;
        EXPECT_GE(r->offset, r1->offset + r1->length);
    }
    EXPECT_FALSE(arena.allocate(1));
    EXPECT_FALSE(arena.allocate(9 * kUnit)) << "larger than the arena";
}

// A client hands its write arena to the daemon over the socket: the daemon maps it (what the
// client writes there, the daemon sees), checks ranges against it, refuses a memfd whose size
// is not sealed, and unmaps it when the connection closes.
TEST_F(LocalReadsTest, WriteArenaIsMappedByTheDaemonUntilItsConnectionCloses) {
    ASSERT_NE(reader->arena(), nullptr);
    const uint64_t token = reader->arena_token(0);
    ASSERT_NE(token, 0u);
    EXPECT_EQ(reader->arena_token(0), token) << "handed over once per connection";
    EXPECT_EQ(arenas.mapped(), 1u);
    auto region = reader->arena()->allocate(100000);
    ASSERT_TRUE(region);
    const auto data = pattern(100000, 17);
    std::memcpy(region->data, data.data(), data.size());
    auto seen = arenas.range(token, region->offset, data.size());
    ASSERT_TRUE(seen.ok()) << seen.status().to_string();
    EXPECT_TRUE(std::equal(data.begin(), data.end(), seen->second.begin()));
    EXPECT_EQ(arenas.range(token, reader->arena()->size() - 10, 11).status().code(), Code::invalid);
    EXPECT_EQ(arenas.range(token + 1, 0, 1).status().code(), Code::not_found);

    // An unsealed memfd: refused, and the connection goes on.
    const int loose = ::memfd_create("loose", MFD_CLOEXEC);
    ASSERT_GE(loose, 0);
    ASSERT_EQ(::ftruncate(loose, 1 << 20), 0);
    auto c = transport::local_read_connect(transport::local_read_socket_name(secret, 0), secret, std::chrono::milliseconds(2000));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    transport::LocalRequest req;
    req.op = static_cast<uint32_t>(transport::LocalOp::map_arena);
    auto r = transport::local_read_call(*c, req, loose);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->header.error, EINVAL);
    EXPECT_EQ(r->header.token, 0u);
    r = transport::local_read_call(*c, req); // no memfd at all
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->header.error, EINVAL);
    ::close(loose);
    ::close(*c);
    EXPECT_EQ(arenas.mapped(), 1u);

    // The reader goes away: its arena is unmapped (a write still using it keeps it alive).
    auto kept = arenas.range(token, 0, 1);
    ASSERT_TRUE(kept.ok());
    reader.reset();
    for (int i = 0; i < 200 && arenas.mapped() != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(arenas.mapped(), 0u);
    EXPECT_EQ(arenas.range(token, 0, 1).status().code(), Code::not_found);
    EXPECT_TRUE(std::equal(data.begin(), data.end(), kept->first->base + region->offset)) << "still mapped for its user";
}

TEST_F(LocalReadsTest, WrongSecretOrNoDaemonMeansNoLocalReads) {
    // A reader with another secret looks for another name: nobody there.
    LocalReads stranger(secret + "x", 1);
    EXPECT_FALSE(stranger.available(0));
    // Rank 1 has no server; a rank past the job's daemons neither.
    LocalReads two(secret, 2);
    EXPECT_TRUE(two.available(0));
    EXPECT_FALSE(two.available(1));
    EXPECT_FALSE(two.available(7));
    // The right name with the wrong secret in the hello: refused by the daemon.
    auto c = transport::local_read_connect(transport::local_read_socket_name(secret, 0), "not the secret",
                                           std::chrono::milliseconds(2000));
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), Code::refused) << c.status().to_string();
    // The daemon went away: no reads, and no hang.
    server.reset();
    LocalReads late(secret, 1);
    EXPECT_FALSE(late.available(0));
}

// ---- kept chunks (client/kept_chunks.h) ----------------------------------------------------

// Reads range [offset, offset + size) of chunk id with read_kept: whether it did, and the
// bytes the chunk holds there in out.
bool read_kept(LocalReads& reader, ChunkId id, uint64_t offset, uint64_t size, std::vector<uint8_t>& out,
               std::span<const uint32_t> chain = {}) {
    out.assign(size, 0xee);
    LocalReads::KeptRead k{{0, id.ino, id.index, offset, size, chain, 0, kChunk}, out};
    reader.read_kept(std::span(&k, 1));
    if (!k.done) return false;
    out.resize(k.length);
    return true;
}

std::vector<uint8_t> slice(const std::vector<uint8_t>& v, uint64_t offset, uint64_t size) {
    return std::vector<uint8_t>(v.begin() + static_cast<std::ptrdiff_t>(offset),
                                v.begin() + static_cast<std::ptrdiff_t>(std::min<uint64_t>(v.size(), offset + size)));
}

// A chunk read once is read again with no question to the daemon (its describes stay as they
// were), until a write, a truncate or a removal of the file's chunks moves its stamp: the next
// read then describes it again and returns the chunk as it is now, never the bytes kept from
// before. Described by the daemon (a reader that may not open the chunk files), and by the
// reader from the file itself, which asks the daemon nothing at all.
TEST_F(LocalReadsTest, AKeptChunkIsReadWithoutTheDaemonUntilItChanges) {
    for (const auto mode : {LocalReads::KeepChunks::asked, LocalReads::KeepChunks::opened}) {
        SCOPED_TRACE(mode == LocalReads::KeepChunks::asked ? "described by the daemon" : "described from the file");
        reader = std::make_unique<LocalReads>(secret, 1, LocalReads::kArenaBytes, LocalReads::CachedReads::mapped,
                                              LocalReads::ColdReads::buffered, mode);
        const uint64_t asked = mode == LocalReads::KeepChunks::asked ? 1 : 0;
        const uint64_t describes = server->reads();
        const ChunkId id{mode == LocalReads::KeepChunks::asked ? 0x3001u : 0x3101u, 2};
        auto data = pattern(6 * kBlock + 500, 21);
        ASSERT_TRUE(store->write(id, 0, data).ok());
        std::vector<uint8_t> got;
        ASSERT_TRUE(read_kept(*reader, id, kBlock, kBlock, got));
        EXPECT_EQ(got, slice(data, kBlock, kBlock));
        EXPECT_EQ(server->reads() - describes, asked) << "the chunk described once, whole";
        EXPECT_EQ(reader->kept_chunks(), 1u);
        for (auto [off, size] : std::vector<std::pair<uint64_t, uint64_t>>{{0, 1}, {kBlock - 3, 9}, {5 * kBlock, kChunk}, {0, kChunk}}) {
            ASSERT_TRUE(read_kept(*reader, id, off, size, got)) << off << "+" << size;
            EXPECT_EQ(got, slice(data, off, size)) << off << "+" << size;
        }
        EXPECT_EQ(server->reads() - describes, asked) << "kept reads ask the daemon nothing";
        EXPECT_EQ(reader->kept_reads(), 5u);
        EXPECT_EQ(reader->kept_chunks(), 1u);

        // A write of 100 bytes inside a block: read again, the daemon describes the chunk anew.
        const auto patch = pattern(100, 22);
        ASSERT_TRUE(store->write(id, 2 * kBlock + 7, patch).ok());
        std::copy(patch.begin(), patch.end(), data.begin() + 2 * kBlock + 7);
        ASSERT_TRUE(read_kept(*reader, id, 2 * kBlock, kBlock, got));
        EXPECT_EQ(got, slice(data, 2 * kBlock, kBlock)) << "the bytes kept from before the write were read";
        EXPECT_EQ(server->reads() - describes, 2 * asked);
        // A write of another file (another stamp) leaves this one kept.
        ASSERT_TRUE(store->write({0x3002, 0}, 0, pattern(10, 1)).ok());
        ASSERT_TRUE(read_kept(*reader, id, 0, 10, got));
        EXPECT_EQ(server->reads() - describes, 2 * asked);

        // Cut short: the new length, from the file that replaced the chunk's.
        ASSERT_TRUE(store->truncate(id, 2 * kBlock + 5).ok());
        data.resize(2 * kBlock + 5);
        ASSERT_TRUE(read_kept(*reader, id, 0, 4 * kBlock, got));
        EXPECT_EQ(got, data);
        EXPECT_EQ(server->reads() - describes, 3 * asked);

        // Removed: nothing kept is read, and the chunk is dropped.
        ASSERT_TRUE(store->remove_file(id.ino).ok());
        EXPECT_FALSE(read_kept(*reader, id, 0, kBlock, got));
        EXPECT_EQ(reader->kept_chunks(), 0u);
        std::vector<uint8_t> none;
        ASSERT_TRUE(read_locally(id, 0, kBlock, none).ok());
        EXPECT_TRUE(none.empty()) << "a removed chunk reads as nothing";
    }
}

// Described from its file, a chunk is taken only while no change of its file's chunks is under
// way (the stamp slot's busy count): the daemon describes it then. Holes read as zeros, and
// data where the file's entries say hole is refused, as when the daemon describes it.
TEST_F(LocalReadsTest, AChunkIsDescribedFromItsFileOnlyWhenNoChangeIsUnderWay) {
    const ChunkId id{0x3201, 0};
    const auto data = pattern(4 * kBlock, 28);
    ASSERT_TRUE(store->write(id, 2 * kBlock, std::span(data).subspan(2 * kBlock)).ok()); // blocks 0, 1: a hole
    std::vector<uint8_t> got;
    ASSERT_TRUE(read_locally(id, 0, 4 * kBlock, got).ok()); // the hole's pages cached (zeros), as a read leaves them
    const uint64_t describes = server->reads();
    {
        const server::ChunkStamps::Change change(store->stamps(), id.ino);
        ASSERT_TRUE(read_kept(*reader, id, 0, 4 * kBlock, got));
        EXPECT_EQ(server->reads() - describes, 1u) << "described from the file during a change";
    }
    ASSERT_TRUE(read_kept(*reader, id, 0, 4 * kBlock, got)); // the change's end moved the stamp
    EXPECT_EQ(server->reads() - describes, 1u) << "not described from the file once quiet";
    EXPECT_TRUE(std::all_of(got.begin(), got.begin() + 2 * kBlock, [](uint8_t c) { return c == 0; }));
    EXPECT_TRUE(std::equal(got.begin() + 2 * kBlock, got.end(), data.begin() + 2 * kBlock));
    {
        std::fstream f(chunk_file(dir.path(), id), std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(ChunkStore::kDataOffset + kBlock + 1));
        f.put('\x01');
    }
    EXPECT_FALSE(read_kept(*reader, id, 0, 4 * kBlock, got)) << "data where a hole was taken for its zeros";
}

// A kept chunk is not a way around the checksums: a block that went bad in the file (no change
// the daemon made, so no stamp moved) fails the kept read, which drops the chunk; the ordinary
// read then says which block, as before.
TEST_F(LocalReadsTest, AKeptChunkWithACorruptBlockIsDroppedAndNotRead) {
    const ChunkId id{0x3003, 0};
    const auto data = pattern(4 * kBlock, 23);
    ASSERT_TRUE(store->write(id, 0, data).ok());
    std::vector<uint8_t> got;
    ASSERT_TRUE(read_kept(*reader, id, 0, 4 * kBlock, got));
    {
        std::fstream f(chunk_file(dir.path(), id), std::ios::in | std::ios::out | std::ios::binary);
        ASSERT_TRUE(f);
        f.seekp(static_cast<std::streamoff>(ChunkStore::kDataOffset + 3 * kBlock + 5));
        f.put(static_cast<char>(data[3 * kBlock + 5] ^ 0x40));
    }
    EXPECT_TRUE(read_kept(*reader, id, 0, kBlock, got)) << "a good block of it still reads";
    EXPECT_FALSE(read_kept(*reader, id, 3 * kBlock, 10, got));
    EXPECT_EQ(reader->kept_chunks(), 0u);
    const Status s = read_locally(id, 3 * kBlock, 10, got);
    EXPECT_EQ(s.code(), Code::io) << s.to_string();
}

// Each kept chunk holds its file open: a process with a low limit on descriptors keeps no more
// than a quarter of it, the least lately read going first.
TEST_F(LocalReadsTest, KeptChunksTakeNoMoreThanAQuarterOfTheDescriptorLimit) {
    struct rlimit was {};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &was), 0);
    struct rlimit low = was;
    low.rlim_cur = 100;
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
    auto limited = std::make_unique<LocalReads>(secret, 1);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &was), 0);
    const auto data = pattern(kBlock, 30);
    std::vector<uint8_t> got;
    for (uint64_t i = 0; i < 40; ++i) {
        const ChunkId id{0x3400 + i, 0};
        ASSERT_TRUE(store->write(id, 0, data).ok());
        ASSERT_TRUE(read_kept(*limited, id, 0, kBlock, got)) << i;
        EXPECT_EQ(got, data);
        ASSERT_TRUE(read_kept(*reader, id, 0, kBlock, got)) << i;
    }
    EXPECT_EQ(limited->kept_chunks(), 25u);
    // The reader made under this process's own limit keeps all 40 (where that limit allows).
    const uint64_t own = was.rlim_cur == RLIM_INFINITY ? 256 : std::clamp<uint64_t>(was.rlim_cur / 4, 16, 256);
    EXPECT_EQ(reader->kept_chunks(), std::min<uint64_t>(40, own));
}

// The size of this process's descriptor table (/proc/self/status FDSize).
size_t descriptor_table_size() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("FDSize:", 0) == 0) return std::stoul(line.substr(7));
    return 0;
}

// Room for every chunk a reader may keep is made in the descriptor table when the reader is
// made: keeping them never grows the table, which in a process with threads waits for an RCU
// grace period (a read of 1 MiB that took 13-19 ms instead of 0.1, at the 256th descriptor).
// In a child process, whose table holds only what it has open (this one's has grown).
TEST_F(LocalReadsTest, KeepingChunksNeverGrowsTheDescriptorTable) {
    const auto data = pattern(kBlock, 31);
    constexpr uint64_t kChunks = 300; // more than any reader keeps
    for (uint64_t i = 0; i < kChunks; ++i) ASSERT_TRUE(store->write(ChunkId{0x3500 + i, 0}, 0, data).ok());
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        int failed = 0;
        const size_t before_reader = descriptor_table_size();
        {
            LocalReads fresh(secret, 1);
            const size_t made = descriptor_table_size();
            std::vector<uint8_t> got;
            for (uint64_t i = 0; i < kChunks; ++i)
                if (!read_kept(fresh, ChunkId{0x3500 + i, 0}, 0, kBlock, got) || got != data) {
                    std::fprintf(stderr, "chunk %llu: not read, or not its bytes\n", static_cast<unsigned long long>(i));
                    failed = 1;
                }
            const size_t kept = fresh.kept_chunks(), after = descriptor_table_size();
            std::fprintf(stderr, "descriptor table: %zu before the reader, %zu after it was made, %zu with %zu chunks kept\n",
                         before_reader, made, after, kept);
            struct rlimit rl {};
            ::getrlimit(RLIMIT_NOFILE, &rl);
            const uint64_t own = rl.rlim_cur == RLIM_INFINITY ? 256 : std::clamp<uint64_t>(rl.rlim_cur / 4, 16, 256);
            if (kept != std::min(kChunks, own) || after != made) failed = 1;
        }
        std::_Exit(failed);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the table grew while chunks were kept (the child's lines above)";
}

// Replicated chunks are never kept (whether this copy may be read depends on the chain table
// and CRAQ's state, which only the daemon knows), and neither is anything of a reader that was
// told not to keep chunks.
TEST_F(LocalReadsTest, ReplicatedChunksAndReadersThatKeepNothingAskEveryTime) {
    const ChunkId id{0x3004, 0};
    ASSERT_TRUE(store->write(id, 0, pattern(kBlock, 24)).ok());
    const std::vector<uint32_t> chain{0, 1};
    std::vector<uint8_t> got;
    EXPECT_FALSE(read_kept(*reader, id, 0, kBlock, got, chain));
    EXPECT_EQ(reader->kept_chunks(), 0u);
    LocalReads plain(secret, 1, LocalReads::kArenaBytes, LocalReads::CachedReads::mapped, LocalReads::ColdReads::buffered,
                     LocalReads::KeepChunks::off);
    EXPECT_FALSE(read_kept(plain, id, 0, kBlock, got));
    EXPECT_EQ(plain.kept_chunks(), 0u);
}

// Pages not in the page cache are not read through the kept mapping (a cold read goes the way
// of cold reads: read_range, which reads ahead in large pages).
TEST_F(LocalReadsTest, AKeptChunkIsNotReadWhereItsPagesAreNotInThePageCache) {
    const ChunkId id{0x3005, 0};
    const auto data = pattern(4 * kBlock, 25);
    // A block a write: each in a folio of its own in the page cache (a folio of which a page is
    // mapped stays whole, and one write of all four made one folio of them).
    for (uint64_t b = 0; b < 4; ++b) ASSERT_TRUE(store->write(id, b * kBlock, std::span(data).subspan(b * kBlock, kBlock)).ok());
    std::vector<uint8_t> got;
    ASSERT_TRUE(read_kept(*reader, id, 0, kBlock, got));
    reader->forget_kept(id.ino); // unmapped: its pages may go
    EXPECT_EQ(reader->kept_chunks(), 0u);
    ASSERT_TRUE(read_kept(*reader, id, 0, kBlock, got)); // kept again, block 0 mapped
    drop_cache(id);
    EXPECT_FALSE(read_kept(*reader, id, 2 * kBlock, kBlock, got)) << "a cold block was read through the mapping";
    EXPECT_EQ(reader->kept_chunks(), 1u) << "the chunk itself stays kept";
    bool cold = false;
    std::vector<uint8_t> back(kBlock);
    ASSERT_TRUE(reader->read_range({0, id.ino, id.index, 2 * kBlock, kBlock}, back, &cold).ok());
    EXPECT_TRUE(cold);
    EXPECT_EQ(back, slice(data, 2 * kBlock, kBlock));
    ASSERT_TRUE(read_kept(*reader, id, 2 * kBlock, kBlock, got)) << "in the page cache again";
    EXPECT_EQ(got, slice(data, 2 * kBlock, kBlock));
    // Not kept, and cold: not kept now either (it would wait for the disk to read the checksums
    // the daemon has in memory), and not described for nothing (read_range describes it).
    reader->forget_kept(id.ino);
    drop_cache(id);
    const uint64_t describes = server->reads();
    EXPECT_FALSE(read_kept(*reader, id, 0, kBlock, got));
    EXPECT_EQ(server->reads(), describes) << "a cold range was described before the read that describes it";
    const bool cachestat = ::syscall(451, -1, nullptr, nullptr, 0) != 0 && errno != ENOSYS; // Linux 6.5
    if (cachestat) {
        EXPECT_EQ(reader->kept_chunks(), 0u) << "a chunk was kept from a cold range";
    }
}

// A kept chunk holds its file: one removed by the daemon is let go within a few seconds though
// nobody reads it again (a deleted file's space comes back), and a daemon that went away leaves
// nothing kept that is read.
TEST_F(LocalReadsTest, KeptChunksGoWhenRemovedOrWhenTheDaemonGoes) {
    const ChunkId id{0x3006, 0}, other{0x3007, 0};
    ASSERT_TRUE(store->write(id, 0, pattern(kBlock, 26)).ok());
    ASSERT_TRUE(store->write(other, 0, pattern(kBlock, 27)).ok());
    std::vector<uint8_t> got;
    ASSERT_TRUE(read_kept(*reader, id, 0, kBlock, got));
    ASSERT_TRUE(read_kept(*reader, other, 0, kBlock, got));
    ASSERT_TRUE(store->remove_file(id.ino).ok());
    const auto deadline = std::chrono::steady_clock::now() + 4 * client::KeptChunks::kSweep;
    while (reader->kept_chunks() > 1 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(reader->kept_chunks(), 1u) << "the removed chunk is still held";
    server.reset();
    EXPECT_FALSE(read_kept(*reader, other, 0, kBlock, got)) << "read from a daemon that went away";
}

} // namespace
} // namespace jobfs
