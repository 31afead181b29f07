// chunk_stamps.h: a counter for every file's chunks held by this daemon, which moves before and
// after each change of one of them (a write, a truncate, a removal), kept in memory that the
// readers on this node map read-only (LocalOp::stamps, ucx-transport/local_read_socket.h).
//
// Why: a local reader asks the daemon to describe a chunk (its checksums, a descriptor of its
// file) before every read, a round trip through the daemon's Unix socket that cost about 50 µs
// on this project's 2-core VM, as long as copying 300 KiB out of the page cache. A reader that
// keeps what it was told (client/kept_chunks.h) may read the chunk again with no question as
// long as the chunk's counter has not moved since the description: no change began after it.
//
// Each slot also counts the changes under way (`busy`): a reader that describes a chunk itself,
// from its file (local_read_socket.h, LocalOp::chunk_dir), does so only where none is, so
// that what it sees is whole.
//
// Files share counters (ucx-transport's stamp_slot hashes the inode into kStampSlots), so a
// change of one file may send a reader of another back to the daemon once: a cost, never a
// wrong read. A counter moves before a change (a reader checking during it sees it moved) and
// again after (a description taken during it, which may have seen part of the change, no
// longer matches).
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "result.h"

namespace jobfs::server {

class ChunkStamps {
public:
    // A table in a memfd of its own, all counters 0.
    static Result<std::unique_ptr<ChunkStamps>> create();
    ~ChunkStamps();
    ChunkStamps(const ChunkStamps&) = delete;
    ChunkStamps& operator=(const ChunkStamps&) = delete;

    // The counter of file ino's chunks now.
    uint64_t stamp(uint64_t ino) const;
    // A read-only descriptor of the table, opened for one reader (the caller owns it): a
    // reader cannot map it writable, so it cannot make another reader keep a stale chunk.
    Result<int> reader_fd() const;

    // Moves file ino's counter at its start and at its end: one around every change of the
    // file's chunks. `stamps` may be null (no table: nothing to tell).
    class Change {
    public:
        Change(ChunkStamps* stamps, uint64_t ino);
        ~Change();
        Change(const Change&) = delete;
        Change& operator=(const Change&) = delete;

    private:
        ChunkStamps* stamps_;
        uint64_t ino_;
    };

private:
    ChunkStamps(int fd, std::atomic<uint64_t>* slots) : fd_(fd), slots_(slots) {}
    void begin(uint64_t ino); // busy up, then the stamp
    void end(uint64_t ino);   // the stamp, then busy down
    int fd_;
    std::atomic<uint64_t>* slots_; // kStampSlots transport::StampSlots (stamp, busy), mapped shared
};

} // namespace jobfs::server
