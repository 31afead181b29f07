// chunk_store.h: the chunks of files that one daemon stores on its local disk.
//
// A file is striped in chunks (default 4 MiB); each chunk this daemon holds is one sparse file
// under <data_dir>/chunks/: one CRC32C (ISA-L) per 64 KiB block in its first kDataOffset
// bytes, then the chunk's bytes (one inode per chunk; chunk_store.cc has the layout). Reads
// verify every block they touch and fail with Code::io on a mismatch, never returning bad
// bytes. Holes are not allocated and read as zeros.
//
// Writes go through the page cache, so that what was just written is read back from memory,
// as from a local file system (a checkpoint read back for verification, a file one step of a
// job writes and the next reads). A piece of at least open's early_writeback_min (the daemon's
// early-writeback-min, default 256 KiB) is sent to the disk at once (sync_file_range WRITE,
// which starts writeback and does not wait for it): dirty data does not pile up until the
// fsync, and the disk works while the writer goes on. Measured on this 2-core VM, 3 daemons on
// the host, alternating runs in one session (session 26): with every large piece direct
// (below) the read-back of a 1 GiB checkpoint ran at 0.55-0.71x of the local disk (bench
// ckpt, one process) and 0.44-0.55x of ROMIO's ufs driver (bench mpiio-ckpt, contiguous),
// since the local disk's file is still in the page cache and the chunk files were not;
// through the page cache 0.77-0.90x and 0.61-0.74x, writes as fast or faster (one process
// 643-711 MB/s direct, 790-838 buffered, 912-941 with early writeback).
//
// Direct I/O (open's direct_io, the daemon's direct-io item, off by default): a write whose
// offset, length and memory are page-aligned (the daemon's receive buffers are,
// server/buffer_pool.h) goes to the disk with O_DIRECT, without a copy into the page cache.
// It was the default until session 26: it had once made a 1 GiB collective write through
// ad_jobfs go from 0.28-0.40x to 1.08-1.37x of ROMIO's ufs driver, when the page cache's first
// touch of every page was the largest cost of a write; since clients hand large writes over
// in shared memory (write arenas) it no longer pays. Other writes go through the page cache,
// and the kernel keeps the two coherent: unaligned ones, a resync's copy, and pieces smaller
// than open's direct_io_min (the daemon's direct-io-min, default 256 KiB). Why the floor: a
// direct write waits for the disk, so a small one costs a device round trip, a thread switch
// and a hypervisor exit for little data. Measured with fio on this disk, one stream,
// `--end_fsync`: 64 KiB pieces ran at 334 MB/s direct and 918 MB/s buffered.
// A file system without O_DIRECT (tmpfs before Linux 6.6) is found at open and written through
// the page cache.
//
// A full disk: a write first reserves its range with fallocate(), so ENOSPC is reported before
// a single byte of the chunk changes, and a failed write never leaves a half-written chunk
// behind that could be taken for done.
//
// Thread safety: all methods may be called concurrently. Operations on one chunk are
// serialised by a lock from a fixed table (hashed by chunk); different chunks proceed in
// parallel. Open file descriptors are cached (bounded) and shared under the same locks.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "result.h"

namespace jobfs::server {

class ChunkStamps;

struct ChunkId {
    uint64_t ino = 0;
    uint64_t index = 0; // chunk number within the file
    bool operator==(const ChunkId&) const = default;
};
// For unordered containers of chunks and for lock stripes.
struct ChunkIdHash {
    size_t operator()(const ChunkId& c) const { return std::hash<uint64_t>()(c.ino * 0x9e3779b97f4a7c15ull ^ c.index); }
};

struct DiskSpace {
    uint64_t total_bytes = 0;
    uint64_t free_bytes = 0;  // available to this daemon
    uint64_t chunk_files = 0; // chunks held (approximate: counted since open)
};

class ChunkStore {
public:
    static constexpr uint32_t kBlockSize = 64 * 1024;
    // Where a chunk's bytes start in its file (the checksums come first): byte i of the chunk
    // is byte kDataOffset + i of the file. Room for the entries of a 1 GiB chunk (128 KiB),
    // and 2 MiB so that the chunk's bytes have in the file the alignment they have in the
    // chunk, up to the page cache's largest folio: a 1 MiB write at a 1 MiB boundary lands in
    // one 1 MiB folio, as in a local file, and a 2 MiB one in a folio that a mapping takes
    // with one page-table entry (at 128 KiB, 1 MiB writes landed in folios of 128-512 KiB,
    // each of which the faults of a read through a mapping and munmap handle apart). 1 MiB read
    // through a fresh mapping and unmapped: 55-58 us from a 2 MiB folio, 92-100 from the
    // 128 KiB-1 MiB ones the old offset gave; 8 processes reading 1 MiB of every 8th MiB of a
    // 1 GiB checkpoint (bench ckpt's strided read), 8 runs each, alternating: median 9500 MB/s
    // against 8600, the local disk's 9400 in both (session 39). The 2 MiB before the bytes are
    // a hole but for the entries' pages: nothing more on the disk.
    static constexpr uint64_t kDataOffset = 2 * 1024 * 1024;

