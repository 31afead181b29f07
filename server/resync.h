// resync.h: a restarted daemon catches up before it serves reads (docs/replication.md, "Resync").
//
// rejoin(), when the chain table has this daemon offline at start: it publishes itself as
// syncing (from then on it is the tail of all its chains and receives every new write), waits
// for writers to pick up that table, then asks every daemon, itself included, to walk the
// files of its metadata shard (ResyncShard): for each chunk whose chain includes this daemon
// (below the file's size or the highest chunk any daemon holds: an open file's size is not
// settled) the walker sends it a ChunkResync naming a serving copy, which ChunkService copies safely
// while writes go on. The walker also removes from the target the chunks of the shard's files
// deleted while it was away (no inode, and no other daemon holds any chunk of them; an
// unlinked file still open on a client keeps its chunks on the serving daemons, so its copies
// here stay too, and are copied like any file's: MetaShard::removed_files keeps its layout). Progress (shards walked of all) shows in the table; when every shard is
// done the daemon publishes itself serving. A shard that cannot be walked (its daemon is
// down) is skipped with a warning: its files' chunks stay as they were here.
//
// Threads: walkers and rejoin run on this object's pool, never on the I/O pool, since they
// wait for other daemons.
#pragma once

#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <functional>
#include <mutex>

#include "server/chunk_service.h"
#include "server/membership.h"
#include "server/meta_shard.h"
#include "worker.h"

namespace jobfs::server {

class Resync {
public:
    using PeerFn = Membership::PeerFn;
    Resync(transport::Worker& worker, MetaShard& shard, Membership& membership, ChunkService& chunks, uint32_t rank,
           uint32_t size, PeerFn peer);
    ~Resync();
    // Runs before a resync walks the shards (metadata first) and again before this daemon is
    // published serving; it is tried again until it succeeds. Set before the first rejoin.
    void before_serving(std::function<Status()> fn) { before_serving_ = std::move(fn); }

    // Starts the rejoin in the background (see above). Called again while one runs (the table
    // took this daemon offline again: it missed writes meanwhile), that one starts over.
    void rejoin();
    // Waits for walkers and rejoin (before the worker goes); a rejoin still waiting for a
    // source ends without publishing serving.
    void stop();

private:
    // Copies to `target` the chunks of this shard's files that it holds a copy of. Fails if
    // a chunk has no serving copy to copy from: the target must not serve it then.
    Result<proto::ResyncResponse> walk(uint32_t target);
    // One rejoin: syncing, every shard walked (again until each succeeded, or its daemon is
    // offline), serving. False if stopped first.
    bool rejoin_once();
    // Waits until every daemon the table does not have offline uses table `version` or a
    // newer one; false if stopped or taken offline meanwhile.
    bool peers_know(uint64_t version);
    // Runs before_serving_ until it succeeds; false if stopped or taken offline meanwhile.
    bool catch_up_metadata();

    MetaShard& shard_;
    Membership& membership_;
    ChunkService& chunks_;
    uint32_t rank_;
    uint32_t size_;
    PeerFn peer_;
    std::function<Status()> before_serving_;
    std::mutex mu_;
    bool running_ = false; // a rejoin task is posted or runs
    bool again_ = false;   // rejoin() was called while it ran: start over
    std::atomic<bool> stopping_{false};
    boost::asio::thread_pool pool_{2};
};

} // namespace jobfs::server
