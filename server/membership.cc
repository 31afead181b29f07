// membership.cc: heartbeats, the manager's rule and the chain table. See membership.h.
#include "server/membership.h"

#include <algorithm>

#include "log.h"
#include "rpc.h"

namespace jobfs::server {

namespace rpc = transport::rpc;
using transport::ServerCall;
using Clock = std::chrono::steady_clock;

namespace {

const char* state_name(uint8_t s) {
    switch (s) {
    case proto::kDaemonServing: return "serving";
    case proto::kDaemonSyncing: return "syncing";
    default: return "offline";
    }
}

} // namespace

Membership::Membership(transport::Worker& worker, uint32_t rank, uint32_t size, PeerFn peer, ReconnectFn reconnect,
                       Options options)
    : worker_(worker), rank_(rank), size_(size), peer_(std::move(peer)), reconnect_(std::move(reconnect)), options_(options) {
    table_.version = 1;
    table_.manager = 0;
    table_.states.assign(size, proto::kDaemonServing);
    table_.sync_done.assign(size, 0);
    table_.sync_total.assign(size, 0);
    table_.meta_replicas = std::min(std::max(options_.meta_replicas, 1u), size);
    last_seen_.assign(size, Clock::now());
    heard_.assign(size, Clock::time_point{});
    broken_.assign(size, false);
    outstanding_.assign(size, false);
    auto* self = this;
    rpc::serve<proto::Heartbeat>(worker, [self](ServerCall call, proto::HeartbeatRequest&& req) {
        ++self->not_work_served_; // before the reply: work_served() never sees it as work
        uint64_t v;
        {
            std::lock_guard l(self->mu_);
            if (req.rank < self->size_) self->last_seen_[req.rank] = self->heard_[req.rank] = Clock::now();
            v = self->table_.version;
        }
        rpc::reply<proto::Heartbeat>(call, proto::HeartbeatResponse{v});
        if (req.table_version > v) self->fetch_from(req.rank);
    });
    rpc::serve<proto::ChainTableGet>(worker, [self](ServerCall call, proto::Empty&&) {
        rpc::reply<proto::ChainTableGet>(call, self->table());
    });
    rpc::serve<proto::ChainTablePublish>(worker, [self](ServerCall call, proto::ChainTable&& t) {
        self->accept(t);
        rpc::reply<proto::ChainTablePublish>(call, proto::Empty{});
    });
}

Membership::~Membership() { stop(); }

bool Membership::adopt_from_peers() {
    for (uint32_t r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        auto ep = peer_(r);
        if (!ep.ok()) continue;
        transport::CallOptions o;
        o.timeout = options_.failure_timeout;
        auto t = rpc::call<proto::ChainTableGet>(*ep, proto::Empty{}, o);
        if (t.ok()) accept(*t);
    }
    std::lock_guard l(mu_);
    return table_.states[rank_] != proto::kDaemonServing;
}

void Membership::start() {
    std::lock_guard l(stop_mu_);
    if (thread_.joinable()) return;
    {
        std::lock_guard m(mu_);
        std::fill(last_seen_.begin(), last_seen_.end(), Clock::now()); // a grace period at start
    }
    stopping_ = false;
    reconnect_wanted_.assign(size_, false);
    thread_ = std::thread([this] { loop(); });
    reconnect_thread_ = std::thread([this] { reconnect_loop(); });
}

void Membership::stop() {
    {
        std::lock_guard l(stop_mu_);
        stopping_ = true;
    }
    stop_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (reconnect_thread_.joinable()) reconnect_thread_.join();
}

void Membership::reconnect_loop() {
    std::unique_lock l(stop_mu_);
    for (;;) {
        stop_cv_.wait(l, [this] {
            return stopping_ || std::find(reconnect_wanted_.begin(), reconnect_wanted_.end(), true) != reconnect_wanted_.end();
        });
        if (stopping_) return;
        const auto r = static_cast<uint32_t>(std::find(reconnect_wanted_.begin(), reconnect_wanted_.end(), true) -
                                             reconnect_wanted_.begin());
        l.unlock();
        // Connected again (its hello answered), it is alive: the manager must not take it
        // offline again before a heartbeat's reply is in.
        const bool back = reconnect_ && reconnect_(r).ok();
        if (back) {
            std::lock_guard m(mu_);
            broken_[r] = false;
            last_seen_[r] = Clock::now();
        }
        l.lock();
        reconnect_wanted_[r] = false;
    }
}

uint64_t Membership::table_version() const {
    std::lock_guard l(mu_);
    return table_.version;
}

proto::ChainTable Membership::table() const {
    std::lock_guard l(mu_);
    return table_;
}

bool Membership::accept(const proto::ChainTable& t) {
    if (t.states.size() != size_ || t.sync_done.size() != size_ || t.sync_total.size() != size_) return false;
    bool taken_offline;
    std::vector<uint32_t> gone;
    {
        std::lock_guard l(mu_);
        if (!proto::newer_table(t, table_)) return false;
        gone = newly_offline(table_, t);
        for (uint32_t r = 0; r < size_; ++r)
            if (t.states[r] != table_.states[r])
                JOBFS_INFO("chain table %llu (from daemon %u): daemon %u %s", static_cast<unsigned long long>(t.version),
                           t.manager, r, state_name(t.states[r]));
        // Offline in the group's table while it runs, whatever it was (serving, or syncing: a
        // manager that had not heard from it yet, or a table of the same version that won over
        // its own): writes may pass it by from now on, so it (re)joins from the start.
        taken_offline = t.states[rank_] == proto::kDaemonOffline && table_.states[rank_] != proto::kDaemonOffline;
        table_ = t;
    }
    if (taken_offline && on_taken_offline_) {
        JOBFS_WARN("chain table %llu has this daemon (%u) offline while it runs: resyncing",
                   static_cast<unsigned long long>(t.version), rank_);
        on_taken_offline_();
    }
    tell_offline(gone);
    if (on_change_) on_change_();
    return true;
}

std::vector<uint32_t> Membership::newly_offline(const proto::ChainTable& prev, const proto::ChainTable& next) const {
    std::vector<uint32_t> out;
    for (uint32_t r = 0; r < size_ && r < prev.states.size() && r < next.states.size(); ++r)
        if (r != rank_ && next.states[r] == proto::kDaemonOffline && prev.states[r] != proto::kDaemonOffline)
            out.push_back(r);
    return out;
}

void Membership::tell_offline(const std::vector<uint32_t>& ranks) {
    if (!on_peer_offline_) return;
    for (uint32_t r : ranks) on_peer_offline_(r);
}

bool Membership::alive(uint32_t r, Clock::time_point now) const {
    return r == rank_ || (!broken_[r] && now - last_seen_[r] < options_.failure_timeout);
}

void Membership::set_sync_progress(uint64_t done, uint64_t total) {
    std::lock_guard l(mu_);
    table_.sync_done[rank_] = done;
    table_.sync_total[rank_] = total;
    // Progress is shown, not agreed on: no new version for it, the next publish carries it.
}

void Membership::set_own_state(uint8_t state) {
    Publication p;
    {
        std::lock_guard l(mu_);
        if (table_.states[rank_] == state) return;
        table_.states[rank_] = state;
        table_.version++;
        table_.manager = rank_;
        JOBFS_INFO("chain table %llu: daemon %u %s", static_cast<unsigned long long>(table_.version), rank_,
                   state_name(state));
        p = publication_locked();
    }
    if (on_change_) on_change_();
    publish(p);
}

void Membership::republish() {
    Publication p;
    {
        std::lock_guard l(mu_);
        p = publication_locked();
    }
    publish(p);
}

std::chrono::milliseconds Membership::rest_interval() const {
    return std::max(options_.interval, options_.failure_timeout / 4);
}

uint64_t Membership::work_served() const { return worker_.stats().requests_served - not_work_served_.load(); }

void Membership::loop() {
    // The heartbeats of a daemon at rest were all of its CPU time (0.4-0.5 % with three
    // daemons every 200 ms); they slow down once no other request has come for kRestAfter,
    // and speed up again from the first round after one has.
    uint64_t work = work_served();
    auto last_work = Clock::now();
    std::unique_lock l(stop_mu_);
    bool at_rest = false;
    while (!stopping_) {
        l.unlock();
        heartbeat_all(at_rest);
        manage();
        const auto now = Clock::now();
        if (const uint64_t w = work_served(); w != work) {
            work = w;
            last_work = now;
        }
        at_rest = now - last_work >= kRestAfter;
        const auto wait = at_rest ? rest_interval() : options_.interval;
        l.lock();
        stop_cv_.wait_for(l, wait, [this] { return stopping_; });
    }
}

void Membership::heartbeat_all(bool at_rest) {
    const uint64_t v = table_version();
    const auto quiet_since = Clock::now() - rest_interval() * 3 / 2;
    for (uint32_t r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        bool broken;
        {
            std::lock_guard l(mu_);
            if (outstanding_[r]) continue; // a slow peer gets no pile of heartbeats
            // Its own heartbeat told both sides (a broken connection is still tried, below).
            if (at_rest && r < rank_ && heard_[r] > quiet_since && !broken_[r]) continue;
            outstanding_[r] = true;
            broken = broken_[r];
        }
        // A broken connection is tried afresh (the daemon may be back, restarted) by the
        // reconnect thread: a connect to a daemon that is hung or cut off waits for its hello
        // deadline, and heartbeats to the others must go on meanwhile, or they too would be
        // taken for lost.
        if (broken) {
            {
                std::lock_guard l(mu_);
                outstanding_[r] = false;
            }
            {
                std::lock_guard l(stop_mu_);
                if (r < reconnect_wanted_.size()) reconnect_wanted_[r] = true;
            }
            stop_cv_.notify_all();
            continue;
        }
        auto ep = peer_(r);
        if (!ep.ok()) {
            std::lock_guard l(mu_);
            outstanding_[r] = false;
            broken_[r] = true;
            continue;
        }
        transport::CallOptions o;
        o.timeout = options_.failure_timeout;
        ++heartbeats_sent_;
        rpc::call_async<proto::Heartbeat>(*ep, proto::HeartbeatRequest{rank_, v}, o,
                                          [this, r](Result<proto::HeartbeatResponse> res, size_t) {
                                              bool behind = false;
                                              {
                                                  std::lock_guard l(mu_);
                                                  outstanding_[r] = false;
                                                  if (res.ok()) {
                                                      last_seen_[r] = Clock::now();
                                                      broken_[r] = false;
                                                      behind = res->table_version > table_.version;
                                                  } else if (res.status().code() != Code::timeout) {
                                                      broken_[r] = true; // died: no need to wait out the silence
                                                  }
                                              }
                                              if (behind) fetch_from(r);
                                          });
    }
}

void Membership::fetch_from(uint32_t rank) {
    auto ep = peer_(rank);
    if (!ep.ok()) return;
    transport::CallOptions o;
    o.timeout = options_.interval * 5;
    rpc::call_async<proto::ChainTableGet>(*ep, proto::Empty{}, o, [this](Result<proto::ChainTable> t, size_t) {
        if (t.ok()) accept(*t);
    });
}

void Membership::manage() {
    Publication p;
    std::vector<uint32_t> gone;
    {
        std::lock_guard l(mu_);
        const proto::ChainTable before = table_;
        if (!manage_locked()) return;
        gone = newly_offline(before, table_);
        p = publication_locked();
    }
    tell_offline(gone);
    if (on_change_) on_change_();
    publish(p);
}

bool Membership::manage_locked() {
    const auto now = Clock::now();
    uint32_t manager = rank_;
    for (uint32_t r = 0; r < rank_; ++r)
        if (alive(r, now)) {
            manager = r;
            break;
        }
    if (manager != rank_) return false;
    // Only a manager that hears from a majority takes daemons offline.
    uint32_t heard = 0;
    for (uint32_t r = 0; r < size_; ++r) heard += alive(r, now) ? 1 : 0;
    if (2 * heard <= size_) return false;
    bool changed = false;
    for (uint32_t r = 0; r < size_; ++r) {
        if (r == rank_ || table_.states[r] == proto::kDaemonOffline || alive(r, now)) continue;
        JOBFS_WARN("daemon %u is lost (%s): offline (chain table %llu, manager %u)", r,
                   broken_[r] ? "connection broken" : "silent too long",
                   static_cast<unsigned long long>(table_.version + 1), rank_);
        table_.states[r] = proto::kDaemonOffline;
        table_.sync_done[r] = table_.sync_total[r] = 0;
        changed = true;
    }
    if (!changed) return false;
    table_.version++;
    table_.manager = rank_;
    return true;
}

Membership::Publication Membership::publication_locked() const {
    Publication p{table_, {}};
    const auto now = Clock::now();
    for (uint32_t r = 0; r < size_; ++r)
        if (r != rank_ && alive(r, now)) p.to.push_back(r);
    return p;
}

// Publications may overtake each other on their way: a peer keeps the newest table it saw.
void Membership::publish(const Publication& p) {
    for (uint32_t r : p.to) {
        auto ep = peer_(r);
        if (!ep.ok()) continue;
        transport::CallOptions o;
        o.timeout = options_.interval * 5;
        rpc::call_async<proto::ChainTablePublish>(*ep, p.table, o, [](Result<proto::Empty>, size_t) {});
    }
}

} // namespace jobfs::server
