// chunk_store_test: chunk files with block checksums on a real local file system (and a tiny
// tmpfs for ENOSPC), checked against an in-memory model of each chunk.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "block_crc.h"
#include "local_read_socket.h"
#include "server/buffer_pool.h"
#include "server/chunk_stamps.h"
#include "server/chunk_store.h"
#include "test_util.h"

namespace jobfs::server {
namespace {

namespace fs = std::filesystem;
using test::pattern;
using test::TempDir;

constexpr uint64_t kChunk = 1 << 20; // small chunks keep the tests fast

std::string chunk_file(const std::string& dir, ChunkId id) {
    char b[64];
    std::snprintf(b, sizeof b, "/chunks/%02llx/%016llx.%08llx", static_cast<unsigned long long>(id.ino % 256),
                  static_cast<unsigned long long>(id.ino), static_cast<unsigned long long>(id.index));
    return dir + b;
}

TEST(ChunkStore, WritesReadBackAcrossBlocks) {
    TempDir d;
    auto st = ChunkStore::open(d.path(), kChunk);
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    ChunkId id{0x10002, 3};
    auto data = pattern(200000, 1);
    ASSERT_TRUE((*st)->write(id, 1000, data).ok());
    std::vector<uint8_t> out(250000, 0xee);
    auto n = (*st)->read(id, 0, out);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    EXPECT_EQ(*n, 201000u);
    EXPECT_TRUE(std::all_of(out.begin(), out.begin() + 1000, [](uint8_t c) { return c == 0; }));
    EXPECT_TRUE(std::equal(data.begin(), data.end(), out.begin() + 1000));
    EXPECT_EQ(*(*st)->length(id), 201000u);
}

TEST(ChunkStore, RandomOperationsMatchAModel) {
    TempDir d;
    auto st = ChunkStore::open(d.path(), kChunk);
    ASSERT_TRUE(st.ok());
    std::mt19937_64 rng(7);
    std::vector<uint8_t> model;
    ChunkId id{42, 0};
    for (int i = 0; i < 400; ++i) {
        int op = static_cast<int>(rng() % 10);
        if (op < 6) {
            uint64_t off = rng() % kChunk;
            uint64_t len = 1 + rng() % std::min<uint64_t>(kChunk - off, 3 * ChunkStore::kBlockSize);
            auto data = pattern(len, static_cast<uint32_t>(i));
            // Half the writes bring their pieces' checksums, as chunk writes from clients do.
            const auto crcs = (i % 2) ? transport::block_crcs(off, data) : std::vector<uint32_t>{};
            ASSERT_TRUE((*st)->write(id, off, data, crcs).ok()) << "op " << i;
            if (model.size() < off + len) model.resize(off + len, 0);
            std::copy(data.begin(), data.end(), model.begin() + off);
        } else if (op < 8) {
            uint64_t len = rng() % kChunk;
            ASSERT_TRUE((*st)->truncate(id, len).ok()) << "op " << i;
            model.resize(len, 0);
        } else {
            uint64_t off = rng() % kChunk;
            uint64_t len = 1 + rng() % (4 * ChunkStore::kBlockSize);
            std::vector<uint8_t> out(len, 0xcc);
            std::vector<uint32_t> crcs;
            auto n = (*st)->read(id, off, out, &crcs);
            ASSERT_TRUE(n.ok()) << "op " << i << ": " << n.status().to_string();
            uint64_t expect = off >= model.size() ? 0 : std::min<uint64_t>(len, model.size() - off);
            ASSERT_EQ(*n, expect) << "op " << i;
            ASSERT_TRUE(std::equal(out.begin(), out.begin() + expect, model.begin() + off)) << "op " << i;
            // The checksums a reply carries: the stored ones where whole blocks are returned.
            ASSERT_EQ(crcs, transport::block_crcs(off, std::span<const uint8_t>(out.data(), expect))) << "op " << i;
        }
    }
    std::vector<uint8_t> all(kChunk);
    std::vector<uint32_t> crcs;
    auto n = (*st)->read(id, 0, all, &crcs);
    ASSERT_TRUE(n.ok());
    ASSERT_EQ(*n, model.size());
    EXPECT_TRUE(std::equal(model.begin(), model.end(), all.begin()));
    EXPECT_EQ(crcs, transport::block_crcs(0, std::span<const uint8_t>(all.data(), *n)));
}

// Direct I/O: page-aligned pieces from page-aligned memory go with O_DIRECT, the rest through
// the page cache, on the same chunks; whatever the mix (overwrites both ways, truncates), every
// read matches the model, and the aligned writes did go direct.
TEST(ChunkStore, DirectWritesMixWithBufferedOnesAndMatchAModel) {
    TempDir d;
    auto st = ChunkStore::open(d.path(), kChunk, true);
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    if (!(*st)->direct_io()) GTEST_SKIP() << d.path() << " has no O_DIRECT";
    BufferPool pool(0);
    std::mt19937_64 rng(11);
    std::vector<uint8_t> model;
    const ChunkId id{43, 0};
    uint64_t aligned_writes = 0;
    for (int i = 0; i < 300; ++i) {
        const int op = static_cast<int>(rng() % 10);
        if (op < 7) {
            const bool aligned = op < 4;
            uint64_t off, len;
            if (aligned) {
                off = (rng() % (kChunk / 4096)) * 4096;
                len = 4096 * (1 + rng() % std::min<uint64_t>((kChunk - off) / 4096, 48));
            } else {
                off = rng() % kChunk;
                len = 1 + rng() % std::min<uint64_t>(kChunk - off, 3 * ChunkStore::kBlockSize);
            }
            const auto bytes = pattern(len, static_cast<uint32_t>(i));
            auto buf = pool.get(len); // page-aligned, as the daemon's receive buffers
            std::copy(bytes.begin(), bytes.end(), buf->data());
            const std::span<const uint8_t> data(buf->data(), len);
            const auto crcs = (i % 2) ? transport::block_crcs(off, data) : std::vector<uint32_t>{};
            ASSERT_TRUE((*st)->write(id, off, data, crcs).ok()) << "op " << i;
            aligned_writes += aligned;
            if (model.size() < off + len) model.resize(off + len, 0);
            std::copy(bytes.begin(), bytes.end(), model.begin() + off);
        } else if (op < 8) {
            const uint64_t len = rng() % kChunk;
            ASSERT_TRUE((*st)->truncate(id, len).ok()) << "op " << i;
            model.resize(len, 0);
        } else {
            std::vector<uint8_t> all(kChunk, 0xcc);
            auto n = (*st)->read(id, 0, all);
            ASSERT_TRUE(n.ok()) << "op " << i << ": " << n.status().to_string();
            ASSERT_EQ(*n, model.size()) << "op " << i;
            ASSERT_TRUE(std::equal(model.begin(), model.end(), all.begin())) << "op " << i;
        }
    }
    EXPECT_EQ((*st)->direct_writes(), aligned_writes);
    EXPECT_GT(aligned_writes, 50u);
    // A reopened store (no page cache state of ours) reads the same.
    st->reset();
    auto again = ChunkStore::open(d.path(), kChunk, true);
    ASSERT_TRUE(again.ok());
    std::vector<uint8_t> all(kChunk);
    auto n = (*again)->read(id, 0, all);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    ASSERT_EQ(*n, model.size());
    EXPECT_TRUE(std::equal(model.begin(), model.end(), all.begin()));
}

// The floor of direct writes: an aligned piece below it goes through the page cache (small
// direct writes each wait for the disk), one at or above it goes direct; both read back.
TEST(ChunkStore, AlignedPiecesBelowTheDirectFloorGoThroughThePageCache) {
    TempDir d;
    auto st = ChunkStore::open(d.path(), kChunk, true, 256 * 1024);
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    if (!(*st)->direct_io()) GTEST_SKIP() << d.path() << " has no O_DIRECT";
    BufferPool pool(0);
    const auto small = pattern(64 * 1024, 1), large = pattern(256 * 1024, 2);
    auto sb = pool.get(small.size()), lb = pool.get(large.size());
    std::copy(small.begin(), small.end(), sb->data());
    std::copy(large.begin(), large.end(), lb->data());
    ASSERT_TRUE((*st)->write(ChunkId{5, 0}, 0, std::span<const uint8_t>(sb->data(), small.size())).ok());
    EXPECT_EQ((*st)->direct_writes(), 0u);
    ASSERT_TRUE((*st)->write(ChunkId{5, 0}, 256 * 1024, std::span<const uint8_t>(lb->data(), large.size())).ok());
    EXPECT_EQ((*st)->direct_writes(), 1u);
    // The small piece again over the direct one's range, then everything read back.
    ASSERT_TRUE((*st)->write(ChunkId{5, 0}, 256 * 1024, std::span<const uint8_t>(sb->data(), small.size())).ok());
    EXPECT_EQ((*st)->direct_writes(), 1u);
    std::vector<uint8_t> want(512 * 1024, 0);
    std::copy(small.begin(), small.end(), want.begin());
    std::copy(large.begin(), large.end(), want.begin() + 256 * 1024);
    std::copy(small.begin(), small.end(), want.begin() + 256 * 1024);
    std::vector<uint8_t> back(want.size());
    auto n = (*st)->read(ChunkId{5, 0}, 0, back);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    ASSERT_EQ(*n, want.size());
    EXPECT_EQ(back, want);
}

// Pages of a chunk's bytes (past its checksums, which are small writes of their own) that
// are dirty, not yet handed to the disk, by cachestat(2) (Linux 6.5); nullopt where the kernel
// has no cachestat.
std::optional<uint64_t> dirty_pages(const std::string& file) {
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
    struct {
        uint64_t off, len;
    } range{ChunkStore::kDataOffset, 0}; // len 0: to the end of the file
    struct {
        uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
    } cs{};
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    const long rc = ::syscall(__NR_cachestat, fd, &range, &cs, 0);
    ::close(fd);
    if (rc != 0) return std::nullopt;
    return cs.nr_dirty;
}

// Early writeback: a large piece written through the page cache is handed to the disk at once
// (nothing of it is left dirty right after the write), a small one is left to the kernel. The
// bytes read back either way.
TEST(ChunkStore, LargeBufferedPiecesAreWrittenBackAtOnce) {
    TempDir d;
    auto st = ChunkStore::open(d.path(), kChunk, false, 256 * 1024, 256 * 1024);
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    const auto small = pattern(64 * 1024, 3), large = pattern(512 * 1024, 4);
    ASSERT_TRUE((*st)->write(ChunkId{7, 0}, 0, small).ok());
    ASSERT_TRUE((*st)->write(ChunkId{8, 0}, 0, large).ok());
    auto small_dirty = dirty_pages(chunk_file(d.path(), ChunkId{7, 0}));
    auto large_dirty = dirty_pages(chunk_file(d.path(), ChunkId{8, 0}));
    if (!small_dirty || !large_dirty) GTEST_SKIP() << "no cachestat(2) on this kernel";
    EXPECT_GT(*small_dirty, 0u) << "a 64 KiB piece was written back at once";
    EXPECT_EQ(*large_dirty, 0u) << "a 512 KiB piece was left dirty";
    std::vector<uint8_t> back(large.size());
    auto n = (*st)->read(ChunkId{8, 0}, 0, back);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    EXPECT_EQ(back, large);
    EXPECT_EQ((*st)->direct_writes(), 0u);
}

// A chunk is one file (its checksums first, then its bytes): one inode to create per chunk.
TEST(ChunkStore, EachChunkIsOneFileWithItsBytesAfterTheChecksums) {
    TempDir d;
    auto st = ChunkStore::open(d.path(), kChunk);
    ASSERT_TRUE(st.ok());
    const auto data = pattern(100000, 8);
    for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE((*st)->write(ChunkId{0x105, i}, 0, data).ok());
    const fs::path dir = fs::path(chunk_file(d.path(), ChunkId{0x105, 0})).parent_path();
    EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 3);
    std::ifstream in(chunk_file(d.path(), ChunkId{0x105, 2}), std::ios::binary);
    std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), {});
    ASSERT_EQ(file.size(), ChunkStore::kDataOffset + data.size());
    EXPECT_TRUE(std::equal(data.begin(), data.end(), file.begin() + ChunkStore::kDataOffset));
}

