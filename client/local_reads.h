// local_reads.h: reading chunks of this node's daemons straight from their chunk files
// (docs/design.md, "Local reads").
//
// Why: a daemon on the reader's node that serves a read copies the bytes from its page cache
// into a buffer, the transport copies them through a socket, and the reader copies them out
// again; reading the chunk file directly is one copy, as reading a local file is. HDFS does the
// same ("short-circuit local reads"). Only the bytes take the short cut: the reader asks the
// daemon over its Unix socket (ucx-transport/local_read_socket.h) for the range, and the
// daemon answers as it would a read over the transport (for a replicated chunk it checks the
// chain table and the chunk's CRAQ state first) with the stored CRC32C of the blocks, the
// chunk file's identity and length, and a read-only descriptor of it. The reader checks the
// descriptor is of the file described, reads whole blocks and checks every one. Anything that
// does not add up (a write or a resync changed the file meanwhile, a corrupt block, a dirty
// replica, a daemon gone) makes the caller read the same piece over the transport, where the
// daemon checks, repairs and answers as always.
//
// A range whose bytes are all in the page cache is read from a mapping of the chunk file, each
// 4 KiB piece checked and then copied out while it is in the CPU's first-level cache: the
// bytes leave memory once, as with pread alone, where pread and a check after it read them
// twice (a warm 1 GiB read by one process went from 0.78-0.80x to 0.84-0.91x of pread from the
// local disk, session 31). Other ranges are first read into the page cache (in 2 MiB pages
// where the kernel keeps them: page_cache_filler.h) and then read the same way; those the
// kernel could not read so are read with pread in runs of blocks. A mapped page
// past the file's end would be a SIGBUS: the reader maps only what fstat shows the file holds,
// and the daemon never shortens a chunk file in place (server/chunk_store.h) except on a full
// disk, where it has no room for the copy; a reader of the cut part at that very moment is
// the one case left, and an I/O error of the disk while the mapping is read is another.
//
// A range of an unreplicated chunk is read from what was kept of the chunk when it was read
// before (kept_chunks.h: its checksums and its file, while the daemon's stamp of it
// says nothing changed), with no question to the daemon. Other ranges ask for a descriptor per
// piece read.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "client/kept_chunks.h"
#include "client/page_cache_filler.h"
#include "client/write_arena.h"
#include "local_read_socket.h"
#include "result.h"

namespace jobfs::client {

// Pieces of any length are read this way: one question to the Unix socket costs less than a
// transport round trip at every size. Through jobfs-fuse, one fio job, 4 KiB random reads ran
// at 8.1-8.6k IOPS with the page caches dropped against 3.9-4.1k with -o no_local_io, and with
// O_DIRECT on a warm file 11.9k against 7.7k (512 bytes: 12.1k against 8.0k; 64 KiB: 12.9k
// against 4.7k). Until session 34 pieces under 128 KiB went over the transport, a threshold
// from when a local read also took a transport round trip.
class LocalReads {
public:
    // `daemons`: how many daemons the job has (ranks 0..daemons-1). `arena_bytes`: the size of
    // the write arena (0: none).
    static constexpr uint64_t kArenaBytes = 32ull << 20;
    // How ranges already in the page cache are read. `mapped` (the default): from a mapping of
    // the chunk file (read_mapped), which is the faster way for a process with one or few
    // reading threads. A process with many (jobfs-fuse's workers) pays for every munmap with a
    // TLB flush on each CPU that runs one of its threads, and reads faster with pread alone.
    enum class CachedReads { mapped, copied };
    // How ranges not all in the page cache are read. `buffered` (the default): read into the
    // chunk file's page cache first (PageCacheFiller: in 2 MiB pages where the kernel keeps
    // them; the first cold range of an open in the reader's thread, the others on the filler's
    // thread meanwhile), then read from there as cached ranges are, and found there by a later
    // read. 4 ranks reading a 1 GiB checkpoint back through ad_jobfs after drop_caches:
    // 1900-1997 MB/s, and 1690-1835 when the disk was asked with posix_fadvise(WILLNEED)
    // (4 KiB pages); a warm read after each, 4169-4238 against 3341-3736 (session 36). On a
    // VM that hands free 2 MiB blocks back to its host, posix_fadvise and pread as before
    // (PageCacheFiller::host_takes_back_huge_pages). `direct`: read with O_DIRECT straight into the
    // caller's buffer, the page cache left out, wherever the buffer and the range are aligned
    // as the file system asks (statx STATX_DIOALIGN; the rest is read buffered). For a process
    // that caches what it read itself, as a FUSE server's kernel does: the bytes are not
    // cached twice, and not copied through the chunk file's page cache (fio, 4 jobs, 1 GiB
    // written and read back cold through the mount: 1988 MB/s direct, 1598 with -o
    // no_direct_reads, median of 5 alternating rounds; jobfs-fuse's buffers in huge pages).
    // The read-ahead of FileIO (prefetch) is for buffered readers: it fills the page cache.
    enum class ColdReads { buffered, direct };
    // Whether unreplicated chunks are read again from what was kept of them (read_kept), and
    // how they come to be kept: `off`; `asked`, described by the daemon; `opened` (the
    // default), described from their files where this process may open them (the daemon's
    // user may), else asked.
    enum class KeepChunks { off, asked, opened };
    LocalReads(std::string secret, uint32_t daemons, uint64_t arena_bytes = kArenaBytes,
               CachedReads cached_reads = CachedReads::mapped, ColdReads cold_reads = ColdReads::buffered,
               KeepChunks keep_chunks = KeepChunks::opened);
    ColdReads cold_reads() const { return cold_reads_; }
    ~LocalReads();

