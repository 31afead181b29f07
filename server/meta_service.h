// meta_service.h: serves the namespace RPCs of daemon_protocol.h from this daemon's metadata
// shards, and keeps their replicas.
//
// Every request is handed to a thread pool (SQLite must not run on the transport's threads).
// Operations that involve a second shard (lookup or removal of an entry whose inode lives
// elsewhere, mkdir of a directory placed on another shard, rename and link across shards) go
// to the MetaCoordinator of the request's shard, which runs them on the pool thread with
// blocking calls to the peers and an intent log that makes them all-or-nothing across
// crashes. The steps other shards apply for it are served here too (Peer* RPCs).
//
// Replication (docs/replication.md, "Metadata shards"). Shard s is kept by the daemons of its
// meta chain (s, s+1, …; ChainTable::meta_replicas of them). The chain table decides which one
// is its primary (proto::meta_primary): that daemon serves the shard's requests, and ships each
// transaction's changeset to the chain's other members that are not offline before it commits
// (MetaShard::start_shipping). A daemon asked for a shard it does not serve answers `again`
// (the client refreshes its table and asks the primary). A member that is not in step (new,
// restarted, or holding a change the primary never got) is sent a snapshot. When the table
// changes, each daemon takes up the shards it now serves (a new term: the table's version; the
// shard's intents are re-driven) and gives up the others (their transactions are refused from
// then on, so nothing commits on a daemon that no longer serves the shard). A primary waiting
// for a member that does not answer waits until the table takes it offline, then goes on
// without it. Without a table (TableFn empty: tests) every daemon serves its own shard alone.
//
// Threads: requests that may wait for another daemon (lookup, mkdir, rmdir, unlink, link,
// rename) run on this service's coordinator pool; everything else, the peers' steps included,
// runs on the daemon's I/O pool and never waits for another daemon's pools. So a step a
// coordinator waits for is never queued behind coordinators waiting in turn (no distributed
// deadlock when two daemons coordinate towards each other with every thread busy). A replica
// applies changesets on a thread of its own, which waits for nothing: a primary's I/O thread
// waiting for it never waits for a pool.
#pragma once

#include <boost/asio/thread_pool.hpp>

#include <functional>
#include <memory>
#include <vector>

#include "daemon_protocol.h"
#include "server/attr_leases.h"
#include "server/dir_delegations.h"
#include "server/meta_coordinator.h"
#include "server/meta_shard.h"
#include "server/rename_lock.h"
#include "worker.h"

namespace jobfs::server {

class MetaService {
public:
    // peer(rank) gives the endpoint to daemon `rank`, this daemon's own included when it is
    // asked for (a coordinator whose step is on another shard this daemon serves).
    using PeerFn = MetaCoordinator::PeerFn;
    // The chain table as this daemon knows it now.
    using TableFn = std::function<proto::ChainTable()>;

    static constexpr int kCoordinatorThreads = 4;
    // How long a client may keep a leased answer (attr_leases.h; jobfsd's attr-lease-ms).
    static constexpr std::chrono::milliseconds kDefaultAttrLease{3000};

    // One shard this daemon keeps (it is in the shard's meta chain); the daemon owns it.
    struct Hosted {
        uint32_t shard;
        MetaShard* db;
    };

    // Replicated: `shards` are those whose meta chain holds this daemon (its own first).
    MetaService(transport::Worker& worker, std::vector<Hosted> shards, uint32_t rank, uint32_t daemons, PeerFn peer,
                TableFn table, boost::asio::thread_pool& pool);
    // One shard per daemon, no replication (tests of the namespace itself).
    MetaService(transport::Worker& worker, MetaShard& shard, uint32_t rank, uint32_t daemons, PeerFn peer,
                boost::asio::thread_pool& pool);
    ~MetaService();

    // Takes up the shards the chain table gives this daemon (see above); with replicated
    // metadata it serves none until then. Call once the table is the group's (a restarted
    // daemon adopted the others'), before the daemon is ready. Blocks.
    void start();

    // Waits for the coordinators in flight; call before the worker goes away.
    void stop();

    // The length of the leases granted from now on (0: none).
    void set_attr_lease(std::chrono::milliseconds lease);
    AttrLeases::Stats attr_lease_stats() const;
    // Directory delegations (dir_delegations.h); their lease is the attribute lease's length.
    DirDelegations::Stats delegation_stats() const;
    // flock and fcntl locks held now on the files of the shards served here.
    size_t locks_held() const;

    // The shard a new directory named `name` in `parent` is placed on.
    static uint32_t place_directory(uint64_t parent, const std::string& name, uint32_t daemons) {
        return MetaCoordinator::place_directory(parent, name, daemons);
    }

    // Re-drives the intents a crash left in the logs of the shards this daemon serves (on the
    // pool); call once every peer is connected.
    void resume_intents();

    // The chain table changed: takes up and gives up shards (see above). Any thread, even a
    // transport callback: the work is done on the coordinator pool.
    void table_changed();

    // Brings every shard this daemon keeps but does not serve in step with its primary
    // (snapshots as needed): a restarted daemon does this before it serves. Blocks.
    Status catch_up(std::chrono::milliseconds timeout);

    MetaCoordinator& coordinator_for_test();

    struct Impl;

private:
    std::shared_ptr<Impl> impl_;
};

} // namespace jobfs::server
