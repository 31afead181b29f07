#include "server/meta_service.h"

#include <boost/asio/post.hpp>

#include <sys/stat.h>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "daemon_protocol.h"
#include "log.h"
#include "server/attr_leases.h"
#include "server/dir_delegations.h"
#include "server/file_locks.h"
#include "server/meta_wire.h"

namespace jobfs::server {

using transport::ServerCall;
namespace rpc = transport::rpc;
using Clock = std::chrono::steady_clock;
using Position = MetaShard::ReplPosition;

namespace {

// Replies with a handler's result (a Status or a Result of a wire type).
template <class Rpc, class R>
void reply_with(const ServerCall& call, const R& r) {
    if constexpr (std::is_same_v<R, Status>) {
        call.reply(r);
    } else {
        if (!r.ok()) return call.reply(r.status());
        rpc::reply<Rpc>(call, *r);
    }
}

// Replies with a handler's result once the holders of leases on what it changed let go, and
// nothing its answer is about is being recalled (attr_leases.h); at once, on this thread, when
// neither holds it up.
template <class Rpc, class R>
void reply_settled(AttrLeases& lz, const ServerCall& call, R r, AttrLeases::Subject about = {}) {
    const bool reads = about.ino || about.parent || about.dir;
    if (!lz.must_settle() && (!reads || lz.idle(about))) {
        lz.settle(nullptr); // closes the request's frame
        return reply_with<Rpc>(call, r);
    }
    if (!reads) return lz.settle([call, r = std::move(r)] { reply_with<Rpc>(call, r); });
    lz.settle([lz = lz.shared_from_this(), call, r = std::move(r), about = std::move(about)] {
        lz->when_idle(about, [call, r] { reply_with<Rpc>(call, r); });
    });
}

// What a request's answer is about, for reply_settled: nothing (a change).
struct NoSubject {
    template <class Req, class R>
    AttrLeases::Subject operator()(const Req&, const R&) const {
        return {};
    }
};

template <class R>
Code code_of(const R& r) {
    if constexpr (std::is_same_v<R, Status>) {
        return r.code();
    } else {
        return r.ok() ? Code::ok : r.status().code();
    }
}

// work(req), or work(req, call) for a handler that needs the connection the request came on.
template <class Work, class Req>
auto run_work(const Work& work, const Req& req, const ServerCall& call) {
    if constexpr (std::is_invocable_v<const Work&, const Req&, const ServerCall&>) {
        return work(req, call);
    } else {
        return work(req);
    }
}

// Runs work on the pool, then finish(call, request, result, since) (since: the lease sequence
// taken before the work, when kSnapshot asks for it, else 0). A request that met a directory
// delegated to a client (Code::recall, dir_delegations.h) changed nothing: the delegation is
// recalled and the request runs again from the start once it ended.
template <class Rpc, bool kSnapshot, class Work, class Finish>
void run_on_pool(boost::asio::thread_pool& pool, std::shared_ptr<AttrLeases> lz, std::shared_ptr<DirDelegations> dd,
                 ServerCall call, std::shared_ptr<const typename Rpc::Request> req, Work work, Finish finish,
                 AttrLeases::Handover carried = {}) {
    boost::asio::post(pool, [&pool, lz, dd, call, req, work, finish, carried = std::move(carried)]() mutable {
        lz->begin_op();
        lz->take_over(std::move(carried));
        const uint64_t since = kSnapshot ? lz->snapshot() : 0;
        auto r = run_work(work, *req, call);
        if (code_of(r) == Code::recall) {
            const uint64_t dir = MetaShard::recall_dir();
            const uint64_t token = MetaShard::recall_token();
            return lz->settle([&pool, lz, dd, call, req, work, finish, dir, token] {
                dd->recall(dir, token, [&pool, lz, dd, call, req, work, finish] {
                    run_on_pool<Rpc, kSnapshot>(pool, lz, dd, call, req, work, finish);
                });
            });
        }
        finish(call, *req, std::move(r), since);
    });
}

// Posts `work` to the pool and replies with its result.
template <class Rpc, class Work, class About = NoSubject>
void serve_on_pool(transport::Worker& w, boost::asio::thread_pool& pool, std::shared_ptr<AttrLeases> lz,
                   std::shared_ptr<DirDelegations> dd, Work work, About about = {}) {
    rpc::serve<Rpc>(w, [&pool, lz, dd, work, about](ServerCall call, typename Rpc::Request&& req) {
        run_on_pool<Rpc, false>(pool, lz, dd, call, std::make_shared<const typename Rpc::Request>(std::move(req)), work,
                                [lz, about](const ServerCall& call, const auto& req, auto r, uint64_t) {
                                    AttrLeases::Subject s = about(req, r);
                                    reply_settled<Rpc>(*lz, call, std::move(r), std::move(s));
                                });
    });
}

// What a shard does alone and at once (lookups, getattrs, creates and unlinks of files):
// `now` runs on the progress thread and answers unless it would have to wait (the shard busy,
// its changes shipped to replicas, a WAL checkpoint due: nullopt) or ask another daemon
// (nullopt too); then `work` answers on the pool, as serve_on_pool. The hop to a pool thread
// and back had cost more than the work itself: 13,000 lookups/s from 4 threads on pool
// threads, 30,000 on the progress thread; creates 5,000 and 8,000 (bench/run meta, 3 daemons
// here). What `now` may do there: one SQLite transaction of the shard under its lock, tried,
// never waited for, whose commit writes the WAL but never syncs it (synchronous=NORMAL).
// A delegated directory (Code::recall) is the pool's to wait for.
//
// `finish(call, request, result, since)` replies; `since` is the lease sequence taken before the
// work (AttrLeases::snapshot, for a grant), when kSnapshot asks for it, else 0.
template <class Rpc, bool kSnapshot, class Now, class Work, class Finish>
void serve_now_or_on_pool_then(transport::Worker& w, boost::asio::thread_pool& pool, std::shared_ptr<AttrLeases> lz,
                               std::shared_ptr<DirDelegations> dd, Now now, Work work, Finish finish) {
    rpc::serve<Rpc>(w, [&pool, lz, dd, now, work, finish](ServerCall call, typename Rpc::Request&& req) {
        lz->begin_op();
        const uint64_t since = kSnapshot ? lz->snapshot() : 0;
        if (auto r = run_work(now, req, call); r && code_of(*r) != Code::recall) return finish(call, req, std::move(*r), since);
        run_on_pool<Rpc, kSnapshot>(pool, lz, dd, call, std::make_shared<const typename Rpc::Request>(std::move(req)),
                                    work, finish, lz->hand_over());
    });
}

template <class Rpc, class Now, class Work, class About = NoSubject>
void serve_now_or_on_pool(transport::Worker& w, boost::asio::thread_pool& pool, std::shared_ptr<AttrLeases> lz,
                          std::shared_ptr<DirDelegations> dd, Now now, Work work, About about = {}) {
    serve_now_or_on_pool_then<Rpc, false>(
        w, pool, lz, dd, now, work, [lz, about](const ServerCall& call, const auto& req, auto r, uint64_t) {
            AttrLeases::Subject s = about(req, r);
            reply_settled<Rpc>(*lz, call, std::move(r), std::move(s));
        });
}

template <class T>
Result<proto::Attr> attr_out(const Result<T>& r) {
    if (!r.ok()) return r.status();
    return to_wire(*r);
}

// a is further along than b (a copy out of step is along nowhere).
bool after(const Position& a, const Position& b) {
    if (a.seq == MetaShard::kOutOfStep) return false;
    if (b.seq == MetaShard::kOutOfStep) return true;
    return a.term > b.term || (a.term == b.term && a.seq > b.seq);
}

std::string pos_str(const Position& p) { return std::to_string(p.term) + "/" + std::to_string(p.seq); }

// How long a primary keeps asking a member that does not answer before it gives up on the
// transaction (by then the manager has taken a dead member offline: failure timeout 5 s).
constexpr auto kShipTimeout = std::chrono::seconds(20);
constexpr auto kApplyCallTimeout = std::chrono::seconds(5);

} // namespace

// ---- the shards this daemon keeps -------------------------------------------------------------

struct Entry {
    uint32_t shard = 0;
    MetaShard* db = nullptr;
    std::shared_ptr<MetaCoordinator> co;
    std::atomic<bool> serving{false}; // this daemon serves it now (see MetaService::Impl::reconcile)
    uint64_t term = 0;                // of its service; guarded by Impl::roles_mu
};

struct MetaService::Impl : std::enable_shared_from_this<MetaService::Impl> {
    Impl(transport::Worker& w, uint32_t rank, uint32_t daemons, PeerFn peer, TableFn table, boost::asio::thread_pool& pool)
        : worker(w), rank(rank), daemons(daemons), peer(std::move(peer)), table(std::move(table)), pool(pool) {}