    // Whether daemon `rank` runs on this node and lets us read its chunk files: connects at the
    // first call; after a failure, tries again at most every few seconds (a daemon restarted).
    bool available(uint32_t rank);

    // A range of a chunk to read: bytes [offset, offset + length) of chunk `index` of file
    // `ino`, held by daemon `rank` of this node. A replicated chunk also names the reader's
    // chain of it and the chain table that comes from (the daemon checks them).
    struct Range {
        uint32_t rank = 0;
        uint64_t ino = 0, index = 0, offset = 0, length = 0;
        std::span<const uint32_t> chain{};
        uint64_t table_version = 0;
        uint64_t chunk_size = 0; // the file's (read_kept: 0, unknown, keeps nothing)
    };
    // A range described by its daemon, its chunk file open and checked to be the file
    // described. Open every range of a request first and read them after, so that a cold read
    // keeps the disk busy with all: a buffered reader's cold ranges after the first are read
    // into the page cache on the filler's thread meanwhile.
    class Opened {
    public:
        // How many bytes of the range the chunk holds (the rest is past its end: zeros).
        uint64_t length() const { return length_; }
        // Some of the range was not in the page cache when opened (read brings it there first,
        // or reads it past the page cache for a direct reader).
        bool cold() const { return cold_; }
    private:
        friend class LocalReads;
        Range range_{};
        transport::UniqueFd fd_;
        bool cold_ = false;
        uint64_t length_ = 0, held_ = 0;
        uint64_t data_offset_ = 0; // byte i of the chunk is byte data_offset_ + i of fd_
        std::vector<uint32_t> crcs_, holes_;
        // The blocks the range touches, whole up to the chunk's end: {first byte, length}.
        std::pair<uint64_t, uint64_t> blocks() const;
    };
    // Errors of open and read mean: read this range over the transport.
    Result<Opened> open(const Range& r);
    // open of several ranges, every question sent before the first answer is awaited: the
    // reader waits once for its daemons, not once per range. Element i is ranges[i]'s.
    std::vector<Result<Opened>> open(std::span<const Range> ranges);
    // Reads what the chunk holds of the range into out (out.size() == o.length()) and checks
    // every block.
    Status read(const Opened& o, std::span<uint8_t> out);
    // Reads ranges of unreplicated chunks from what was kept of their chunks (kept_chunks.h),
    // describing and keeping each chunk first where nothing unchanged is kept (from its file, or
    // by its daemon with every question sent before the first answer is awaited, as open does).
    // `done`: read so, with `length` the bytes the chunk holds there (the rest are past its
    // end: zeros). Not done: read it with open and read (a replicated chunk, a daemon without
    // stamps, bytes not in the page cache, a change of the chunk meanwhile, a failed check).
    struct KeptRead {
        Range range;
        std::span<uint8_t> out; // out.size() == range.length
        uint64_t length = 0;
        bool done = false;
    };
    void read_kept(std::span<KeptRead> reads);
    // Forgets what was kept of file ino's chunks (its last handle here closed: kept_chunks.h).
    void forget_kept(uint64_t ino) {
        if (kept_) kept_->drop_file(ino);
    }
    // Pieces read so by read_kept, and chunks kept now (tests, bench).
    uint64_t kept_reads() const { return kept_reads_.load(std::memory_order_relaxed); }
    size_t kept_chunks() const { return kept_ ? kept_->size() : 0; }
    // open, then read into out (out.size() == r.length): the bytes the chunk holds there.
    // *cold: some of them were not in the page cache.
    Result<uint64_t> read_range(const Range& r, std::span<uint8_t> out, bool* cold);

    // Read-ahead of a sequential reader: has bytes [offset, offset + length) of chunk `index`
    // of file `ino` held by daemon `rank` read into the page cache on the filler's thread,
    // unless they are there. A hint: returns whether they were handed over (false: cached
    // already, nothing there, or PageCacheFiller::kMaxQueued ranges waiting).
    bool prefetch(uint32_t rank, uint64_t ino, uint64_t index, uint64_t offset, uint64_t length);
    // Ranges asked for by prefetch (tests).
    uint64_t prefetches() const { return prefetches_.load(std::memory_order_relaxed); }

    // Pieces read so far this way (bench and tests), and of them those read from a mapping of
    // the chunk file (all in the page cache; the others with pread).
    uint64_t reads() const;
    uint64_t mapped_reads() const { return mapped_reads_.load(std::memory_order_relaxed); }
    // Pieces of which some bytes were read with direct I/O (ColdReads::direct).
    uint64_t direct_reads() const { return direct_reads_.load(std::memory_order_relaxed); }

