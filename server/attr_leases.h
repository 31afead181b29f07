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
//   the inode, each name it was leased under and those names' directories are `busy`; the
//   request's handler, once the shard is done, recalls them (settle: one LeaseRecall per
//   holder, on the connection the holder asked on) and replies to its own caller only when
//   every holder let go, or when a holder's lease ran out (a holder that does not answer: dead
//   or cut off). A change of an inode whose recall is still out waits for that recall too. So
//   when a change returns, no client shows the old state.
// - A reader (lookup, getattr, readdir, a create that found the file) whose answer is about
//   something busy replies only once it is idle (when_idle, without holding a thread): no
//   client reads the new state, nor that a name is gone, while another may still show the old.
// - A grant is refused for an inode changed after the caller's snapshot (since), or in a
//   directory whose mode or owner changed since: the answer it would cover may predate a
//   change whose recall it missed. The client, too, keeps no answer when a recall arrived while
//   its call was out (attr_cache.h).
// - A daemon that takes up a shard another daemon served (failover) cannot know that one's
//   holders: changes of that shard wait out a full lease from the takeover (take_up). A daemon
//   that gives a shard up recalls its holders (give_up). A client drops what a daemon granted
//   once its connection to that daemon fails, and gives its leases back as it disconnects.
//
// Only regular files and symlinks whose inode lives on the shard of their entry are leased:
// directories change with every entry made in them. The lease's length is the daemon's
// attr-lease-ms item (0: no leases); the client counts it from before it sent the request, so
// its copy always ends first.
//
// Threads: every method may be called from any thread, the transport's progress thread
// included; none waits. A request's change notes live in the calling thread, in a frame that
// begin_op opens and settle or hand_over closes. Frames nest: a thread waiting for a call
// (a primary shipping its changes to replicas) may serve other requests meanwhile, each in a
// frame of its own. Lock rule: mu_ guards everything shared and is never held while calling
// out (recalls are sent, and `done` functions run, after it is released).
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
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
    // Opens this thread's frame for a request (closed by settle or hand_over).
    void begin_op();
    // The change sequence now: taken before the shard reads what a grant will cover.
    uint64_t snapshot() const;
    // The sequence of the request's own last change of ino (a create grants on the inode it
    // made); 0 when it made none.
    uint64_t own_change(uint64_t ino) const;
    // Grants `holder` a lease on ino, leased under the entry parent/name, unless ino changed
    // after `since`, or parent's mode or owner did, or ino is busy; its length in ms, 0 if none.
    uint32_t grant(uint64_t ino, uint64_t parent, const std::string& name, const transport::Endpoint& holder,
                   uint64_t since);
    // True when the request must recall holders or wait before it replies.
    bool must_settle() const;
    // Closes the frame: recalls what the request changed; `done` runs once every holder let
    // go or its lease ran out, and recalls of its inodes that were already out ended (at once,
    // on this thread, when there is nothing to wait for).
    void settle(std::function<void()> done);

    // What a reader's answer is about: an inode, an entry, a directory's entries (0 / empty:
    // not that).
    struct Subject {
        uint64_t ino = 0;
        uint64_t parent = 0;
        std::string name;
        uint64_t dir = 0;
    };
    bool idle(const Subject& s) const;
    // Runs `done` once nothing of `s` is busy (at once, on this thread, if nothing is).
    void when_idle(Subject s, std::function<void()> done);

    struct Holder {
        transport::Endpoint ep;
        Clock::time_point until;
    };
    struct Entry {
        uint64_t parent = 0;
        std::string name;
        bool operator==(const Entry&) const = default;
    };
    struct Recall {
        uint64_t ino = 0;
        std::vector<Holder> holders;
        std::vector<Entry> entries; // busy with it
    };
    // A request's frame, to be finished on another thread (a request the progress thread
    // began, which a try_ operation left to a pool: what it noted before it rolled back was
    // taken off its holders already, and its recall must not be lost).
    struct Handover {
        std::vector<Recall> recalls;
        std::vector<uint64_t> joins;
        Clock::time_point wait_until{};
    };
    Handover hand_over();
    void take_over(Handover h);

    // The holder on this connection let go of all its leases (LeaseRelease: it disconnects).
    void release(const transport::Endpoint& holder);

    // ---- shards changing hands ----
    // This daemon takes up shard s. failover: another daemon may have served it and granted
    // leases: its changes wait until a full lease from now has passed.
    void take_up(uint32_t shard, bool failover);
    // This daemon gives shard s up: its holders are recalled (without waiting for them).
    void give_up(uint32_t shard);
    // The daemon stops: waits for leases to run out end now (their requests reply).
    void shutdown();

    struct Stats {
        uint64_t granted = 0;
        uint64_t recalls = 0;         // LeaseRecall calls sent
        uint64_t recall_failures = 0; // holders that did not answer (their lease was waited out)
        uint64_t held = 0;            // inodes with holders now
    };
    Stats stats() const;

private:
    struct Lease {
        std::vector<Entry> entries; // the names it was leased under (several: hard links)
        std::vector<Holder> holders;
        int busy = 0; // recalls of it in progress
    };
    struct Frame {
        std::vector<std::pair<uint64_t, uint64_t>> changed; // (ino, sequence) changed by the request
        std::vector<Recall> recalls;                         // holders taken off what it changed
        std::vector<uint64_t> joins;                         // inodes it changed whose recall was out
        Clock::time_point wait_until{};                      // a shard's failover grace
        bool empty() const { return recalls.empty() && joins.empty() && wait_until <= Clock::now(); }
    };
    struct Notes; // a thread's frames
    struct Waiter {
        Subject what;
        std::function<void()> done;
    };

    Notes& notes() const;
    Frame& top() const;
    Frame take_top();
    // Takes ino's live holders (caller holds mu_) into frame f; marks it and its names busy.
    void revoke_locked(uint64_t ino, Lease& l, Frame& f);
    // revoke_locked for every lease pred(ino, lease) picks.
    template <class Pred>
    void revoke_where_locked(Pred pred, Frame& f);
    bool idle_locked(const Subject& s) const;
    // When a failover grace ends for any shard of s (none: the epoch).
    Clock::time_point grace_of_locked(const Subject& s) const;
    void finish(const std::vector<Recall>& recalls);
    void recall(Frame f, std::function<void()> done);
    void prune_locked(Clock::time_point now);

    std::atomic<int64_t> lease_ms_;
    boost::asio::thread_pool& timers_;
    mutable std::mutex mu_;
    std::unordered_map<uint64_t, Lease> leases_;
    std::unordered_map<std::string, int> busy_names_; // proto::entry_key -> recalls out
    std::unordered_map<uint64_t, int> busy_dirs_;     // directory -> recalls out of entries in it
    std::vector<Waiter> waiters_;
    // The sequence of each inode's last change, and of each directory's last mode or owner
    // change; older changes are forgotten (a snapshot older than floor_ gets no grant).
    uint64_t seq_ = 0;
    uint64_t floor_ = 0;
    std::unordered_map<uint64_t, uint64_t> changed_;
    std::unordered_map<uint64_t, uint64_t> access_changed_;
    std::unordered_map<uint32_t, Clock::time_point> grace_; // shard -> changes wait until
    std::vector<std::weak_ptr<boost::asio::steady_timer>> timers_live_;
    bool stopping_ = false;
    Clock::time_point next_prune_{};
    uint64_t st_granted_ = 0, st_recalls_ = 0, st_recall_failures_ = 0;
};

} // namespace jobfs::server
