// client_test: libjobfs against three real jobfsd processes on loopback (LocalCluster).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <csignal>
#include <filesystem>
#include <future>
#include <random>
#include <set>
#include <thread>

#include "client/client.h"
#include "client/inode_client.h"
#include "client/local_cluster.h"
#include "server/chunk_store.h"
#include "read_whole.h"
#include "test_util.h"

namespace jobfs::client {
namespace {

using test::pattern;

namespace fs = std::filesystem;

std::string jobfsd_path() { return jobfs::test::build_tree_program("server/jobfsd"); }

class ClientTest : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/jobfs-client-XXXXXX";
        dir = ::mkdtemp(tmpl);
        start();
    }
    void start(const std::vector<std::string>& more_args = {}) {
        LocalClusterOptions o;
        o.jobfsd = jobfsd_path();
        o.dir = dir;
        o.daemons = 3;
        o.extra_args = {"--chunk-size", "1M"};
        o.extra_args.insert(o.extra_args.end(), more_args.begin(), more_args.end());
        auto c = LocalCluster::start(o);
        ASSERT_TRUE(c.ok()) << c.status().to_string();
        cluster = std::move(*c);
        auto cl = Client::connect(cluster->info());
        ASSERT_TRUE(cl.ok()) << cl.status().to_string();
        client = std::move(*cl);
    }
    // jobfs-fuse's client, with 64 MiB of write-behind per file: every write of these tests
    // fits, so write returns at once.
    Result<std::unique_ptr<InodeClient>> write_behind_client() {
        InodeClientOptions o;
        o.write_behind_bytes = 64 << 20;
        return InodeClient::connect(cluster->info(), o);
    }
    void TearDown() override {
        client.reset();
        cluster.reset();
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
    Status write_file(const std::string& path, const std::vector<uint8_t>& data) {
        auto f = client->open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644, Layout{1 << 20, 0});
        if (!f.ok()) return f.status();
        Status s = client->pwrite(**f, 0, data);
        if (!s.ok()) return s;
        return client->close(**f);
    }
    Result<std::vector<uint8_t>> read_file(const std::string& path) { return read_file(*client, path); }
    static Result<std::vector<uint8_t>> read_file(Client& c, const std::string& path) { return test::read_whole(c, path); }

    std::string dir;
    std::unique_ptr<LocalCluster> cluster;
    std::unique_ptr<Client> client;
};

// Ports picked for daemons that bind them later: never the same one twice in a row of 1000
// picks. (Before, two of a test's three daemons were once given port 25195; among 1000 random
// picks of 12,000 ports a repeat is all but certain.)
TEST(PickFreePort, NeverHandsOutAPortItHandedOutLately) {
    std::set<uint16_t> seen;
    for (int i = 0; i < 1000; ++i) {
        auto p = pick_free_port();
        ASSERT_TRUE(p.ok()) << p.status().to_string();
        EXPECT_GE(*p, 20000);
        EXPECT_LT(*p, 32000);
        EXPECT_TRUE(seen.insert(*p).second) << "port " << *p << " handed out twice (pick " << i << ")";
    }
}

TEST_F(ClientTest, NamespaceOperationsAndTheirErrors) {
    ASSERT_TRUE(client->mkdir("/a").ok());
    ASSERT_TRUE(client->mkdir("/a/b").ok());
    ASSERT_TRUE(client->mkdir("/a/b/c").ok());
    ASSERT_TRUE(write_file("/a/b/c/file", pattern(1000, 1)).ok());
    EXPECT_EQ(client->stat("/a/b/c/file")->size, 1000u);
    EXPECT_EQ(client->mkdir("/a").status().code(), Code::exists);
    EXPECT_EQ(client->stat("/nope/x").status().code(), Code::not_found);
    EXPECT_EQ(client->mkdir("/a/b/c/file/sub").status().code(), Code::not_dir);
    EXPECT_EQ(client->open("/a/b", O_WRONLY).status().code(), Code::is_dir);
    EXPECT_EQ(client->rmdir("/a/b").code(), Code::not_empty);
    EXPECT_EQ(client->open("/a/b/c/file", O_WRONLY | O_CREAT | O_EXCL).status().code(), Code::exists);
    auto names = client->list("/a/b/c");
    ASSERT_TRUE(names.ok());
    ASSERT_EQ(names->size(), 1u);
    EXPECT_EQ((*names)[0].name, "file");
    ASSERT_TRUE(client->rename("/a/b/c/file", "/a/b/c/renamed").ok());
    EXPECT_EQ(client->stat("/a/b/c/file").status().code(), Code::not_found);
    EXPECT_EQ(*read_file("/a/b/c/renamed"), pattern(1000, 1));
    ASSERT_TRUE(client->symlink("/a/b/c", "/short").ok());
    EXPECT_EQ(client->stat("/short/renamed")->size, 1000u);
    ASSERT_TRUE(client->unlink("/a/b/c/renamed").ok());
    ASSERT_TRUE(client->rmdir("/a/b/c").ok());
    EXPECT_EQ(client->stat("/a/b/c").status().code(), Code::not_found);
}

TEST_F(ClientTest, EightWritersOneCheckpointByteExact) {
    constexpr size_t kBlock = 8 << 20, kWriters = 8;
    {
        auto f = client->open("/ckpt", O_WRONLY | O_CREAT, 0644, Layout{1 << 20, 0});
        ASSERT_TRUE(f.ok());
        ASSERT_TRUE(client->close(**f).ok());
    }
    std::vector<std::thread> ts;
    std::atomic<int> ok{0};
    for (size_t w = 0; w < kWriters; ++w) {
        ts.emplace_back([&, w] {
            // Each writer is its own client, as separate processes would be.
            auto c = Client::connect(cluster->info());
            if (!c.ok()) return;
            auto f = (*c)->open("/ckpt", O_WRONLY);
            if (!f.ok()) return;
            auto data = pattern(kBlock, w);
            if ((*c)->pwrite(**f, w * kBlock, data).ok() && (*c)->close(**f).ok()) ++ok;
        });
    }
    for (auto& t : ts) t.join();
    ASSERT_EQ(ok.load(), static_cast<int>(kWriters));
    auto st = client->stat("/ckpt");
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->size, kBlock * kWriters); // exact after every writer's close
    auto back = read_file("/ckpt");
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    ASSERT_EQ(back->size(), kBlock * kWriters);
    for (size_t w = 0; w < kWriters; ++w)
        ASSERT_TRUE(std::equal(back->begin() + w * kBlock, back->begin() + (w + 1) * kBlock, pattern(kBlock, w).begin()))
            << "block of writer " << w;
}

TEST_F(ClientTest, LengthIsSettledAtCloseAndFsync) {
    auto f = client->open("/lazy", O_RDWR | O_CREAT, 0644, Layout{1 << 20, 0});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(client->pwrite(**f, 0, pattern(3 << 20, 2)).ok());
    EXPECT_EQ(client->stat("/lazy")->size, 0u); // not settled yet: no metadata call per write
    ASSERT_TRUE(client->fsync(**f).ok());
    EXPECT_EQ(client->stat("/lazy")->size, 3u << 20);
    ASSERT_TRUE(client->pwrite(**f, 5 << 20, pattern(100, 3)).ok());
    ASSERT_TRUE(client->close(**f).ok());
    EXPECT_EQ(client->stat("/lazy")->size, (5u << 20) + 100);
}

// fsetxattr names the file by its open handle: the attribute is the inode's, under whatever
// name the file has later (jobfs stage-in sets the ETag on a temporary name, then renames).
TEST_F(ClientTest, FsetxattrSetsTheOpenFilesAttribute) {
    auto f = client->open("/tmp-name", O_WRONLY | O_CREAT | O_EXCL, 0644);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    ASSERT_TRUE(client->pwrite(**f, 0, pattern(1000, 4)).ok());
    ASSERT_TRUE(client->fsetxattr(**f, "user.jobfs.stage.etag", "abc123").ok());
    EXPECT_EQ(client->fsetxattr(**f, "user.jobfs.stage.etag", "x", 1 /* XATTR_CREATE */).code(), Code::exists);
    ASSERT_TRUE(client->close(**f).ok());
    ASSERT_TRUE(client->rename("/tmp-name", "/final").ok());
    auto v = client->getxattr("/final", "user.jobfs.stage.etag");
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    EXPECT_EQ(*v, "abc123");
    EXPECT_EQ(client->stat("/final")->size, 1000u);
}