    // ---- local writes (write_arena.h) -------------------------------------------------------
    // This client's write arena (nullptr: none could be made; every write goes over the transport).
    WriteArena* arena() { return arena_.get(); }
    // The token under which daemon `rank` of this node has the arena mapped, handed over at the
    // first call on each connection (0: not available, or the daemon refused it).
    uint64_t arena_token(uint32_t rank);
    // The daemon did not know the token (it restarted, or closed our connection): hand the
    // arena over again next time.
    void forget_arena(uint32_t rank, uint64_t token);

    // Connections kept to each daemon of this node, made as concurrent readers need them: the
    // daemon answers each connection's requests in turn, on one of its threads
    // (server/local_read_server.h), so that threads reading at once are not queued behind one
    // another's describes (and the checksum reads some of them wait for).
    static constexpr uint32_t kConnections = 4;

private:
    struct Conn;
    struct Daemon;
    // Connects c to daemon `rank` unless it is connected; whether it is. c.mu is held.
    bool connect(uint32_t rank, Conn& c);
    // A connection to daemon `rank` for one caller: the first free one if any (connected on
    // first use), else the caller waits for one.
    std::unique_lock<std::mutex> take(uint32_t rank, Conn** out);
    // One request over a connection to daemon `rank`; a failure (not the daemon's error answer) closes it.
    Result<transport::LocalReply> call(uint32_t rank, const transport::LocalRequest& req);
    // A chunk's file, open read-only, and where the chunk's bytes start in it.
    struct ChunkFile {
        transport::UniqueFd fd;
        uint64_t data_offset = 0;
    };
    Result<ChunkFile> open_chunk(uint32_t rank, uint64_t ino, uint64_t index);
    // read of a range whose bytes are all in the page cache, or are brought there first
    // through the same mapping (a cold one: PageCacheFiller::populate): the file mapped, each
    // piece of a block checked and copied out in one pass (the bytes leave memory once, as
    // with pread, rather than once for pread and again for the check). nullopt: it cannot be
    // mapped (or populated); read it with read_copied.
    std::optional<Status> read_mapped(const Opened& o, std::span<uint8_t> out);
    // read with pread, in runs of blocks each checked while still in the CPU's cache; a cold
    // range of a direct reader in one run of all the blocks it covers whole, with O_DIRECT
    // where aligned. *direct: some bytes were read so.
    Status read_copied(const Opened& o, std::span<uint8_t> out, bool* direct);
    // Daemon `rank`'s chunk stamps, asked for on a connection of their own at the first call
    // (again after the daemon went away, at most every few seconds); null: none.
    std::shared_ptr<const ChunkStampsView> stamps_of(uint32_t rank);
    // The chunk of r as described whole in `reply`, with its file: to keep (null: not usable).
    std::shared_ptr<const KeptChunk> kept_chunk(const Range& r, Result<transport::LocalReply> reply,
                                                std::shared_ptr<const ChunkStampsView> stamps) const;
    // The chunk of r described from its file, opened by name in the daemon's chunk directory
    // (local_read_socket.h, LocalOp::chunk_dir), with no question to the daemon: null where the
    // file cannot be opened (not there, not ours), a change of the file's chunks is under way,
    // or the range is not all in the page cache (a cold read). *cached: whether it
    // is all there, as far as the kernel could tell (nullopt: it could not, or nothing looked).
    std::shared_ptr<const KeptChunk> kept_chunk_from_file(const Range& r, std::shared_ptr<const ChunkStampsView> stamps,
                                                          std::optional<bool>* cached) const;
    // Reads k from kept chunk c (see read_kept); false: not so (c dropped if it failed its check
    // or changed meanwhile). `resident`: k's range was just seen all in the page cache.
    bool read_from(const KeptChunk& c, KeptRead& k, bool resident = false);
    // Sends reqs[i] to daemon to[i] (a rank past the job's daemons: not sent, answered invalid), each
    // before the first answer is awaited, on one connection per daemon held from the first
    // question to the last answer (taken in rank order: two readers never wait for each other).
    // Element i is reqs[i]'s answer.
    std::vector<Result<transport::LocalReply>> ask(std::span<const transport::LocalRequest> reqs,
                                                   std::span<const uint32_t> to);
    // The rest of open, once the daemon answered.
    Result<Opened> opened(const Range& range, Result<transport::LocalReply> reply) const;

    const std::string secret_;
    const CachedReads cached_reads_;
    const ColdReads cold_reads_;
    std::vector<std::unique_ptr<Daemon>> daemons_;
    std::unique_ptr<WriteArena> arena_;
    std::atomic<uint64_t> reads_{0}, mapped_reads_{0}, direct_reads_{0};
    std::atomic<uint64_t> prefetches_{0}, kept_reads_{0};
    PageCacheFiller filler_; // cold ranges read into the page cache ahead of their reader
    const KeepChunks keep_chunks_;
    std::unique_ptr<KeptChunks> kept_; // null: keep_chunks off
};

} // namespace jobfs::client
