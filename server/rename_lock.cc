// rename_lock.cc: the file system's rename lock. See rename_lock.h.
#include "server/rename_lock.h"

#include <boost/asio/post.hpp>

#include <thread>

#include "daemon_protocol.h"
#include "log.h"
#include "rpc.h"

namespace jobfs::server {

namespace rpc = transport::rpc;
using Clock = std::chrono::steady_clock;

// Shared with the RPC handlers, which the worker may run after this object is gone.
struct RenameLock::State {
    std::mutex mu;
    std::condition_variable cv;
    uint64_t holder = 0; // 0: free
    Clock::time_point expires;
    std::chrono::milliseconds lease{0};
    bool stopping = false;

    void grant(uint64_t token) { // blocks until free, or the holder's lease ran out
        std::unique_lock l(mu);
        while (holder != 0 && !stopping) {
            if (cv.wait_until(l, expires) == std::cv_status::timeout && holder != 0 && Clock::now() >= expires) {
                JOBFS_WARN("rename lock: holder %llx kept it past its lease (%lld ms): given to %llx",
                           static_cast<unsigned long long>(holder), static_cast<long long>(lease.count()),
                           static_cast<unsigned long long>(token));
                break;
            }
        }
        holder = token;
        expires = Clock::now() + lease;
    }
    void release(uint64_t token) {
        {
            std::lock_guard l(mu);
            if (holder != token) return; // its lease ran out: another holds it now
            holder = 0;
        }
        cv.notify_all();
    }
};

RenameLock::RenameLock(transport::Worker& worker, uint32_t rank, PeerFn peer, HolderFn holder,
                       std::chrono::milliseconds lease)
    : rank_(rank), peer_(std::move(peer)), holder_(std::move(holder)) {
    state_ = std::make_shared<State>();
    state_->lease = lease;
    waiters_ = std::make_shared<boost::asio::thread_pool>(1);
    // An acquire that must wait waits on the lock's thread, never on the transport's; waiting
    // acquires are granted one after another.
    auto st = state_;
    auto pool = waiters_;
    auto holder_fn = holder_;
    rpc::serve<proto::RenameLockAcquire>(worker, [st, pool, holder_fn, rank](transport::ServerCall call,
                                                                             proto::RenameLockRequest&& r) {
        if (holder_fn() != int64_t(rank))
            return call.reply(Status(Code::again, "daemon " + std::to_string(rank) + " does not hold the rename lock"));
        boost::asio::post(*pool, [st, call, token = r.token] {
            st->grant(token);
            rpc::reply<proto::RenameLockAcquire>(call, proto::Empty{});
        });
    });
    rpc::serve<proto::RenameLockRelease>(worker, [st](transport::ServerCall call, proto::RenameLockRequest&& r) {
        st->release(r.token);
        rpc::reply<proto::RenameLockRelease>(call, proto::Empty{});
    });
}

RenameLock::~RenameLock() {
    {
        std::lock_guard l(state_->mu);
        state_->stopping = true;
    }
    state_->cv.notify_all();
    waiters_->join();
}

Result<RenameLock::Held> RenameLock::acquire() {
    const uint64_t token = (uint64_t(rank_) << 48) | next_token_.fetch_add(1);
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    for (;;) {
        const int64_t h = holder_();
        Status st;
        if (h == int64_t(rank_)) {
            state_->grant(token);
            return Held(this, token, rank_);
        }
        if (h < 0) {
            st = Status(Code::peer_gone, "no daemon holds the rename lock (metadata shard 0 is not served)");
        } else {
            auto ep = peer_(static_cast<uint32_t>(h));
            if (ep.ok()) {
                transport::CallOptions o;
                o.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(kLease) + std::chrono::seconds(30);
                st = rpc::call<proto::RenameLockAcquire>(*ep, proto::RenameLockRequest{token}, o).status();
                if (st.ok()) return Held(this, token, static_cast<uint32_t>(h));
            } else {
                st = ep.status();
            }
        }
        // The holder is changing (shard 0 changing hands): ask again under the next table.
        if (!cured_by_newer_table(st.code()) || Clock::now() >= deadline) return st.with_context("rename lock");
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}

RenameLock::Held::~Held() {
    if (!lock_) return;
    if (at_ == lock_->rank_) {
        lock_->state_->release(token_);
        return;
    }
    // Best effort: if its holder cannot be told, the lease frees the lock.
    auto ep = lock_->peer_(at_);
    if (!ep.ok()) return;
    auto r = rpc::call<proto::RenameLockRelease>(*ep, proto::RenameLockRequest{token_});
    if (!r.ok()) JOBFS_WARN("rename lock: release failed (%s): it is freed when its lease ends", r.status().to_string().c_str());
}

} // namespace jobfs::server