// Client::create sets the size and attributes with the file (jobfs stage-in's temporary
// files): writes within that size settle nothing, and after the handle's own ftruncate they
// settle again.
TEST_F(ClientTest, CreateWithSizeAndXattrsNeedsNoSettle) {
    auto f = client->create("/made", O_WRONLY | O_CREAT | O_EXCL, 0644, NewFile{3000, {{"user.etag", "e1"}}});
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    EXPECT_EQ(client->stat("/made")->size, 3000u);  // before any write: a hole
    EXPECT_EQ(*client->getxattr("/made", "user.etag"), "e1");
    ASSERT_TRUE(client->pwrite(**f, 0, pattern(3000, 5)).ok());
    ASSERT_TRUE(client->close(**f).ok());
    auto r = client->open("/made", O_RDONLY);
    ASSERT_TRUE(r.ok());
    std::vector<uint8_t> back(4000);
    auto n = client->pread(**r, 0, back);
    ASSERT_TRUE(n.ok());
    ASSERT_EQ(*n, 3000u);
    back.resize(3000);
    EXPECT_EQ(back, pattern(3000, 5));
    ASSERT_TRUE(client->close(**r).ok());

    // Past the created size, or after a cut by this handle, writes settle as any do.
    auto g = client->create("/cut", O_RDWR | O_CREAT | O_EXCL, 0644, NewFile{1000, {}});
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE(client->ftruncate(**g, 10).ok());
    ASSERT_TRUE(client->pwrite(**g, 500, pattern(100, 6)).ok());
    ASSERT_TRUE(client->close(**g).ok());
    EXPECT_EQ(client->stat("/cut")->size, 600u);
    auto h = client->create("/longer", O_WRONLY | O_CREAT | O_EXCL, 0644, NewFile{100, {}});
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(client->pwrite(**h, 0, pattern(150, 7)).ok());
    ASSERT_TRUE(client->close(**h).ok());
    EXPECT_EQ(client->stat("/longer")->size, 150u);

    // Refused without O_EXCL (an existing file would not get them) or for reading only.
    EXPECT_EQ(client->create("/made", O_WRONLY | O_CREAT, 0644, NewFile{1, {}}).status().code(), Code::invalid);
    EXPECT_EQ(client->create("/x", O_RDONLY | O_CREAT | O_EXCL, 0644, NewFile{1, {}}).status().code(), Code::invalid);
    EXPECT_EQ(client->create("/made", O_WRONLY | O_CREAT | O_EXCL, 0644, NewFile{1, {}}).status().code(), Code::exists);
}

// Two handles, as two MPI ranks have (ROMIO's misc test): what one settled and another cut
// must not come back from the first handle's older writes, and a reader sees what another
// handle settled after it opened.
TEST_F(ClientTest, OtherHandlesTruncateAndSettledWritesAreSeen) {
    auto c2 = Client::connect(cluster->info());
    ASSERT_TRUE(c2.ok());
    auto a = client->open("/two", O_RDWR | O_CREAT, 0644, Layout{1 << 20, 0});
    ASSERT_TRUE(a.ok());
    auto b = (*c2)->open("/two", O_RDWR);
    ASSERT_TRUE(b.ok());
    ASSERT_TRUE(client->pwrite(**a, 0, pattern(4096, 1)).ok());
    ASSERT_TRUE(client->fsync(**a).ok());
    ASSERT_TRUE((*c2)->ftruncate(**b, 1060).ok());
    auto st = client->fstat(**a);
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->size, 1060u) << "a settled write must not outlive a later truncate";
    ASSERT_TRUE(client->fsync(**a).ok());
    EXPECT_EQ(client->stat("/two")->size, 1060u) << "a second sync must not re-extend";
    // b writes past the end and settles; a, which knew 1060, reads it all.
    ASSERT_TRUE((*c2)->pwrite(**b, 8192, pattern(100, 2)).ok());
    ASSERT_TRUE((*c2)->fsync(**b).ok());
    std::vector<uint8_t> in(200);
    auto n = client->pread(**a, 8192, in);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    ASSERT_EQ(*n, 100u) << "a read past the known length asks for the settled one";
    EXPECT_TRUE(std::equal(in.begin(), in.begin() + 100, pattern(100, 2).begin()));
    // a's own write is seen by a at once, settled or not
    ASSERT_TRUE(client->pwrite(**a, 9000, pattern(10, 3)).ok());
    n = client->pread(**a, 9000, in);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 10u);
    ASSERT_TRUE(client->close(**a).ok());
    ASSERT_TRUE((*c2)->close(**b).ok());
    EXPECT_EQ(client->stat("/two")->size, 9010u);
}

// The daemons run on this node: reads take the bytes from the chunk files (local reads,
// client/local_reads.h), large and small pieces and unaligned edges alike, and with the
// daemons' local-reads off every byte comes over the transport.
TEST_F(ClientTest, ReadsOfThisNodesDaemonsReadTheChunkFilesThemselves) {
    const auto data = pattern((6 << 20) + 12345, 31);
    ASSERT_TRUE(write_file("/local", data).ok());
    EXPECT_EQ(client->io().local_daemon_count(), client->daemon_count()); // every daemon is on this node
    const uint64_t before = client->io().local_reads();
    auto back = read_file("/local");
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, data);
    // One per chunk: six whole 1 MiB chunks and the last one's 12345 bytes (small pieces too).
    EXPECT_EQ(client->io().local_reads() - before, 7u);
    auto f = client->open("/local", O_RDONLY);
    ASSERT_TRUE(f.ok());
    const uint64_t parts_before = client->io().local_reads();
    for (auto [off, len] : std::vector<std::pair<uint64_t, uint64_t>>{{1, 4096}, {(1 << 20) - 7, 300000}, {5 << 20, 2 << 20}}) {
        std::vector<uint8_t> part(len);
        auto n = client->pread(**f, off, part);
        ASSERT_TRUE(n.ok()) << n.status().to_string();
        ASSERT_EQ(*n, std::min<uint64_t>(len, data.size() - off));
        EXPECT_TRUE(std::equal(part.begin(), part.begin() + static_cast<std::ptrdiff_t>(*n), data.begin() + static_cast<std::ptrdiff_t>(off)));
    }
    // Every piece, the 7 bytes at a chunk's end and the 4 KiB at an odd offset too: 1 + 2 + 2.
    EXPECT_EQ(client->io().local_reads() - parts_before, 5u);
    ASSERT_TRUE(client->close(**f).ok());

    // The same data served by daemons started with local reads off.
    client.reset();
    cluster.reset();
    start({"--local-reads", "false"});
    auto again = read_file("/local");
    ASSERT_TRUE(again.ok()) << again.status().to_string();
    EXPECT_EQ(*again, data);
    EXPECT_EQ(client->io().local_reads(), 0u);
    EXPECT_EQ(client->io().local_daemon_count(), 0u);
}

// A reader keeps what it read of a chunk (client/kept_chunks.h) and reads it again with no
// question to the daemon; another client's write to the file, settled, is read at once all the
// same (the daemon's stamp of the file moved), and the reader's close lets the chunks go.
TEST_F(ClientTest, AReaderReadsKeptChunksAgainAndStillSeesAnotherClientsWrite) {
    const uint64_t mib = 1 << 20;
    auto data = pattern(3 * mib, 43);
    ASSERT_TRUE(write_file("/kept", data).ok());
    auto f = client->open("/kept", O_RDONLY);
    ASSERT_TRUE(f.ok());
    std::vector<uint8_t> got(mib);
    const auto read_at = [&](uint64_t off) {
        auto n = client->pread(**f, off, got);
        return n.ok() && *n == got.size() &&
               std::equal(got.begin(), got.end(), data.begin() + static_cast<std::ptrdiff_t>(off));
    };
    const uint64_t kept_before = client->io().local_kept_reads();
    for (int round = 0; round < 3; ++round)
        for (uint64_t off : {uint64_t{0}, uint64_t{5000}, 2 * mib}) ASSERT_TRUE(read_at(off)) << "round " << round << " at " << off;
    // Every piece is a kept read (the first of each chunk describes the chunk whole, then reads
    // it kept): 1 MiB chunks, so the read at 5000 is two pieces, four a round.
    EXPECT_EQ(client->io().local_kept_reads() - kept_before, 12u);
    EXPECT_EQ(client->io().local_kept_chunks(), 3u);

    auto other = Client::connect(cluster->info());
    ASSERT_TRUE(other.ok()) << other.status().to_string();
    auto w = (*other)->open("/kept", O_WRONLY);
    ASSERT_TRUE(w.ok());
    const auto patch = pattern(3000, 44);
    ASSERT_TRUE((*other)->pwrite(**w, 6000, patch).ok());
    ASSERT_TRUE((*other)->close(**w).ok());
    std::copy(patch.begin(), patch.end(), data.begin() + 6000);
    EXPECT_TRUE(read_at(5000)) << "the bytes kept from before the other client's write were read";
    EXPECT_TRUE(read_at(2 * mib));
    // Cut to 4000 bytes: what the kept chunks held past that is gone (their checksums would
    // still match it), whatever length the reader still takes the file to have.
    auto t = (*other)->open("/kept", O_WRONLY);
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE((*other)->ftruncate(**t, 4000).ok());
    ASSERT_TRUE((*other)->close(**t).ok());
    std::fill(got.begin(), got.end(), 0xee);
    auto n = client->pread(**f, 0, got);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    ASSERT_GE(*n, 4000u);
    EXPECT_TRUE(std::equal(got.begin(), got.begin() + 4000, data.begin()));
    EXPECT_TRUE(std::all_of(got.begin() + 4000, got.begin() + static_cast<std::ptrdiff_t>(*n), [](uint8_t c) { return c == 0; }))
        << "bytes past the cut were read from what was kept";
    ASSERT_TRUE(client->close(**f).ok());
    EXPECT_EQ(client->io().local_kept_chunks(), 0u) << "chunks of a file no longer open here are still held";
}