// A directory of chunks in another layout (an older jobfs's: a .crc file beside each chunk, no
// layout mark; or another version's mark, such as layout 2's, whose bytes started at 128 KiB)
// is refused at open, with the reason, and left as it is; a new directory is marked and opens
// again.
TEST(ChunkStore, ChunksOfAnotherLayoutAreRefusedAtOpen) {
    TempDir d;
    {
        auto st = ChunkStore::open(d.path(), kChunk);
        ASSERT_TRUE(st.ok()) << st.status().to_string();
        ASSERT_TRUE((*st)->write(ChunkId{3, 0}, 0, pattern(1000, 1)).ok());
    }
    auto again = ChunkStore::open(d.path(), kChunk);
    ASSERT_TRUE(again.ok()) << again.status().to_string();
    EXPECT_EQ(*(*again)->length(ChunkId{3, 0}), 1000u);

    TempDir old;
    fs::create_directories(old.path() + "/chunks/05");
    std::ofstream(chunk_file(old.path(), ChunkId{5, 0})) << "old bytes";
    std::ofstream(chunk_file(old.path(), ChunkId{5, 0}) + ".crc") << "old crcs";
    auto refused = ChunkStore::open(old.path(), kChunk);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), Code::invalid);
    EXPECT_NE(refused.status().message().find("older jobfs"), std::string::npos) << refused.status().to_string();
    EXPECT_FALSE(fs::exists(old.path() + "/chunks/.layout")); // not marked: still refused next time
    EXPECT_FALSE(ChunkStore::open(old.path(), kChunk).ok());

    std::ofstream(d.path() + "/chunks/.layout", std::ios::trunc)
        << "jobfs chunk layout 2: one file per chunk, 128 KiB of CRC32C entries, then the bytes\n";
    auto other = ChunkStore::open(d.path(), kChunk);
    ASSERT_FALSE(other.ok());
    EXPECT_EQ(other.status().code(), Code::invalid);
    EXPECT_NE(other.status().message().find("jobfs chunk layout 2"), std::string::npos) << other.status().to_string();
    EXPECT_NE(other.status().message().find("another jobfs version"), std::string::npos) << other.status().to_string();
}

