#include "server/daemon.h"

#include <boost/asio/thread_pool.hpp>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "cluster_descriptor.h"
#include "daemon_protocol.h"
#include "log.h"
#include "server/bootstrap_pmix.h"
#include "server/chunk_service.h"
#include "server/local_read_server.h"
#include "server/chunk_store.h"
#include "server/daemon_stats.h"
#include "server/meta_service.h"
#include "server/membership.h"
#include "server/meta_shard.h"
#include "server/resync.h"
#include "server/same_node_peers.h"
#include "worker.h"

namespace jobfs::server {

using Clock = std::chrono::steady_clock;

// Destroyed in reverse order of declaration: peers and worker first (no new requests),
// then the pool (finishes queued disk work), then the store it used.
struct Daemon::Parts {
    std::unique_ptr<PmixBootstrap> pmix; // during start only (pmix bootstrap); finalized last
    std::unique_ptr<ChunkStore> chunks;
    std::unique_ptr<WriteArenas> write_arenas; // local writes: clients' arenas (after every writer is gone)
    std::unique_ptr<MetaShard> meta;
    std::vector<std::unique_ptr<MetaShard>> meta_copies; // copies of the previous shards (metadata replication)
    std::unique_ptr<boost::asio::thread_pool> pool;
    std::unique_ptr<transport::Worker> worker;
    std::unique_ptr<Membership> membership;
    std::unique_ptr<ChunkService> chunk_service;
    std::unique_ptr<SameNodePeers> same_node; // chain forwards to daemons of this node: shared memory
    std::unique_ptr<LocalReadServer> local_reads; // local-reads: chunk files for readers on this node
    std::unique_ptr<MetaService> meta_service;
    std::unique_ptr<Resync> resync;
    std::mutex peers_mu; // guards peers, started: filled at start while requests may already arrive
    std::condition_variable peers_cv; // a peer connected, or the start ended
    std::vector<transport::Endpoint> peers; // by rank; our own slot stays empty
    uint32_t self_rank = UINT32_MAX;         // this daemon, reached through `self` (below)
    std::string self_host;
    uint16_t self_port = 0;
    std::mutex self_mu;
    transport::Endpoint self;
    bool started = false;                    // the start-up connect loop ended
    std::chrono::steady_clock::time_point start_deadline;
};

namespace {

std::pair<std::string, uint16_t> split_host_port(const std::string& hp) {
    size_t colon = hp.rfind(':');
    return {hp.substr(0, colon), static_cast<uint16_t>(std::stoul(hp.substr(colon + 1)))};
}

} // namespace

Result<uint32_t> find_rank(const DaemonConfig& c) {
    if (c.rank >= 0) return static_cast<uint32_t>(c.rank);
    // This host's names, as a Slurm node list names it: the host name and its first label.
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    const std::string full(name), short_name = full.substr(0, full.find('.'));
    std::vector<uint32_t> same_port, exact, by_name;
    for (uint32_t i = 0; i < c.daemons.size(); ++i) {
        auto [host, port] = split_host_port(c.daemons[i]);
        if (port != c.port) continue;
        same_port.push_back(i);
        if (host == c.listen) exact.push_back(i);
        if (!full.empty() && (host == full || host == short_name)) by_name.push_back(i);
    }
    if (exact.size() == 1) return exact[0];
    if (by_name.size() == 1) return by_name[0];
    if (same_port.size() == 1) return same_port[0];
    return Status(Code::invalid, same_port.empty()
                                     ? "no entry of daemons has port " + std::to_string(c.port) + ": set rank"
                                     : "several entries of daemons have port " + std::to_string(c.port) +
                                           " and none names this host (" + full + ") alone: set rank");
}

Result<std::string> read_secret(const std::string& path) {
    if (path.empty()) return std::string();
    std::ifstream in(path);
    if (!in) return Status::from_errno(errno, "cannot read secret file " + path);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    if (s.empty()) return Status(Code::invalid, "secret file " + path + " is empty");
    return s;
}

Daemon::Daemon(DaemonConfig config, uint32_t rank) : config_(std::move(config)), rank_(rank) {}

Daemon::~Daemon() { stop(); }

Result<std::unique_ptr<Daemon>> Daemon::start(const DaemonConfig& config_in) {
    // The rank comes first: it names the shard and may be part of the data directory.
    std::unique_ptr<PmixBootstrap> pmix;
    uint32_t rank = 0, size = 0;
    if (config_in.bootstrap == "pmix") {
        auto b = PmixBootstrap::init();
        if (!b.ok()) return b.status();
        pmix = std::move(*b);
        rank = pmix->rank();
        size = pmix->size();
        log::set_name("jobfsd." + std::to_string(rank)); // jobfsd could not name its log before
    } else if (config_in.bootstrap == "static") {
        auto r = find_rank(config_in);
        if (!r.ok()) return r.status();
        rank = *r;
        size = static_cast<uint32_t>(config_in.daemons.size());
    } else {
        return Status(Code::unsupported, "bootstrap '" + config_in.bootstrap + "' is not known");
    }
    auto secret = read_secret(config_in.secret_file);
    if (!secret.ok()) return secret.status();

    std::unique_ptr<Daemon> d(new Daemon(config_in, rank));
    DaemonConfig& config = d->config_;
    config.data_dir = expand_rank(config.data_dir, rank);
    d->parts_ = std::make_unique<Parts>();
    Parts& p = *d->parts_;
    p.pmix = std::move(pmix);
    auto chunks = ChunkStore::open(config.data_dir, kMaxChunkSize, config.direct_io, config.direct_io_min,
                                   config.early_writeback_min);
    if (!chunks.ok()) return chunks.status().with_context("data directory");
    p.chunks = std::move(*chunks);
    // This daemon's rank is its shard of the namespace; shard 0 holds the root.
    auto meta = MetaShard::open(config.data_dir + "/meta.db", rank,
                               Layout{static_cast<uint32_t>(config.chunk_size), config.stripe_count, config.replicas});
    if (!meta.ok()) return meta.status().with_context("metadata");
    p.meta = std::move(*meta);
    // Metadata replication (docs/replication.md, "Metadata shards"): shard s is kept by the
    // daemons s, s+1, ... (replicas of them), so this one keeps copies of the shards before it.
    const uint32_t meta_replicas = std::min(std::max(config.replicas, 1u), size);
    std::vector<MetaService::Hosted> hosted{{rank, p.meta.get()}};
    for (uint32_t k = 1; k < meta_replicas; ++k) {
        const uint32_t s = (rank + size - k) % size;
        const std::string path = config.data_dir + "/meta-copy-" + std::to_string(s) + ".db";
        const bool existed = ::access(path.c_str(), F_OK) == 0;
        auto copy = MetaShard::open(path, s, Layout{static_cast<uint32_t>(config.chunk_size), config.stripe_count, config.replicas});
        if (!copy.ok()) return copy.status().with_context("copy of metadata shard " + std::to_string(s));
        // A new copy holds a fresh shard, not the primary's: it takes a snapshot first.
        if (!existed) {
            Status st = (*copy)->forget_position();
            if (!st.ok()) return st.with_context("copy of metadata shard " + std::to_string(s));
        }
        hosted.push_back({s, copy->get()});
        p.meta_copies.push_back(std::move(*copy));
    }
    p.pool = std::make_unique<boost::asio::thread_pool>(config.io_threads);

    transport::WorkerOptions wo;
    wo.name = "jobfsd." + std::to_string(rank);
    wo.secret = *secret;
    wo.call_timeout = config.call_timeout;
    wo.busy_poll = std::chrono::microseconds(config.busy_poll_us);
    auto worker = transport::Worker::create(wo);
    if (!worker.ok()) return worker.status();
    p.worker = std::move(*worker);
    Parts* parts = &p;
    // A static group has no start-up barrier: a client that another daemon's "ready" let in
    // may reach this one before it connected to every peer. A request forwarded to such a peer
    // waits for that connection (until the start-up deadline) instead of failing; handlers,
    // which must not block, do not wait.
    auto peer = [parts](uint32_t r) -> Result<transport::Endpoint> {
        std::unique_lock lock(parts->peers_mu);
        auto valid = [parts, r] { return r < parts->peers.size() && parts->peers[r].valid(); };
        if (r == parts->self_rank) {
            // A coordinator's step on another shard this daemon serves: through itself.
            std::lock_guard self_lock(parts->self_mu);
            if (!parts->self.valid() || !parts->self.health().ok()) {
                lock.unlock();
                auto ep = parts->worker->connect(parts->self_host, parts->self_port);
                if (!ep.ok()) return ep.status().with_context("connection to this daemon");
                parts->self = *ep;
            }
            return parts->self;
        }
        if (!valid() && !parts->started && !parts->worker->in_callback())
            parts->peers_cv.wait_until(lock, parts->start_deadline, [parts, &valid] { return valid() || parts->started; });
        if (!valid()) return Status(Code::peer_gone, "no connection to daemon " + std::to_string(r));
        return parts->peers[r];
    };
    // Peers' addresses are known only after the PMIx exchange below: read them when needed.
    const DaemonConfig* cfg = &config;
    auto reconnect = [parts, cfg](uint32_t r) -> Status {
        if (r >= cfg->daemons.size()) return Status(Code::invalid, "no daemon " + std::to_string(r));
        auto [host, pport] = split_host_port(cfg->daemons[r]);
        auto ep = parts->worker->connect(host, pport);
        if (!ep.ok()) return ep.status();
        std::lock_guard lock(parts->peers_mu);
        if (r < parts->peers.size()) parts->peers[r] = *ep;
        JOBFS_INFO("reconnected to daemon %u at %s", r, cfg->daemons[r].c_str());
        return Status::OK();
    };
    p.membership = std::make_unique<Membership>(*p.worker, rank, size, peer, reconnect,
                                                Membership::Options{config.heartbeat, config.failure_timeout, meta_replicas});
    Membership* membership = p.membership.get();
    p.chunk_service = std::make_unique<ChunkService>(*p.worker, *p.chunks, *p.pool, rank, peer,
                                                     [membership] { return membership->table_version(); });
    p.meta_service = std::make_unique<MetaService>(*p.worker, hosted, rank, size, peer,
                                                   [membership] { return membership->table(); }, *p.pool);
    p.meta_service->set_attr_lease(config.attr_lease);
    p.resync = std::make_unique<Resync>(*p.worker, *p.meta, *p.membership, *p.chunk_service, rank, size, peer);
    p.same_node = std::make_unique<SameNodePeers>(*p.worker, *secret, rank, size, peer);
    p.chunk_service->forward_through(p.same_node.get());
    if (config.local_reads) {
        // Without it readers get every byte over the transport: slower, never wrong.
        ChunkService* chunks = p.chunk_service.get();
        p.write_arenas = std::make_unique<WriteArenas>();
        auto lr = LocalReadServer::start(
            *p.chunks, *secret, rank,
            [chunks](ChunkId id, std::span<const uint32_t> chain, uint64_t table_version) {
                return chunks->read_gate(id, chain, table_version);
            },
            p.write_arenas.get());
        if (lr.ok()) {
            p.local_reads = std::move(*lr);
            chunks->accept_arenas(p.write_arenas.get());
        } else {
            JOBFS_WARN("local reads are off: %s", lr.status().message().c_str());
        }
    }
    // DaemonStats: the process's figures, the reads clients of this node made from chunk files
    // (described by the local socket), the bytes written from their arenas and the heartbeats
    // sent. A status query leaves the daemon at rest. The worker goes first at stop, so the
    // handler never outlives what it reads.
    serve_daemon_stats(*p.worker, [worker = p.worker.get(), chunks = p.chunk_service.get(), local = p.local_reads.get(),
                                   same_node = p.same_node.get(), meta = p.meta_service.get(),
                                   membership](proto::DaemonStatsResponse& s) {
        membership->served_monitoring();
        s.connections_accepted = worker->stats().connections_accepted;
        s.locks_held = meta->locks_held();
        s.local_reads = local ? local->reads() : 0;
        s.arena_write_bytes = chunks->arena_write_bytes();
        s.heartbeats_sent = membership->heartbeats_sent();
        s.shm_forward_bytes = same_node->bytes_sent();
        s.shm_connections = same_node->connections_made();
        const AttrLeases::Stats leases = meta->attr_lease_stats();
        s.leases_held = leases.held;
        s.leases_granted = leases.granted;
        s.lease_recalls = leases.recalls;
        s.lease_recall_failures = leases.recall_failures;
        const DirDelegations::Stats dirs = meta->delegation_stats();
        s.delegations_held = dirs.held;
        s.delegations_granted = dirs.granted;
        s.delegation_recalls = dirs.recalls;
        s.delegation_recall_failures = dirs.recall_failures;
    });
    auto port = p.worker->listen(config.listen, config.port);
    if (!port.ok()) return port.status();
    d->port_ = *port;

    const auto deadline = Clock::now() + config.startup_timeout;
    {
        std::lock_guard lock(p.peers_mu);
        p.start_deadline = deadline;
    }
    // However the start ends, nobody waits for a peer any more.
    struct StartEnd {
        Parts& p;
        ~StartEnd() {
            {
                std::lock_guard lock(p.peers_mu);
                p.started = true;
            }
            p.peers_cv.notify_all();
        }
    } start_end{p};
    auto time_left = [&deadline] {
        return std::max(std::chrono::milliseconds(1),
                        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    };
    if (p.pmix) {
        // Listening first, so that the port published is the one bound (port=0 picks any).
        std::string me = advertised_host(config.listen) + ":" + std::to_string(*port);
        auto list = p.pmix->exchange(me, time_left());
        if (!list.ok()) return list.status();
        config.daemons = std::move(*list);
        JOBFS_INFO("pmix: daemon %u of %u at %s", rank, size, me.c_str());
    }

    // Connect to every peer; those not up yet refuse, so retry until the start-up deadline.
    {
        std::lock_guard lock(p.peers_mu);
        p.peers.resize(config.daemons.size());
    }
    for (;;) {
        std::vector<std::string> missing;
        Status last;
        for (uint32_t r = 0; r < config.daemons.size(); ++r) {
            {
                std::lock_guard lock(p.peers_mu);
                if (r == rank || p.peers[r].valid()) continue;
            }
            auto [host, pport] = split_host_port(config.daemons[r]);
            auto ep = p.worker->connect(host, pport);
            if (ep.ok()) {
                {
                    std::lock_guard lock(p.peers_mu);
                    p.peers[r] = *ep;
                }
                p.peers_cv.notify_all();
                JOBFS_INFO("connected to daemon %u at %s", r, config.daemons[r].c_str());
            } else {
                if (ep.status().code() == Code::permission || ep.status().code() == Code::protocol)
                    return ep.status(); // retrying cannot help
                missing.push_back(std::to_string(r) + " (" + config.daemons[r] + ": " + ep.status().message() + ")");
            }
        }
        if (missing.empty()) break;
        if (Clock::now() >= deadline) {
            std::string list;
            for (auto& m : missing) list += (list.empty() ? "" : ", ") + m;
            return Status(Code::timeout, "daemons not reachable after " +
                                             std::to_string(config.startup_timeout.count()) + " ms: " + list);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    {
        // This daemon as the others reach it (a coordinator's step on a shard it serves).
        std::lock_guard lock(p.peers_mu);
        auto [self_host, self_port] = split_host_port(config.daemons[rank]);
        p.self_host = self_host;
        p.self_port = self_port;
        p.self_rank = rank;
    }
    // Under PMIx every daemon waits for every other to be connected too, so that "ready" (and
    // the cluster file) means the whole group is; a static group has no such barrier. PMIx has
    // done its work then and is finalized at once, while the launcher still answers: mpirun,
    // ending a job, serves no PMIx requests, so a PMIx_Finalize at stop would block until the
    // launcher's SIGKILL.
    if (p.pmix) {
        Status s = p.pmix->barrier(time_left());
        if (!s.ok()) return s;
        s = p.pmix->finalize(PmixBootstrap::kFinalizeLimit);
        if (!s.ok()) JOBFS_WARN("%s", s.message().c_str()); // the group is up all the same
        p.pmix.reset();
    }
    if (rank == 0 && !config.cluster_file.empty()) {
        Status s = transport::write_cluster_descriptor(config.cluster_file, config.daemons, *secret);
        if (!s.ok()) return s.with_context("cluster-file");
        d->wrote_cluster_file_ = true;
    }
    // A restarted daemon that the others took offline catches up before it serves reads.
    const bool rejoin = p.membership->adopt_from_peers();
    // The metadata shards this daemon serves under the group's table (not its own first
    // table: a restarted daemon's copy of its shard may be behind). Taking one up re-drives
    // its intents: cross-shard operations a crash interrupted are finished or undone now that
    // every shard they touch is reachable.
    p.meta_service->start();
    Resync* resync = p.resync.get();
    p.membership->on_taken_offline([resync] { resync->rejoin(); });
    MetaService* meta_service = p.meta_service.get();
    p.membership->on_change([meta_service] { meta_service->table_changed(); });
    // A restarted daemon's copies of metadata shards catch up with their primaries before it
    // serves (its own shard then comes back to it).
    p.resync->before_serving([meta_service] { return meta_service->catch_up(std::chrono::seconds(60)); });
    // A peer taken offline: what waits for it (chain forwards, cross-shard steps) fails now
    // and is retried on the chains without it. The next use of its connection reconnects.
    p.membership->on_peer_offline([parts](uint32_t r) {
        transport::Endpoint ep;
        {
            std::lock_guard lock(parts->peers_mu);
            if (r < parts->peers.size()) ep = parts->peers[r];
        }
        if (ep.valid())
            ep.abort(Status(Code::peer_gone, "daemon " + std::to_string(r) + " was taken offline (chain table)"));
    });
    p.membership->start();
    if (rejoin) p.resync->rejoin();
    return d;
}

void Daemon::stop() {
    if (!parts_) return;
    Parts& p = *parts_;
    // Clients must not find a group that is going away.
    if (wrote_cluster_file_ && ::unlink(config_.cluster_file.c_str()) != 0)
        JOBFS_WARN("cannot remove cluster-file %s: %s", config_.cluster_file.c_str(), std::strerror(errno));
    wrote_cluster_file_ = false;
    if (p.worker) p.worker->stop_listening();
    if (p.resync) p.resync->stop();         // walks in progress end (their calls fail or finish)
    if (p.membership) p.membership->stop(); // no heartbeats to a group going away
    if (p.meta_service) p.meta_service->stop(); // coordinators finish their cross-shard steps
    if (p.pool) p.pool->join(); // queued disk work finishes and its replies go out
    {
        std::lock_guard lock(p.peers_mu);
        p.peers.clear();
    }
    p.worker.reset();      // connections flushed and closed
    p.local_reads.reset();
    p.chunk_service.reset();
    p.same_node.reset();
    p.resync.reset();
    p.meta_service.reset();
    p.membership.reset();
    p.pool.reset();
    p.meta_copies.clear();
    p.meta.reset();        // SQLite closed (WAL checkpointed)
    p.chunks.reset();
    parts_.reset();
}

} // namespace jobfs::server