// The daemons run on this node: large writes hand them their bytes through the write arena
// (client/write_arena.h) instead of the transport, and every byte reads back, also over the
// transport alone. A daemon restarted no longer knows the arena: the writes it refuses are sent
// with their bytes, and the arena is handed over again for the next ones.
TEST_F(ClientTest, LargeWritesToThisNodesDaemonsGoThroughTheWriteArena) {
    const auto data = pattern((6 << 20) + 12345, 41);
    uint64_t before = client->io().local_writes();
    ASSERT_TRUE(write_file("/arena", data).ok());
    // One per whole 1 MiB chunk; the last piece, 12345 bytes, goes with its write.
    EXPECT_EQ(client->io().local_writes() - before, 6u);
    auto back = read_file("/arena");
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, data);
    ClientOptions remote;
    remote.local_reads = false; // no local reads, no arena: everything over the transport
    auto far = Client::connect(cluster->info(), remote);
    ASSERT_TRUE(far.ok()) << far.status().to_string();
    back = read_file(**far, "/arena");
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, data);
    {
        auto w = (*far)->open("/far", O_WRONLY | O_CREAT, 0644);
        ASSERT_TRUE(w.ok());
        ASSERT_TRUE((*far)->pwrite(**w, 0, data).ok());
        ASSERT_TRUE((*far)->close(**w).ok());
        EXPECT_EQ((*far)->io().local_writes(), 0u);
        EXPECT_EQ((*far)->io().local_daemon_count(), 0u); // local reads off: none counted
    }

    for (uint32_t r = 0; r < 3; ++r) {
        cluster->kill(r);
        ASSERT_TRUE(cluster->restart(r).ok());
    }
    const auto again = pattern(6 << 20, 42);
    auto f = client->open("/arena", O_WRONLY);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    Status s = client->pwrite(**f, 0, again);
    ASSERT_TRUE(s.ok()) << s.to_string();
    before = client->io().local_writes();
    s = client->pwrite(**f, 0, again);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(client->io().local_writes() - before, 6u) << "the arena is handed over again";
    ASSERT_TRUE(client->close(**f).ok());
    back = read_file(**far, "/arena");
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_TRUE(std::equal(again.begin(), again.end(), back->begin()));
}

// Write-behind copies a large write straight into the write arena (FileIO::hold) and the
// writer threads name that region: every whole chunk piece goes through the arena, and the
// bytes read back over the transport alone. After a restart the daemons no longer know the
// arena: the held pieces they refuse are sent again with their bytes, read from the region.
TEST_F(ClientTest, WriteBehindHoldsLargeWritesInTheArenaAndResendsThemFromThere) {
    ClientOptions o;
    o.write_behind_bytes = 8 << 20;
    auto c = Client::connect(cluster->info(), o);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    ClientOptions remote;
    remote.local_reads = false; // no local reads, no arena: everything over the transport
    auto far = Client::connect(cluster->info(), remote);
    ASSERT_TRUE(far.ok()) << far.status().to_string();
    auto write_all = [&](const std::vector<uint8_t>& data) {
        auto f = (*c)->open("/held", O_WRONLY | O_CREAT, 0644);
        if (!f.ok()) return f.status();
        for (uint64_t off = 0; off < data.size(); off += 1 << 20) {
            const uint64_t n = std::min<uint64_t>(1 << 20, data.size() - off);
            JOBFS_RETURN_IF_ERROR((*c)->pwrite(**f, off, {data.data() + off, n}));
        }
        return (*c)->close(**f);
    };

    const auto data = pattern((6 << 20) + 12345, 71);
    uint64_t before = (*c)->io().local_writes();
    Status s = write_all(data);
    ASSERT_TRUE(s.ok()) << s.to_string();
    // One per whole 1 MiB chunk; the last piece, 12345 bytes, goes with its write.
    EXPECT_EQ((*c)->io().local_writes() - before, 6u);
    auto back = read_file(**far, "/held");
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_TRUE(*back == data);

    for (uint32_t r = 0; r < 3; ++r) {
        cluster->kill(r);
        ASSERT_TRUE(cluster->restart(r).ok());
    }
    const auto again = pattern((6 << 20) + 12345, 72);
    s = write_all(again);
    ASSERT_TRUE(s.ok()) << s.to_string();
    back = read_file(**far, "/held");
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_TRUE(*back == again) << "a held piece refused by a restarted daemon was not sent again whole";
    before = (*c)->io().local_writes();
    s = write_all(data);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ((*c)->io().local_writes() - before, 6u) << "the arena is handed over again";
    back = read_file(**far, "/held");
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_TRUE(*back == data);
}

// The chunk file of chunk `index` of file `ino`, whichever daemon of the cluster in `dir` holds it.
std::string find_chunk_file(const std::string& dir, uint64_t ino, uint64_t index) {
    char name[48];
    std::snprintf(name, sizeof name, "%016llx.%08llx", static_cast<unsigned long long>(ino),
                  static_cast<unsigned long long>(index));
    for (auto& e : fs::recursive_directory_iterator(dir))
        if (e.path().filename() == name) return e.path();
    return {};
}

// How many of a chunk file's data pages (past its checksums) are in the page cache, and how
// many it has.
std::pair<size_t, size_t> resident_pages(const std::string& path) {
    const off_t data = static_cast<off_t>(server::ChunkStore::kDataOffset);
    int fd = ::open(path.c_str(), O_RDONLY);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_size <= data) {
        if (fd >= 0) ::close(fd);
        return {0, 0};
    }
    const size_t len = static_cast<size_t>(st.st_size - data), page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    void* m = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, data);
    ::close(fd);
    std::vector<unsigned char> v((len + page - 1) / page);
    size_t n = 0;
    if (m != MAP_FAILED && ::mincore(m, len, v.data()) == 0)
        for (unsigned char c : v) n += c & 1;
    if (m != MAP_FAILED) ::munmap(m, len);
    return {n, v.size()};
}

// Takes a chunk file out of the page cache, whichever way the daemon wrote it.
bool evict(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    const bool ok = fd >= 0 && ::fdatasync(fd) == 0 && ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
    if (fd >= 0) ::close(fd);
    return ok;
}

// A restart reading its checkpoint back in sequence: once a read follows the one before, the
// chunks after it are asked of this node's disk (read-ahead of local reads) before the reader
// gets to them, and each range only once.
TEST_F(ClientTest, SequentialReadsAskTheDiskForTheChunksAhead) {
    const uint64_t mib = 1 << 20;
    const auto data = pattern(12 * mib, 41);
    ASSERT_TRUE(write_file("/seq", data).ok());
    auto f = client->open("/seq", O_RDONLY);
    ASSERT_TRUE(f.ok());
    const uint64_t ino = (*f)->ino;
    std::vector<std::string> chunks;
    for (uint64_t i = 0; i < 12; ++i) {
        chunks.push_back(find_chunk_file(dir, ino, i));
        ASSERT_FALSE(chunks.back().empty()) << "chunk " << i;
        ASSERT_TRUE(evict(chunks.back())) << chunks.back();
        ASSERT_EQ(resident_pages(chunks.back()).first, 0u) << chunks.back();
    }
    const uint64_t before = client->io().local_prefetches();
    std::vector<uint8_t> got(mib);
    for (uint64_t i = 0; i < 3; ++i) {
        auto n = client->pread(**f, i * mib, got);
        ASSERT_TRUE(n.ok()) << n.status().to_string();
        ASSERT_TRUE(std::equal(got.begin(), got.end(), data.begin() + static_cast<std::ptrdiff_t>(i * mib)));
        // Two reads are no run yet (sequential_reads.h): nothing asked for.
        if (i == 1) {
            EXPECT_EQ(client->io().local_prefetches() - before, 0u);
        }
    }
    // The third read made a run: the 8 MiB ahead of it (SequentialReads::kWindow), chunks 3 to
    // 10, are on their way in; chunk 11 is not asked for.
    EXPECT_EQ(client->io().local_prefetches() - before, 8u);
    for (uint64_t i = 3; i <= 10; ++i) {
        auto [in, all] = resident_pages(chunks[i]);
        for (int k = 0; k < 200 && in < all; ++k) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            std::tie(in, all) = resident_pages(chunks[i]);
        }
        EXPECT_EQ(in, all) << "chunk " << i;
    }
    EXPECT_EQ(resident_pages(chunks[11]).first, 0u);
    // Reading on asks only for what was not asked for yet, and every byte reads back.
    for (uint64_t i = 3; i < 12; ++i) {
        auto n = client->pread(**f, i * mib, got);
        ASSERT_TRUE(n.ok()) << n.status().to_string();
        ASSERT_TRUE(std::equal(got.begin(), got.end(), data.begin() + static_cast<std::ptrdiff_t>(i * mib))) << i;
    }
    EXPECT_EQ(client->io().local_prefetches() - before, 9u); // chunks 3..11, once each
    ASSERT_TRUE(client->close(**f).ok());
}

