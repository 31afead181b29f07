// attr_leases.h: leases on the attributes and names clients cache, and their recall.
//
// A client that looks up or creates a file with LookupLeased or CreateLeased may keep the
// answer (the entry parent/name -> inode and the inode's attributes) for the lease's length,
// and answer stat from it without asking (client/attr_cache.h). Strong consistency holds
// because nothing about a leased inode changes without its holders letting go first, as with
// Lustre's lock callbacks or CephFS's capabilities:
//
// - The shard tells this table of every inode it changes, inside the transaction
//   (MetaShard::ChangeObserver): note_change. The inode's holders are taken off it at once and
//   the inode is `busy`; the request's handler, once the shard is done, recalls them (settle:
//   one LeaseRecall per holder, on the connection the holder asked on) and replies to its own
//   caller only when every holder let go, or when a holder's lease ran out (a holder that does
//   not answer: dead or cut off). So when a change returns, no client shows the old state.
// - A lookup that reads an inode while it is busy waits until it is not (wait_idle) before it
//   answers: no client reads the new state while another may still show the old one.
// - A grant is refused for an inode changed after the caller's snapshot (since): the answer
//   it would cover may predate the change whose recall it missed. The client, too, keeps no
//   answer when a recall arrived while its call was out (attr_cache.h).
// - A daemon that takes up a shard another daemon served (failover) cannot know that one's
//   holders: changes of that shard wait out a full lease from the takeover (take_up). A daemon
//   that gives a shard up recalls its holders (give_up). A client drops what a daemon granted
//   once its connection to that daemon fails.
//
// Only regular files and symlinks whose inode lives on the shard of their entry are leased:
// directories change with every entry made in them. The lease's length is the daemon's
// attr-lease-ms item (0: no leases); the client counts it from before it sent the request, so
// its copy always ends first.
//
// Threads: every method may be called from any thread, the transport's progress thread
// included, except wait_idle (a pool thread: it waits). The change notes of one request live
// in the calling thread (begin_op .. settle), so a request's shard work and its settle run on
// one thread, as the request handlers do. Lock rule: mu_ guards everything shared, is never
// held while calling out (recalls are sent after it is released).
#pragma once

#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "worker.h"

namespace jobfs::server {

// Held by shared_ptr: recalls in flight keep a weak reference.
class AttrLeases : public std::enable_shared_from_this<AttrLeases> {
public:
    using Clock = std::chrono::steady_clock;

    // timers: where waits for leases to run out are scheduled (the daemon's I/O pool).
    AttrLeases(std::chrono::milliseconds lease, boost::asio::thread_pool& timers);
    ~AttrLeases();

    std::chrono::milliseconds lease() const { return std::chrono::milliseconds(lease_ms_.load()); }
    void set_lease(std::chrono::milliseconds lease) { lease_ms_ = lease.count(); }

    // ---- from the shard, inside its transactions ----
    void note_change(uint64_t ino);
    // A directory's mode or owner changed: lookups in it may now be refused, so every lease
    // on an entry in it is recalled.
    void note_dir_access(uint64_t dir);

    // ---- from the request handlers ----
    // Starts a request's notes on this thread (leftovers of one that did not settle are
    // recalled now, without a reply waiting for them).
    void begin_op();
    // The change sequence now: taken before the shard reads what a grant will cover.
    uint64_t snapshot() const;
    // The sequence of this thread's request's own last change of ino (a create grants on the
    // inode it made); 0 when it made none.
    uint64_t own_change(uint64_t ino) const;
    // Grants `holder` a lease on ino (its entry in `parent`) unless ino changed after `since`
    // or is busy; the lease's length in ms, 0 when none.
    uint32_t grant(uint64_t ino, uint64_t parent, const transport::Endpoint& holder, uint64_t since);
    bool busy(uint64_t ino) const;
    // Waits (a pool thread) until ino is not busy, at most a lease and a second.
    void wait_idle(uint64_t ino);
    // True when this thread's request must recall holders or wait before it replies.
    bool must_settle() const;
    // Recalls what this thread's request changed; `done` runs once every holder let go or its
    // lease ran out (at once, on this thread, when there is nothing to wait for).
    void settle(std::function<void()> done);

    // The holder on this connection let go of all its leases (LeaseRelease: it disconnects).
    void release(const transport::Endpoint& holder);

    // ---- shards changing hands ----
    // This daemon takes up shard s. failover: another daemon may have served it and granted
    // leases: its changes wait until a full lease from now has passed.
    void take_up(uint32_t shard, bool failover);
    // This daemon gives shard s up: its holders are recalled (without waiting for them).
    void give_up(uint32_t shard);

    struct Holder {
        transport::Endpoint ep;
        Clock::time_point until;
    };
    struct Recall {
        uint64_t ino = 0;
        std::vector<Holder> holders;
    };
    // This thread's request's notes, to be finished on another thread (a request the
    // progress thread began, which a try_ operation left to a pool: what it noted before it
    // rolled back was taken off its holders already, and its recall must not be lost).
    struct Handover {
        std::vector<Recall> recalls;
        Clock::time_point wait_until{};
    };
    Handover hand_over();
    void take_over(Handover h);

    struct Stats {
        uint64_t granted = 0;
        uint64_t recalls = 0;        // LeaseRecall calls sent
        uint64_t recall_failures = 0; // holders that did not answer (their lease was waited out)
        uint64_t held = 0;           // inodes with holders now
    };
    Stats stats() const;

private:
    struct Lease {
        uint64_t parent = 0;
        std::vector<Holder> holders;
        int busy = 0; // recalls of it in progress
    };
    struct Notes; // one request's, per thread

    Notes& notes() const;
    // Takes ino's live holders (caller holds mu_); they go into the thread's notes.
    void revoke_locked(uint64_t ino, Lease& l, Notes& n);
    // revoke_locked for every lease pred(ino, lease) picks.
    template <class Pred>
    void revoke_where_locked(Pred pred, Notes& n);
    void finish(const std::vector<uint64_t>& inos);
    void recall(std::vector<Recall> recalls, Clock::time_point wait_until, std::function<void()> done);
    void prune_locked(Clock::time_point now);

    std::atomic<int64_t> lease_ms_;
    boost::asio::thread_pool& timers_;
    mutable std::mutex mu_;
    std::condition_variable idle_;
    std::unordered_map<uint64_t, Lease> leases_;
    // The sequence of each inode's last change; changes older than floor_ are forgotten (a
    // snapshot older than floor_ gets no grant).
    uint64_t seq_ = 0;
    uint64_t floor_ = 0;
    std::unordered_map<uint64_t, uint64_t> changed_;
    std::unordered_map<uint32_t, Clock::time_point> grace_; // shard -> changes wait until
    Clock::time_point next_prune_{};
    uint64_t st_granted_ = 0, st_recalls_ = 0, st_recall_failures_ = 0;
};

} // namespace jobfs::server
