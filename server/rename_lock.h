// rename_lock.h: the file system's rename lock.
//
// A rename that moves an entry to another directory checks that a directory does not move
// below itself by walking up from the new parent, then applies the move. Two such renames
// running at once (`mv /a /b/` and `mv /b /a/`) could each pass their check before the other
// applied, and together cut both directories off from the root in a loop. Linux serialises
// every rename between two directories with one mutex per file system (s_vfs_rename_mutex),
// Lustre with a global rename lock on MDT0; jobfs does the same: the daemon serving metadata
// shard 0 (daemon 0, or the next of shard 0's meta chain while it is lost) holds the lock, and
// every rename whose two parents differ holds it from before its checks until it is done.
// When shard 0 changes hands the lock starts free on its new daemon: renames that held it on
// the old one (whose daemon died) are not waited for.
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

    // holder(): the daemon that holds the lock now (-1: none is reachable). Every daemon
    // serves RenameLockAcquire/Release on `worker` and grants the lock while it is the holder.
    using HolderFn = std::function<int64_t()>;
    RenameLock(transport::Worker& worker, uint32_t rank, PeerFn peer, HolderFn holder,
               std::chrono::milliseconds lease = kLease);
    ~RenameLock();
    RenameLock(const RenameLock&) = delete;
    RenameLock& operator=(const RenameLock&) = delete;

    // Held while it lives; released (on daemon 0, by RPC from the others) when it goes.
    class Held {
    public:
        Held() = default;
        Held(Held&& o) noexcept : lock_(std::exchange(o.lock_, nullptr)), token_(o.token_), at_(o.at_) {}
        Held& operator=(Held&&) = delete;
        ~Held();

    private:
        friend class RenameLock;
        Held(RenameLock* lock, uint64_t token, uint32_t at) : lock_(lock), token_(token), at_(at) {}
        RenameLock* lock_ = nullptr;
        uint64_t token_ = 0;
        uint32_t at_ = 0; // the daemon that granted it
    };

    // Waits until this caller holds the lock (no holder reachable for 20 s: the error).
    Result<Held> acquire();

private:
    struct State; // the holder's side: who has it, and its lease

    const uint32_t rank_;
    PeerFn peer_;
    HolderFn holder_;
    std::shared_ptr<State> state_;
    std::shared_ptr<boost::asio::thread_pool> waiters_; // acquires that wait
    std::atomic<uint64_t> next_token_{1};
};

} // namespace jobfs::server