// jobfs-fuse's way (LocalReads::ColdReads::direct): a sequential reader of cold chunks reads
// them with direct I/O, is not read ahead (that would fill the page cache the reads go past),
// gets every byte back, and leaves the chunk files' data out of the page cache.
TEST_F(ClientTest, ADirectReaderReadsColdChunksPastThePageCacheWithoutReadAhead) {
    const uint64_t mib = 1 << 20;
    const auto data = pattern(12 * mib, 43);
    ASSERT_TRUE(write_file("/direct", data).ok());
    InodeClientOptions o;
    o.local_cold_reads = LocalReads::ColdReads::direct;
    auto ic = InodeClient::connect(cluster->info(), o);
    ASSERT_TRUE(ic.ok()) << ic.status().to_string();
    const proto::Cred root{0, 0, {}};
    auto a = (*ic)->lookup(root, kRootIno, "direct");
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    std::vector<std::string> chunks;
    for (uint64_t i = 0; i < 12; ++i) {
        chunks.push_back(find_chunk_file(dir, a->ino, i));
        ASSERT_FALSE(chunks.back().empty()) << "chunk " << i;
        ASSERT_TRUE(evict(chunks.back())) << chunks.back();
    }
    auto h = (*ic)->open(root, a->ino, O_RDONLY);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    struct Free {
        void operator()(uint8_t* p) const { std::free(p); }
    };
    const std::unique_ptr<uint8_t[], Free> buf(static_cast<uint8_t*>(std::aligned_alloc(4096, mib)));
    ASSERT_TRUE(buf);
    for (uint64_t i = 0; i < 12; ++i) {
        auto n = (*ic)->read(**h, i * mib, {buf.get(), mib});
        ASSERT_TRUE(n.ok()) << n.status().to_string();
        ASSERT_EQ(*n, mib);
        ASSERT_TRUE(std::equal(buf.get(), buf.get() + mib, data.begin() + static_cast<std::ptrdiff_t>(i * mib))) << i;
    }
    EXPECT_EQ((*ic)->io().local_direct_reads(), 12u);
    EXPECT_EQ((*ic)->io().local_prefetches(), 0u);
    for (const auto& c : chunks) EXPECT_EQ(resident_pages(c).first, 0u) << c;
    ASSERT_TRUE((*ic)->release(std::move(*h)).ok());
}

TEST_F(ClientTest, SparseFilesReadZerosInHoles) {
    auto f = client->open("/sparse", O_RDWR | O_CREAT, 0644, Layout{1 << 20, 0});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(client->pwrite(**f, 20 << 20, pattern(10, 4)).ok());
    ASSERT_TRUE(client->close(**f).ok());
    auto g = client->open("/sparse", O_RDONLY);
    ASSERT_TRUE(g.ok());
    std::vector<uint8_t> mid(4 << 20, 0xff);
    auto n = client->pread(**g, 7 << 20, mid);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, mid.size());
    EXPECT_TRUE(std::all_of(mid.begin(), mid.end(), [](uint8_t c) { return c == 0; }));
    // The holes take no disk: every daemon holds at most the one chunk that was written.
    size_t chunk_files = 0;
    for (auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file() && e.path().parent_path().parent_path().filename() == "chunks")
            ++chunk_files;
    EXPECT_EQ(chunk_files, 1u);
}

TEST_F(ClientTest, UnlinkRemovesTheData) {
    ASSERT_TRUE(write_file("/big", pattern(6 << 20, 5)).ok());
    auto count = [&] {
        size_t n = 0;
        for (auto& e : fs::recursive_directory_iterator(dir))
            if (e.is_regular_file() && e.path().parent_path().parent_path().filename() == "chunks") ++n;
        return n;
    };
    EXPECT_GE(count(), 6u);
    ASSERT_TRUE(client->unlink("/big").ok());
    EXPECT_EQ(count(), 0u);
    EXPECT_EQ(client->stat("/big").status().code(), Code::not_found);
}

TEST_F(ClientTest, TruncateShrinksAndRegrowsWithZeros) {
    ASSERT_TRUE(write_file("/t", pattern(3 << 20, 6)).ok());
    ASSERT_TRUE(client->truncate("/t", 1000).ok());
    EXPECT_EQ(client->stat("/t")->size, 1000u);
    ASSERT_TRUE(client->truncate("/t", 2 << 20).ok());
    auto back = read_file("/t");
    ASSERT_TRUE(back.ok());
    ASSERT_EQ(back->size(), 2u << 20);
    auto orig = pattern(3 << 20, 6);
    EXPECT_TRUE(std::equal(back->begin(), back->begin() + 1000, orig.begin()));
    EXPECT_TRUE(std::all_of(back->begin() + 1000, back->end(), [](uint8_t c) { return c == 0; }));
}

TEST_F(ClientTest, RestartOnTheSameDataServesEverything) {
    ASSERT_TRUE(client->mkdir("/keep").ok());
    ASSERT_TRUE(write_file("/keep/data", pattern(5 << 20, 7)).ok());
    client.reset();
    ASSERT_TRUE(cluster->stop().ok());
    cluster.reset();
    start();
    auto back = read_file("/keep/data");
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, pattern(5 << 20, 7));
}

TEST_F(ClientTest, AnotherUserIsRefused) {
    ClientOptions o;
    o.cred = proto::Cred{1000, 1000, {}};
    auto user = Client::connect(cluster->info(), o);
    ASSERT_TRUE(user.ok());
    EXPECT_EQ((*user)->mkdir("/mine").status().code(), Code::permission);
    EXPECT_EQ((*user)->open("/f", O_WRONLY | O_CREAT).status().code(), Code::permission);
}

