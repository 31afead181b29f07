// meta_service.h: serves the namespace RPCs of daemon_protocol.h from this daemon's MetaShard.
//
// Every request is handed to a thread pool (SQLite must not run on the transport's threads).
// Operations that involve a second shard (lookup or removal of an entry whose inode lives
// elsewhere, mkdir of a directory placed on another shard, rename and link across shards) go
// to the MetaCoordinator, which runs them on the pool thread with blocking calls to the
// peers and an intent log that makes them all-or-nothing across crashes. The steps other
// shards apply for it are served here too (Peer* RPCs).
//
// Threads: requests that may wait for another daemon (lookup, mkdir, rmdir, unlink, link,
// rename) run on this service's coordinator pool; everything else, the peers' steps included,
// runs on the daemon's I/O pool and never waits for another daemon. So a step a coordinator
// waits for is never queued behind coordinators waiting in turn (no distributed deadlock
// when two daemons coordinate towards each other with every thread busy).
#pragma once

#include <boost/asio/thread_pool.hpp>

#include <functional>

#include "server/meta_coordinator.h"
#include "server/meta_shard.h"
#include "server/rename_lock.h"
#include "worker.h"

namespace jobfs::server {

class MetaService {
public:
    // peer(rank) gives the endpoint to daemon `rank` (never called for this daemon's rank).
    using PeerFn = MetaCoordinator::PeerFn;

    static constexpr int kCoordinatorThreads = 4;

    MetaService(transport::Worker& worker, MetaShard& shard, uint32_t rank, uint32_t daemons, PeerFn peer,
                boost::asio::thread_pool& pool);
    ~MetaService();

    // Waits for the coordinators in flight; call before the worker goes away.
    void stop();

    // The shard a new directory named `name` in `parent` is placed on.
    static uint32_t place_directory(uint64_t parent, const std::string& name, uint32_t daemons) {
        return MetaCoordinator::place_directory(parent, name, daemons);
    }

    // Re-drives the intents a crash left in the log (on the pool); call once every peer is
    // connected.
    void resume_intents();

    MetaCoordinator& coordinator_for_test() { return *coordinator_; }

private:
    std::shared_ptr<MetaCoordinator> coordinator_;
    std::shared_ptr<boost::asio::thread_pool> coord_pool_;
    std::shared_ptr<RenameLock> rename_lock_; // renames between directories (daemon 0 holds it)
};

} // namespace jobfs::server
