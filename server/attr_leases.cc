// attr_leases.cc: see attr_leases.h.
#include "server/attr_leases.h"

#include <algorithm>
#include <deque>
#include <utility>

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

// A thread's open frames, innermost last. frames[0] holds changes made outside any request
// (sent at the next begin_op on this thread).
struct AttrLeases::Notes {
    std::vector<Frame> frames = std::vector<Frame>(1);
};

AttrLeases::AttrLeases(std::chrono::milliseconds lease, boost::asio::thread_pool& timers)
    : lease_ms_(lease.count()), timers_(timers) {}

AttrLeases::~AttrLeases() = default;

AttrLeases::Notes& AttrLeases::notes() const {
    // Per table: in tests several daemons' tables may share a thread.
    thread_local std::deque<std::pair<const AttrLeases*, Notes>> all; // stable references
    for (auto& [owner, n] : all)
        if (owner == this) return n;
    all.emplace_back(this, Notes{});
    return all.back().second;
}

AttrLeases::Frame& AttrLeases::top() const { return notes().frames.back(); }

AttrLeases::Frame AttrLeases::take_top() {
    Notes& n = notes();
    if (n.frames.size() > 1) {
        Frame f = std::move(n.frames.back());
        n.frames.pop_back();
        return f;
    }
    return std::exchange(n.frames[0], Frame{});
}

void AttrLeases::revoke_locked(uint64_t ino, Lease& l, Frame& f) {
    const auto now = Clock::now();
    std::vector<Holder> live;
    for (auto& h : l.holders)
        if (h.until > now) live.push_back(std::move(h));
    l.holders.clear();
    if (live.empty()) return;
    ++l.busy;
    for (const Entry& e : l.entries) {
        ++busy_names_[proto::entry_key(e.parent, e.name)];
        ++busy_dirs_[e.parent];
    }
    f.recalls.push_back(Recall{ino, std::move(live), l.entries});
}

template <class Pred>
void AttrLeases::revoke_where_locked(Pred pred, Frame& f) {
    for (auto it = leases_.begin(); it != leases_.end();) {
        if (pred(it->first, it->second)) {
            changed_[it->first] = ++seq_;
            revoke_locked(it->first, it->second, f);
            if (it->second.busy == 0 && it->second.holders.empty()) {
                it = leases_.erase(it);
                continue;
            }
        }
        ++it;
    }
}

void AttrLeases::note_change(uint64_t ino) {
    std::lock_guard lock(mu_);
    Frame& f = top();
    const uint64_t s = ++seq_;
    if (changed_.size() >= kMaxChanged) {
        changed_.clear();
        floor_ = s;
    }
    changed_[ino] = s;
    f.changed.emplace_back(ino, s);
    auto it = leases_.find(ino);
    if (it != leases_.end()) {
        Lease& l = it->second;
        // A recall of it another request began is still out: this change waits for it too
        // (its holders still show what was before both). Not for this request's own recall.
        const bool own = std::any_of(f.recalls.begin(), f.recalls.end(), [&](const Recall& r) { return r.ino == ino; });
        if (l.busy > 0 && !own && std::find(f.joins.begin(), f.joins.end(), ino) == f.joins.end()) f.joins.push_back(ino);
        revoke_locked(ino, l, f);
        if (l.busy == 0 && l.holders.empty()) leases_.erase(it);
    }
    auto g = grace_.find(shard_of(ino));
    if (g != grace_.end()) {
        if (g->second > Clock::now())
            f.wait_until = std::max(f.wait_until, g->second);
        else
            grace_.erase(g);
    }
}

void AttrLeases::note_dir_access(uint64_t dir) {
    std::lock_guard lock(mu_);
    const uint64_t s = ++seq_;
    if (access_changed_.size() >= kMaxChanged) {
        access_changed_.clear();
        floor_ = s;
    }
    access_changed_[dir] = s;
    revoke_where_locked(
        [dir](uint64_t, const Lease& l) {
            return std::any_of(l.entries.begin(), l.entries.end(), [dir](const Entry& e) { return e.parent == dir; });
        },
        top());
}

void AttrLeases::begin_op() {
    Notes& n = notes();
    if (n.frames.size() == 1) {
        // Changes noted outside any request: recalled now, with nobody waiting to reply.
        Frame loose = std::exchange(n.frames[0], Frame{});
        if (!loose.empty()) recall(std::move(loose), nullptr);
    }
    n.frames.emplace_back();
}

uint64_t AttrLeases::snapshot() const {
    std::lock_guard lock(mu_);
    return seq_;
}

