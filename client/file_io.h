// file_io.h: the client's striped data path: file bytes to and from the chunk daemons.
//
// FileIO turns a byte range of a file into one chunk RPC per chunk it touches (layout.h says
// which daemon holds which chunk) and runs them concurrently, so a large write or read moves
// data to and from every daemon of the stripe at once. It knows nothing about metadata: the
// caller passes the layout and, for reads, the file size it got from the metadata shard
// (design.md: holes inside the size read zeros, reads past it stop at EOF).
//
// Bulk data never gets copied: writes send from the caller's buffer and reads land in it, by
// UCX rendezvous. Hence the one rule every method keeps: it returns only after every call it
// started has completed, even when an early piece failed, because until then the transport
// may still read or write the caller's memory.
//
// Errors: the first failure to arrive decides the result; its code is passed through unchanged
// (no_space, io, peer_gone, timeout...) with the operation, inode, chunk and daemon added in
// front of the message. After a failure no further pieces are started. A failed pwrite may
// have written some of its pieces (as a failed POSIX write may have).
//
// Thread safety: all methods may be called concurrently from any threads, but not from a
// transport callback (they block).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "client/layout.h"
#include "client/local_reads.h"
#include "client/sequential_reads.h"
#include "client/stall_watch.h"
#include "daemon_protocol.h"
#include "result.h"
#include "worker.h"

namespace jobfs::client {

class FileIO {
public:
    // Calls in flight per FileIO call: enough to keep every daemon of a wide stripe busy with
    // a few chunks each, few enough that one huge request does not flood the endpoints.
    static constexpr size_t kMaxInFlight = 32;

    // `daemons[r]` is the connection to the daemon of rank r; `timeout` is every call's deadline.
    // Connects afresh to daemon `rank` (it was restarted): endpoints that broke are replaced.
    using ReconnectFn = std::function<Result<transport::Endpoint>(uint32_t rank)>;

    // `local`: reads of this node's daemons' chunks from their files (local_reads.h); none: all
    // bytes come over the transport.
    explicit FileIO(std::vector<transport::Endpoint> daemons,
                    std::chrono::milliseconds timeout = std::chrono::milliseconds{30000}, ReconnectFn reconnect = {},
                    std::shared_ptr<LocalReads> local = {});

    // Writes `data` at `offset` of file `ino`.
    Status pwrite(uint64_t ino, const Layout& layout, uint64_t offset, std::span<const uint8_t> data) const;

    // A write whose bytes FileIO holds (hold()), so that the caller's buffer is free at once
    // (write_behind.h). Each piece whose chain head runs on this node is copied straight into
    // the write arena, the rest into one buffer of its own: the bytes are copied once on their
    // way to a local daemon, not once to keep them and again into the arena.
    class HeldWrite {
    public:
        ~HeldWrite(); // gives the arena regions back (or retires those a call left unanswered)
        HeldWrite(const HeldWrite&) = delete;
        HeldWrite& operator=(const HeldWrite&) = delete;
        uint64_t offset() const { return offset_; }
        uint64_t size() const { return size_; }

    private:
        friend class FileIO;
        HeldWrite() = default;
        struct Piece {
            ChunkPiece where;
            std::span<const uint8_t> bytes;            // in `region` or in `copy_`
            std::optional<WriteArena::Region> region;  // held in the arena
            bool unanswered = false;                   // a call naming the region got no answer
        };
        uint64_t ino_ = 0, offset_ = 0, size_ = 0;
        Layout layout_;
        std::vector<Piece> pieces_;
        std::vector<std::vector<uint32_t>> crcs_;
        std::unique_ptr<uint8_t[]> copy_; // the pieces not held in the arena, one after another
        std::shared_ptr<LocalReads> local_; // owns the arena
    };
    // Copies `data` (see HeldWrite); pwrite(*held) then writes it as pwrite above would.
    Result<std::unique_ptr<HeldWrite>> hold(uint64_t ino, const Layout& layout, uint64_t offset,
                                            std::span<const uint8_t> data) const;
    Status pwrite(HeldWrite& held) const;

    // Reads min(out.size(), file_size - offset) bytes at `offset` into `out` (0 at or past EOF).
    // Bytes inside file_size that no chunk holds (holes, absent chunks) read as zeros.
    Result<size_t> pread(uint64_t ino, const Layout& layout, uint64_t file_size, uint64_t offset,
                         std::span<uint8_t> out) const;

    // Cuts the chunks past new_size when a file shrinks from old_size (growing leaves holes and
    // needs nothing).
    Status truncate_chunks(uint64_t ino, const Layout& layout, uint64_t old_size, uint64_t new_size) const;

    // Removes every chunk of the file from every daemon (chunks may be anywhere).
    Status remove_file(uint64_t ino) const;

    // Makes the chunks of the file below `size` durable on their daemons.
    Status sync(uint64_t ino, const Layout& layout, uint64_t size) const;