TEST(ChunkStore, HolesAreNotAllocatedAndReadAsZeros) {
    TempDir d;
    auto st = ChunkStore::open(d.path(), 4 << 20);
    ASSERT_TRUE(st.ok());
    ChunkId id{7, 1};
    auto data = pattern(4096, 3);
    ASSERT_TRUE((*st)->write(id, 3 << 20, data).ok());
    struct stat s {};
    ASSERT_EQ(::stat(chunk_file(d.path(), id).c_str(), &s), 0);
    EXPECT_EQ(s.st_size, ChunkStore::kDataOffset + (3 << 20) + 4096);
    EXPECT_LT(s.st_blocks * 512, 64 * 1024) << "the 3 MiB hole was allocated";
    std::vector<uint8_t> out(3 << 20, 0xff);
    std::vector<uint32_t> crcs;
    auto n = (*st)->read(id, 0, out, &crcs);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, out.size());
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t c) { return c == 0; }));
    EXPECT_EQ(crcs, transport::block_crcs(0, out)) << "a hole's blocks have no stored checksum";
}

// Whether the kernel holds the page at `offset` of `path` in its page cache (mincore of a
// mapping, which looks without reading it).
bool page_cached(const std::string& path, off_t offset) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const long page = ::sysconf(_SC_PAGESIZE);
    void* m = ::mmap(nullptr, static_cast<size_t>(page), PROT_READ, MAP_SHARED, fd, offset);
    ::close(fd);
    if (m == MAP_FAILED) return false;
    unsigned char in = 0;
    const bool ok = ::mincore(m, static_cast<size_t>(page), &in) == 0;
    ::munmap(m, static_cast<size_t>(page));
    return ok && (in & 1);
}