    transport::Worker& worker;
    const uint32_t rank;
    const uint32_t daemons;
    PeerFn peer;
    TableFn table; // empty: no replication, every daemon serves its own shard
    boost::asio::thread_pool& pool;
    std::shared_ptr<boost::asio::thread_pool> coord_pool = std::make_shared<boost::asio::thread_pool>(kCoordinatorThreads);
    // Replicas apply on their own thread: it waits for nothing but its own databases.
    std::shared_ptr<boost::asio::thread_pool> apply_pool = std::make_shared<boost::asio::thread_pool>(1);
    std::shared_ptr<RenameLock> rename_lock;
    std::map<uint32_t, std::unique_ptr<Entry>> shards; // fixed once constructed
    // Leases on what clients cache of this daemon's shards (attr_leases.h).
    std::shared_ptr<AttrLeases> leases = std::make_shared<AttrLeases>(MetaService::kDefaultAttrLease, pool);
    // Directories delegated to clients (dir_delegations.h); made by the constructor.
    std::shared_ptr<DirDelegations> delegations;
    // flock and fcntl locks on the files of the shards served here (file_locks.h), and the
    // connection each locking client came on last: a client whose connection is down is dead,
    // and its locks go once they stand in another's way (or at once, at its LeaseRelease).
    std::mutex lock_conns_mu; // guards lock_conns; taken inside FileLocks' mutex, never around it
    std::unordered_map<uint64_t, transport::Endpoint> lock_conns;
    std::shared_ptr<FileLocks> locks = std::make_shared<FileLocks>([this](uint64_t client) {
        std::lock_guard lock(lock_conns_mu);
        auto it = lock_conns.find(client);
        if (it == lock_conns.end()) return false;
        if (it->second.health().ok()) return true;
        lock_conns.erase(it); // FileLocks drops its locks: nothing is left of it here
        return false;
    });

    std::mutex roles_mu;                            // reconcile runs one at a time
    std::mutex catch_mu;                            // guards catching
    std::set<std::pair<uint32_t, uint32_t>> catching; // (shard, member) snapshots on their way

    proto::ChainTable now() const { return table ? table() : proto::ChainTable{}; }

    Entry* find(uint32_t shard) {
        auto it = shards.find(shard);
        return it == shards.end() ? nullptr : it->second.get();
    }

    // The shard's entry if this daemon serves it now; `again` otherwise (the caller's table is
    // stale, or the shard is changing hands).
    Result<Entry*> serve(uint32_t shard) {
        Entry* e = find(shard);
        if (e && e->serving.load() && (!table || proto::meta_primary(shard, now()) == int64_t(rank))) return e;
        return Status(Code::again, "daemon " + std::to_string(rank) + " does not serve metadata shard " +
                                       std::to_string(shard) + " (chain table " + std::to_string(now().version) +
                                       "): ask its primary");
    }

    // The daemon serving shard s, for a coordinator's step there (possibly this one).
    Result<transport::Endpoint> peer_of_shard(uint32_t s) {
        const int64_t p = proto::meta_primary(s, now());
        if (p < 0) return Status(Code::peer_gone, "no daemon serves metadata shard " + std::to_string(s));
        return peer(static_cast<uint32_t>(p));
    }

