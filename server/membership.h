// membership.h: which daemons serve chunks: heartbeats, the manager and the chain table
// (docs/replication.md, "Failure detection").
//
// Every daemon sends a heartbeat to every peer each `interval` and notes when each answered.
// At rest (no request but heartbeats and status queries for kRestAfter) it sends them every
// failure_timeout / 4 instead (rest_interval()): a daemon nobody uses costs next to no CPU,
// and a lost peer is still taken offline within failure_timeout plus that interval. At rest a
// pair also makes one exchange, not two: the higher rank sends none to a lower one it heard a
// heartbeat from within 1.5 rest intervals (the request and its answer tell each side that the
// other is up and which table version it has); it sends again once that one falls silent.
// The manager is the lowest-ranked daemon this daemon hears from (itself included), so it is
// chosen without an election and replaced as soon as it stops answering. A daemon is lost when
// its connection is broken (the heartbeat fails at once: the process died, the host reset the
// connection) or when it has been silent for `failure_timeout` (a hung or unreachable node;
// long enough that a daemon slowed down by a full disk is not taken for dead). Then, if the
// manager still hears from a majority of the daemons (so a manager cut off from the others does
// not take them all offline), it marks the lost daemon offline in a new version of the chain
// table and pushes the table to every daemon it hears from; chains then leave the
// lost daemon out and keep serving. A daemon that learns of a newer version (a heartbeat's
// answer names it) fetches it. Clients fetch the table from any daemon and refresh it when a
// daemon answers Code::again (their table is older) or a chain member does not answer.
//
// Not guaranteed: agreement during a network partition (no quorum; two managers may publish,
// and the lower one's table wins once they hear from each other).
//
// Threads: one heartbeat thread; one reconnect thread (a connect to a hung peer blocks until
// its hello deadline, so it must not hold up the heartbeats; one peer at a time); handlers run
// on the transport's thread and only take the table's mutex.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon_protocol.h"
#include "worker.h"

namespace jobfs::server {

class Membership {
public:
    using PeerFn = std::function<Result<transport::Endpoint>(uint32_t rank)>;
    // Connects afresh to a daemon whose connection broke (it may have been restarted).
    using ReconnectFn = std::function<Status(uint32_t rank)>;
    struct Options {
        std::chrono::milliseconds interval{200};
        std::chrono::milliseconds failure_timeout{5000};
        uint32_t meta_replicas = 1; // copies of each metadata shard (the table carries it)
    };

    // Registers the membership RPCs on `worker`; the table starts at version 1 with every
    // daemon serving (the same on every daemon, so nothing is exchanged at start).
    Membership(transport::Worker& worker, uint32_t rank, uint32_t size, PeerFn peer, ReconnectFn reconnect,
               Options options);

    // At start, before serving: takes the newest table any peer has (a restarted daemon must
    // not assume version 1). True when that table has this daemon offline: it must resync.
    bool adopt_from_peers();
    ~Membership();

    // Starts heartbeating (once every peer is connected) / stops (before the worker goes).
    void start();
    void stop();

    uint64_t table_version() const;
    proto::ChainTable table() const;

    // Adopts `t` when it is newer than ours; true if it was.
    bool accept(const proto::ChainTable& t);
    // Called (outside the lock) when a newer table takes this running daemon offline: it was
    // cut off (a network partition) and the others went on without it, so it must resync
    // before it serves again, as a restarted daemon does. Set before start().
    void on_taken_offline(std::function<void()> fn) { on_taken_offline_ = std::move(fn); }
    // Called (outside the lock, possibly on the transport's thread) for each peer a newer
    // table takes offline, this daemon's own decision as manager included: calls still waiting
    // for it (a write forwarded down a chain to a node cut off by a partition) must fail now,
    // so that they are retried on the shrunken chain, rather than wait for their deadline.
    // Set before start().
    void on_peer_offline(std::function<void(uint32_t rank)> fn) { on_peer_offline_ = std::move(fn); }
    // Called (outside the lock, possibly on the transport's thread; must not block) after
    // every change of the table this daemon uses. Set before start().
    void on_change(std::function<void()> fn) { on_change_ = std::move(fn); }

    // This daemon's resync progress, shown in the table (state syncing).
    void set_sync_progress(uint64_t done, uint64_t total);
    // Publishes this daemon's own state (a restarted daemon: syncing, then serving). Goes
    // through the manager's rule: the new version is pushed to every peer heard from.
    void set_own_state(uint8_t state);
    // Pushes this daemon's table again to every peer it hears from (one that missed it).
    void republish();

    // A request served that is no use of the daemon (a status query): it leaves it at rest.
    void served_monitoring() { ++not_work_served_; }
    uint64_t heartbeats_sent() const { return heartbeats_sent_.load(); }

private:
    // Between heartbeats at rest: failure_timeout / 4, never below `interval`.
    std::chrono::milliseconds rest_interval() const;
    static constexpr std::chrono::seconds kRestAfter{2};
    void loop();
    uint64_t work_served() const; // requests served but heartbeats and status: moves while the daemon is used
    void reconnect_loop(); // the reconnect thread: connects afresh to peers whose connection broke
    void heartbeat_all(bool at_rest);
    void manage();
    bool manage_locked(); // takes lost daemons offline; true if the table changed
    // A table to push and the live peers to push it to, taken under mu_; publish() sends it
    // after mu_ is released. Lock order: nothing takes the transport (a call, peer_) while
    // holding mu_, since reply callbacks run under the worker's lock and take mu_.
    struct Publication {
        proto::ChainTable table;
        std::vector<uint32_t> to;
    };
    Publication publication_locked() const;
    void publish(const Publication& p);
    void fetch_from(uint32_t rank);
    bool alive(uint32_t r, std::chrono::steady_clock::time_point now) const;

    transport::Worker& worker_;
    std::atomic<uint64_t> not_work_served_{0}; // heartbeats answered, status queries
    std::atomic<uint64_t> heartbeats_sent_{0};
    const uint32_t rank_;
    const uint32_t size_;
    PeerFn peer_;
    ReconnectFn reconnect_;
    Options options_;
    std::function<void()> on_taken_offline_;
    std::function<void(uint32_t)> on_peer_offline_;
    std::function<void()> on_change_;
    // The peers `next` has offline that `prev` had in service.
    std::vector<uint32_t> newly_offline(const proto::ChainTable& prev, const proto::ChainTable& next) const;
    void tell_offline(const std::vector<uint32_t>& ranks);

    mutable std::mutex mu_;
    proto::ChainTable table_;
    std::vector<std::chrono::steady_clock::time_point> last_seen_; // by rank
    std::vector<std::chrono::steady_clock::time_point> heard_;     // by rank: its last heartbeat to us
    std::vector<bool> broken_;       // by rank: the last heartbeat failed on a broken connection
    std::vector<bool> outstanding_;  // by rank: a heartbeat is on its way (one at a time)

    std::mutex stop_mu_;
    std::condition_variable stop_cv_;
    bool stopping_ = false;
    std::vector<bool> reconnect_wanted_; // by rank, guarded by stop_mu_
    std::thread thread_;
    std::thread reconnect_thread_;
};

} // namespace jobfs::server