// The checksums of a chunk it has written or read are kept by the store (crc_table_cache.h):
// once the kernel dropped the chunk file's first page, reads and describes do not wait for it
// to be read again. Without them, both read it back.
TEST(ChunkStore, ChecksumsOfAChunkInUseAreNotReadFromItsFileAgain) {
    TempDir d;
    auto st = ChunkStore::open(d.path(), 4 << 20);
    ASSERT_TRUE(st.ok());
    const ChunkId id{11, 0};
    const auto data = pattern(1 << 20, 9);
    ASSERT_TRUE((*st)->write(id, 0, data).ok());
    ASSERT_TRUE((*st)->sync(id).ok()); // clean pages, which the kernel may drop
    const std::string file = chunk_file(d.path(), id);
    {
        const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::posix_fadvise(fd, 0, static_cast<off_t>(ChunkStore::kDataOffset), POSIX_FADV_DONTNEED), 0);
        ::close(fd);
    }
    if (page_cached(file, 0)) GTEST_SKIP() << "the kernel kept the page it was asked to drop";
    std::vector<uint8_t> out(data.size());
    auto n = (*st)->read(id, 0, out);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    EXPECT_TRUE(std::equal(data.begin(), data.end(), out.begin()));
    auto v = (*st)->describe(id, 100000, 300000);
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    const auto crcs = transport::block_crcs(0, data);
    EXPECT_EQ(v->crcs, std::vector<uint32_t>(crcs.begin() + 1, crcs.begin() + 7)); // blocks 1..6
    EXPECT_FALSE(page_cached(file, 0)) << "the checksums were read from the file again";
}

// Bytes this process has read with read and pread so far (/proc/self/io, rchar).
uint64_t bytes_read_so_far() {
    std::ifstream io("/proc/self/io");
    for (std::string key; io >> key;) {
        uint64_t v = 0;
        io >> v;
        if (key == "rchar:") return v;
    }
    return 0;
}

// A chunk written piece after piece, each past its end (a checkpoint's stream): a write needs
// the old checksums only of blocks whose old bytes it keeps, and these keep none, so nothing
// is read; with the checksum table cached, each such write read it again from the file.
TEST(ChunkStore, WritesPastTheEndReadNothing) {
    TempDir d;
    auto st = ChunkStore::open(d.path(), 4 << 20);
    ASSERT_TRUE(st.ok());
    const ChunkId id{12, 0};
    const auto data = pattern(4 << 20, 10);
    constexpr size_t kPiece = 512 << 10;
    ASSERT_TRUE((*st)->write(id, 0, std::span(data).first(kPiece)).ok());
    // Reading /proc/self/io counts too: what one look costs, seen between two looks.
    const uint64_t probe = bytes_read_so_far();
    const uint64_t before = bytes_read_so_far();
    for (size_t off = kPiece; off < data.size(); off += kPiece)
        ASSERT_TRUE((*st)->write(id, off, std::span(data).subspan(off, kPiece)).ok());
    EXPECT_EQ(bytes_read_so_far() - before, before - probe) << "the writes read the chunk file";
    std::vector<uint8_t> out(data.size());
    ASSERT_TRUE((*st)->read(id, 0, out).ok());
    EXPECT_EQ(out, data);
}

// A local reader's descriptor of chunk id's file (ChunkStore::open_for_reader), and the first
// n bytes of the chunk read through it.
transport::UniqueFd reader_of(ChunkStore& st, ChunkId id) {
    auto fd = st.open_for_reader(id);
    EXPECT_TRUE(fd.ok()) << fd.status().to_string();
    return transport::UniqueFd(fd.ok() ? *fd : -1);
}
std::vector<uint8_t> chunk_bytes_through(const transport::UniqueFd& reader, size_t n) {
    std::vector<uint8_t> out(n);
    const ssize_t got = ::pread(reader.get(), out.data(), n, ChunkStore::kDataOffset);
    out.resize(got > 0 ? static_cast<size_t>(got) : 0);
    return out;
}