uint64_t AttrLeases::own_change(uint64_t ino) const {
    const Frame& f = top();
    for (auto it = f.changed.rbegin(); it != f.changed.rend(); ++it)
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

uint32_t AttrLeases::grant(uint64_t ino, uint64_t parent, const std::string& name, const transport::Endpoint& holder,
                           uint64_t since) {
    const int64_t ms = lease_ms_.load();
    if (ms <= 0 || !holder.valid()) return 0;
    const auto now = Clock::now();
    std::lock_guard lock(mu_);
    if (since < floor_ || stopping_) return 0;
    auto c = changed_.find(ino);
    if (c != changed_.end() && c->second > since) return 0;
    auto d = access_changed_.find(parent);
    if (d != access_changed_.end() && d->second > since) return 0; // the lookup's check may be stale
    auto g = grace_.find(shard_of(ino));
    if (g != grace_.end() && g->second > now) return 0; // another daemon's holders may still hold it
    prune_locked(now);
    auto existing = leases_.find(ino);
    if (existing != leases_.end() && existing->second.busy) return 0;
    Lease& l = leases_[ino];
    Entry e{parent, name};
    if (std::find(l.entries.begin(), l.entries.end(), e) == l.entries.end()) l.entries.push_back(std::move(e));
    const auto until = now + std::chrono::milliseconds(ms);
    auto h = std::find_if(l.holders.begin(), l.holders.end(), [&](const Holder& x) { return x.ep == holder; });
    if (h != l.holders.end())
        h->until = until;
    else
        l.holders.push_back(Holder{holder, until});
    ++st_granted_;
    return static_cast<uint32_t>(ms);
}

bool AttrLeases::must_settle() const { return !top().empty(); }

AttrLeases::Clock::time_point AttrLeases::grace_of_locked(const Subject& s) const {
    Clock::time_point end{};
    for (uint64_t key : {s.ino, s.parent, s.dir}) {
        if (!key) continue;
        auto g = grace_.find(shard_of(key));
        if (g != grace_.end()) end = std::max(end, g->second);
    }
    return end;
}

bool AttrLeases::idle_locked(const Subject& s) const {
    // After a failover, what the new primary reads may be newer than what the lost one's
    // holders show until their leases end.
    if (grace_of_locked(s) > Clock::now()) return false;
    if (s.ino) {
        auto it = leases_.find(s.ino);
        if (it != leases_.end() && it->second.busy > 0) return false;
    }
    if (s.parent && busy_names_.count(proto::entry_key(s.parent, s.name))) return false;
    if (s.dir && busy_dirs_.count(s.dir)) return false;
    return true;
}

bool AttrLeases::idle(const Subject& s) const {
    std::lock_guard lock(mu_);
    return idle_locked(s);
}

void AttrLeases::when_idle(Subject s, std::function<void()> done) {
    std::shared_ptr<boost::asio::steady_timer> timer;
    {
        std::lock_guard lock(mu_);
        if (idle_locked(s)) {
            timer = nullptr;
        } else {
            // A grace ends by the clock, not by a recall: look again then.
            const auto grace = grace_of_locked(s);
            if (grace > Clock::now() && !stopping_) {
                timer = std::make_shared<boost::asio::steady_timer>(timers_, grace);
                timers_live_.push_back(timer);
            }
            waiters_.push_back(Waiter{std::move(s), std::move(done)});
            if (!timer) return;
        }
    }
    if (!timer) return done();
    std::weak_ptr<AttrLeases> wk = weak_from_this();
    timer->async_wait([wk, timer](const boost::system::error_code&) {
        if (auto self = wk.lock()) self->finish({});
    });
}

void AttrLeases::finish(const std::vector<Recall>& recalls) {
    std::vector<std::function<void()>> ready;
    {
        std::lock_guard lock(mu_);
        for (const Recall& r : recalls) {
            auto it = leases_.find(r.ino);
            if (it != leases_.end()) {
                if (it->second.busy > 0) --it->second.busy;
                if (it->second.busy == 0 && it->second.holders.empty()) leases_.erase(it);
            }
            for (const Entry& e : r.entries) {
                auto n = busy_names_.find(proto::entry_key(e.parent, e.name));
                if (n != busy_names_.end() && --n->second <= 0) busy_names_.erase(n);
                auto d = busy_dirs_.find(e.parent);
                if (d != busy_dirs_.end() && --d->second <= 0) busy_dirs_.erase(d);
            }
        }
        for (auto it = waiters_.begin(); it != waiters_.end();) {
            if (idle_locked(it->what)) {
                ready.push_back(std::move(it->done));
                it = waiters_.erase(it);
            } else {
                ++it;
            }
        }
    }
    for (auto& f : ready) f();
}

void AttrLeases::settle(std::function<void()> done) { recall(take_top(), std::move(done)); }

AttrLeases::Handover AttrLeases::hand_over() {
    Frame f = take_top();
    return Handover{std::move(f.recalls), std::move(f.joins), f.wait_until};
}

void AttrLeases::take_over(Handover h) {
    Frame& f = top();
    for (auto& r : h.recalls) f.recalls.push_back(std::move(r));
    for (uint64_t j : h.joins) f.joins.push_back(j);
    f.wait_until = std::max(f.wait_until, h.wait_until);
}

// Sends one LeaseRecall per holder; `done` runs when all answered (or at the latest lease end
// of those that did not), the recalls this frame joined ended, and wait_until passed.
void AttrLeases::recall(Frame f, std::function<void()> done) {
    const auto now = Clock::now();
    if (f.empty()) {
        if (done) done();
        return;
    }
    struct Pending {
        std::mutex mu;
        size_t left = 0;
        Clock::time_point wait_until;
        std::vector<Recall> recalls; // to finish
        std::function<void()> done;
    };
    auto p = std::make_shared<Pending>();
    p->wait_until = f.wait_until;
    p->done = std::move(done);
    struct ToHolder {
        transport::Endpoint ep;
        Clock::time_point until;
        proto::LeaseRecallRequest req;
    };
    std::vector<ToHolder> to;
    for (const Recall& r : f.recalls)
        for (const Holder& h : r.holders) {
            auto t = std::find_if(to.begin(), to.end(), [&](const ToHolder& x) { return x.ep == h.ep; });
            if (t == to.end()) {
                to.push_back(ToHolder{h.ep, h.until, {}});
                t = std::prev(to.end());
            }
            t->until = std::max(t->until, h.until);
            t->req.inos.push_back(r.ino);
        }
    p->recalls = std::move(f.recalls);
    std::weak_ptr<AttrLeases> wk = weak_from_this();
    auto end = [wk, p] {
        if (auto s = wk.lock()) s->finish(p->recalls);
        if (p->done) p->done();
    };
    auto complete = [wk, p, end] {
        auto self = wk.lock();
        if (!self || p->wait_until <= Clock::now()) return end();
        auto timer = std::make_shared<boost::asio::steady_timer>(self->timers_, p->wait_until);
        {
            std::lock_guard lock(self->mu_);
            if (self->stopping_) return end();
            auto& live = self->timers_live_;
            live.erase(std::remove_if(live.begin(), live.end(), [](const auto& t) { return t.expired(); }), live.end());
            live.push_back(timer);
        }
        timer->async_wait([timer, end](const boost::system::error_code&) { end(); });
    };
    // One count per holder called and per recall joined, and one for issuing them all.
    p->left = to.size() + f.joins.size() + 1;
    auto one_done = [p, complete] {
        bool last = false;
        {
            std::lock_guard lock(p->mu);
            last = --p->left == 0;
        }
        if (last) complete();
    };
    {
        std::lock_guard lock(mu_);
        st_recalls_ += to.size();
    }
    for (auto& t : to) {
        transport::CallOptions o;
        o.timeout = std::max(kMinRecallTimeout, std::chrono::ceil<std::chrono::milliseconds>(t.until - now));
        const auto until = t.until;
        transport::rpc::call_async<proto::LeaseRecall>(
            t.ep, t.req, o, [wk, p, until, one_done, who = t.ep.peer()](Result<proto::Empty> r, size_t) {
                if (!r.ok()) {
                    {
                        std::lock_guard lock(p->mu);
                        p->wait_until = std::max(p->wait_until, until);
                    }
                    JOBFS_WARN("attribute lease recall from %s failed (%s): waiting for its lease to end",
                               who.c_str(), r.status().to_string().c_str());
                    if (auto s = wk.lock()) {
                        std::lock_guard lock(s->mu_);
                        ++s->st_recall_failures_;
                    }
                }
                one_done();
            });
    }
    for (uint64_t ino : f.joins) when_idle(Subject{ino, 0, {}, 0}, one_done);
    one_done();
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
    Frame f;
    {
        std::lock_guard lock(mu_);
        revoke_where_locked([shard](uint64_t ino, const Lease&) { return shard_of(ino) == shard; }, f);
    }
    recall(std::move(f), nullptr);
}

void AttrLeases::shutdown() {
    std::vector<std::shared_ptr<boost::asio::steady_timer>> live;
    {
        std::lock_guard lock(mu_);
        stopping_ = true;
        grace_.clear();
        busy_names_.clear(); // nobody waits for anything any more
        busy_dirs_.clear();
        for (auto& [ino, l] : leases_) l.busy = 0;
        for (auto& w : timers_live_)
            if (auto t = w.lock()) live.push_back(std::move(t));
        timers_live_.clear();
    }
    for (auto& t : live) t->cancel(); // their waits end now: the requests reply
    finish({});                          // and so do readers waiting
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