TEST_F(ClientTest, KilledDaemonFailsPromptlyNeverHangs) {
    ASSERT_TRUE(write_file("/f", pattern(6 << 20, 8)).ok());
    cluster->kill(1);
    auto t0 = std::chrono::steady_clock::now();
    auto back = read_file("/f"); // its chunks are on every daemon, one of them dead
    ASSERT_FALSE(back.ok());
    EXPECT_EQ(back.status().to_errno() == ENOTCONN || back.status().to_errno() == ECONNREFUSED ||
                  back.status().to_errno() == EIO || back.status().to_errno() == ECANCELED,
              true)
        << back.status().to_string();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

// The daemons run with --chunk-size 1M: that is the default of new files, and a file may
// still ask for larger chunks than the daemons' default.
TEST_F(ClientTest, DaemonsChunkSizeIsTheDefaultAndLargerLayoutsWork) {
    auto f = client->open("/plain", O_RDWR | O_CREAT);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ((*f)->layout.chunk_size, 1u << 20);
    ASSERT_TRUE(client->pwrite(**f, 0, pattern(3 << 20, 31)).ok());
    ASSERT_TRUE(client->close(**f).ok());
    EXPECT_EQ(client->stat("/plain")->chunk_size, 1u << 20);
    EXPECT_EQ(*read_file("/plain"), pattern(3 << 20, 31));
    auto big = client->open("/big-chunks", O_RDWR | O_CREAT, 0644, Layout{16 << 20, 0});
    ASSERT_TRUE(big.ok());
    ASSERT_TRUE(client->pwrite(**big, 0, pattern(20 << 20, 32)).ok());
    ASSERT_TRUE(client->close(**big).ok());
    EXPECT_EQ(client->stat("/big-chunks")->chunk_size, 16u << 20);
    EXPECT_EQ(*read_file("/big-chunks"), pattern(20 << 20, 32));
}

// The directory cache of path walks: this client's own changes are seen at once, a directory
// another client removed and made again is found anew, and a rename elsewhere is seen once
// the entry times out.
TEST_F(ClientTest, DirectoryCacheNeverHidesAChange) {
    ClientOptions o;
    o.dir_cache_ttl = std::chrono::milliseconds(300);
    auto a = Client::connect(cluster->info(), o);
    auto b = Client::connect(cluster->info());
    ASSERT_TRUE(a.ok() && b.ok());
    Client& ca = **a;
    Client& cb = **b;
    ASSERT_TRUE(ca.mkdir("/d").ok());
    ASSERT_TRUE(ca.mkdir("/d/e").ok());
    ASSERT_TRUE(write_file("/d/e/f", pattern(100, 41)).ok());
    ASSERT_TRUE(ca.stat("/d/e/f").ok()); // /d and /d/e are cached in a now
    // Another client replaces /d/e by a new directory: a's next create lands in the new one.
    ASSERT_TRUE(cb.unlink("/d/e/f").ok());
    ASSERT_TRUE(cb.rmdir("/d/e").ok());
    auto fresh = cb.mkdir("/d/e");
    ASSERT_TRUE(fresh.ok());
    auto g = ca.open("/d/e/g", O_WRONLY | O_CREAT | O_EXCL);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    ASSERT_TRUE(ca.close(**g).ok());
    auto listed = cb.list("/d/e");
    ASSERT_TRUE(listed.ok());
    ASSERT_EQ(listed->size(), 1u);
    EXPECT_EQ((*listed)[0].name, "g");
    // a's own rename: the old path is gone for a at once.
    ASSERT_TRUE(ca.rename("/d", "/moved").ok());
    EXPECT_EQ(ca.stat("/d/e/g").status().code(), Code::not_found);
    EXPECT_TRUE(ca.stat("/moved/e/g").ok());
    // b's rename: a sees it once its cache entries expire.
    ASSERT_TRUE(ca.stat("/moved/e/g").ok());
    ASSERT_TRUE(cb.rename("/moved", "/again").ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    EXPECT_EQ(ca.stat("/moved/e/g").status().code(), Code::not_found);
    EXPECT_TRUE(ca.stat("/again/e/g").ok());
}

// Write behind: eight writers, each every 8th MiB of one file (the strided checkpoint),
// their writes buffered and in flight while they go on; after the closes the file is exact.
TEST_F(ClientTest, WriteBehindStridedWritersByteExact) {
    constexpr uint64_t kPiece = 1 << 20, kWriters = 8, kRounds = 8;
    ASSERT_TRUE(write_file("/strided", {}).ok());
    std::vector<std::thread> ts;
    std::atomic<int> ok{0};
    for (uint64_t w = 0; w < kWriters; ++w) {
        ts.emplace_back([&, w] {
            ClientOptions o;
            o.write_behind_bytes = 4 * kPiece;
            auto c = Client::connect(cluster->info(), o);
            if (!c.ok()) return;
            auto f = (*c)->open("/strided", O_WRONLY);
            if (!f.ok()) return;
            for (uint64_t r = 0; r < kRounds; ++r) {
                const uint64_t piece = r * kWriters + w;
                if (!(*c)->pwrite(**f, piece * kPiece, pattern(kPiece, piece)).ok()) return;
            }
            if ((*c)->close(**f).ok()) ++ok;
        });
    }
    for (auto& t : ts) t.join();
    ASSERT_EQ(ok.load(), int(kWriters));
    auto back = read_file("/strided");
    ASSERT_TRUE(back.ok());
    ASSERT_EQ(back->size(), kPiece * kWriters * kRounds);
    for (uint64_t piece = 0; piece < kWriters * kRounds; ++piece)
        ASSERT_TRUE(std::equal(back->begin() + piece * kPiece, back->begin() + (piece + 1) * kPiece,
                               pattern(kPiece, piece).begin()))
            << "piece " << piece;
}

TEST_F(ClientTest, WriteBehindReadsItsOwnWritesAndReportsFailuresLater) {
    ClientOptions o;
    o.write_behind_bytes = 8 << 20;
    auto c = Client::connect(cluster->info(), o);
    ASSERT_TRUE(c.ok());
    auto f = (*c)->open("/wb", O_RDWR | O_CREAT);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*c)->pwrite(**f, 0, pattern(3 << 20, 51)).ok());
    std::vector<uint8_t> back(3 << 20);
    auto n = (*c)->pread(**f, 0, back);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(back, pattern(3 << 20, 51));
    ASSERT_TRUE((*c)->fsync(**f).ok());
    // A daemon dies: the buffered writes to it fail, and fsync and close say so, promptly.
    cluster->kill(1);
    const auto t0 = std::chrono::steady_clock::now();
    Status first;
    for (uint64_t off = 0; off < (24u << 20) && first.ok(); off += 1 << 20) first = (*c)->pwrite(**f, off, pattern(1 << 20, 52));
    Status synced = (*c)->fsync(**f);
    EXPECT_FALSE(synced.ok());
    Status closed = (*c)->close(**f);
    EXPECT_FALSE(closed.ok());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

// jobfs-fuse's client with write-behind: the writes of one handle still on their way are read
// through another handle of this process at once, and a truncate cuts them all (none lands
// after it and shows through a later extension); the size is settled at release.
TEST_F(ClientTest, InodeClientWriteBehindIsSeenByEveryHandleAndCutByATruncate) {
    auto ic = write_behind_client();
    ASSERT_TRUE(ic.ok()) << ic.status().to_string();
    const proto::Cred root{0, 0, {}};
    constexpr uint64_t kPiece = 1 << 20, kPieces = 32;
    auto w = (*ic)->create(root, kRootIno, "wb", 0644, O_WRONLY | O_CREAT);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    const uint64_t ino = w->first.ino;
    auto r = (*ic)->open(root, ino, O_RDONLY);
    ASSERT_TRUE(r.ok());
    const auto data = pattern(kPiece * kPieces, 61);
    // The daemons stop for a while, so the writes are still queued when the next call comes.
    std::vector<std::jthread> resumers; // joined on every way out
    auto stall_daemons = [&] {
        for (uint32_t d = 0; d < 3; ++d) EXPECT_TRUE(test::stop_process(cluster->pid(d)));
        resumers.emplace_back([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            for (uint32_t d = 0; d < 3; ++d) ::kill(cluster->pid(d), SIGCONT);
        });
    };
    stall_daemons();
    for (uint64_t i = 0; i < kPieces; ++i)
        ASSERT_TRUE((*ic)->write(*w->second, i * kPiece, {data.data() + i * kPiece, kPiece}).ok());
    std::vector<uint8_t> back(kPiece * kPieces);
    for (uint64_t i = kPieces; i-- > 0;) { // the last written first
        auto n = (*ic)->read(**r, i * kPiece, {back.data() + i * kPiece, kPiece});
        ASSERT_TRUE(n.ok());
        ASSERT_EQ(*n, kPiece);
    }
    EXPECT_TRUE(back == data) << "a read through another handle missed writes on their way";

    resumers.back().join();
    stall_daemons();
    for (uint64_t i = 0; i < kPieces; ++i)
        ASSERT_TRUE((*ic)->write(*w->second, i * kPiece, {data.data() + i * kPiece, kPiece}).ok());
    proto::SetattrRequest cut;
    cut.size = 0;
    ASSERT_TRUE((*ic)->setattr(root, ino, cut).ok());
    resumers.back().join();
    proto::SetattrRequest grow;
    grow.size = kPiece * kPieces;
    ASSERT_TRUE((*ic)->setattr(root, ino, grow).ok());
    auto n = (*ic)->read(**r, 0, back);
    ASSERT_TRUE(n.ok());
    ASSERT_EQ(*n, kPiece * kPieces);
    EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](uint8_t b) { return b == 0; }))
        << "a write landed after the truncate";

    ASSERT_TRUE((*ic)->write(*w->second, 0, {data.data(), 3 * kPiece}).ok());
    ASSERT_TRUE((*ic)->release(std::move(w->second)).ok());
    ASSERT_TRUE((*ic)->release(std::move(*r)).ok());
    EXPECT_EQ(client->stat("/wb")->size, kPiece * kPieces);
    auto all = read_file("/wb");
    ASSERT_TRUE(all.ok());
    EXPECT_TRUE(std::equal(data.begin(), data.begin() + 3 * kPiece, all->begin()));
}