// A shortening truncate writes the kept part to a new file that replaces the chunk's: a
// local reader's descriptor (and mapping) of the old file keeps every byte it had, never a
// page past the end (a SIGBUS in a mapping reader). Without it, the old file was cut in place.
TEST(ChunkStore, ShorteningLeavesAReadersFileWhole) {
    TempDir d;
    auto st = ChunkStore::open(d.path(), kChunk);
    ASSERT_TRUE(st.ok());
    ChunkId id{9, 2};
    auto data = pattern(kChunk, 4);
    ASSERT_TRUE((*st)->write(id, 0, data).ok());
    const transport::UniqueFd reader = reader_of(**st, id);
    ASSERT_TRUE((*st)->truncate(id, 100000).ok());
    struct stat s {};
    ASSERT_EQ(::fstat(reader.get(), &s), 0);
    EXPECT_EQ(static_cast<uint64_t>(s.st_size), ChunkStore::kDataOffset + kChunk) << "the reader's file was cut";
    EXPECT_EQ(chunk_bytes_through(reader, kChunk), data);
    // The chunk itself is cut: its length, bytes and checksums (the last block re-checksummed).
    EXPECT_EQ(*(*st)->length(id), 100000u);
    std::vector<uint8_t> out(kChunk);
    std::vector<uint32_t> crcs;
    auto n = (*st)->read(id, 0, out, &crcs);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    ASSERT_EQ(*n, 100000u);
    EXPECT_TRUE(std::equal(out.begin(), out.begin() + 100000, data.begin()));
    EXPECT_EQ(crcs, transport::block_crcs(0, std::span(out).first(100000)));
    // Nothing is left beside it, and growing it again reads zeros past the cut.
    EXPECT_EQ(std::distance(fs::directory_iterator(fs::path(chunk_file(d.path(), id)).parent_path()), fs::directory_iterator{}), 1);
    ASSERT_TRUE((*st)->truncate(id, 300000).ok());
    ASSERT_EQ(*(*st)->read(id, 0, out), 300000u);
    EXPECT_TRUE(std::equal(out.begin(), out.begin() + 100000, data.begin()));
    EXPECT_TRUE(std::all_of(out.begin() + 100000, out.begin() + 300000, [](uint8_t c) { return c == 0; }));
}

// A daemon killed between writing a shortened copy and renaming it over the chunk leaves the
// copy behind: the next open of the store removes it and keeps the chunk as it was.
TEST(ChunkStore, OpenRemovesAShortenedCopyLeftBehind) {
    TempDir d;
    ChunkId id{9, 3};
    auto data = pattern(200000, 8);
    const std::string p = chunk_file(d.path(), id);
    {
        auto st = ChunkStore::open(d.path(), kChunk);
        ASSERT_TRUE(st.ok());
        ASSERT_TRUE((*st)->write(id, 0, data).ok());
    }
    fs::copy_file(p, p + ".shortened");
    auto st = ChunkStore::open(d.path(), kChunk);
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    EXPECT_FALSE(fs::exists(p + ".shortened"));
    std::vector<uint8_t> out(data.size());
    ASSERT_EQ(*(*st)->read(id, 0, out), data.size());
    EXPECT_EQ(out, data);
}

// Truncated to nothing, a chunk's file goes (an absent chunk reads as an empty one); a reader
// of the old file keeps it.
TEST(ChunkStore, TruncateToZeroRemovesTheChunkFile) {
    TempDir d;
    auto st = ChunkStore::open(d.path(), kChunk);
    ASSERT_TRUE(st.ok());
    ChunkId id{9, 0};
    auto data = pattern(200000, 5);
    ASSERT_TRUE((*st)->write(id, 0, data).ok());
    const transport::UniqueFd reader = reader_of(**st, id);
    ASSERT_TRUE((*st)->truncate(id, 0).ok());
    EXPECT_FALSE(fs::exists(chunk_file(d.path(), id)));
    EXPECT_TRUE((*st)->chunk_indexes(9)->empty());
    EXPECT_EQ(*(*st)->length(id), 0u);
    EXPECT_EQ(chunk_bytes_through(reader, data.size()), data);
    // Written again, it is a new chunk with only the new bytes.
    ASSERT_TRUE((*st)->write(id, 65536, std::span(data).first(1000)).ok());
    std::vector<uint8_t> out(200000, 0xff);
    ASSERT_EQ(*(*st)->read(id, 0, out), 66536u);
    EXPECT_TRUE(std::all_of(out.begin(), out.begin() + 65536, [](uint8_t c) { return c == 0; }));
}

