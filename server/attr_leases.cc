// attr_leases.cc: see attr_leases.h.
#include "server/attr_leases.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>

#include "daemon_protocol.h"
#include "log.h"
#include "rpc.h"
#include "server/meta_shard.h"

namespace jobfs::server {

namespace {
// Changes remembered for grants still in flight; past this many, all are forgotten at once
// (a grant whose snapshot is older than that is refused: conservative, never wrong).
constexpr size_t kMaxChanged = 1 << 16;
// The least time a recall is given, even when the holder's lease is about to end anyway.
constexpr std::chrono::milliseconds kMinRecallTimeout{50};
} // namespace

// One request's notes, in the thread that runs it.
struct AttrLeases::Notes {
    const AttrLeases* owner = nullptr;
    std::vector<std::pair<uint64_t, uint64_t>> changed; // (ino, sequence) changed by this request
    std::vector<Recall> recalls;                        // holders taken off what it changed
    Clock::time_point wait_until{};                     // a shard's failover grace
};

AttrLeases::AttrLeases(std::chrono::milliseconds lease, boost::asio::thread_pool& timers)
    : lease_ms_(lease.count()), timers_(timers) {}

AttrLeases::~AttrLeases() = default;

AttrLeases::Notes& AttrLeases::notes() const {
    thread_local Notes n;
    if (n.owner != this) {
        n = Notes{};
        n.owner = this;
    }
    return n;
}

void AttrLeases::revoke_locked(uint64_t ino, Lease& l, Notes& n) {
    const auto now = Clock::now();
    std::vector<Holder> live;
    for (auto& h : l.holders)
        if (h.until > now) live.push_back(std::move(h));
    l.holders.clear();
    if (live.empty()) return;
    ++l.busy;
    n.recalls.push_back(Recall{ino, std::move(live)});
}

void AttrLeases::note_change(uint64_t ino) {
    std::lock_guard lock(mu_);
    Notes& n = notes();
    const uint64_t s = ++seq_;
    if (changed_.size() >= kMaxChanged) {
        changed_.clear();
        floor_ = s;
    }
    changed_[ino] = s;
    n.changed.emplace_back(ino, s);
    auto it = leases_.find(ino);
    if (it != leases_.end()) {
        revoke_locked(ino, it->second, n);
        if (it->second.busy == 0 && it->second.holders.empty()) leases_.erase(it);
    }
    auto g = grace_.find(shard_of(ino));
    if (g != grace_.end()) {
        if (g->second > Clock::now())
            n.wait_until = std::max(n.wait_until, g->second);
        else
            grace_.erase(g);
    }
}

template <class Pred>
void AttrLeases::revoke_where_locked(Pred pred, Notes& n) {
    for (auto it = leases_.begin(); it != leases_.end();) {
        if (pred(it->first, it->second)) {
            changed_[it->first] = ++seq_;
            revoke_locked(it->first, it->second, n);
            if (it->second.busy == 0 && it->second.holders.empty()) {
                it = leases_.erase(it);
                continue;
            }
        }
        ++it;
    }
}

void AttrLeases::note_dir_access(uint64_t dir) {
    std::lock_guard lock(mu_);
    revoke_where_locked([dir](uint64_t, const Lease& l) { return l.parent == dir; }, notes());
}

void AttrLeases::begin_op() {
    Notes& n = notes();
    if (!n.recalls.empty() || n.wait_until > Clock::now()) settle(nullptr);
    n.changed.clear();
}

uint64_t AttrLeases::snapshot() const {
    std::lock_guard lock(mu_);
    return seq_;
}

uint64_t AttrLeases::own_change(uint64_t ino) const {
    const Notes& n = notes();
    for (auto it = n.changed.rbegin(); it != n.changed.rend(); ++it)
        if (it->first == ino) return it->second;
    return 0;
}

void AttrLeases::prune_locked(Clock::time_point now) {
    if (now < next_prune_) return;
    next_prune_ = now + std::max(lease(), std::chrono::milliseconds(1000));
    for (auto it = leases_.begin(); it != leases_.end();) {
        auto& hs = it->second.holders;
        hs.erase(std::remove_if(hs.begin(), hs.end(), [&](const Holder& h) { return h.until <= now; }), hs.end());
        it = hs.empty() && it->second.busy == 0 ? leases_.erase(it) : std::next(it);
    }
}

uint32_t AttrLeases::grant(uint64_t ino, uint64_t parent, const transport::Endpoint& holder, uint64_t since) {
    const int64_t ms = lease_ms_.load();
    if (ms <= 0 || !holder.valid()) return 0;
    const auto now = Clock::now();
    std::lock_guard lock(mu_);
    if (since < floor_) return 0;
    auto c = changed_.find(ino);
    if (c != changed_.end() && c->second > since) return 0;
    auto g = grace_.find(shard_of(ino));
    if (g != grace_.end() && g->second > now) return 0; // another daemon's holders may still hold it
    prune_locked(now);
    Lease& l = leases_[ino];
    if (l.busy) return 0;
    l.parent = parent;
    const auto until = now + std::chrono::milliseconds(ms);
    auto h = std::find_if(l.holders.begin(), l.holders.end(), [&](const Holder& x) { return x.ep == holder; });
    if (h != l.holders.end())
        h->until = until;
    else
        l.holders.push_back(Holder{holder, until});
    ++st_granted_;
    return static_cast<uint32_t>(ms);
}

bool AttrLeases::busy(uint64_t ino) const {
    std::lock_guard lock(mu_);
    auto it = leases_.find(ino);
    return it != leases_.end() && it->second.busy > 0;
}

void AttrLeases::wait_idle(uint64_t ino) {
    std::unique_lock lock(mu_);
    idle_.wait_for(lock, lease() + std::chrono::seconds(1), [&] {
        auto it = leases_.find(ino);
        return it == leases_.end() || it->second.busy == 0;
    });
}

bool AttrLeases::must_settle() const {
    const Notes& n = notes();
    return !n.recalls.empty() || n.wait_until > Clock::now();
}

void AttrLeases::finish(const std::vector<uint64_t>& inos) {
    {
        std::lock_guard lock(mu_);
        for (uint64_t ino : inos) {
            auto it = leases_.find(ino);
            if (it == leases_.end()) continue;
            if (it->second.busy > 0) --it->second.busy;
            if (it->second.busy == 0 && it->second.holders.empty()) leases_.erase(it);
        }
    }
    idle_.notify_all();
}

void AttrLeases::settle(std::function<void()> done) {
    Notes& n = notes();
    std::vector<Recall> recalls = std::move(n.recalls);
    const Clock::time_point wait_until = n.wait_until;
    n.recalls.clear();
    n.changed.clear();
    n.wait_until = {};
    recall(std::move(recalls), wait_until, std::move(done));
}

// Sends one LeaseRecall per holder; `done` runs when all answered, or at the latest lease end
// of those that did not, or at wait_until, whichever is last.
void AttrLeases::recall(std::vector<Recall> recalls, Clock::time_point wait_until, std::function<void()> done) {
    const auto now = Clock::now();
    if (recalls.empty() && wait_until <= now) {
        if (done) done();
        return;
    }
    struct Pending {
        std::mutex mu;
        size_t left = 0;
        Clock::time_point wait_until;
        std::vector<uint64_t> inos;
        std::function<void()> done;
    };
    auto p = std::make_shared<Pending>();
    p->wait_until = wait_until;
    p->done = std::move(done);
    struct ToHolder {
        transport::Endpoint ep;
        Clock::time_point until;
        proto::LeaseRecallRequest req;
    };
    std::vector<ToHolder> to;
    for (auto& r : recalls) {
        p->inos.push_back(r.ino);
        for (auto& h : r.holders) {
            auto t = std::find_if(to.begin(), to.end(), [&](const ToHolder& x) { return x.ep == h.ep; });
            if (t == to.end()) {
                to.push_back(ToHolder{h.ep, h.until, {}});
                t = std::prev(to.end());
            }
            t->until = std::max(t->until, h.until);
            t->req.inos.push_back(r.ino);
        }
    }
    std::weak_ptr<AttrLeases> wk = weak_from_this();
    auto complete = [wk, p] {
        auto self = wk.lock();
        if (!self) return;
        auto end = [wk, p] {
            if (auto s = wk.lock()) s->finish(p->inos);
            if (p->done) p->done();
        };
        if (p->wait_until <= Clock::now()) return end();
        auto timer = std::make_shared<boost::asio::steady_timer>(self->timers_, p->wait_until);
        timer->async_wait([timer, end](const boost::system::error_code&) { end(); });
    };
    p->left = to.size();
    {
        std::lock_guard lock(mu_);
        st_recalls_ += to.size();
    }
    if (to.empty()) return complete();
    for (auto& t : to) {
        transport::CallOptions o;
        o.timeout = std::max(kMinRecallTimeout, std::chrono::ceil<std::chrono::milliseconds>(t.until - now));
        const auto until = t.until;
        transport::rpc::call_async<proto::LeaseRecall>(
            t.ep, t.req, o, [wk, p, until, complete, who = t.ep.peer()](Result<proto::Empty> r, size_t) {
                bool last = false;
                {
                    std::lock_guard lock(p->mu);
                    if (!r.ok()) p->wait_until = std::max(p->wait_until, until);
                    last = --p->left == 0;
                }
                if (!r.ok()) {
                    JOBFS_WARN("attribute lease recall from %s failed (%s): waiting for its lease to end",
                               who.c_str(), r.status().to_string().c_str());
                    if (auto s = wk.lock()) {
                        std::lock_guard lock(s->mu_);
                        ++s->st_recall_failures_;
                    }
                }
                if (last) complete();
            });
    }
}

AttrLeases::Handover AttrLeases::hand_over() {
    Notes& n = notes();
    Handover h{std::move(n.recalls), n.wait_until};
    n.recalls.clear();
    n.changed.clear();
    n.wait_until = {};
    return h;
}

void AttrLeases::take_over(Handover h) {
    Notes& n = notes();
    for (auto& r : h.recalls) n.recalls.push_back(std::move(r));
    n.wait_until = std::max(n.wait_until, h.wait_until);
}

void AttrLeases::release(const transport::Endpoint& holder) {
    std::lock_guard lock(mu_);
    for (auto it = leases_.begin(); it != leases_.end();) {
        auto& hs = it->second.holders;
        hs.erase(std::remove_if(hs.begin(), hs.end(), [&](const Holder& h) { return h.ep == holder; }), hs.end());
        it = hs.empty() && it->second.busy == 0 ? leases_.erase(it) : std::next(it);
    }
}

void AttrLeases::take_up(uint32_t shard, bool failover) {
    if (!failover || lease_ms_.load() <= 0) return;
    std::lock_guard lock(mu_);
    grace_[shard] = Clock::now() + lease();
}

void AttrLeases::give_up(uint32_t shard) {
    Notes n;
    {
        std::lock_guard lock(mu_);
        revoke_where_locked([shard](uint64_t ino, const Lease&) { return shard_of(ino) == shard; }, n);
    }
    recall(std::move(n.recalls), {}, nullptr);
}

AttrLeases::Stats AttrLeases::stats() const {
    std::lock_guard lock(mu_);
    Stats s;
    s.granted = st_granted_;
    s.recalls = st_recalls_;
    s.recall_failures = st_recall_failures_;
    for (const auto& [ino, l] : leases_) s.held += !l.holders.empty();
    return s;
}

} // namespace jobfs::server