    uint32_t daemon_count() const { return static_cast<uint32_t>(daemons_.size()); }
    // How many daemons run on this node and let this process read their chunk files (local
    // reads): all of them on a one-node job, where reading a chunk costs a copy from the page
    // cache and no transfer. Connects to each at the first call.
    uint32_t local_daemon_count() const;
    // The last handle of file ino in this process closed: what local reads kept of its chunks
    // goes (kept_chunks.h), and with it the chunk files and pages it held mapped.
    void forget_kept(uint64_t ino) const {
        if (local_) local_->forget_kept(ino);
    }
    // Pieces read from this node's chunk files (local_reads.h) so far.
    uint64_t local_reads() const { return local_ ? local_->reads() : 0; }
    // Of those, pieces read from what was kept of their chunk, with no question to the daemon
    // (kept_chunks.h), and chunks kept now.
    uint64_t local_kept_reads() const { return local_ ? local_->kept_reads() : 0; }
    size_t local_kept_chunks() const { return local_ ? local_->kept_chunks() : 0; }
    // Chunk ranges read ahead (asked of the disk) so far.
    uint64_t local_prefetches() const { return local_ ? local_->prefetches() : 0; }
    // Of the pieces read locally, those read in part or whole with direct I/O (LocalReads::ColdReads).
    uint64_t local_direct_reads() const { return local_ ? local_->direct_reads() : 0; }
    // Pieces written through the write arena (write_arena.h) so far.
    uint64_t local_writes() const { return local_writes_.load(std::memory_order_relaxed); }
    // Pieces shorter than this are sent with the write: the arena saves copies, not round trips.
    static constexpr uint64_t kMinArenaWrite = 64 * 1024;

    // The chain table in use (docs/replication.md): fetched from the daemons at first use and
    // again whenever a chain member fails or a daemon says ours is stale. Version 0: no table
    // (daemons without one, every daemon serving).
    proto::ChainTable table() const;
    // Asks every daemon for its table and keeps the newest.
    Status refresh_table() const;
    // The table, fetched once if never (metadata routing: client/meta_call.h).
    proto::ChainTable table_once() const { return current_table(); }
    // The connection to daemon `rank` (replaced by heal after it broke).
    transport::Endpoint endpoint(uint32_t rank) const;
    void heal(uint32_t rank) const; // reconnects a broken endpoint (blocking), unless offline

    // Registers a metadata call with replicated shards while it waits (client/meta_call.h): one
    // that waits longer than kStallAfter makes the watcher leave out the daemons the table has
    // offline (leave_out_offline), every kStallAfter while it waits, so a call to a primary
    // that hung fails then (peer_gone) and is asked of the new primary, not at its deadline.
    StallWatch::Watched watch_meta_call() const { return stalls_->watch(); }
    static constexpr std::chrono::milliseconds kStallAfter{2000};

    // How long a write keeps retrying while the daemons take a lost member out of its chains
    // (heartbeats: failure-timeout-ms, 1.5 s by default).
    static constexpr std::chrono::milliseconds kFailoverTimeout{20000};

    // The chain of a chunk under `t`: for writes the serving daemons in placement order, then the
    // syncing ones (they take writes at the tail while they catch up); for reads the serving ones.
    Chain write_chain(uint64_t ino, uint64_t index, const Layout& layout, const proto::ChainTable& t) const;
    Chain read_chain(uint64_t ino, uint64_t index, const Layout& layout, const proto::ChainTable& t) const;
    // The copy of a chunk on this node that local reads and read-ahead take (-1: none). Always
    // the same one while the chain stands, so that read-ahead warms the copy that is read and
    // the page cache holds one copy of a chunk, not R.
    int local_replica(uint64_t ino, uint64_t index, const Chain& chain) const;

private:
    Status check(const Layout& layout) const;
    // The rounds of a write (both pwrites): its pieces, with their bytes and checksums (an
    // empty crcs[i]: piece i's, taken as it is first sent).
    Status write_pieces(uint64_t ino, const Layout& layout, std::vector<HeldWrite::Piece>& pieces,
                        std::vector<std::vector<uint32_t>>& crcs) const;
    // Called while chunk calls are slow to come back: refreshes the table and aborts the
    // connections to daemons it has offline, so that calls waiting for a daemon cut off by a
    // partition or hung (no reply, yet a connection that looks alive) fail now and are retried
    // on its chain's other members instead of waiting for their deadline. Replicated files
    // only: with R=1 there is no other member, and a daemon slowed down past the failure
    // timeout (taken offline, yet alive) still completes the call within its deadline.
    void leave_out_offline() const;
    proto::ChainTable current_table() const; // fetched once if never
    // Read-ahead (local reads only): a read that continues a sequential run of reads of the
    // file asks the disks of this node for the chunk ranges that follow it
    // (LocalReads::prefetch), as SequentialReads says. A restart reading its checkpoint back
    // sequentially then keeps the disk busy while it copies. A file found all in the page
    // cache is not read ahead until a read of it finds bytes that are not.
    // `cold`: some of the read just done was not in the page cache.
    void read_ahead(uint64_t ino, const Layout& layout, uint64_t file_size, uint64_t offset, uint64_t length,
                    const proto::ChainTable& t, bool cold) const;

    mutable std::vector<transport::Endpoint> daemons_;
    std::chrono::milliseconds timeout_;
    mutable std::mutex eps_mu_; // guards daemons_ (heal replaces endpoints)
    ReconnectFn reconnect_;
    std::shared_ptr<LocalReads> local_;
    mutable std::atomic<uint64_t> local_writes_{0};
    mutable SequentialReads sequential_; // what read_ahead asks for
    mutable std::atomic<uint64_t> read_turn_{0};
    mutable std::mutex table_mu_;
    mutable proto::ChainTable table_;
    mutable bool table_fetched_ = false;
    // Last: its watcher thread, which calls leave_out_offline, stops before the rest goes.
    std::unique_ptr<StallWatch> stalls_;
};

} // namespace jobfs::client
