// dir_delegations.h: the directories this daemon's shards delegated to clients, and their
// recall.
//
// A delegation (daemon_protocol.h, DelegateDir) lets one client answer creates and unlinks in
// a directory itself and send them in batches (DirOps). The shard records it (a row of
// dir_delegations, replicated with the shard) and refuses every other operation that reads or
// changes the directory's entries, removes it or changes its attributes with Code::recall
// (meta_shard.h). The request handler then asks this table to recall the delegation and runs
// the request again once it ended:
//
// - The holder is sent DirRecall on the connection it was granted on (or renewed it on: a
//   DirOps after a failover names it to a daemon that took the shard up). It sends what it
//   holds back (DirOps with release, which ends the delegation in the shard) and answers.
// - A holder that does not answer (dead, cut off) is waited out: its delegation ends one lease
//   after its last grant or DirOps, as the client counts it from before it asked (so the
//   holder stops first). A holder this daemon does not know (a delegation recorded by the
//   primary before it) is waited out from the recall on, unless it renews meanwhile: then it
//   is asked on the connection it renewed on.
// - Then the delegation is ended in the shard by its token (end), and every request waiting
//   for it runs again, on the pool. A later DirOps with that token is refused (busy).
//
// A grant never comes while a recall of the directory is out: the shard still refuses it
// (another token), and the grant waits for the recall like any other request.
//
// Threads: every method may be called from any thread, the progress thread included; none
// waits. Lock rule: mu_ guards the table and is never held while calling out.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "status.h"
#include "worker.h"

namespace jobfs::server {

class DirDelegations : public std::enable_shared_from_this<DirDelegations> {
public:
    using Clock = std::chrono::steady_clock;
    // Ends dir's delegation in its shard if `token` still holds it (a transaction).
    using EndFn = std::function<Status(uint64_t dir, uint64_t token)>;

    // pool: where ends run and waiting requests are handed back (the daemon's I/O pool).
    DirDelegations(std::chrono::milliseconds lease, boost::asio::thread_pool& pool, EndFn end);

    std::chrono::milliseconds lease() const { return std::chrono::milliseconds(lease_ms_.load()); }
    void set_lease(std::chrono::milliseconds lease) { lease_ms_ = lease.count(); }

    // The shard granted dir to `token`, asked on `holder`; or a DirOps renewed it there.
    void granted(uint64_t dir, uint64_t token, const transport::Endpoint& holder);
    // A DirOps with release ended it in the shard.
    void released(uint64_t dir, uint64_t token);
    // `token`: the one the shard names (MetaShard::recall_dir's row). Runs `done` on the pool
    // once the delegation ended (at once when it already has).
    void recall(uint64_t dir, uint64_t token, std::function<void()> done);
    // The token of dir's delegation when a client other than the one on `caller` holds it
    // (or it is being recalled), else 0. A request about a file there from another client
    // recalls it first: the holder may have removed or renamed the file unseen. A holder this
    // daemon does not know (it took the shard up, and the holder has not renewed here yet)
    // is not found.
    uint64_t held_by_another(uint64_t dir, const transport::Endpoint& caller) const;
    // This daemon no longer serves shard s: what it knew of its delegations is stale.
    void give_up(uint32_t shard);
    // The daemon stops: waiting requests run now (they find the shard gone).
    void shutdown();

    struct Stats {
        uint64_t granted = 0;
        uint64_t recalls = 0;         // DirRecall calls sent
        uint64_t recall_failures = 0; // holders waited out
        uint64_t held = 0;            // delegations known now
    };
    Stats stats() const;

private:
    struct Held {
        uint64_t token = 0;
        std::optional<transport::Endpoint> holder;
        std::optional<transport::Endpoint> asked; // where the recall out was sent
        Clock::time_point until{};
        bool recalling = false;
        std::vector<std::function<void()>> waiters;
    };
    // Ends the delegation in the shard, then hands the waiters back.
    void finish(uint64_t dir, uint64_t token);
    // The recall's next step: ask the holder, or wait for its lease (pursue_at), or finish.
    void pursue(uint64_t dir, uint64_t token);
    void pursue_at(uint64_t dir, uint64_t token, Clock::time_point when);
    void run_all(std::vector<std::function<void()>> fns);

    std::atomic<int64_t> lease_ms_;
    boost::asio::thread_pool& pool_;
    EndFn end_;
    mutable std::mutex mu_;
    std::unordered_map<uint64_t, Held> held_;
    std::vector<std::weak_ptr<boost::asio::steady_timer>> timers_;
    bool stopping_ = false;
    uint64_t st_granted_ = 0, st_recalls_ = 0, st_recall_failures_ = 0;
};

} // namespace jobfs::server