// The shortened copy keeps the chunk's holes unallocated.
TEST(ChunkStore, ShorteningKeepsHoles) {
    TempDir d;
    auto st = ChunkStore::open(d.path(), 4 << 20);
    ASSERT_TRUE(st.ok());
    ChunkId id{7, 2};
    auto head = pattern(4096, 6), tail = pattern(4096, 7);
    ASSERT_TRUE((*st)->write(id, 0, head).ok());
    ASSERT_TRUE((*st)->write(id, 3 << 20, tail).ok());
    ASSERT_TRUE((*st)->truncate(id, (3 << 20) + 100).ok());
    struct stat s {};
    ASSERT_EQ(::stat(chunk_file(d.path(), id).c_str(), &s), 0);
    EXPECT_EQ(s.st_size, ChunkStore::kDataOffset + (3 << 20) + 100);
    EXPECT_LT(s.st_blocks * 512, 64 * 1024) << "the 3 MiB hole was allocated in the copy";
    std::vector<uint8_t> out((3 << 20) + 100, 0xff);
    ASSERT_EQ(*(*st)->read(id, 0, out), out.size());
    EXPECT_TRUE(std::equal(head.begin(), head.end(), out.begin()));
    EXPECT_TRUE(std::all_of(out.begin() + 4096, out.begin() + (3 << 20), [](uint8_t c) { return c == 0; }));
    EXPECT_TRUE(std::equal(tail.begin(), tail.begin() + 100, out.begin() + (3 << 20)));
}

TEST(ChunkStore, CorruptionIsDetectedNotReturned) {
    TempDir d;
    auto st = ChunkStore::open(d.path(), kChunk);
    ASSERT_TRUE(st.ok());
    ChunkId id{9, 0};
    auto data = pattern(kChunk, 4);
    ASSERT_TRUE((*st)->write(id, 0, data).ok());
    st->reset(); // nothing cached: the next open reads the disk
    {
        std::fstream f(chunk_file(d.path(), id), std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(ChunkStore::kDataOffset + 3 * ChunkStore::kBlockSize + 17);
        char c = static_cast<char>(data[3 * ChunkStore::kBlockSize + 17] ^ 0x40);
        f.write(&c, 1);
    }
    auto st2 = ChunkStore::open(d.path(), kChunk);
    ASSERT_TRUE(st2.ok());
    std::vector<uint8_t> out(100);
    auto bad = (*st2)->read(id, 3 * ChunkStore::kBlockSize, out);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), Code::io);
    EXPECT_NE(bad.status().message().find("checksum"), std::string::npos);
    auto good = (*st2)->read(id, 5 * ChunkStore::kBlockSize, out); // other blocks are fine
    ASSERT_TRUE(good.ok());
    EXPECT_TRUE(std::equal(out.begin(), out.end(), data.begin() + 5 * ChunkStore::kBlockSize));
    // A write that only partly covers the corrupt block refuses to bless it with a new checksum.
    auto w = (*st2)->write(id, 3 * ChunkStore::kBlockSize + 100, std::vector<uint8_t>(10, 1));
    EXPECT_EQ(w.code(), Code::io);
}

TEST(ChunkStore, MissingChunkReadsNothing) {
    TempDir d;
    auto st = ChunkStore::open(d.path(), kChunk);
    ASSERT_TRUE(st.ok());
    std::vector<uint8_t> out(10);
    auto n = (*st)->read(ChunkId{1, 1}, 0, out);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 0u);
    EXPECT_EQ(*(*st)->length(ChunkId{1, 1}), 0u);
}

TEST(ChunkStore, PersistsAcrossReopen) {
    TempDir d;
    auto data = pattern(300000, 5);
    {
        auto st = ChunkStore::open(d.path(), kChunk);
        ASSERT_TRUE(st.ok());
        ASSERT_TRUE((*st)->write(ChunkId{5, 2}, 12345, data).ok());
        ASSERT_TRUE((*st)->sync(ChunkId{5, 2}).ok());
    }
    auto st = ChunkStore::open(d.path(), kChunk);
    ASSERT_TRUE(st.ok());
    std::vector<uint8_t> out(data.size());
    auto n = (*st)->read(ChunkId{5, 2}, 12345, out);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(out, data);
}

TEST(ChunkStore, SyncFileSyncsTheFilesChunksAndCreatesNone) {
    TempDir d;
    auto data = pattern(200000, 9);
    {
        auto st = ChunkStore::open(d.path(), kChunk);
        ASSERT_TRUE(st.ok());
        for (uint64_t idx : {0, 3, 7}) ASSERT_TRUE((*st)->write(ChunkId{7, idx}, 1000 * idx, data).ok());
        ASSERT_TRUE((*st)->write(ChunkId{8, 0}, 0, data).ok());
        ASSERT_TRUE((*st)->sync_file(7).ok());
        ASSERT_TRUE((*st)->sync_file(12345).ok()); // no chunk here: nothing to do
        auto ext = (*st)->extents();
        ASSERT_TRUE(ext.ok());
        EXPECT_EQ(*ext, (std::vector<std::pair<uint64_t, uint64_t>>{{7, 8}, {8, 1}})) << "sync_file made a chunk";
        ASSERT_TRUE((*st)->remove_file(7).ok());
        ASSERT_TRUE((*st)->sync_file(7).ok()); // removed: nothing left to sync
    }
    auto st = ChunkStore::open(d.path(), kChunk);
    ASSERT_TRUE(st.ok());
    std::vector<uint8_t> out(data.size());
    ASSERT_EQ(*(*st)->read(ChunkId{8, 0}, 0, out), data.size());
    EXPECT_EQ(out, data);
    EXPECT_EQ(*(*st)->length(ChunkId{7, 3}), 0u);
}

