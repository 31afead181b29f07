// local_reads.h: reading chunks of this node's daemons straight from their chunk files
// (docs/design.md, "Local reads").
//
// Why: a daemon on the reader's node that serves a read copies the bytes from its page cache
// into a buffer, the transport copies them through a socket, and the reader copies them out
// again; reading the chunk file directly is one copy, as reading a local file is. HDFS does the
// same ("short-circuit local reads"). Only the bytes take the short cut: a read of a replicated
// chunk still asks its daemon over the transport, which checks the chain table and the chunk's
// CRAQ state as for any read and answers "read it yourself" with the stored CRC32C of the
// blocks, the chunk file's identity and length; the reader then gets a read-only descriptor of
// the file over the daemon's Unix socket (ucx-transport/local_read_socket.h). An unreplicated
// chunk has nothing of that to check: one question on the socket brings the description and
// the descriptor. Either way the reader checks the descriptor is of the file described, reads
// whole blocks and checks every one. Anything that does not add up (a write or a resync changed the file
// meanwhile, a corrupt block, a daemon gone) makes the caller read the same piece the ordinary
// way, where the daemon checks, repairs and answers as always.
//
// Descriptors are not kept: one is asked for per piece read, so that a deleted file's space is
// never held by a reader (a round trip of the Unix socket, a few microseconds).
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "daemon_protocol.h"
#include "local_read_socket.h"
#include "result.h"

namespace jobfs::client {

class LocalReads {
public:
    // Pieces shorter than this go the ordinary way: for them the extra round trip of the Unix
    // socket costs more than the copies it saves.
    static constexpr uint64_t kMinLength = 128 * 1024;

    // `daemons`: how many daemons the job has (ranks 0..daemons-1).
    LocalReads(std::string secret, uint32_t daemons);
    ~LocalReads();

    // Whether daemon `rank` runs on this node and lets us read its chunk files: connects at the
    // first call; after a failure, tries again at most every few seconds (a daemon restarted).
    bool available(uint32_t rank);

    // A piece to be read locally: bytes [offset, offset + answer.length) of chunk `index` of
    // file `ino`, held by daemon `rank`, which answered `answer` (answer.local).
    struct Piece {
        uint32_t rank = 0;
        uint64_t ino = 0, index = 0, offset = 0;
        const proto::ChunkReadResponse* answer = nullptr;
    };
    // The chunk file of a piece, open, checked to be the file the daemon described, its range
    // asked of the disk unless it is in the page cache already. Open every piece of a request
    // first and read them after, so that a cold read keeps the disk busy with all of them.
    class File {
    public:
        File() = default;
        File(File&& o) noexcept : fd_(o.fd_), cold_(o.cold_) { o.fd_ = -1; }
        File& operator=(File&& o) noexcept;
        ~File();
        // Some of the range was not in the page cache when opened (it was asked of the disk).
        bool cold() const { return cold_; }
    private:
        friend class LocalReads;
        explicit File(int fd) : fd_(fd) {}
        int fd_ = -1;
        bool cold_ = false;
    };
    // Errors of open and read mean: read this piece the ordinary way.
    Result<File> open(const Piece& p);
    // Reads the piece into out (out.size() == answer.length) and checks every block.
    Status read(const File& f, const Piece& p, std::span<uint8_t> out);

    // An unreplicated chunk (no chain, no CRAQ versions: what the daemon would answer over the
    // transport is what it knows of the chunk file) needs no transport round trip: the daemon is
    // asked over its socket alone (LocalOp::describe), then the range is read and checked as
    // read() does. Returns how many bytes the chunk holds there (fewer than out.size(): the
    // rest is a hole or past the chunk's end, zeros to the caller). Errors: read it the ordinary way.
    // *cold: some of it was not in the page cache.
    Result<uint64_t> read_unreplicated(uint32_t rank, uint64_t ino, uint64_t index, uint64_t offset,
                                       std::span<uint8_t> out, bool* cold);

    // Read-ahead of a sequential reader: asks the disk for bytes [offset, offset + length) of
    // chunk `index` of file `ino` held by daemon `rank` (posix_fadvise WILLNEED) without
    // reading them, unless they are in the page cache. A hint: returns whether the disk was
    // asked (false: cached already, or nothing there).
    bool prefetch(uint32_t rank, uint64_t ino, uint64_t index, uint64_t offset, uint64_t length);
    // Ranges asked for by prefetch (tests).
    uint64_t prefetches() const { return prefetches_.load(std::memory_order_relaxed); }

    // Pieces read so far this way (bench and tests).
    uint64_t reads() const;

private:
    struct Daemon;
    // One request over daemon `rank`'s socket; a failure (not the daemon's error answer) closes it.
    Result<transport::LocalReply> call(uint32_t rank, const transport::LocalRequest& req);
    Result<int> open_chunk(uint32_t rank, uint64_t ino, uint64_t index);
    // Checks that f is the file the answer describes and asks the disk for the range unless cached.
    Status check_and_advise(File& f, const Piece& p);

    const std::string secret_;
    std::vector<std::unique_ptr<Daemon>> daemons_;
    std::atomic<uint64_t> reads_{0};
    std::atomic<uint64_t> prefetches_{0};
};

} // namespace jobfs::client
