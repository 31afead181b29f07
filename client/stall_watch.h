// stall_watch.h: runs an action while some call has waited longer than it should.
//
// Why: a metadata call to a primary that hangs (stopped, or a node that stopped answering
// while its connection still looks alive) waits for its whole deadline (30 s), although the
// other daemons take that daemon offline within the failure timeout and a replica serves the
// shard. The call stays an ordinary synchronous call (its thread drives the transport, as
// every call's does); it only registers while it waits (watch(): a lock and a set insert).
// A watcher thread, started at the first registration, sleeps until some registered call is
// older than `after`, then runs `action` every `every` while one is. FileIO's action leaves
// out the daemons the chain table has offline: their connections are aborted, the waiting
// call fails with peer_gone, and meta_call asks the new primary (client/meta_call.h).
//
// Thread safety: watch() and the guards it returns may be used from any thread but a
// transport callback. `action` runs on the watcher thread, never under the lock. Like the
// transport's threads, the watcher does not survive fork(): a process forks before its first
// watch() (jobfs-fuse forks before it connects; jobfs ckpt lets its connection go first).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

namespace jobfs::client {

class StallWatch {
public:
    using Clock = std::chrono::steady_clock;

    StallWatch(std::function<void()> action, std::chrono::milliseconds after, std::chrono::milliseconds every);
    ~StallWatch(); // stops and joins the watcher
    StallWatch(const StallWatch&) = delete;
    StallWatch& operator=(const StallWatch&) = delete;

    // A registered call, from watch() until it is destroyed (an empty one watches nothing).
    class Watched {
    public:
        Watched() = default;
        Watched(Watched&& o) noexcept : owner_(o.owner_), at_(o.at_) { o.owner_ = nullptr; }
        Watched& operator=(Watched&&) = delete;
        ~Watched();

    private:
        friend class StallWatch;
        Watched(StallWatch* owner, std::multiset<Clock::time_point>::iterator at) : owner_(owner), at_(at) {}
        StallWatch* owner_ = nullptr;
        std::multiset<Clock::time_point>::iterator at_;
    };
    Watched watch();

private:
    void run();

    const std::function<void()> action_;
    const std::chrono::milliseconds after_, every_;
    std::mutex mu_; // guards everything below
    std::condition_variable cv_;
    std::multiset<Clock::time_point> calls_; // when each registered call started
    bool stop_ = false;
    std::thread thread_; // started by the first watch()
};

} // namespace jobfs::client