TEST(ChunkStore, RemoveFileDeletesEveryChunk) {
    TempDir d;
    auto st = ChunkStore::open(d.path(), kChunk);
    ASSERT_TRUE(st.ok());
    for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE((*st)->write(ChunkId{77, i}, 0, pattern(1000, 1)).ok());
    ASSERT_TRUE((*st)->write(ChunkId{78, 0}, 0, pattern(1000, 1)).ok());
    ASSERT_TRUE((*st)->remove_file(77).ok());
    for (uint64_t i = 0; i < 5; ++i) {
        EXPECT_EQ(*(*st)->length(ChunkId{77, i}), 0u);
        EXPECT_FALSE(fs::exists(chunk_file(d.path(), ChunkId{77, i})));
    }
    // Nothing else of the file is left beside its chunks either (77's directory is its own).
    EXPECT_TRUE(fs::is_empty(fs::path(chunk_file(d.path(), ChunkId{77, 0})).parent_path()));
    EXPECT_EQ(*(*st)->length(ChunkId{78, 0}), 1000u); // a neighbour in the same directory stays
    EXPECT_TRUE((*st)->remove_file(77).ok());         // idempotent
}

TEST(ChunkStore, ConcurrentWritersOnOneChunkAndMany) {
    TempDir d;
    auto st = ChunkStore::open(d.path(), kChunk);
    ASSERT_TRUE(st.ok());
    constexpr int kThreads = 4;
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t) {
        ts.emplace_back([&, t] {
            for (int i = 0; i < 16; ++i) {
                // Disjoint 16 KiB slices of one shared chunk, and a chunk of our own.
                uint64_t off = static_cast<uint64_t>((i * kThreads + t) * 16384);
                EXPECT_TRUE((*st)->write(ChunkId{1, 0}, off, pattern(16384, static_cast<uint32_t>(off))).ok());
                EXPECT_TRUE((*st)->write(ChunkId{100 + static_cast<uint64_t>(t), 0}, off, pattern(16384, 9)).ok());
            }
        });
    }
    for (auto& t : ts) t.join();
    std::vector<uint8_t> out(16384);
    for (int k = 0; k < 16 * kThreads; ++k) {
        uint64_t off = static_cast<uint64_t>(k) * 16384;
        auto n = (*st)->read(ChunkId{1, 0}, off, out);
        ASSERT_TRUE(n.ok()) << n.status().to_string();
        ASSERT_EQ(out, pattern(16384, static_cast<uint32_t>(off))) << "slice " << k;
    }
}

TEST(ChunkStore, BadArgumentsAreInvalid) {
    TempDir d;
    EXPECT_EQ(ChunkStore::open(d.path(), 1000).status().code(), Code::invalid);
    auto st = ChunkStore::open(d.path(), kChunk);
    ASSERT_TRUE(st.ok());
    EXPECT_EQ((*st)->write(ChunkId{1, 0}, kChunk - 10, pattern(11, 1)).code(), Code::invalid);
    EXPECT_EQ((*st)->truncate(ChunkId{1, 0}, kChunk + 1).code(), Code::invalid);
    EXPECT_EQ(ChunkStore::open("/proc/no-such-dir/x", kChunk).status().code(), Code::not_found);
}