// A reader's close settles nothing of the writers': its flush and release neither wait for their
// writes nor settle the size (which moves the mtime, and jobfs-fuse's kernel then drops the
// pages it cached, also while a write is on its way: posix_check's "a process rereading a page
// sees every write" failed so with -o no_direct_writes). settle_file through the same reader
// does (an unlock), as does the writer's close.
TEST_F(ClientTest, InodeClientReadersCloseLeavesTheWritersUnsettled) {
    auto ic = write_behind_client();
    ASSERT_TRUE(ic.ok()) << ic.status().to_string();
    const proto::Cred root{0, 0, {}};
    auto w = (*ic)->create(root, kRootIno, "unsettled", 0644, O_WRONLY | O_CREAT);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    const auto data = pattern(3 << 20, 67);
    ASSERT_TRUE((*ic)->write(*w->second, 0, data).ok());
    auto before = client->stat("/unsettled");
    ASSERT_TRUE(before.ok());
    ASSERT_EQ(before->size, 0u);
    for (int i = 0; i < 2; ++i) {
        auto r = (*ic)->open(root, w->first.ino, O_RDONLY);
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        ASSERT_TRUE((*ic)->flush(**r).ok());
        ASSERT_TRUE((*ic)->release(std::move(*r)).ok());
    }
    auto after = client->stat("/unsettled");
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->size, 0u) << "a reader's close settled the writer's size";
    EXPECT_EQ(after->mtime_ns, before->mtime_ns) << "a reader's close moved the mtime";
    // An unlock through a reader's descriptor (jobfs-fuse) settles what the process wrote.
    auto r = (*ic)->open(root, w->first.ino, O_RDONLY);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE((*ic)->settle_file(**r).ok());
    EXPECT_EQ(client->stat("/unsettled")->size, data.size());
    ASSERT_TRUE((*ic)->release(std::move(*r)).ok());
    ASSERT_TRUE((*ic)->flush(*w->second).ok());
    ASSERT_TRUE((*ic)->release(std::move(w->second)).ok());
    auto back = read_file("/unsettled");
    ASSERT_TRUE(back.ok());
    EXPECT_TRUE(*back == data);
}

// A small write into a large one still on its way must not land first (posix_check under ASan
// read "0123456789" back after pwrite(fd, "AB", 2, 4)): overlapping writes keep their order.
TEST_F(ClientTest, InodeClientWriteBehindKeepsOverlappingWritesInOrder) {
    auto ic = write_behind_client();
    ASSERT_TRUE(ic.ok()) << ic.status().to_string();
    const proto::Cred root{0, 0, {}};
    auto w = (*ic)->create(root, kRootIno, "order", 0644, O_RDWR | O_CREAT);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    constexpr size_t kBig = 4 << 20;
    for (int round = 0; round < 20; ++round) {
        const std::vector<uint8_t> big(kBig, static_cast<uint8_t>('a' + round));
        const uint8_t small[2] = {'A', 'B'};
        ASSERT_TRUE((*ic)->write(*w->second, 0, big).ok());
        ASSERT_TRUE((*ic)->write(*w->second, 4, small).ok());
        uint8_t back[8] = {};
        auto n = (*ic)->read(*w->second, 0, back);
        ASSERT_TRUE(n.ok());
        ASSERT_EQ(*n, sizeof back);
        ASSERT_EQ(back[4], 'A') << "round " << round << ": the older, larger write landed last";
        ASSERT_EQ(back[5], 'B') << "round " << round;
        ASSERT_EQ(back[3], 'a' + round) << "round " << round;
    }
    ASSERT_TRUE((*ic)->release(std::move(w->second)).ok());
}

// An attribute reply the daemon gave before the last writer's size was settled, merged after
// that writer's release: it must still carry the writes (fuse_test lost 1 O_APPEND record in
// 800: the kernel took the older size and the next append landed on the last record). With
// more releases meanwhile than the client remembers, it asks the daemon again.
TEST_F(ClientTest, InodeClientAttributesFromBeforeAReleaseKeepItsWrites) {
    std::atomic<uint64_t> hold_ino{0};
    std::promise<void> replied, go;
    auto go_f = go.get_future().share();
    InodeClientOptions o;
    o.after_attr_reply = [&](uint64_t ino) {
        uint64_t want = ino;
        if (ino == 0 || !hold_ino.compare_exchange_strong(want, 0)) return;
        replied.set_value();
        go_f.wait();
    };
    auto ic = InodeClient::connect(cluster->info(), o);
    ASSERT_TRUE(ic.ok()) << ic.status().to_string();
    const proto::Cred root{0, 0, {}};
    const auto rec = pattern(100, 71);
    auto run = [&](const char* name, int others, auto&& call) {
        std::vector<std::unique_ptr<Handle>> open_others;
        for (int i = 0; i < others; ++i) {
            auto h = (*ic)->create(root, kRootIno, std::string(name) + "-other" + std::to_string(i), 0644, O_WRONLY | O_CREAT);
            ASSERT_TRUE(h.ok()) << h.status().to_string();
            open_others.push_back(std::move(h->second));
        }
        auto w = (*ic)->create(root, kRootIno, name, 0644, O_WRONLY | O_CREAT | O_APPEND);
        ASSERT_TRUE(w.ok()) << w.status().to_string();
        const uint64_t ino = w->first.ino;
        ASSERT_TRUE((*ic)->write(*w->second, 0, rec).ok()); // written, its size not settled yet
        replied = {};
        go = {};
        go_f = go.get_future().share();
        hold_ino = ino;
        auto answer = std::async(std::launch::async, [&] { return call(ino); });
        replied.get_future().wait(); // the daemon has answered with the unsettled size
        ASSERT_TRUE((*ic)->flush(*w->second).ok());
        ASSERT_TRUE((*ic)->release(std::move(w->second)).ok());
        for (auto& h : open_others) ASSERT_TRUE((*ic)->release(std::move(h)).ok());
        go.set_value();
        auto a = answer.get();
        ASSERT_TRUE(a.ok()) << a.status().to_string();
        EXPECT_EQ(a->size, rec.size()) << name << ": a reply from before the release lost its writes";
    };
    run("getattr", 0, [&](uint64_t ino) { return (*ic)->getattr(ino); });
    run("lookup", 0, [&](uint64_t) { return (*ic)->lookup(root, kRootIno, "lookup"); });
    run("overflow", 300, [&](uint64_t) { return (*ic)->lookup(root, kRootIno, "overflow"); });
}

// Two nodes append to one log through handles held open. Each kernel places a write at the
// size it last knew (here: never updated, offset 0 every time); the daemons place it at the
// end instead, so no record overwrites another, and the size is right without a close.
TEST_F(ClientTest, InodeClientAppendsOfTwoNodesGetPlacesOfTheirOwn) {
    auto node1 = InodeClient::connect(cluster->info());
    auto node2 = InodeClient::connect(cluster->info());
    ASSERT_TRUE(node1.ok() && node2.ok());
    const proto::Cred root{0, 0, {}};
    auto c = (*node1)->create(root, kRootIno, "log", 0644, O_WRONLY | O_CREAT | O_APPEND);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    const uint64_t ino = c->first.ino;
    auto h2 = (*node2)->open(root, ino, O_WRONLY | O_APPEND);
    ASSERT_TRUE(h2.ok()) << h2.status().to_string();
    auto plain = (*node2)->open(root, ino, O_RDWR);
    ASSERT_TRUE(plain.ok());
    constexpr int kRecords = 50;
    auto record = [](int node, int i) {
        char b[32];
        int n = snprintf(b, sizeof b, "node %d record %03d\n", node, i);
        return std::vector<uint8_t>(b, b + n);
    };
    std::thread t1([&] {
        for (int i = 0; i < kRecords; ++i) ASSERT_TRUE((*node1)->write(*c->second, 0, record(1, i)).ok());
    });
    std::thread t2([&] {
        for (int i = 0; i < kRecords; ++i) ASSERT_TRUE((*node2)->write(**h2, 0, record(2, i)).ok());
    });
    t1.join();
    t2.join();
    const size_t total = 2 * kRecords * record(1, 0).size();
    auto a = (*node1)->getattr(ino);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->size, total) << "the size before any close";
    // A plain write on node 2 past the end, not settled yet: node 2's next append goes after it.
    const auto mark = pattern(10, 81);
    ASSERT_TRUE((*node2)->write(**plain, total + 100, mark).ok());
    ASSERT_TRUE((*node2)->write(**h2, 0, record(2, kRecords)).ok());
    ASSERT_TRUE((*node1)->release(std::move(c->second)).ok());
    ASSERT_TRUE((*node2)->release(std::move(*h2)).ok());
    ASSERT_TRUE((*node2)->release(std::move(*plain)).ok());
    auto all = read_file("/log");
    ASSERT_TRUE(all.ok());
    ASSERT_EQ(all->size(), total + 110 + record(2, 0).size());
    std::string text(all->begin(), all->begin() + total);
    std::multiset<std::string> lines;
    for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) lines.insert(text.substr(at, nl + 1 - at));
    std::multiset<std::string> want;
    for (int node = 1; node <= 2; ++node)
        for (int i = 0; i < kRecords; ++i) {
            const auto r = record(node, i);
            want.insert(std::string(r.begin(), r.end()));
        }
    EXPECT_TRUE(lines == want) << "records overwritten or torn: " << lines.size() << " lines";
    EXPECT_TRUE(std::equal(mark.begin(), mark.end(), all->begin() + total + 100));
    const auto last = record(2, kRecords);
    EXPECT_TRUE(std::equal(last.begin(), last.end(), all->begin() + total + 110));

    // The log is cut on node 2 (a rotation) while node 1 holds it open for appending: node 1's
    // next append goes at the new end, with no hole of what it had appended before.
    auto again = (*node1)->open(root, ino, O_WRONLY | O_APPEND);
    ASSERT_TRUE(again.ok());
    ASSERT_TRUE((*node1)->write(**again, 0, record(1, 0)).ok());
    proto::SetattrRequest cut;
    cut.size = 0;
    ASSERT_TRUE((*node2)->setattr(root, ino, cut).ok());
    ASSERT_TRUE((*node1)->write(**again, 0, record(1, 1)).ok());
    ASSERT_TRUE((*node1)->release(std::move(*again)).ok());
    auto rotated = read_file("/log");
    ASSERT_TRUE(rotated.ok());
    EXPECT_EQ(*rotated, record(1, 1));
}