    // Opens (creating if needed) the store under data_dir; chunk_size bounds every chunk (the
    // daemon passes the largest layout chunk; checksum space grows with what is written).
    // direct_io: write aligned pieces of at least direct_io_min bytes with O_DIRECT where the
    // file system allows it; early_writeback_min: start the writeback of a piece written through
    // the page cache at once when it is at least this large (0: leave it to the kernel). Above.
    static Result<std::unique_ptr<ChunkStore>> open(const std::string& data_dir, uint64_t chunk_size,
                                                    bool direct_io = false, uint64_t direct_io_min = 0,
                                                    uint64_t early_writeback_min = 0);
    ~ChunkStore();

    ChunkStore(const ChunkStore&) = delete;
    ChunkStore& operator=(const ChunkStore&) = delete;

    // Whether aligned writes go with O_DIRECT (asked for, and the file system allows it).
    bool direct_io() const;
    // Writes that went with O_DIRECT since open (for tests).
    uint64_t direct_writes() const;

    // Writes data at offset within the chunk (offset + size <= chunk_size). piece_crcs, if
    // given, are the CRC32Cs of data cut at block boundaries (transport::block_crcs), already
    // checked against it: a block the write covers whole keeps its piece's CRC instead of a
    // second pass over its bytes.
    Status write(ChunkId id, uint64_t offset, std::span<const uint8_t> data,
                 std::span<const uint32_t> piece_crcs = {});
    // Reads up to out.size() bytes at offset; returns how many the chunk holds there (short at
    // the chunk's end, 0 for a chunk never written). Holes read as zeros. Every block read is
    // verified against its stored CRC; piece_crcs, if given, receives the CRC32Cs of the bytes
    // returned cut at block boundaries (transport::block_crcs), the stored ones where a whole
    // block is returned.
    Result<size_t> read(ChunkId id, uint64_t offset, std::span<uint8_t> out,
                        std::vector<uint32_t>* piece_crcs = nullptr);
    // What a local reader (docs/design.md, "Local reads") needs to read [offset, offset + size)
    // of the chunk from its file itself and check it, without this daemon touching the bytes.
    struct View {
        uint64_t length = 0;       // the chunk's length (0: no such chunk); its bytes start at kDataOffset
        std::vector<uint32_t> crcs; // stored CRC32C of every block the range touches, from offset's
        std::vector<uint32_t> holes; // indexes (into crcs) of blocks never written
        uint64_t file_dev = 0, file_ino = 0; // the chunk file (fstat), to match a reader's descriptor
        uint64_t stamp = 0; // the file's chunk stamp from before the chunk was looked at (stamps())
    };
    Result<View> describe(ChunkId id, uint64_t offset, uint64_t size);
    // A read-only descriptor of the chunk's file (Code::not_found: no such chunk), for a local
    // reader, whose bytes start at kDataOffset; the caller owns it. Opened anew at each call,
    // never shared: a reader sets O_DIRECT on its own (local_read_socket.h).
    Result<int> open_for_reader(ChunkId id);
    // A descriptor (O_PATH) of the directory the chunk files are in, named there as
    // transport::chunk_file_name says, for a local reader that opens them itself where the
    // file system lets it (local_read_socket.h); the caller owns it.
    Result<int> open_dir_for_reader() const;
    // The counters that move around every write, truncate and removal of a file's chunks here,
    // for local readers that keep what describe said (chunk_stamps.h); null: none could be made.
    ChunkStamps* stamps() const;
    // Cuts or extends (with a hole) the chunk to length bytes. A cut is never made in the
    // chunk's file: a local reader may have it mapped (client/local_reads.h), and a mapped page
    // past the end is a SIGBUS in that reader. Cut to 0, the file is removed; cut to less,
    // the kept bytes go to a new file (holes stay holes; synced) renamed over it (a copy that
    // a killed daemon left unrenamed is removed by the next open). Only on a full disk, with
    // no room for that copy, is the file cut in place.
    Status truncate(ChunkId id, uint64_t length);
    // Length of the chunk's data (0 if absent).
    Result<uint64_t> length(ChunkId id);
    // Makes the chunk's data and checksums durable.
    Status sync(ChunkId id);
    // Makes every chunk of a file held here durable: writeback of all of them is started
    // first and waited for after, so the disk sees one stream and the file system commits its
    // journal once or a few times rather than once per chunk (an fsync of a checkpoint striped
    // in hundreds of chunks).
    Status sync_file(uint64_t ino);
    // Removes every chunk of a file (idempotent).
    Status remove_file(uint64_t ino);
    // For every file with a chunk here: its inode and one past its highest chunk held here
    // (resync: a file still open for writing has no settled size to go by).
    Result<std::vector<std::pair<uint64_t, uint64_t>>> extents();

    Result<DiskSpace> space();
    // The indexes of the chunks of a file held here (a scan of its chunk directory).
    Result<std::vector<uint64_t>> chunk_indexes(uint64_t ino);
    uint64_t chunk_size() const { return chunk_size_; }

    struct Impl;

private:
    explicit ChunkStore(std::unique_ptr<Impl> impl, uint64_t chunk_size);
    std::unique_ptr<Impl> impl_;
    uint64_t chunk_size_;
};

} // namespace jobfs::server
