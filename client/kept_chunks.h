// kept_chunks.h: what this node's daemons said of chunks read lately (their checksums, their
// files mapped), kept so that the next read of one asks the daemon nothing.
//
// Why: a local read (local_reads.h) asks the daemon to describe the range before reading it, a
// round trip through its Unix socket with a descriptor passed, then maps the file and unmaps it
// after: about 50 µs per read on this project's 2-core VM, whatever its size, where pread of a
// local file's 4 KiB takes 1-2 µs. A reader of training samples reads small pieces of the same
// chunks again and again.
//
// When what was kept still holds: the daemon's chunk stamps (server/chunk_stamps.h), a
// counter per file that moves before and after every change of its chunks there, mapped
// read-only here. A chunk kept with the stamp its description came with is read again, with
// no question, while the stamp stands and the daemon runs (the connection the stamps came on
// has not hung up: a restarted daemon has new stamps, and its old ones never move). The bytes
// read are checked against the kept checksums as always, and the stamp is looked at again
// after the copy: a change that began meanwhile sends the read back to the daemon.
//
// Only unreplicated chunks are kept: whether a replica may be read here depends on the chain
// table and CRAQ's state as well, which only its daemon can tell (local_read_socket.h).
//
// A kept chunk holds its file open and mapped, and the pages it read mapped: neither
// a deleted chunk's space nor those pages can go (drop_caches and POSIX_FADV_DONTNEED pass
// mapped pages by) until it is dropped. A file's chunks are dropped when its last handle in
// this process closes (drop_file), as an open file's space is held anyway; a thread drops
// chunks whose stamp moved, whose daemon went away, or that were not read for kIdle, every
// kSweep while any is kept; and no more are kept than kMaxKept, or a quarter of
// the process's descriptor limit where that is lower (each holds one).
//
// Room for those descriptors is made in the process's descriptor table up front
// (reserve_descriptors): the kernel doubles the table when a descriptor past its end is
// opened, and in a process with threads waits for an RCU grace period to do so (10-20 ms
// here), which a reader would otherwise sit through in the middle of its reads (seen: the
// 221st chunk one process kept, its 256th descriptor, took 13-19 ms to read, not 0.1). The
// client grows it before it starts its threads, so that not every connect waits instead.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <tuple>
#include <vector>

#include "local_read_socket.h"
#include "result.h"

namespace jobfs::client {

// A daemon's chunk stamps, mapped read-only, and the connection they came on.
class ChunkStampsView {
public:
    // Takes the table's descriptor (LocalOp::stamps) and the connection (kept open: its hang-up
    // says the daemon is gone); `dir`, the chunk directory (LocalOp::chunk_dir; none: an empty
    // one) in which a chunk's bytes start at `data_offset` of its file.
    static Result<std::shared_ptr<ChunkStampsView>> map(transport::UniqueFd table, transport::UniqueFd connection,
                                                        transport::UniqueFd dir = {}, uint64_t data_offset = 0);
    ~ChunkStampsView();
    ChunkStampsView(const ChunkStampsView&) = delete;
    ChunkStampsView& operator=(const ChunkStampsView&) = delete;

    uint64_t stamp(uint64_t ino) const {
        return slots_[2 * transport::stamp_slot(ino)].load(std::memory_order_acquire);
    }
    // No change of file ino's chunks (or of the others of its slot) is under way.
    bool quiet(uint64_t ino) const {
        return slots_[2 * transport::stamp_slot(ino) + 1].load(std::memory_order_acquire) == 0;
    }
    // The daemon still runs: its end of the connection is open (a poll, no wait).
    bool alive() const;
    int dir() const { return dir_.get(); } // -1: none
    uint64_t data_offset() const { return data_offset_; }

private:
    ChunkStampsView(const std::atomic<uint64_t>* slots, transport::UniqueFd connection, transport::UniqueFd dir,
                    uint64_t data_offset)
        : slots_(slots), connection_(std::move(connection)), dir_(std::move(dir)), data_offset_(data_offset) {}
    const std::atomic<uint64_t>* slots_; // kStampSlots transport::StampSlots: stamp, busy
    transport::UniqueFd connection_;
    transport::UniqueFd dir_;
    uint64_t data_offset_;
};

// A chunk as its daemon described it, its file open and mapped.
struct KeptChunk {
    uint32_t rank = 0;
    uint64_t ino = 0, index = 0;
    uint64_t stamp = 0; // the file's stamp the description came with
    uint64_t held = 0;  // the chunk's length
    std::vector<uint32_t> crcs;  // of every block, from block 0
    std::vector<uint32_t> holes; // indexes of blocks never written, ascending
    std::shared_ptr<const ChunkStampsView> stamps;
    transport::UniqueFd file;       // the chunk's file, read-only (cachestat asks of it)
    uint64_t data_offset = 0;       // where the chunk's bytes start in it
    const uint8_t* bytes = nullptr; // bytes[i]: byte i of the chunk, in the mapping
    void* map = nullptr;
    size_t map_len = 0;
    mutable std::atomic<int64_t> last_read{0}; // steady clock, ns
    KeptChunk() = default;
    KeptChunk(const KeptChunk&) = delete;
    KeptChunk& operator=(const KeptChunk&) = delete;
    ~KeptChunk();
    // Nothing changed the chunk since it was described (an atomic load).
    bool unchanged() const { return stamps->stamp(ino) == stamp; }
    // That, and its daemon runs (a poll).
    bool current() const { return unchanged() && stamps->alive(); }
};

class KeptChunks {
public:
    static constexpr size_t kMaxKept = 256;
    static constexpr std::chrono::milliseconds kIdle{5000};
    static constexpr std::chrono::milliseconds kSweep{1000};

    KeptChunks(); // makes room in the descriptor table for the chunks it may keep
    ~KeptChunks(); // stops the sweeper, drops every chunk

    // Grows this process's descriptor table to hold twice as many descriptors as a reader
    // keeps chunks, more than the highest open now (within the soft limit): the table never
    // shrinks, so keeping them later does not grow it. Done before the process has threads,
    // it waits for nothing: Client::connect calls it before it starts any.
    static void reserve_descriptors();

    // The chunk if kept and unchanged (one kept but changed is dropped); whether its daemon
    // still runs, the reader asks after its copy (KeptChunk::current).
    std::shared_ptr<const KeptChunk> find(uint32_t rank, uint64_t ino, uint64_t index);
    // Keeps c (in place of any kept for the same chunk); the least lately read goes past the most kept.
    void keep(std::shared_ptr<const KeptChunk> c);
    // Drops c if it is the one kept for its chunk.
    void drop(const KeptChunk& c);
    // Drops every chunk of file ino (its last handle here closed).
    void drop_file(uint64_t ino);
    size_t size() const;

private:
    using Key = std::tuple<uint64_t, uint64_t, uint32_t>; // ino, index, rank: a file's chunks side by side
    void sweep_loop();
    mutable std::mutex mu_; // guards chunks_ and stop_
    std::condition_variable wake_;
    std::map<Key, std::shared_ptr<const KeptChunk>> chunks_;
    bool stop_ = false;
    const size_t max_kept_;
    std::thread sweeper_;
};

} // namespace jobfs::client