TEST_F(ClientTest, TenThousandFilesInOneDirectoryAreListedCompletely) {
    constexpr int kFiles = 10000;
    ASSERT_TRUE(client->mkdir("/many").ok());
    for (int i = 0; i < kFiles; ++i) {
        auto f = client->open("/many/f" + std::to_string(i), O_WRONLY | O_CREAT | O_EXCL);
        ASSERT_TRUE(f.ok()) << i << ": " << f.status().to_string();
        ASSERT_TRUE(client->close(**f).ok());
    }
    auto list = client->list("/many");
    ASSERT_TRUE(list.ok()) << list.status().to_string();
    ASSERT_EQ(list->size(), size_t(kFiles));
    std::set<std::string> names;
    for (auto& e : *list) names.insert(e.name);
    EXPECT_EQ(names.size(), size_t(kFiles)); // no duplicates across readdir pages
    for (int i = 0; i < kFiles; i += 997) EXPECT_TRUE(names.count("f" + std::to_string(i))) << i;
}

TEST_F(ClientTest, RenameAcrossDaemonsMovesNamesDataAndDirectories) {
    // Directories land on daemons by hash: make sure /src and /dst are on different ones.
    ASSERT_TRUE(client->mkdir("/src").ok());
    std::string dst;
    for (int i = 0; dst.empty(); ++i) {
        std::string d = "/dst" + std::to_string(i);
        auto a = client->mkdir(d);
        ASSERT_TRUE(a.ok());
        if (proto::shard_of(a->ino) != proto::shard_of(client->stat("/src")->ino)) dst = d;
        ASSERT_LT(i, 50);
    }
    ASSERT_TRUE(write_file("/src/data", pattern(3 << 20, 11)).ok());
    ASSERT_TRUE(client->rename("/src/data", dst + "/data").ok());
    EXPECT_EQ(client->stat("/src/data").status().code(), Code::not_found);
    EXPECT_EQ(*read_file(dst + "/data"), pattern(3 << 20, 11));
    // Over an existing file: the replaced file's data goes.
    ASSERT_TRUE(write_file("/src/other", pattern(2 << 20, 12)).ok());
    ASSERT_TRUE(client->rename(dst + "/data", "/src/other").ok());
    EXPECT_EQ(*read_file("/src/other"), pattern(3 << 20, 11));
    // A whole directory (with contents) into another one, and refused below itself.
    ASSERT_TRUE(client->mkdir("/src/sub").ok());
    ASSERT_TRUE(write_file("/src/sub/leaf", pattern(1000, 13)).ok());
    ASSERT_TRUE(client->rename("/src", dst + "/moved").ok());
    EXPECT_EQ(*read_file(dst + "/moved/sub/leaf"), pattern(1000, 13));
    EXPECT_EQ(client->rename(dst, dst + "/moved/sub/loop").code(), Code::invalid);
    // Unlinking a file whose inode stayed on another daemon removes it and its data.
    ASSERT_TRUE(client->unlink(dst + "/moved/other").ok());
    EXPECT_EQ(client->stat(dst + "/moved/other").status().code(), Code::not_found);
}

// Renames inside one directory by the batch: every entry as rename() would make it alone, an
// outcome each, one failing entry stopping none of the others, a replaced file's data gone.
TEST_F(ClientTest, RenamesInOneDirectoryGoByTheBatchWithAnOutcomeEach) {
    ASSERT_TRUE(client->mkdir("/batch").ok());
    ASSERT_TRUE(client->mkdir("/batch/sub").ok());
    std::vector<std::pair<std::string, std::string>> names;
    for (int i = 0; i < 300; ++i) { // more than one request's worth (kMaxRenamesInDir)
        const std::string n = std::to_string(i);
        ASSERT_TRUE(write_file("/batch/.tmp" + n, pattern(1000 + i, i)).ok());
        names.emplace_back(".tmp" + n, "f" + n);
    }
    names.emplace_back(".missing", "f-none");   // not_found
    names.emplace_back(".tmp0", "f0-again");    // renamed already, earlier in this batch
    names.emplace_back("f1", "sub");            // a file over a directory: is_dir
    names.emplace_back("a/b", "c");             // not a name in the directory: invalid
    auto chunk_files = [&] {
        size_t n = 0;
        for (auto& e : fs::recursive_directory_iterator(dir))
            if (e.is_regular_file() && e.path().parent_path().parent_path().filename() == "chunks") ++n;
        return n;
    };
    const size_t chunks_before = chunk_files();
    ASSERT_TRUE(write_file("/batch/f7", pattern(5 << 20, 99)).ok()); // replaced: its chunks go
    ASSERT_GT(chunk_files(), chunks_before);
    auto r = client->rename_in_dir("/batch", names);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(r->size(), names.size());
    for (int i = 0; i < 300; ++i) {
        const std::string n = std::to_string(i);
        ASSERT_TRUE((*r)[i].ok()) << (*r)[i].to_string();
        EXPECT_EQ(client->stat("/batch/.tmp" + n).status().code(), Code::not_found);
        ASSERT_EQ(*read_file("/batch/f" + n), pattern(1000 + i, i)) << n;
    }
    EXPECT_EQ((*r)[300].code(), Code::not_found) << (*r)[300].to_string();
    EXPECT_NE((*r)[300].message().find("/batch/.missing"), std::string::npos) << (*r)[300].message();
    EXPECT_EQ((*r)[301].code(), Code::not_found);
    EXPECT_EQ((*r)[302].code(), Code::is_dir) << (*r)[302].to_string();
    EXPECT_EQ((*r)[303].code(), Code::invalid) << (*r)[303].to_string();
    EXPECT_EQ(chunk_files(), chunks_before) << "the replaced file's chunks";
    EXPECT_EQ(client->stat("/batch/sub")->type, 2u);
    EXPECT_EQ(client->list("/batch")->size(), 301u); // f0..f299 and sub
    // An unknown directory fails the whole call, with its name.
    auto bad = client->rename_in_dir("/nowhere", {{"a", "b"}});
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), Code::not_found);
    EXPECT_NE(bad.status().message().find("/nowhere"), std::string::npos) << bad.status().message();
}

