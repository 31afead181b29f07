#include "server/dir_delegations.h"

#include <boost/asio/post.hpp>

#include <algorithm>

#include "daemon_protocol.h"
#include "log.h"
#include "rpc.h"

namespace jobfs::server {

namespace {
// A holder that answers a recall at once needs little; one that cannot be reached is waited
// out all the same.
constexpr auto kMinRecallTimeout = std::chrono::milliseconds(200);
} // namespace

DirDelegations::DirDelegations(std::chrono::milliseconds lease, boost::asio::thread_pool& pool, EndFn end)
    : lease_ms_(lease.count()), pool_(pool), end_(std::move(end)) {}

void DirDelegations::granted(uint64_t dir, uint64_t token, const transport::Endpoint& holder) {
    std::lock_guard lock(mu_);
    Held& h = held_[dir];
    if (h.recalling && h.token != token) return; // the recall ends the one the shard names
    if (h.token != token) ++st_granted_;
    h.token = token;
    h.holder = holder;
    h.until = Clock::now() + lease();
}

uint64_t DirDelegations::held_by_another(uint64_t dir, const transport::Endpoint& caller) const {
    std::lock_guard lock(mu_);
    auto it = held_.find(dir);
    if (it == held_.end()) return 0;
    const Held& h = it->second;
    return h.recalling || !h.holder || !(*h.holder == caller) ? h.token : 0;
}

void DirDelegations::released(uint64_t dir, uint64_t token) {
    std::lock_guard lock(mu_);
    auto it = held_.find(dir);
    if (it != held_.end() && it->second.token == token && !it->second.recalling) held_.erase(it);
}

void DirDelegations::recall(uint64_t dir, uint64_t token, std::function<void()> done) {
    {
        std::lock_guard lock(mu_);
        if (stopping_) {
            boost::asio::post(pool_, std::move(done));
            return;
        }
        auto [it, fresh] = held_.try_emplace(dir);
        Held& h = it->second;
        if (!h.recalling && (fresh || h.token != token)) {
            // Granted by a primary before this daemon (or stale here): its holder is unknown
            // until it renews here.
            h.token = token;
            h.holder.reset();
            h.until = Clock::now() + lease();
        }
        // (A recall of another token out: it ends that one, then this request runs again.)
        h.waiters.push_back(std::move(done));
        if (h.recalling) return;
        h.recalling = true;
    }
    pursue(dir, token);
}

// Asks the holder (once per connection it is known on), or waits for its lease to end; a
// holder that renewed meanwhile (a DirOps: it is alive, perhaps on a new connection after a
// failover) is asked again rather than cut off.
void DirDelegations::pursue(uint64_t dir, uint64_t token) {
    std::optional<transport::Endpoint> ask;
    Clock::time_point until;
    {
        std::lock_guard lock(mu_);
        auto it = held_.find(dir);
        if (it == held_.end() || it->second.token != token) return; // ended meanwhile
        Held& h = it->second;
        until = h.until;
        if (h.holder && h.holder->health().ok() && !(h.asked && *h.asked == *h.holder)) {
            ask = h.holder;
            h.asked = h.holder;
            ++st_recalls_;
        }
    }
    if (!ask) {
        if (Clock::now() >= until) return finish(dir, token);
        return pursue_at(dir, token, until);
    }
    transport::CallOptions o;
    o.timeout = std::max(kMinRecallTimeout, std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()));
    std::weak_ptr<DirDelegations> wk = weak_from_this();
    transport::rpc::call_async<proto::DirRecall>(
        *ask, proto::DirRecallRequest{dir, token}, o, [wk, dir, token, who = ask->peer()](Result<proto::Empty> r, size_t) {
            auto self = wk.lock();
            if (!self) return;
            if (r.ok()) return self->finish(dir, token);
            JOBFS_WARN("recall of the delegation of directory %llu from %s failed (%s): waiting for it to end",
                       static_cast<unsigned long long>(dir), who.c_str(), r.status().to_string().c_str());
            {
                std::lock_guard lock(self->mu_);
                ++self->st_recall_failures_;
            }
            self->pursue(dir, token);
        });
}

void DirDelegations::pursue_at(uint64_t dir, uint64_t token, Clock::time_point when) {
    auto timer = std::make_shared<boost::asio::steady_timer>(pool_, when);
    {
        std::lock_guard lock(mu_);
        if (stopping_) return boost::asio::post(pool_, [self = shared_from_this(), dir, token] { self->finish(dir, token); });
        timers_.erase(std::remove_if(timers_.begin(), timers_.end(), [](const auto& t) { return t.expired(); }),
                      timers_.end());
        timers_.push_back(timer);
    }
    timer->async_wait([self = shared_from_this(), timer, dir, token](const boost::system::error_code& ec) {
        if (ec) return self->finish(dir, token); // cancelled: the daemon stops
        self->pursue(dir, token);
    });
}

void DirDelegations::finish(uint64_t dir, uint64_t token) {
    boost::asio::post(pool_, [self = shared_from_this(), dir, token] {
        Status st = self->end_(dir, token);
        if (!st.ok())
            JOBFS_WARN("ending the delegation of directory %llu: %s", static_cast<unsigned long long>(dir),
                       st.to_string().c_str());
        std::vector<std::function<void()>> waiters;
        {
            std::lock_guard lock(self->mu_);
            auto it = self->held_.find(dir);
            if (it != self->held_.end() && it->second.token == token) {
                waiters = std::move(it->second.waiters);
                self->held_.erase(it);
            }
        }
        self->run_all(std::move(waiters));
    });
}

void DirDelegations::run_all(std::vector<std::function<void()>> fns) {
    for (auto& f : fns) boost::asio::post(pool_, std::move(f));
}

void DirDelegations::give_up(uint32_t shard) {
    std::vector<std::function<void()>> waiters;
    {
        std::lock_guard lock(mu_);
        for (auto it = held_.begin(); it != held_.end();) {
            if (proto::shard_of(it->first) != shard) {
                ++it;
                continue;
            }
            for (auto& w : it->second.waiters) waiters.push_back(std::move(w));
            it = held_.erase(it);
        }
    }
    run_all(std::move(waiters)); // they find the shard served elsewhere (again)
}

void DirDelegations::shutdown() {
    std::vector<std::function<void()>> waiters;
    std::vector<std::shared_ptr<boost::asio::steady_timer>> live;
    {
        std::lock_guard lock(mu_);
        stopping_ = true;
        for (auto& [dir, h] : held_)
            for (auto& w : h.waiters) waiters.push_back(std::move(w));
        held_.clear();
        for (auto& w : timers_)
            if (auto t = w.lock()) live.push_back(std::move(t));
        timers_.clear();
    }
    for (auto& t : live) t->cancel();
    run_all(std::move(waiters));
}

DirDelegations::Stats DirDelegations::stats() const {
    std::lock_guard lock(mu_);
    return Stats{st_granted_, st_recalls_, st_recall_failures_, held_.size()};
}

} // namespace jobfs::server