// A full disk: a tmpfs of 1 MiB that the test mounts (root only; skipped elsewhere).
TEST(ChunkStore, FullDiskGivesNoSpaceAndChangesNothing) {
    TempDir d;
    if (::mount("jobfs-test", d.path().c_str(), "tmpfs", 0, "size=1m") != 0)
        GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << std::strerror(errno);
    struct Unmount {
        std::string p;
        ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
    } unmount{d.path()};
    // Direct I/O asked for, as the daemon does by default, and the writes from page-aligned
    // memory: the reservation fails before any write of either kind (tmpfs takes O_DIRECT
    // since Linux 6.6; an older one refuses it at open and the store writes buffered).
    auto st = ChunkStore::open(d.path(), kChunk, true);
    ASSERT_TRUE(st.ok());
    BufferPool pool(0);
    auto aligned = [&](const std::vector<uint8_t>& v) {
        auto b = pool.get(v.size());
        std::copy(v.begin(), v.end(), b->data());
        return b;
    };
    auto a = pattern(600 * 1024, 11);
    ASSERT_TRUE((*st)->write(ChunkId{1, 0}, 0, *aligned(a)).ok());
    auto b = pattern(600 * 1024, 12);
    Status s = (*st)->write(ChunkId{2, 0}, 0, *aligned(b));
    ASSERT_EQ(s.code(), Code::no_space) << s.to_string();
    EXPECT_EQ(s.to_errno(), ENOSPC);
    // Nothing of the failed write is visible, and the earlier chunk is intact.
    std::vector<uint8_t> out(b.size());
    auto n = (*st)->read(ChunkId{2, 0}, 0, out);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    EXPECT_EQ(*n, 0u);
    std::vector<uint8_t> back(a.size());
    auto m = (*st)->read(ChunkId{1, 0}, 0, back);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(back, a);
    // Overwriting data in place needs no new space and still works on the full disk.
    auto c = pattern(4096, 13);
    ASSERT_TRUE((*st)->write(ChunkId{1, 0}, 8192, c).ok());
    ASSERT_TRUE((*st)->read(ChunkId{1, 0}, 0, back).ok());
    EXPECT_TRUE(std::equal(c.begin(), c.end(), back.begin() + 8192));
    // A shortening truncate needs no room either: with the disk filled to the last block, no
    // copy of the kept part fits, and the chunk is cut in place.
    for (uint64_t k = 0;; ++k) {
        Status w = (*st)->write(ChunkId{3, k}, 0, std::span(c).first(4096));
        if (w.code() == Code::no_space) break;
        ASSERT_TRUE(w.ok()) << w.to_string();
        ASSERT_LT(k, 1000u) << "the 1 MiB disk never filled";
    }
    ASSERT_TRUE((*st)->truncate(ChunkId{1, 0}, 300000).ok());
    EXPECT_EQ(*(*st)->length(ChunkId{1, 0}), 300000u);
    ASSERT_EQ(*(*st)->read(ChunkId{1, 0}, 0, back), 300000u);
    EXPECT_TRUE(std::equal(c.begin(), c.end(), back.begin() + 8192));
    EXPECT_TRUE(std::equal(a.begin() + 8192 + 4096, a.begin() + 300000, back.begin() + 8192 + 4096));
    // Space freed by removing a file can be used again.
    ASSERT_TRUE((*st)->remove_file(3).ok());
    ASSERT_TRUE((*st)->remove_file(1).ok());
    EXPECT_TRUE((*st)->write(ChunkId{2, 0}, 0, *aligned(b)).ok());
    ASSERT_TRUE((*st)->read(ChunkId{2, 0}, 0, out).ok());
    EXPECT_EQ(out, b);
}

// The chunk stamps (server/chunk_stamps.h): a file's counter moves by two around every write,
// truncate and removal of its chunks (once before, once after), describe says the counter from
// before it looked, another file's counter stays, and a reader's descriptor of the table cannot
// be mapped writable.
TEST(ChunkStore, StampsMoveAroundEveryChangeOfAFilesChunks) {
    TempDir dir;
    auto st = ChunkStore::open(dir.path(), kChunk);
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    ChunkStore& store = **st;
    server::ChunkStamps* stamps = store.stamps();
    ASSERT_NE(stamps, nullptr);
    const uint64_t ino = 0x51;
    uint64_t other = ino + 1;
    while (transport::stamp_slot(other) == transport::stamp_slot(ino)) ++other;
    const ChunkId id{ino, 3};
    const uint64_t before = stamps->stamp(ino), other_before = stamps->stamp(other);
    ASSERT_TRUE(store.write(id, 0, pattern(100000, 1)).ok());
    EXPECT_EQ(stamps->stamp(ino), before + 2);
    auto v = store.describe(id, 0, kChunk);
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(v->stamp, before + 2);
    ASSERT_TRUE(store.truncate(id, 5000).ok());
    EXPECT_EQ(stamps->stamp(ino), before + 4);
    ASSERT_TRUE(store.truncate(id, 5000).ok()); // nothing to do, but a truncate all the same
    EXPECT_EQ(stamps->stamp(ino), before + 6);
    ASSERT_TRUE(store.remove_file(ino).ok());
    EXPECT_EQ(stamps->stamp(ino), before + 8);
    ASSERT_TRUE(store.read(id, 0, std::span<uint8_t>()).ok());
    EXPECT_EQ(stamps->stamp(ino), before + 8) << "a read is no change";
    EXPECT_EQ(stamps->stamp(other), other_before);

    auto fd = stamps->reader_fd();
    ASSERT_TRUE(fd.ok()) << fd.status().to_string();
    const size_t bytes = transport::kStampSlots * sizeof(transport::StampSlot);
    EXPECT_EQ(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0), MAP_FAILED);
    EXPECT_EQ(errno, EACCES);
    void* m = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, *fd, 0);
    ASSERT_NE(m, MAP_FAILED);
    const auto* slot = static_cast<const transport::StampSlot*>(m) + transport::stamp_slot(ino);
    EXPECT_EQ(slot->stamp, before + 8) << "the reader sees the counter";
    EXPECT_EQ(slot->busy, 0u);
    {
        const server::ChunkStamps::Change change(stamps, ino);
        EXPECT_EQ(slot->busy, 1u) << "a change under way";
        EXPECT_EQ(slot->stamp, before + 9);
    }
    EXPECT_EQ(slot->busy, 0u);
    ASSERT_TRUE(store.write(id, 0, pattern(10, 2)).ok());
    EXPECT_EQ(slot->stamp, before + 12);
    ::munmap(m, bytes);
    ::close(*fd);
}

} // namespace
} // namespace jobfs::server