// Directories renamed by the batch leave no path in the client's directory cache: the old
// names (and the paths below them) would still lead to the moved directories, alive, so
// nothing would catch the mistake later.
TEST_F(ClientTest, DirectoriesRenamedByTheBatchAreGoneFromTheDirectoryCache) {
    for (const char* d : {"/mv", "/mv/a", "/mv/a/deep", "/mv/b"}) ASSERT_TRUE(client->mkdir(d).ok()) << d;
    ASSERT_TRUE(write_file("/mv/a/deep/f", pattern(3000, 1)).ok()); // caches /mv, /mv/a and /mv/a/deep
    ASSERT_TRUE(write_file("/mv/b/g", pattern(3000, 2)).ok());      // and /mv/b
    // More directories, placed over the three daemons by their names: some live on another
    // daemon than /mv's entries, so the daemon renames them through its coordinator and goes
    // on with the batch after them (the file last).
    std::vector<std::pair<std::string, std::string>> names = {{"a", "a2"}, {"b", "c"}};
    for (int i = 0; i < 6; ++i) {
        ASSERT_TRUE(client->mkdir("/mv/d" + std::to_string(i)).ok());
        names.emplace_back("d" + std::to_string(i), "e" + std::to_string(i));
    }
    ASSERT_TRUE(write_file("/mv/file", pattern(100, 4)).ok());
    names.emplace_back("file", "file2");
    auto r = client->rename_in_dir("/mv", names);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(r->size(), names.size());
    for (const Status& s : *r) ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(write_file("/mv/a/deep/x", pattern(10, 3)).code(), Code::not_found);
    EXPECT_EQ(write_file("/mv/a/x", pattern(10, 3)).code(), Code::not_found);
    EXPECT_EQ(write_file("/mv/b/x", pattern(10, 3)).code(), Code::not_found);
    EXPECT_EQ(*read_file("/mv/a2/deep/f"), pattern(3000, 1));
    EXPECT_EQ(*read_file("/mv/c/g"), pattern(3000, 2));
    EXPECT_EQ(*read_file("/mv/file2"), pattern(100, 4));
    // The coordinator's part was exercised: some renamed directory's inode lives on another
    // daemon than /mv's entries.
    const uint32_t mv_shard = proto::shard_of(client->stat("/mv")->ino);
    int elsewhere = 0;
    for (int i = 0; i < 6; ++i) {
        auto e = client->stat("/mv/e" + std::to_string(i));
        ASSERT_TRUE(e.ok());
        EXPECT_EQ(e->type, 2u) << i;
        elsewhere += proto::shard_of(e->ino) != mv_shard;
    }
    EXPECT_GT(elsewhere, 0);
    EXPECT_EQ(client->list("/mv")->size(), names.size());
}

TEST_F(ClientTest, UnlinkOfAnOpenFileKeepsItsDataUntilTheLastClose) {
    ASSERT_TRUE(write_file("/open", pattern(2 << 20, 14)).ok());
    auto f = client->open("/open", O_RDWR);
    ASSERT_TRUE(f.ok());
    auto g = client->open("/open", O_RDONLY);
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE(client->unlink("/open").ok());
    EXPECT_EQ(client->stat("/open").status().code(), Code::not_found);
    // Still readable and writable through the open handles.
    std::vector<uint8_t> buf(2 << 20);
    auto n = client->pread(**f, 0, buf);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    EXPECT_EQ(buf, pattern(2 << 20, 14));
    ASSERT_TRUE(client->pwrite(**f, 0, pattern(4096, 15)).ok());
    ASSERT_TRUE(client->fsync(**f).ok());
    ASSERT_TRUE(client->close(**f).ok());
    n = client->pread(**g, 0, std::span<uint8_t>(buf.data(), 4096));
    ASSERT_TRUE(n.ok());
    EXPECT_TRUE(std::equal(buf.begin(), buf.begin() + 4096, pattern(4096, 15).begin()));
    size_t chunks = 0;
    for (auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file() && e.path().parent_path().parent_path().filename() == "chunks") ++chunks;
    EXPECT_GE(chunks, 2u);
    ASSERT_TRUE(client->close(**g).ok()); // the last close: now the data goes
    chunks = 0;
    for (auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file() && e.path().parent_path().parent_path().filename() == "chunks") ++chunks;
    EXPECT_EQ(chunks, 0u);
}

TEST_F(ClientTest, BadPathsAndNamesGetClearErrorsAndChangeNothing) {
    EXPECT_EQ(client->mkdir(std::string("/a\0b", 4)).status().code(), Code::invalid);
    EXPECT_EQ(client->mkdir("relative").status().code(), Code::invalid);
    EXPECT_EQ(client->mkdir("").status().code(), Code::invalid);
    EXPECT_EQ(client->mkdir("/" + std::string(256, 'n')).status().code(), Code::name_too_long);
    EXPECT_TRUE(client->mkdir("/" + std::string(255, 'n')).ok());
    std::string deep;
    while (deep.size() < 4096) deep += "/d";
    EXPECT_EQ(client->stat(deep).status().code(), Code::name_too_long);
    EXPECT_EQ(client->open("/", O_WRONLY | O_CREAT).status().code(), Code::invalid);
    EXPECT_EQ(client->rmdir("/").code(), Code::invalid);
    // ".." is taken lexically, and never above the root.
    ASSERT_TRUE(client->mkdir("/p").ok());
    ASSERT_TRUE(client->mkdir("/p/q").ok());
    EXPECT_EQ(client->stat("/p/q/..")->ino, client->stat("/p")->ino);
    EXPECT_EQ(client->stat("/../../p")->ino, client->stat("/p")->ino);
    auto root = client->list("/");
    ASSERT_TRUE(root.ok());
    EXPECT_EQ(root->size(), 2u); // "p" and the 255-byte name, nothing from the failures
}

// A data disk that fills up: ENOSPC for the writer, nothing already written lost, and the
// space usable again once the file is gone.
TEST(ClientFullDiskTest, SmallDataDirectoryGivesEnospcAndLosesNothing) {
    test::TempDir dir("jobfs-full");
    ASSERT_EQ(::system(("mount -t tmpfs -o size=48m jobfs-test " + dir.path()).c_str()), 0)
        << "this test mounts a small tmpfs and needs root";
    struct Unmount {
        std::string p;
        ~Unmount() { (void)!::system(("umount -l " + p).c_str()); }
    } unmount{dir.path()};
    LocalClusterOptions o;
    o.jobfsd = jobfsd_path();
    o.dir = dir.path() + "/cluster";
    o.daemons = 3;
    o.extra_args = {"--chunk-size", "1M"};
    auto cluster = LocalCluster::start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status().to_string();
    auto c = Client::connect((*cluster)->info());
    ASSERT_TRUE(c.ok());
    Client& cl = **c;
    auto keep = cl.open("/keep", O_WRONLY | O_CREAT, 0644, Layout{1 << 20, 0});
    ASSERT_TRUE(keep.ok());
    ASSERT_TRUE(cl.pwrite(**keep, 0, pattern(8 << 20, 21)).ok());
    ASSERT_TRUE(cl.close(**keep).ok());

    auto big = cl.open("/big", O_WRONLY | O_CREAT, 0644, Layout{1 << 20, 0});
    ASSERT_TRUE(big.ok());
    Status s;
    uint64_t written = 0;
    for (; written < (96u << 20) && s.ok(); written += 4 << 20) s = cl.pwrite(**big, written, pattern(4 << 20, 22));
    ASSERT_FALSE(s.ok()) << "96 MiB fit into a 48 MiB file system";
    EXPECT_EQ(s.to_errno(), ENOSPC) << s.to_string();
    (void)cl.close(**big);

    auto again = cl.open("/keep", O_RDONLY);
    ASSERT_TRUE(again.ok());
    std::vector<uint8_t> back(8 << 20);
    auto n = cl.pread(**again, 0, back);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    EXPECT_EQ(back, pattern(8 << 20, 21));
    ASSERT_TRUE(cl.close(**again).ok());

    ASSERT_TRUE(cl.unlink("/big").ok());
    auto after = cl.open("/after", O_WRONLY | O_CREAT, 0644, Layout{1 << 20, 0});
    ASSERT_TRUE(after.ok());
    EXPECT_TRUE(cl.pwrite(**after, 0, pattern(16 << 20, 23)).ok());
    EXPECT_TRUE(cl.close(**after).ok());
    // With write behind, the writer learns of ENOSPC at a later write or at close at the latest.
    ClientOptions wbo;
    wbo.write_behind_bytes = 8 << 20;
    auto wbc = Client::connect((*cluster)->info(), wbo);
    ASSERT_TRUE(wbc.ok());
    auto wb = (*wbc)->open("/wb", O_WRONLY | O_CREAT, 0644, Layout{1 << 20, 0});
    ASSERT_TRUE(wb.ok());
    Status ws;
    for (uint64_t off = 0; off < (96u << 20) && ws.ok(); off += 1 << 20) ws = (*wbc)->pwrite(**wb, off, pattern(1 << 20, 24));
    Status wclose = (*wbc)->close(**wb);
    Status reported = ws.ok() ? wclose : ws;
    EXPECT_EQ(reported.to_errno(), ENOSPC) << reported.to_string();
    EXPECT_FALSE(wclose.ok());
    wbc->reset();
    c->reset();
    EXPECT_TRUE((*cluster)->stop().ok());
}

} // namespace
} // namespace jobfs::client
