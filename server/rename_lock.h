// rename_lock.h: the file system's rename lock.
//
// A rename that moves an entry to another directory checks that a directory does not move
// below itself by walking up from the new parent, then applies the move. Two such renames
// running at once (`mv /a /b/` and `mv /b /a/`) could each pass their check before the other
// applied, and together cut both directories off from the root in a loop. Linux serialises
// every rename between two directories with one mutex per file system (s_vfs_rename_mutex),
// Lustre with a global rename lock on MDT0; jobfs does the same: daemon 0 holds the lock and
// every rename whose two parents differ holds it from before its checks until it is done.
// Renames within one directory (most of them: a temporary file renamed into place) never take
// it.
//
// The lock has a lease: a holder that does not release it within `lease` (its daemon died, or
// a step hangs) loses it to the next waiter, so a lost daemon cannot stop every rename of the
// file system. A rename that outlives its lease is no longer protected; the lease is longer
// than any rename takes with every daemon alive (each of its steps has a 30 s deadline).
//
// Threads: acquire() blocks (a coordinator's thread); the RPC handlers never block: an
// acquire that has to wait waits on the lock's own thread.
#pragma once

#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>

#include "result.h"
#include "worker.h"

namespace jobfs::server {

class RenameLock {
public:
    using PeerFn = std::function<Result<transport::Endpoint>(uint32_t rank)>;
    static constexpr std::chrono::milliseconds kLease{60000};

    // rank: this daemon's; rank 0 holds the lock and serves RenameLockAcquire/Release on
    // `worker`, the others ask it through peer(0).
    RenameLock(transport::Worker& worker, uint32_t rank, PeerFn peer,
               std::chrono::milliseconds lease = kLease);
    ~RenameLock();
    RenameLock(const RenameLock&) = delete;
    RenameLock& operator=(const RenameLock&) = delete;

    // Held while it lives; released (on daemon 0, by RPC from the others) when it goes.
    class Held {
    public:
        Held() = default;
        Held(Held&& o) noexcept : lock_(std::exchange(o.lock_, nullptr)), token_(o.token_) {}
        Held& operator=(Held&&) = delete;
        ~Held();

    private:
        friend class RenameLock;
        Held(RenameLock* lock, uint64_t token) : lock_(lock), token_(token) {}
        RenameLock* lock_ = nullptr;
        uint64_t token_ = 0;
    };

    // Waits until this caller holds the lock (daemon 0 unreachable: its error).
    Result<Held> acquire();

private:
    struct State; // daemon 0's side: the holder and its lease

    const uint32_t rank_;
    PeerFn peer_;
    std::shared_ptr<State> state_;                      // daemon 0 only
    std::shared_ptr<boost::asio::thread_pool> waiters_; // daemon 0 only: acquires that wait
    std::atomic<uint64_t> next_token_{1};
};

} // namespace jobfs::server