    Status ship(uint32_t s, const Position& prev, const Position& at, std::span<const uint8_t> cs);
    Status bring_in_step(uint32_t s, uint32_t member);
    void schedule_catch_up(uint32_t s, uint32_t member);
    void reconcile();
    void register_handlers(transport::Worker& w);
};

// A primary's shipping of one transaction (MetaShard::ShipFn): to every member of the shard's
// chain that is not offline, in chain order, before the transaction commits.
Status MetaService::Impl::ship(uint32_t s, const Position& prev, const Position& at, std::span<const uint8_t> cs) {
    const auto deadline = Clock::now() + kShipTimeout;
    proto::MetaApplyRequest req{s, 0, prev.term, prev.seq, at.term, at.seq, std::vector<uint8_t>(cs.begin(), cs.end())};
    proto::ChainTable t = now();
    for (uint32_t m : proto::meta_chain(s, daemons, t.meta_replicas)) {
        if (m == rank) continue;
        for (;;) {
            t = now();
            if (proto::meta_primary(s, t) != int64_t(rank))
                return Status(Code::again, "daemon " + std::to_string(rank) + " no longer serves metadata shard " +
                                               std::to_string(s));
            if (m >= t.states.size() || t.states[m] == proto::kDaemonOffline) break; // it catches up when back
            req.table_version = t.version;
            transport::CallOptions o;
            o.timeout = kApplyCallTimeout;
            auto ep = peer(m);
            Status st = ep.ok() ? rpc::call<proto::MetaApply>(*ep, req, o).status() : ep.status();
            if (st.ok()) break;
            if (st.code() == Code::busy) { // not in step: a snapshot first, the client asks again
                schedule_catch_up(s, m);
                return Status(Code::again, "metadata shard " + std::to_string(s) + ": the copy on daemon " +
                                               std::to_string(m) + " is being brought in step");
            }
            if (Clock::now() >= deadline)
                return st.with_context("metadata shard " + std::to_string(s) + ": copy on daemon " + std::to_string(m));
            // Another table (ours or its: heartbeats bring them level), or it does not answer
            // (the manager takes it offline after the failure timeout).
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
    }
    return Status::OK();
}

// Makes `member`'s copy of shard s the same as this daemon's: nothing if their positions are
// equal, else a snapshot.
Status MetaService::Impl::bring_in_step(uint32_t s, uint32_t member) {
    Entry* e = find(s);
    if (!e) return Status(Code::invalid, "daemon " + std::to_string(rank) + " keeps no copy of metadata shard " + std::to_string(s));
    auto ep = peer(member);
    if (!ep.ok()) return ep.status();
    auto theirs = rpc::call<proto::MetaPosition>(*ep, proto::MetaShardRequest{s, member});
    auto mine = e->db->position();
    if (!mine.ok()) return mine.status();
    if (theirs.ok() && Position{theirs->term, theirs->seq} == *mine) return Status::OK();
    auto snap = e->db->snapshot();
    if (!snap.ok()) return snap.status();
    transport::CallOptions o;
    o.timeout = std::chrono::seconds(60);
    o.bulk_out = snap->image;
    Status st = rpc::call<proto::MetaInstall>(*ep, proto::MetaInstallRequest{s, snap->at.term, snap->at.seq}, o).status();
    if (st.ok())
        JOBFS_INFO("metadata shard %u: copy on daemon %u brought in step (snapshot %s, %zu bytes)", s, member,
                   pos_str(snap->at).c_str(), snap->image.size());
    return st.with_context("metadata shard " + std::to_string(s) + ": snapshot to daemon " + std::to_string(member));
}

void MetaService::Impl::schedule_catch_up(uint32_t s, uint32_t member) {
    {
        std::lock_guard l(catch_mu);
        if (!catching.insert({s, member}).second) return;
    }
    std::weak_ptr<Impl> wk = weak_from_this();
    boost::asio::post(*coord_pool, [wk, s, member] {
        auto im = wk.lock();
        if (!im) return;
        Status st = im->bring_in_step(s, member);
        if (!st.ok()) JOBFS_WARN("%s", st.to_string().c_str());
        std::lock_guard l(im->catch_mu);
        im->catching.erase({s, member});
    });
}

// Takes up the shards the table now gives this daemon and gives up the others.
void MetaService::Impl::reconcile() {
    if (!table) return;
    std::lock_guard l(roles_mu);
    const proto::ChainTable t = now();
    const bool replicated = t.meta_replicas > 1 && t.states.size() == daemons;
    for (auto& [s, e] : shards) {
        const bool mine = proto::meta_primary(s, t) == int64_t(rank);
        if (mine && !e->serving) {
            if (replicated) {
                // A member ahead of this copy (it applied a change this one never got, or this
                // daemon was down for a while and comes back first) gives its copy first.
                auto pos = e->db->position();
                for (uint32_t m : proto::meta_chain(s, daemons, t.meta_replicas)) {
                    if (m == rank || !pos.ok() || t.states[m] == proto::kDaemonOffline) continue;
                    auto ep = peer(m);
                    if (!ep.ok()) continue;
                    auto theirs = rpc::call<proto::MetaPosition>(*ep, proto::MetaShardRequest{s, rank});
                    if (!theirs.ok() || !after(Position{theirs->term, theirs->seq}, *pos)) continue;
                    Status got = rpc::call<proto::MetaCatchUp>(*ep, proto::MetaShardRequest{s, rank}).status();
                    JOBFS_INFO("metadata shard %u: daemon %u had %s, ahead of %s here: %s", s, m,
                               pos_str(Position{theirs->term, theirs->seq}).c_str(), pos_str(*pos).c_str(),
                               got.ok() ? "took its copy" : got.to_string().c_str());
                    pos = e->db->position();
                }
                // Copies not in step get a snapshot now, before the first changeset.
                for (uint32_t m : proto::meta_chain(s, daemons, t.meta_replicas))
                    if (m != rank && t.states[m] != proto::kDaemonOffline && !bring_in_step(s, m).ok())
                        schedule_catch_up(s, m);
                std::weak_ptr<Impl> wk = weak_from_this();
                const uint32_t shard = s;
                (void)e->db->start_shipping(t.version, [wk, shard](const Position& prev, const Position& at,
                                                                   std::span<const uint8_t> cs) -> Status {
                    auto im = wk.lock();
                    if (!im) return Status(Code::cancelled, "metadata service stopped");
                    return im->ship(shard, prev, at, cs);
                });
            }
            e->term = t.version;
            // Before it serves: a table past the first means the shard may have been served
            // elsewhere, with leases this daemon does not know (attr_leases.h).
            leases->take_up(s, t.version > 1);
            e->serving = true;
            if (replicated) JOBFS_INFO("serving metadata shard %u (chain table %llu)", s, static_cast<unsigned long long>(t.version));
            auto co = e->co;
            boost::asio::post(*coord_pool, [co, lz = leases] { // its intents, replicated with it
                lz->begin_op();
                co->resume();
                lz->settle(nullptr);
            });
        } else if (!mine && e->serving) {
            e->serving = false;
            leases->give_up(s);
            delegations->give_up(s);
            // Transactions already past the check roll back: nothing commits here any more.
            const uint32_t shard = s;
            (void)e->db->start_shipping(e->term, [shard](const Position&, const Position&, std::span<const uint8_t>) {
                return Status(Code::again, "metadata shard " + std::to_string(shard) + " changed hands");
            });
            JOBFS_INFO("metadata shard %u is served by daemon %lld now (chain table %llu)", s,
                       static_cast<long long>(proto::meta_primary(s, t)), static_cast<unsigned long long>(t.version));
        }
    }
}

// ---- construction: the RPCs -------------------------------------------------------------------

MetaService::MetaService(transport::Worker& w, MetaShard& shard, uint32_t rank, uint32_t daemons, PeerFn peer,
                         boost::asio::thread_pool& pool)
    : MetaService(w, std::vector<Hosted>{{rank, &shard}}, rank, daemons, std::move(peer), {}, pool) {}

MetaService::MetaService(transport::Worker& w, std::vector<Hosted> hosted, uint32_t rank, uint32_t daemons, PeerFn peer,
                         TableFn table, boost::asio::thread_pool& pool)
    : impl_(std::make_shared<Impl>(w, rank, daemons, std::move(peer), std::move(table), pool)) {
    Impl& im = *impl_;
    std::weak_ptr<Impl> wk = impl_;
    im.delegations = std::make_shared<DirDelegations>(kDefaultAttrLease, pool, [wk](uint64_t dir, uint64_t token) -> Status {
        auto im = wk.lock();
        if (!im) return Status(Code::cancelled, "metadata service stopped");
        auto e = im->serve(proto::shard_of(dir));
        if (!e.ok()) return e.status();
        return (*e)->db->end_delegation(dir, token);
    });
    // The rename lock is held by the daemon serving shard 0 (rename_lock.h).
    im.rename_lock = std::make_shared<RenameLock>(w, rank, im.peer, [wk]() -> int64_t {
        auto im = wk.lock();
        return im ? proto::meta_primary(0, im->now()) : -1;
    });
    for (const Hosted& h : hosted) {
        auto e = std::make_unique<Entry>();
        e->shard = h.shard;
        e->db = h.db;
        h.db->set_change_observer({[lz = im.leases](uint64_t ino) { lz->note_change(ino); },
                                   [lz = im.leases](uint64_t dir) { lz->note_dir_access(dir); }});
        // The coordinator of shard s reaches shard x through whichever daemon serves x.
        e->co = std::make_shared<MetaCoordinator>(*h.db, h.shard, daemons, [wk](uint32_t x) -> Result<transport::Endpoint> {
            auto im = wk.lock();
            if (!im) return Status(Code::cancelled, "metadata service stopped");
            return im->peer_of_shard(x);
        });
        im.shards.emplace(h.shard, std::move(e));
    }
    if (!im.table) {
        for (auto& [s, e] : im.shards) e->serving = true;
    }
    im.register_handlers(w);
    // Unreplicated, a daemon serves its own shard from the start, whatever the table (a
    // request may reach it while it still connects to its peers: DaemonTest). Replicated, it
    // waits for start(): its copy may be behind the group's.
    if (im.table && im.now().meta_replicas <= 1) im.reconcile();
}

void MetaService::start() { impl_->reconcile(); }

void MetaService::Impl::register_handlers(transport::Worker& w) {
    auto im = shared_from_this();
    auto cpool = coord_pool;
    auto lz = leases;
    auto dd = delegations;
    // Each request names its shard by an inode it holds (an entry's directory, an inode).
#define JOBFS_SERVE(key)                                  \
    auto e_ = im->serve(proto::shard_of(key));            \
    if (!e_.ok()) return e_.status();                     \
    MetaShard& sh = *(*e_)->db;                           \
    MetaCoordinator& co = *(*e_)->co;                     \
    (void)sh;                                             \
    (void)co
    // What the shard answers at once, or nothing (try the pool): busy, or the inode elsewhere.
    const auto at_once = [](std::optional<Result<Attr>> a) -> std::optional<Result<proto::Attr>> {
        if (!a || (!a->ok() && a->status().code() == Code::cross_device)) return std::nullopt;
        return attr_out(*a);
    };
    // Readers answer only once what they read is not being recalled (attr_leases.h): no
    // client sees the new state, or that a name is gone, while another may show the old.
    const auto about_ino = [](const proto::InoRequest& r, const auto&) { return AttrLeases::Subject{r.ino, 0, {}, 0}; };
    const auto about_entry = [](const auto& r, const Result<proto::Attr>& a) {
        return AttrLeases::Subject{a.ok() ? a->ino : 0, r.parent, r.name, 0};
    };
    // A file in a directory another client holds: its holder may have removed or renamed it
    // and not sent that yet (a name another node's kernel cached leads here by the inode). The
    // delegation is recalled first, as for a lookup (dir_delegations.h: held_by_another).
    const auto unless_held = [dd](Result<Attr> a, const ServerCall& call) -> Result<Attr> {
        if (!a.ok() || a->type == FileType::directory || a->parent == 0) return a;
        const uint64_t token = dd->held_by_another(a->parent, call.connection());
        return token ? MetaShard::must_recall(a->parent, token) : a;
    };
    serve_now_or_on_pool<proto::Getattr>(
        w, pool, lz, dd,
        [im, at_once, unless_held](const proto::InoRequest& r, const ServerCall& call) -> std::optional<Result<proto::Attr>> {
            JOBFS_SERVE(r.ino);
            auto a = sh.try_getattr(r.ino);
            if (a) a = unless_held(std::move(*a), call);
            return at_once(std::move(a));
        },
        [im, unless_held](const proto::InoRequest& r, const ServerCall& call) -> Result<proto::Attr> {
            JOBFS_SERVE(r.ino);
            return attr_out(unless_held(sh.getattr(r.ino), call));
        },
        about_ino);
    const auto lookup_now = [im, at_once](const proto::NameRequest& r) -> std::optional<Result<proto::Attr>> {
        JOBFS_SERVE(r.parent);
        return at_once(sh.try_lookup(from_wire(r.cred), r.parent, r.name));
    };
    const auto lookup_on_pool = [im](const proto::NameRequest& r) -> Result<proto::Attr> {
        JOBFS_SERVE(r.parent);
        return attr_out(co.lookup(from_wire(r.cred), r.parent, r.name));
    };
    serve_now_or_on_pool<proto::Lookup>(w, *cpool, lz, dd, lookup_now, lookup_on_pool, about_entry);
    const auto new_file = [](const proto::CreateRequest& r) {
        NewFile init{r.size, {}};
        for (const auto& x : r.xattrs) init.xattrs.emplace_back(x.name, x.value);
        return init;
    };
    const auto create_now = [im, at_once, new_file](const proto::CreateRequest& r) -> std::optional<Result<proto::Attr>> {
        JOBFS_SERVE(r.parent);
        return at_once(sh.try_create(from_wire(r.cred), r.parent, r.name, r.mode, r.exclusive,
                                     Layout{r.chunk_size, r.stripe_count, r.replicas}, new_file(r)));
    };
    const auto create_on_pool = [im, new_file](const proto::CreateRequest& r) -> Result<proto::Attr> {
        JOBFS_SERVE(r.parent);
        return attr_out(sh.create(from_wire(r.cred), r.parent, r.name, r.mode, r.exclusive,
                                  Layout{r.chunk_size, r.stripe_count, r.replicas}, new_file(r)));
    };
    // A create reads its name (taken or not) and, when the file was there, the file.
    serve_now_or_on_pool<proto::Create>(w, pool, lz, dd, create_now, create_on_pool, about_entry);

    // The same with a lease on the answer (attr_leases.h), for a file or symlink whose inode
    // lives with its entry. `since`: the change sequence the answer is not older than.
    const auto reply_leased = [lz](const ServerCall& call, Result<proto::Attr> a, const auto& r, uint64_t since) {
        AttrLeases::Subject about{a.ok() ? a->ino : 0, r.parent, r.name, 0};
        if (!a.ok()) return reply_settled<proto::LookupLeased>(*lz, call, a.status(), std::move(about));
        proto::LeasedAttr out{std::move(*a), 0};
        if ((out.attr.type == 1 || out.attr.type == 3) && proto::shard_of(out.attr.ino) == proto::shard_of(r.parent))
            out.lease_ms = lz->grant(out.attr.ino, r.parent, r.name, call.connection(), since);
        reply_settled<proto::LookupLeased>(*lz, call, Result<proto::LeasedAttr>(std::move(out)), std::move(about));
    };
    serve_now_or_on_pool_then<proto::LookupLeased, true>(
        w, *cpool, lz, dd, lookup_now, lookup_on_pool,
        [reply_leased](const ServerCall& call, const proto::NameRequest& r, Result<proto::Attr> a, uint64_t since) {
            reply_leased(call, std::move(a), r, since);
        });
    rpc::serve<proto::LeaseRelease>(w, [lz, im](ServerCall call, proto::Empty&&) {
        lz->release(call.connection());
        // A client that ends gives back its locks too.
        std::vector<uint64_t> gone;
        {
            std::lock_guard lock(im->lock_conns_mu);
            std::erase_if(im->lock_conns, [&](const auto& kv) {
                if (!(kv.second == call.connection())) return false;
                gone.push_back(kv.first);
                return true;
            });
        }
        for (uint64_t client : gone) im->locks->release_client(client);
        rpc::reply<proto::LeaseRelease>(call, proto::Empty{});
    });
    // flock and fcntl locks (file_locks.h): in memory, answered on the progress thread.
    rpc::serve<proto::FileLockOp>(w, [im](ServerCall call, proto::FileLockRequest&& r) {
        if (auto e = im->serve(proto::shard_of(r.ino)); !e.ok()) return call.reply(e.status());
        if (r.client == 0 || r.type > proto::kLockUnlock || r.start > r.end || (r.test && r.type == proto::kLockUnlock))
            return call.reply(Status(Code::invalid, "lock of inode " + std::to_string(r.ino) + ": malformed request"));
        {
            std::lock_guard lock(im->lock_conns_mu);
            im->lock_conns[r.client] = call.connection();
        }
        const FileLock want{r.client, r.owner, r.pid, r.flock != 0, static_cast<LockType>(r.type), r.start, r.end};
        const std::optional<FileLock> in_way = r.test ? im->locks->conflict(r.ino, want) : im->locks->set(r.ino, want);
        proto::FileLockResponse out;
        out.granted = !in_way;
        if (in_way) {
            out.type = static_cast<uint8_t>(in_way->type);
            out.pid = in_way->pid;
            out.start = in_way->start;
            out.end = in_way->end;
        }
        rpc::reply<proto::FileLockOp>(call, out);
    });
    serve_now_or_on_pool_then<proto::CreateLeased, true>(
        w, pool, lz, dd, create_now, create_on_pool,
        [lz, reply_leased](const ServerCall& call, const proto::CreateRequest& r, Result<proto::Attr> a, uint64_t before) {
            // A create's own change of the inode it made (or found) is no reason to refuse its lease.
            const uint64_t since = a.ok() ? std::max(before, lz->own_change(a->ino)) : before;
            reply_leased(call, std::move(a), r, since);
        });
    // Directory delegations (dir_delegations.h).
    serve_on_pool<proto::DelegateDir>(
        w, pool, lz, dd,
        [im](const proto::DelegateRequest& r, const ServerCall& call) -> Result<proto::DelegateResponse> {
            JOBFS_SERVE(r.dir);
            if (im->delegations->lease().count() <= 0)
                return Status(Code::unsupported, "directory delegations are off here (attr-lease-ms 0)");
            auto d = sh.delegate_dir(from_wire(r.cred), r.dir, r.token, proto::kMaxDelegatedEntries,
                                     proto::kDelegatedInos);
            if (!d.ok()) return d.status();
            im->delegations->granted(r.dir, r.token, call.connection());
            proto::DelegateResponse out;
            out.dir = to_wire(d->dir);
            out.entries.reserve(d->entries.size());
            for (auto& e : d->entries) out.entries.push_back(proto::DirEntry{std::move(e.name), e.ino, static_cast<uint8_t>(e.type)});
            out.ino_first = d->ino_first;
            out.ino_count = d->ino_count;
            out.chunk_size = d->layout.chunk_size;
            out.stripe_count = d->layout.stripe_count;
            out.replicas = d->layout.replicas;
            out.lease_ms = static_cast<uint32_t>(im->delegations->lease().count());
            return out;
        });
    serve_on_pool<proto::DirOps>(
        w, pool, lz, dd, [im](const proto::DirOpsRequest& r, const ServerCall& call) -> Result<proto::DirOpsResponse> {
            JOBFS_SERVE(r.dir);
            if (r.ops.size() > proto::kMaxDirOps)
                return Status(Code::invalid, std::to_string(r.ops.size()) + " delegated operations in one request (at most " +
                                                 std::to_string(proto::kMaxDirOps) + ")");
            std::vector<MetaShard::DirOp> ops;
            ops.reserve(r.ops.size());
            for (const auto& o : r.ops) {
                MetaShard::DirOp op{o.kind, o.name, o.ino, o.mode, o.time_ns, {o.size, {}}, o.new_name};
                for (const auto& x : o.xattrs) op.init.xattrs.emplace_back(x.name, x.value);
                ops.push_back(std::move(op));
            }
            auto res = sh.dir_ops(from_wire(r.cred), r.dir, r.token, ops, r.release, r.more_inos ? proto::kDelegatedInos : 0);
            if (!res.ok()) return res.status();
            if (r.release) im->delegations->released(r.dir, r.token);
            else im->delegations->granted(r.dir, r.token, call.connection()); // renewed
            proto::DirOpsResponse out;
            out.ino_first = res->ino_first;
            out.ino_count = res->ino_count;
            out.outcomes.reserve(res->outcomes.size());
            for (size_t i = 0; i < res->outcomes.size(); ++i) {
                auto& o = res->outcomes[i];
                proto::DirOpOutcome w;
                if (!o.ok()) {
                    w.code = static_cast<int32_t>(o.status().code());
                    w.message = o.status().message();
                } else if (r.ops[i].kind == MetaShard::kDirOpCreate || (o->last_link && o->attr.type == FileType::regular)) {
                    // (An unlink's inode matters only when the file's data goes with it.)
                    w.attr = to_wire(o->attr);
                    w.last_link = o->last_link;
                } else {
                    w.attr.ino = o->attr.ino;
                    w.last_link = o->last_link;
                }
                out.outcomes.push_back(std::move(w));
            }
            return out;
        });
    serve_on_pool<proto::Mkdir>(w, *cpool, lz, dd, [im](const proto::MkdirRequest& r) -> Result<proto::Attr> {
        JOBFS_SERVE(r.parent);
        return attr_out(co.mkdir(from_wire(r.cred), r.parent, r.name, r.mode));
    });
    serve_on_pool<proto::Symlink>(w, pool, lz, dd, [im](const proto::SymlinkRequest& r) -> Result<proto::Attr> {
        JOBFS_SERVE(r.parent);
        return attr_out(sh.symlink(from_wire(r.cred), r.parent, r.name, r.target));
    });
    serve_on_pool<proto::Readlink>(w, pool, lz, dd, [im](const proto::InoRequest& r) -> Result<proto::LinkTarget> {
        JOBFS_SERVE(r.ino);
        auto t = sh.readlink(r.ino);
        if (!t.ok()) return t.status();
        return proto::LinkTarget{*t};
    });
    // A link is coordinated by the shard of its new entry; a request that reached another
    // daemon is passed on to the one serving it, without holding a thread while it waits.
    rpc::serve<proto::Link>(w, [im, cpool](ServerCall call, proto::LinkRequest&& r) {
        const uint32_t owner = proto::shard_of(r.new_parent);
        if (im->serve(owner).ok()) {
            auto lz = im->leases;
            run_on_pool<proto::Link, false>(
                *cpool, lz, im->delegations, call, std::make_shared<const proto::LinkRequest>(std::move(r)),
                [im](const proto::LinkRequest& r) -> Result<proto::Attr> {
                    JOBFS_SERVE(r.new_parent);
                    return attr_out(co.link(from_wire(r.cred), r.ino, r.new_parent, r.name));
                },
                [lz](const ServerCall& call, const proto::LinkRequest&, Result<proto::Attr> a, uint64_t) {
                    reply_settled<proto::Link>(*lz, call, std::move(a));
                });
            return;
        }
        boost::asio::post(im->pool, [im, owner, call, r = std::move(r)] {
            auto ep = im->peer_of_shard(owner);
            if (!ep.ok()) return call.reply(ep.status());
            rpc::call_async<proto::Link>(*ep, r, {}, [call](Result<proto::Attr> a, size_t) {
                if (!a.ok()) return call.reply(a.status());
                rpc::reply<proto::Link>(call, *a);
            });
        });
    });
    serve_now_or_on_pool<proto::Unlink>(
        w, *cpool, lz, dd,
        [im](const proto::NameRequest& r) -> std::optional<Result<proto::UnlinkResponse>> {
            JOBFS_SERVE(r.parent);
            auto u = sh.try_unlink(from_wire(r.cred), r.parent, r.name);
            if (!u || (!u->ok() && u->status().code() == Code::cross_device)) return std::nullopt; // the coordinator's
            if (!u->ok()) return u->status();
            return to_wire(**u);
        },
        [im](const proto::NameRequest& r) -> Result<proto::UnlinkResponse> {
            JOBFS_SERVE(r.parent);
            auto u = co.unlink(from_wire(r.cred), r.parent, r.name);
            if (!u.ok()) return u.status();
            return to_wire(*u);
        });
    serve_on_pool<proto::Rmdir>(w, *cpool, lz, dd, [im](const proto::NameRequest& r) -> Status {
        JOBFS_SERVE(r.parent);
        return co.rmdir(from_wire(r.cred), r.parent, r.name);
    });
    serve_on_pool<proto::Rename>(w, *cpool, lz, dd, [im](const proto::RenameRequest& r) -> Result<proto::RenameResponse> {
        JOBFS_SERVE(r.old_parent);
        // Between two directories: under the file system's rename lock, from before the loop
        // check to the end (rename_lock.h).
        std::optional<RenameLock::Held> held;
        if (r.old_parent != r.new_parent) {
            auto h = im->rename_lock->acquire();
            if (!h.ok()) return h.status();
            held.emplace(std::move(*h));
        }
        auto res = co.rename(from_wire(r.cred), r.old_parent, r.old_name, r.new_parent, r.new_name, r.flags);
        if (!res.ok()) return res.status();
        proto::RenameResponse out;
        if (res->replaced) out.replaced = to_wire(*res->replaced);
        return out;
    });
    serve_on_pool<proto::RenameInDir>(w, *cpool, lz, dd, [im](const proto::RenameInDirRequest& r)
                                                    -> Result<proto::RenameInDirResponse> {
        JOBFS_SERVE(r.parent);
        if (r.entries.size() > proto::kMaxRenamesInDir)
            return Status(Code::invalid, std::to_string(r.entries.size()) + " renames in one request (at most " +
                                             std::to_string(proto::kMaxRenamesInDir) + ")");
        std::vector<std::pair<std::string, std::string>> names;
        names.reserve(r.entries.size());
        for (const auto& e : r.entries) names.emplace_back(e.old_name, e.new_name);
        // Nothing renamed (a delegated directory: run_on_pool recalls it and runs this again).
        auto results = co.rename_in_dir(from_wire(r.cred), r.parent, names, r.flags);
        if (!results.ok()) return results.status();
        proto::RenameInDirResponse out;
        for (auto& res : *results) {
            proto::RenameOutcome o;
            if (!res.ok()) {
                o.code = static_cast<int32_t>(res.status().code());
                o.message = res.status().message();
            } else if (res->replaced) {
                o.replaced = to_wire(*res->replaced);
            }
            out.outcomes.push_back(std::move(o));
        }
        return out;
    });
    serve_on_pool<proto::Readdir>(
        w, pool, lz, dd,
        [im](const proto::ReaddirRequest& r) -> Result<proto::ReaddirResponse> {
            JOBFS_SERVE(r.ino);
            auto d = sh.readdir(from_wire(r.cred), r.ino, r.after, r.max_entries ? r.max_entries : 1000);
            if (!d.ok()) return d.status();
            proto::ReaddirResponse out;
            out.more = d->more;
            for (auto& e : d->entries) out.entries.push_back(proto::DirEntry{e.name, e.ino, static_cast<uint8_t>(e.type)});
            return out;
        },
        [](const proto::ReaddirRequest& r, const auto&) { return AttrLeases::Subject{0, 0, {}, r.ino}; });
    serve_on_pool<proto::Setattr>(w, pool, lz, dd, [im](const proto::SetattrRequest& r) -> Result<proto::Attr> {
        JOBFS_SERVE(r.ino);
        SetAttr set;
        set.mode = r.mode;
        set.uid = r.uid;
        set.gid = r.gid;
        set.size = r.size;
        set.atime_ns = r.atime_ns;
        set.mtime_ns = r.mtime_ns;
        set.atime_now = r.atime_now;
        set.mtime_now = r.mtime_now;
        return attr_out(sh.setattr(from_wire(r.cred), r.ino, set));
    });
    serve_on_pool<proto::ExtendSize>(w, pool, lz, dd, [im](const proto::ExtendSizeRequest& r) -> Result<proto::Attr> {
        JOBFS_SERVE(r.ino);
        return attr_out(sh.extend_size(r.ino, r.size));
    });
    serve_on_pool<proto::ReserveAppend>(w, pool, lz, dd, [im](const proto::AppendRequest& r) -> Result<proto::Attr> {
        JOBFS_SERVE(r.ino);
        return attr_out(sh.reserve_append(r.ino, r.at_least, r.length, r.token));
    });
    serve_on_pool<proto::SetLayout>(w, pool, lz, dd, [im](const proto::LayoutRequest& r) -> Result<proto::Attr> {
        JOBFS_SERVE(r.ino);
        return attr_out(sh.set_layout(from_wire(r.cred), r.ino, Layout{r.chunk_size, r.stripe_count, r.replicas}));
    });
    serve_on_pool<proto::Setxattr>(w, pool, lz, dd, [im](const proto::XattrRequest& r) -> Status {
        JOBFS_SERVE(r.ino);
        return sh.setxattr(from_wire(r.cred), r.ino, r.name, r.value, r.flags);
    });
    serve_on_pool<proto::Getxattr>(w, pool, lz, dd, [im](const proto::XattrRequest& r) -> Result<proto::XattrValue> {
        JOBFS_SERVE(r.ino);
        auto v = sh.getxattr(from_wire(r.cred), r.ino, r.name);
        if (!v.ok()) return v.status();
        return proto::XattrValue{*v};
    });
    serve_on_pool<proto::Listxattr>(w, pool, lz, dd, [im](const proto::XattrRequest& r) -> Result<proto::XattrList> {
        JOBFS_SERVE(r.ino);
        auto v = sh.listxattr(from_wire(r.cred), r.ino);
        if (!v.ok()) return v.status();
        return proto::XattrList{*v};
    });
    serve_on_pool<proto::Removexattr>(w, pool, lz, dd, [im](const proto::XattrRequest& r) -> Status {
        JOBFS_SERVE(r.ino);
        return sh.removexattr(from_wire(r.cred), r.ino, r.name);
    });
    // The counts of the shards this daemon serves (statfs sums over all daemons).
    serve_on_pool<proto::MetaCounts>(w, pool, lz, dd, [im](const proto::Empty&) -> Result<proto::CountsResponse> {
        proto::CountsResponse out{0, 0};
        for (auto& [s, e] : im->shards) {
            if (!im->serve(s).ok()) continue;
            auto c = e->db->counts();
            if (!c.ok()) return c.status();
            out.inodes += c->inodes;
            out.dentries += c->dentries;
        }
        return out;
    });

    // The other shards' steps of cross-shard operations (meta_coordinator.h).
    serve_on_pool<proto::PeerCreateInode>(w, pool, lz, dd, [im](const proto::CreateInodeRequest& r) -> Result<proto::Attr> {
        JOBFS_SERVE(uint64_t(r.shard) << 48);
        Attr tmpl = from_wire(r.tmpl);
        tmpl.parent = r.parent;
        sh.note_intents_done(r.done_below);
        return attr_out(r.intent ? sh.create_inode_once(r.intent, tmpl) : sh.create_inode(tmpl));
    });
    serve_on_pool<proto::PeerDeleteInode>(w, pool, lz, dd, [im](const proto::InoRequest& r) -> Status {
        JOBFS_SERVE(r.ino);
        return sh.delete_inode(r.ino);
    });
    serve_on_pool<proto::PeerLookupDentry>(w, pool, lz, dd, [im](const proto::NameRequest& r) -> Result<proto::DirEntry> {
        JOBFS_SERVE(r.parent);
        auto e = sh.lookup_dentry(from_wire(r.cred), r.parent, r.name);
        if (!e.ok()) return e.status();
        return proto::DirEntry{e->name, e->ino, static_cast<uint8_t>(e->type)};
    });
    serve_on_pool<proto::PeerRenameInsert>(w, pool, lz, dd, [im](const proto::RenameInsertRequest& r)
                                                        -> Result<proto::RenameInsertResponse> {
        JOBFS_SERVE(r.parent);
        sh.note_intents_done(r.done_below);
        auto i = sh.rename_insert(r.intent, r.parent, r.name, r.ino, static_cast<FileType>(r.type), r.expect_ino);
        if (!i.ok()) return i.status();
        proto::RenameInsertResponse out;
        out.replaced_ino = i->replaced_here ? 0 : i->replaced_ino;
        out.replaced_type = static_cast<uint8_t>(i->replaced_type);
        if (i->replaced_here) out.replaced_here = to_wire(*i->replaced_here);
        return out;
    });
    serve_on_pool<proto::PeerAdjustNlink>(w, pool, lz, dd, [im](const proto::NlinkRequest& r) -> Result<proto::UnlinkResponse> {
        JOBFS_SERVE(r.ino);
        sh.note_intents_done(r.done_below);
        auto u = sh.adjust_nlink_once(r.intent, static_cast<IntentStep>(r.step), r.ino, r.delta);
        if (!u.ok()) return u.status();
        return to_wire(*u);
    });
    serve_on_pool<proto::PeerAbortStep>(w, pool, lz, dd, [im](const proto::StepRequest& r) -> Result<proto::StepResult> {
        JOBFS_SERVE(uint64_t(r.shard) << 48);
        sh.note_intents_done(r.done_below);
        auto a = sh.abort_step_result(r.intent, static_cast<IntentStep>(r.step));
        if (!a.ok()) return a.status();
        return proto::StepResult{a->has_value(), a->value_or(0)};
    });
    serve_on_pool<proto::PeerSetParent>(w, pool, lz, dd, [im](const proto::SetParentRequest& r) -> Status {
        JOBFS_SERVE(r.ino);
        return sh.set_parent(r.ino, r.parent);
    });
    serve_on_pool<proto::PeerParent>(w, pool, lz, dd, [im](const proto::InoRequest& r) -> Result<proto::ParentResponse> {
        JOBFS_SERVE(r.ino);
        auto p = sh.parent_of(r.ino);
        if (!p.ok()) return p.status();
        return proto::ParentResponse{*p};
    });
#undef JOBFS_SERVE

    // ---- replication: a copy's side ------------------------------------------------------
    auto apool = apply_pool;
    serve_on_pool<proto::MetaApply>(w, *apool, lz, dd, [im](const proto::MetaApplyRequest& r) -> Status {
        Entry* e = im->find(r.shard);
        if (!e) return Status(Code::invalid, "daemon " + std::to_string(im->rank) + " keeps no copy of metadata shard " +
                                                 std::to_string(r.shard));
        const proto::ChainTable t = im->now();
        // Both sides must agree on who serves the shard: the same table.
        if (t.version != r.table_version)
            return Status(Code::again, "chain table " + std::to_string(t.version) + " here, " +
                                           std::to_string(r.table_version) + " at the shard's primary");
        Status st = e->db->apply_changeset(Position{r.prev_term, r.prev_seq}, Position{r.term, r.seq}, r.changeset);
        if (st.code() == Code::again) return Status(Code::busy, st.message()); // needs a snapshot
        return st;
    });
    rpc::serve<proto::MetaInstall>(w, [im, apool](ServerCall call, proto::MetaInstallRequest&& r) {
        auto image = std::make_shared<std::vector<uint8_t>>(call.bulk_length());
        call.receive_bulk(*image, [im, apool, call, r, image](Status got) {
            if (!got.ok()) return call.reply(got);
            boost::asio::post(*apool, [im, call, r, image] {
                Entry* e = im->find(r.shard);
                if (!e) return call.reply(Status(Code::invalid, "no copy of metadata shard " + std::to_string(r.shard) + " here"));
                const Position at{r.term, r.seq};
                auto mine = e->db->position();
                // A snapshot older than what this copy has reached (in the same history) is stale.
                if (mine.ok() && mine->seq != MetaShard::kOutOfStep && mine->term == at.term && mine->seq >= at.seq)
                    return call.reply(Status::OK());
                Status st = e->db->install_snapshot(MetaShard::Snapshot{at, std::move(*image)});
                if (st.ok()) JOBFS_INFO("metadata shard %u: copy here replaced by a snapshot at %s", r.shard, pos_str(at).c_str());
                call.reply(st);
            });
        });
    });
    serve_on_pool<proto::MetaPosition>(w, *apool, lz, dd, [im](const proto::MetaShardRequest& r) -> Result<proto::MetaPositionResponse> {
        Entry* e = im->find(r.shard);
        if (!e) return Status(Code::invalid, "no copy of metadata shard " + std::to_string(r.shard) + " here");
        auto p = e->db->position();
        if (!p.ok()) return p.status();
        return proto::MetaPositionResponse{p->term, p->seq};
    });
    serve_on_pool<proto::MetaCatchUp>(w, *cpool, lz, dd, [im](const proto::MetaShardRequest& r) -> Status {
        return im->bring_in_step(r.shard, r.member);
    });
}

MetaService::~MetaService() { stop(); }

void MetaService::stop() {
    impl_->leases->shutdown(); // waits for leases to run out end: their requests reply
    impl_->delegations->shutdown();
    impl_->coord_pool->join();
    impl_->apply_pool->join();
}

void MetaService::resume_intents() {
    for (auto& [s, e] : impl_->shards) {
        if (!e->serving) continue;
        auto co = e->co;
        boost::asio::post(*impl_->coord_pool, [co, lz = impl_->leases] {
            lz->begin_op();
            co->resume();
            lz->settle(nullptr);
        });
    }
}

void MetaService::table_changed() {
    std::weak_ptr<Impl> wk = impl_;
    boost::asio::post(*impl_->coord_pool, [wk] {
        if (auto im = wk.lock()) im->reconcile();
    });
}

Status MetaService::catch_up(std::chrono::milliseconds timeout) {
    Impl& im = *impl_;
    const auto deadline = Clock::now() + timeout;
    for (auto& [s, e] : im.shards) {
        for (;;) {
            const proto::ChainTable t = im.now();
            if (t.meta_replicas <= 1) return Status::OK();
            const int64_t p = proto::meta_primary(s, t);
            if (p < 0 || p == int64_t(im.rank)) break; // nobody to catch up with, or ours
            auto ep = im.peer(static_cast<uint32_t>(p));
            Status st = ep.ok() ? rpc::call<proto::MetaCatchUp>(*ep, proto::MetaShardRequest{s, im.rank}).status() : ep.status();
            if (st.ok()) break;
            if (Clock::now() >= deadline)
                return st.with_context("metadata shard " + std::to_string(s) + ": catching up with daemon " + std::to_string(p));
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    }
    return Status::OK();
}

void MetaService::set_attr_lease(std::chrono::milliseconds lease) {
    impl_->leases->set_lease(lease);
    impl_->delegations->set_lease(lease);
}

DirDelegations::Stats MetaService::delegation_stats() const { return impl_->delegations->stats(); }

size_t MetaService::locks_held() const { return impl_->locks->count(); }

AttrLeases::Stats MetaService::attr_lease_stats() const { return impl_->leases->stats(); }

MetaCoordinator& MetaService::coordinator_for_test() { return *impl_->shards.begin()->second->co; }

} // namespace jobfs::server
