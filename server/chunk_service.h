// chunk_service.h: serves the chunk RPCs of daemon_protocol.h from a ChunkStore (and registers
// DaemonStats, server/daemon_stats.h, beside DiskSpace).
//
// Handlers run on the transport's progress thread and must not block, so every disk access is
// handed to an I/O pool; the reply is sent from there. A write's payload is received by
// rendezvous straight into the buffer that the pool then writes to the chunk file; a read's
// buffer goes back by rendezvous from the pool.
//
// Chain replication (docs/replication.md): a write that names a chain is stored here and, at
// the same time, passed to this daemon's successor in the chain; the answer goes back once
// both are done, so the head answers the client only when the tail has stored the bytes. Each
// chunk's writes are numbered by the head (CRAQ versions); a replica that holds a write not yet
// acknowledged by the rest of the chain is dirty, and a read of it asks the tail which version
// is committed before serving (or tells the reader to ask the tail). Every write's end-to-end
// checksums are checked before storing; a read whose stored copy is corrupt is repaired from
// another replica of the chain and then served.
#pragma once

#include <boost/asio/thread_pool.hpp>

#include <array>
#include <atomic>
#include <shared_mutex>
#include <functional>
#include <set>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>

#include "daemon_protocol.h"
#include "server/buffer_pool.h"
#include "server/chunk_store.h"
#include "server/write_arenas.h"
#include "worker.h"

namespace jobfs::server {

class SameNodePeers;

class ChunkService {
public:
    // peer(rank): the connection to another daemon (for forwarding and repairs).
    using PeerFn = std::function<Result<transport::Endpoint>(uint32_t rank)>;
    // The chain table version this daemon knows (0: no table; requests are not checked).
    using TableVersionFn = std::function<uint64_t()>;

    // Registers the handlers on `worker`. `store` and `pool` must outlive the worker's use.
    ChunkService(transport::Worker& worker, ChunkStore& store, boost::asio::thread_pool& pool, uint32_t rank = 0,
                 PeerFn peer = {}, TableVersionFn table_version = {});

    // Whether a read of chunk `id` by a reader whose chain of it is `chain` (from chain table
    // `table_version`) may be served from the local copy now, as CRAQ has it: the reader's
    // table is not older than ours, this daemon is in the chain, and it is the tail or holds
    // no write of the chunk in flight (an unreplicated chunk, `chain` empty, always may).
    // Code::again otherwise. For readers that read the chunk file themselves
    // (server/local_read_server.h); any thread.
    Status read_gate(ChunkId id, std::span<const uint32_t> chain, uint64_t table_version);

    // Lets writes name the arenas clients of this node mapped here (ChunkWriteRequest::arena).
    // `arenas` must outlive the service's handlers.
    void accept_arenas(const WriteArenas* arenas) { arenas_ = arenas; }
    // Sends the bytes of chain forwards through `peers` (shared memory to the daemons of this
    // node) rather than the ordinary connections. `peers` must outlive the service's handlers.
    void forward_through(SameNodePeers* peers) { same_node_ = peers; }
    // Bytes written from write arenas so far (DaemonStats).
    uint64_t arena_write_bytes() const { return arena_write_bytes_.load(std::memory_order_relaxed); }

    // Reads a whole chunk from another replica and stores it here in place of the local copy
    // (repair after a checksum error; resync). Blocking: call on the pool only.
    Status repair_from(ChunkId id, uint32_t source_rank);
    // repair_from the first other member of `chain` that has a good copy.
    Status repair_from_any(ChunkId id, const std::vector<uint32_t>& chain);

    // Replaces the local copy of a chunk with `source`'s, safely while writes go on (resync):
    // waits until the source has stored every write of the chunk this daemon has seen, copies,
    // and installs the copy only if no write arrived here meanwhile (else copies again).
    // Returns the bytes copied. Blocking: call on a thread of its own.
    Result<uint64_t> resync_chunk(ChunkId id, uint32_t source);

    // The files this daemon holds chunks of (ChunkStore::extents), as ChunkExtents answers
    // them: for the RPC and for a resync walker's own store.
    Result<proto::ChunkExtentsResponse> extents();

    // Removes every chunk of file `ino` here, and its CRAQ versions (FileRemoveChunks; a
    // resync walker's garbage collection). Blocking: call on a pool.
    Status remove_file(uint64_t ino);

    // The whole local copy of a chunk, every block verified (scrub, repair source checks).
    Result<std::vector<uint8_t>> read_whole(ChunkId id);

private:
    static constexpr size_t kKeptBufferBytes = 32u << 20; // idle buffers kept: 8 chunks of 4 MiB
    // A chunk's CRAQ versions on this daemon: the newest write seen and the writes not yet
    // acknowledged by the rest of the chain.
    struct Versions {
        uint64_t pending = 0;
        std::multiset<uint64_t> in_flight;
        uint64_t committed() const { return in_flight.empty() ? pending : *in_flight.begin() - 1; }
    };

    // Code::again when a request built from chain table `sender_version` must be re-planned by
    // its sender (ours is newer).
    Status stale(uint64_t sender_version) const;
    // The rest of a write once its bytes are here (data, kept valid by `keep`): checks the
    // writer's CRCs, stores them and passes them down the chain, on the pool; replies.
    void store_and_forward(transport::ServerCall call, std::shared_ptr<proto::ChunkWriteRequest> r, int pos,
                           std::span<const uint8_t> data, std::shared_ptr<const void> keep);
    uint64_t begin_write(ChunkId id, uint64_t version); // version 0: number it (head)
    // failed_at_head: the head numbered it and the chain did not store it (its number is given back).
    void end_write(ChunkId id, uint64_t version, bool failed_at_head = false);
    // After a resync installed the source's copy: versions past `version` (given up by their
    // head) no longer count as seen here.
    void forget_versions_after(ChunkId id, uint64_t version);
    // CRAQ: whether this copy may serve a read now (unreplicated, the tail, or no write of it in
    // flight here; else *pending is the newest version seen, for the tail to confirm).
    bool clean_here(ChunkId id, std::span<const uint32_t> chain, uint64_t* pending);
    // True with the newest version seen when a write of the chunk is still in flight.
    bool dirty(ChunkId id, uint64_t* pending);
    uint64_t committed(ChunkId id);
    uint64_t pending(ChunkId id);
    // Writes hold a chunk's guard shared while they store; resync holds it exclusively while it
    // checks that no write came and installs its copy.
    std::shared_mutex& guard(ChunkId id) { return guards_[ChunkIdHash()(id) % guards_.size()]; }
    Status install(ChunkId id, const std::vector<uint8_t>& data);
    Result<std::vector<uint8_t>> fetch(ChunkId id, uint32_t source);

    ChunkStore& store_;
    // The bytes of writes received and reads sent: recycled and page-aligned (buffer_pool.h).
    BufferPool buffers_{kKeptBufferBytes};
    boost::asio::thread_pool& pool_;
    uint32_t rank_;
    PeerFn peer_;
    TableVersionFn table_version_;
    std::mutex versions_mu_;
    std::unordered_map<ChunkId, Versions, ChunkIdHash> versions_;
    std::array<std::shared_mutex, 64> guards_;
    std::atomic<const WriteArenas*> arenas_{nullptr};
    std::atomic<SameNodePeers*> same_node_{nullptr};
    std::atomic<uint64_t> arena_write_bytes_{0};
    boost::asio::thread_pool resync_pool_{2}; // ChunkResync: blocking copies, off the I/O pool
};

} // namespace jobfs::server
