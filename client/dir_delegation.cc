#include "client/dir_delegation.h"

#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <random>

#include "client/meta_call.h"
#include "log.h"
#include "rpc.h"

namespace jobfs::client {

namespace {

constexpr size_t kMaxName = 255;          // NAME_MAX: longer names are the daemon's to refuse
constexpr size_t kFailedKept = 1 << 16;   // failed creates remembered (error_of)
constexpr size_t kMadeKept = 1 << 20;     // files made here whose attributes are kept
constexpr auto kIdleWait = std::chrono::milliseconds(500);

int64_t now_ns() {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool same_cred(const proto::Cred& a, const proto::Cred& b) {
    return a.uid == b.uid && a.gid == b.gid && a.groups == b.groups;
}

bool in_group(const proto::Cred& c, uint32_t g) {
    return g == c.gid || std::find(c.groups.begin(), c.groups.end(), g) != c.groups.end();
}

// The file a create in dir makes, exactly as the daemon makes it (MetaShard's new_inode and
// create): owner, the setgid-directory rule, times, layout.
proto::Attr new_file(const proto::Cred& cred, const proto::Attr& dir, uint64_t ino, uint32_t mode, uint32_t chunk_size,
                     uint32_t stripe_count, uint32_t replicas) {
    proto::Attr a;
    a.ino = ino;
    a.type = 1;
    a.mode = S_IFREG | (mode & 07777);
    a.uid = cred.uid;
    a.gid = cred.gid;
    if (dir.mode & S_ISGID) a.gid = dir.gid;
    if ((a.mode & S_ISGID) && cred.uid != 0 && !in_group(cred, a.gid)) a.mode &= ~uint32_t(S_ISGID);
    a.nlink = 1;
    a.atime_ns = a.mtime_ns = a.ctime_ns = now_ns();
    a.chunk_size = chunk_size;
    a.stripe_count = stripe_count;
    a.replicas = replicas;
    a.generation = 1;
    return a;
}

uint64_t new_token() {
    thread_local std::mt19937_64 gen{std::random_device{}()};
    uint64_t t = 0;
    while (t == 0) t = gen();
    return t;
}

} // namespace

DirDelegations::DirDelegations(std::chrono::milliseconds flush_delay, ReleaseFn release)
    : flush_delay_(flush_delay), release_(std::move(release)) {}

void DirDelegations::start(const FileIO& io) {
    io_ = &io;
    flusher_ = std::thread([this] { flusher(); });
}

DirDelegations::~DirDelegations() {
    {
        std::lock_guard lock(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (flusher_.joinable()) flusher_.join();
}

void DirDelegations::serve_recalls(transport::Worker& w, std::weak_ptr<DirDelegations> self) {
    transport::rpc::serve<proto::DirRecall>(w, [self](transport::ServerCall call, proto::DirRecallRequest&& r) {
        auto d = self.lock();
        if (!d) return transport::rpc::reply<proto::DirRecall>(call, proto::Empty{});
        d->recalled(std::move(call), r.dir, r.token);
    });
}

void DirDelegations::recalled(transport::ServerCall call, uint64_t dir, uint64_t token) {
    std::lock_guard lock(mu_);
    ++stats_.recalled;
    auto it = dirs_.find(dir);
    if (it == dirs_.end() || it->second.token != token) {
        auto in = interest_.find(dir);
        if (in != interest_.end() && in->second.asking && in->second.asking_token == token) {
            // Its grant is on its way to ask(): recalled as soon as it is kept.
            early_recalls_.push_back({dir, token, std::move(call)});
            return;
        }
        return transport::rpc::reply<proto::DirRecall>(call, proto::Empty{}); // nothing held
    }
    it->second.recalled = true;
    it->second.recalls.push_back(std::move(call));
    cv_.notify_all();
}

DirDelegations::Dir* DirDelegations::usable_locked(uint64_t dir) {
    auto it = dirs_.find(dir);
    if (it == dirs_.end()) return nullptr;
    Dir& d = it->second;
    if (d.recalled || stopping_ || Clock::now() >= d.use_until || !d.granted_on.health().ok()) return nullptr;
    return &d;
}

DirDelegations::Dir* DirDelegations::usable_by_locked(const proto::Cred& cred, uint64_t dir) {
    Dir* d = usable_locked(dir);
    return d && same_cred(d->cred, cred) ? d : nullptr;
}

bool DirDelegations::want(std::unique_lock<std::mutex>& lock, const proto::Cred& cred, uint64_t dir) {
    const auto now = Clock::now();
    if (interest_[dir].asking) {
        // Another thread asks: its answer serves this one too (a request to the daemon now
        // would only make it recall what it is granting).
        cv_.wait(lock, [&] { return !interest_[dir].asking; });
        return usable_by_locked(cred, dir) != nullptr;
    }
    Interest& in = interest_[dir];
    if (!io_ || now < in.not_before || dirs_.count(dir)) return false;
    if (now - in.since > kAskWindow) {
        in.since = now;
        in.count = 0;
    }
    if (++in.count < kAskAfter) return false;
    if (interest_.size() > 4096) { // a client touching many directories: start over
        Interest keep = in;
        interest_.clear();
        interest_[dir] = keep;
    }
    interest_[dir].asking = true;
    lock.unlock();
    Status s = ask(cred, dir);
    lock.lock();
    interest_[dir].asking = false;
    cv_.notify_all();
    if (!s.ok()) interest_[dir].not_before = Clock::now() + kCooldown;
    return s.ok();
}

Status DirDelegations::ask(const proto::Cred& cred, uint64_t dir) {
    const uint64_t token = new_token();
    {
        std::lock_guard lock(mu_);
        interest_[dir].asking_token = token; // a recall of an older one is answered at once
    }
    const auto sent = Clock::now();
    transport::Endpoint via;
    auto r = meta_call<proto::DelegateDir>(*io_, dir, proto::DelegateRequest{cred, dir, token}, &via);
    if (!r.ok()) return r.status(); // too many entries, no permission, an older daemon: as before
    std::lock_guard lock(mu_);
    Dir& d = dirs_[dir];
    d = Dir{};
    d.cred = cred;
    d.token = token;
    d.granted_on = via;
    d.attr = std::move(r->dir);
    d.chunk_size = r->chunk_size;
    d.stripe_count = r->stripe_count;
    d.replicas = r->replicas;
    d.lease = std::chrono::milliseconds(r->lease_ms);
    d.use_until = sent + d.lease / 2;
    d.ino_next = r->ino_first;
    d.ino_end = r->ino_first + r->ino_count;
    d.entries.reserve(r->entries.size());
    for (auto& e : r->entries) d.entries.emplace(std::move(e.name), Entry{e.ino, e.type, std::nullopt});
    ++stats_.granted;
    for (auto it = early_recalls_.begin(); it != early_recalls_.end();) {
        if (it->dir != dir) {
            ++it;
            continue;
        }
        if (it->token == token) {
            d.recalled = true;
            d.recalled_at_grant = true;
            d.recalls.push_back(std::move(it->call));
        } else {
            transport::rpc::reply<proto::DirRecall>(it->call, proto::Empty{});
        }
        it = early_recalls_.erase(it);
    }
    cv_.notify_all();
    return Status::OK();
}

DirDelegations::Dir* DirDelegations::held_for_locked(std::unique_lock<std::mutex>& lock, const proto::Cred& cred,
                                                     uint64_t dir) {
    if (Dir* d = usable_locked(dir)) return same_cred(d->cred, cred) ? d : nullptr;
    return want(lock, cred, dir) ? usable_by_locked(cred, dir) : nullptr;
}

DirDelegations::Dir* DirDelegations::room_locked(std::unique_lock<std::mutex>& lock, const proto::Cred& cred,
                                                 uint64_t dir) {
    for (;;) {
        Dir* d = usable_by_locked(cred, dir);
        if (!d) return nullptr;
        if (d->queued.size() < kMaxQueued && d->ino_next < d->ino_end) return d;
        if (d->ino_next >= d->ino_end) d->want_inos = true;
        flush_now_ = true;
        cv_.notify_all();
        cv_.wait_for(lock, std::chrono::milliseconds(100));
    }
}

void DirDelegations::queue_locked(Dir& d, proto::DirOp op) {
    ++d.answered;
    // The flusher sleeps until its next deadline, up to kIdleWait while nothing was queued: a
    // queue that starts must wake it to count the flush delay from now.
    const bool starts = d.queued.empty();
    if (starts) d.queued_since = Clock::now();
    d.queued.push_back(std::move(op));
    d.seqs.push_back(++queued_total_);
    ++stats_.ops;
    if (starts || d.queued.size() >= kBatch) cv_.notify_all();
}

namespace {

// Extended attributes a delegated create may carry: those the daemon is sure to take (user.*
// on a file its maker may write, as MetaShard's xattr_access); others are the daemon's to judge.
bool plain_xattrs(const proto::Cred& cred, uint32_t mode, const std::vector<proto::XattrPair>& xattrs) {
    constexpr size_t kMaxXattrName = 255, kMaxXattrValue = 64 * 1024;
    if (xattrs.empty()) return true;
    if (cred.uid != 0 && !(mode & S_IWUSR)) return false;
    return std::all_of(xattrs.begin(), xattrs.end(), [](const proto::XattrPair& x) {
        return x.name.size() > 5 && x.name.size() <= kMaxXattrName && x.name.rfind("user.", 0) == 0 &&
               x.name.find('\0') == std::string::npos && x.value.size() <= kMaxXattrValue;
    });
}

} // namespace

std::optional<Result<proto::Attr>> DirDelegations::create(const proto::Cred& cred, uint64_t dir,
                                                          const std::string& name, uint32_t mode, bool exclusive,
                                                          uint64_t size, const std::vector<proto::XattrPair>& xattrs) {
    if (name.empty() || name.size() > kMaxName) return std::nullopt;
    if ((size || !xattrs.empty()) && (!exclusive || size > uint64_t(INT64_MAX) || !plain_xattrs(cred, mode, xattrs)))
        return std::nullopt;
    std::unique_lock lock(mu_);
    Dir* d = held_for_locked(lock, cred, dir);
    if (!d) return std::nullopt;
    if (auto it = d->entries.find(name); it != d->entries.end()) {
        if (exclusive) return Result<proto::Attr>(Status(Code::exists, "'" + name + "' exists"));
        if (it->second.type == 2) return Result<proto::Attr>(Status(Code::is_dir, "'" + name + "' is a directory"));
        if (it->second.type != 1) return std::nullopt; // a symlink: the daemon follows it
        if (it->second.attr) return Result<proto::Attr>(*it->second.attr);
        return attr_of(lock, *d, it->second.ino);
    }
    if (!(d = room_locked(lock, cred, dir))) return std::nullopt;
    if (d->entries.count(name)) { // made by another thread while this one waited for room
        lock.unlock();
        return create(cred, dir, name, mode, exclusive, size, xattrs);
    }
    const uint64_t ino = d->ino_next++;
    if (d->ino_end - d->ino_next < proto::kDelegatedInos / 2) d->want_inos = true;
    proto::Attr a = new_file(cred, d->attr, ino, mode, d->chunk_size, d->stripe_count, d->replicas);
    a.size = size;
    d->entries[name] = Entry{ino, 1, a};
    d->attr.mtime_ns = d->attr.ctime_ns = a.ctime_ns; // as the daemon's add_entry will set them
    if (made_.size() > kMadeKept) made_.clear(); // only attributes to forget are missed: then asked
    made_[ino] = {dir, name};
    queue_locked(*d, proto::DirOp{1, name, ino, mode, a.ctime_ns, size, xattrs, {}});
    return Result<proto::Attr>(std::move(a));
}

std::optional<Status> DirDelegations::unlink(const proto::Cred& cred, uint64_t dir, const std::string& name,
                                             const std::function<bool(uint64_t ino)>& in_use) {
    if (name.empty() || name.size() > kMaxName) return std::nullopt;
    std::unique_lock lock(mu_);
    Dir* d = held_for_locked(lock, cred, dir);
    if (!d) return std::nullopt;
    auto it = d->entries.find(name);
    if (it == d->entries.end()) return Status(Code::not_found, "no entry '" + name + "'");
    if (it->second.type == 2) return Status(Code::is_dir, "'" + name + "' is a directory");
    // An inode of another shard (a hard link made elsewhere) is the daemons' to unlink.
    if (proto::shard_of(it->second.ino) != proto::shard_of(dir)) return std::nullopt;
    if (!(d = room_locked(lock, cred, dir))) return std::nullopt;
    it = d->entries.find(name);
    if (it == d->entries.end()) return Status(Code::not_found, "no entry '" + name + "'");
    const uint64_t ino = it->second.ino;
    if (in_use && in_use(ino)) return std::nullopt;
    d->entries.erase(it);
    made_.erase(ino);
    d->attr.mtime_ns = d->attr.ctime_ns = now_ns(); // the daemon's, when it applies it, a moment later
    // (The attribute cache holds nothing under dir: the grant recalled every lease on its
    // entries, and no new one is asked for while it is delegated.)
    queue_locked(*d, proto::DirOp{2, name, ino, 0, 0, 0, {}, {}});
    return Status::OK();
}

std::optional<Status> DirDelegations::rename(const proto::Cred& cred, uint64_t dir, const std::string& from,
                                             const std::string& to, const std::function<bool(uint64_t ino)>& in_use) {
    if (from.empty() || from.size() > kMaxName || to.empty() || to.size() > kMaxName) return std::nullopt;
    std::unique_lock lock(mu_);
    Dir* d = usable_by_locked(cred, dir);
    if (!d) return std::nullopt; // (a rename alone does not ask for the directory)
    auto src = d->entries.find(from);
    if (src == d->entries.end()) return Status(Code::not_found, "no entry '" + from + "'");
    const uint64_t ino = src->second.ino;
    if (src->second.type != 1 || proto::shard_of(ino) != proto::shard_of(dir)) return std::nullopt;
    auto dst = d->entries.find(to);
    if (dst != d->entries.end()) {
        if (dst->second.ino == ino) return Status::OK(); // two names of one inode: nothing to do
        if (dst->second.type == 2) return Status(Code::is_dir, "'" + to + "' is a directory");
        if (dst->second.type != 1 || proto::shard_of(dst->second.ino) != proto::shard_of(dir)) return std::nullopt;
        if (in_use && in_use(dst->second.ino)) return std::nullopt;
    }
    if (!(d = room_locked(lock, cred, dir))) return std::nullopt;
    src = d->entries.find(from); // (room_locked may have waited)
    dst = d->entries.find(to);
    if (src == d->entries.end() || src->second.ino != ino) return std::nullopt;
    if (dst != d->entries.end()) {
        made_.erase(dst->second.ino);
        d->entries.erase(dst);
    }
    Entry moved = std::move(src->second);
    d->entries.erase(src);
    const int64_t t = now_ns();
    if (moved.attr) {
        moved.attr->ctime_ns = t; // as the daemon sets it (rename changes the inode's ctime)
        made_[ino] = {dir, to};
    }
    d->entries[to] = std::move(moved);
    d->attr.mtime_ns = d->attr.ctime_ns = t;
    queue_locked(*d, proto::DirOp{3, from, ino, 0, t, 0, {}, to});
    return Status::OK();
}

std::optional<Result<proto::Attr>> DirDelegations::lookup(const proto::Cred& cred, uint64_t dir,
                                                          const std::string& name) {
    std::unique_lock lock(mu_);
    Dir* d = usable_by_locked(cred, dir);
    if (!d) return std::nullopt;
    auto it = d->entries.find(name);
    if (it == d->entries.end()) return Result<proto::Attr>(Status(Code::not_found, "no entry '" + name + "'"));
    if (it->second.attr) return Result<proto::Attr>(*it->second.attr);
    return attr_of(lock, *d, it->second.ino);
}

std::optional<proto::Attr> DirDelegations::dir_attr(uint64_t dir) {
    std::lock_guard lock(mu_);
    Dir* d = usable_locked(dir);
    if (!d) return std::nullopt;
    return d->attr;
}

Result<proto::Attr> DirDelegations::attr_of(std::unique_lock<std::mutex>& lock, const Dir& d, uint64_t ino) {
    // The daemon knows the inode: it was in the directory at the grant, or it was made here
    // and a request about it since (before_request) waited for its create. What it says of
    // it is current unless an unlink or a rename answered here that names it is still on its
    // way (an unlink of another of its names changes its link count, a rename its ctime):
    // then the queue goes first.
    bool moving = std::find(d.sending_moved.begin(), d.sending_moved.end(), ino) != d.sending_moved.end();
    for (size_t i = 0; i < d.queued.size() && !moving; ++i)
        moving = d.queued[i].kind != 1 && d.queued[i].ino == ino;
    if (moving) barrier_locked(lock);
    lock.unlock();
    return meta_call<proto::Getattr>(*io_, ino, proto::InoRequest{ino});
}

uint64_t DirDelegations::oldest_locked() const {
    uint64_t oldest = UINT64_MAX;
    for (const auto& [dir, d] : dirs_) {
        if (d.sending_first) oldest = std::min(oldest, d.sending_first);
        if (!d.seqs.empty()) oldest = std::min(oldest, d.seqs.front());
    }
    return oldest;
}

void DirDelegations::before_request(uint64_t key) {
    std::unique_lock lock(mu_);
    barrier_locked(lock);
    if (auto m = made_.find(key); m != made_.end()) {
        // A file made here, about to change (its size settled, its mode set…): its attributes
        // are the daemon's to tell from now on.
        auto d = dirs_.find(m->second.first);
        if (d != dirs_.end())
            if (auto e = d->second.entries.find(m->second.second); e != d->second.entries.end() && e->second.ino == key)
                e->second.attr.reset();
        made_.erase(m);
    }
    auto it = dirs_.find(key);
    if (it == dirs_.end()) return;
    // A request of this client about the directory itself: given back first, as the daemon
    // would otherwise recall it (and this client would not ask again for a while).
    it->second.recalled = true;
    it->second.voluntary = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !dirs_.count(key); });
}

void DirDelegations::barrier() {
    std::unique_lock lock(mu_);
    barrier_locked(lock);
}

void DirDelegations::barrier_locked(std::unique_lock<std::mutex>& lock) {
    const uint64_t target = queued_total_;
    if (oldest_locked() > target) return;
    flush_now_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return oldest_locked() > target; });
}

Status DirDelegations::sync() {
    std::unique_lock lock(mu_);
    barrier_locked(lock);
    const uint64_t lost = stats_.lost - lost_reported_;
    lost_reported_ = stats_.lost;
    if (lost == 0) return Status::OK();
    return Status(Code::io, std::to_string(lost) +
                                " creates, unlinks or renames in delegated directories were lost (the log names them)");
}

Status DirDelegations::error_of(uint64_t ino) {
    std::lock_guard lock(mu_);
    auto it = failed_.find(ino);
    if (it == failed_.end()) return Status::OK();
    return it->second.with_context("the create of inode " + std::to_string(ino) + " was lost");
}

DirDelegations::Stats DirDelegations::stats() const {
    std::lock_guard lock(mu_);
    return stats_;
}

void DirDelegations::flusher() {
    std::unique_lock lock(mu_);
    for (;;) {
        const auto now = Clock::now();
        auto next = now + kIdleWait;
        uint64_t pick = 0;
        bool release = false;
        bool any_queued = false;
        for (auto& [dir, d] : dirs_) {
            const bool ending = d.recalled || stopping_;
            if (!d.queued.empty()) {
                any_queued = true;
                if (flush_now_ || ending || d.queued.size() >= kBatch || now >= d.queued_since + flush_delay_ ||
                    now >= d.use_until) {
                    pick = dir;
                    release = ending;
                    break;
                }
                next = std::min(next, d.queued_since + flush_delay_);
            } else if (ending || now >= d.use_until) {
                pick = dir; // nothing left to send: give it back
                release = true;
                break;
            } else if (d.want_inos && d.ino_next >= d.ino_end) {
                pick = dir;
                break;
            } else {
                next = std::min(next, d.use_until);
            }
        }
        if (pick) {
            send_locked(lock, pick, release);
            continue;
        }
        if (!any_queued) flush_now_ = false;
        if (stopping_ && dirs_.empty()) break;
        cv_.wait_until(lock, next);
    }
    for (auto& e : early_recalls_) transport::rpc::reply<proto::DirRecall>(e.call, proto::Empty{});
    early_recalls_.clear();
}

void DirDelegations::send_locked(std::unique_lock<std::mutex>& lock, uint64_t dir, bool release) {
    Dir& d = dirs_.at(dir);
    const size_t n = std::min(d.queued.size(), size_t(proto::kMaxDirOps));
    proto::DirOpsRequest req;
    req.cred = d.cred;
    req.dir = dir;
    req.token = d.token;
    req.ops.assign(std::make_move_iterator(d.queued.begin()), std::make_move_iterator(d.queued.begin() + n));
    d.queued.erase(d.queued.begin(), d.queued.begin() + n);
    d.sending_first = n ? d.seqs.front() : 0;
    d.sending_moved.clear();
    for (const auto& op : req.ops)
        if (op.kind != 1) d.sending_moved.push_back(op.ino);
    d.seqs.erase(d.seqs.begin(), d.seqs.begin() + n);
    if (!d.queued.empty()) d.queued_since = Clock::now();
    req.release = release && d.queued.empty();
    req.more_inos = d.want_inos && !req.release;
    d.want_inos = false;
    const auto sent = Clock::now();
    lock.unlock();
    auto r = meta_call<proto::DirOps>(*io_, dir, req);
    std::vector<proto::Attr> gone;
    lock.lock();
    Dir& dd = dirs_.at(dir); // only this thread erases
    dd.sending_first = 0;
    dd.sending_moved.clear();
    ++stats_.batches;
    if (!r.ok()) {
        // The delegation is lost (it ended, or the daemons cannot be reached): so is what was
        // queued under it, and what the callers were told stands nowhere.
        const size_t lost = req.ops.size() + dd.queued.size();
        JOBFS_ERROR("%zu operations in delegated directory %llu were lost: %s", lost,
                    static_cast<unsigned long long>(dir), r.status().to_string().c_str());
        // EIO for the callers, as for data a write-behind could not land: the cause says why.
        const Status why(Code::io, "lost with the delegation of directory " + std::to_string(dir) + ": " +
                                       r.status().to_string());
        if (failed_.size() > kFailedKept) failed_.clear();
        for (const auto& op : req.ops)
            if (op.kind == 1) failed_[op.ino] = why;
        for (const auto& op : dd.queued)
            if (op.kind == 1) failed_[op.ino] = why;
        stats_.lost += lost;
        dd.queued.clear();
        dd.seqs.clear();
        forget_locked(dir, true);
        cv_.notify_all();
        return;
    }
    if (!req.release) dd.use_until = std::max(dd.use_until, sent + dd.lease / 2);
    if (r->ino_count) {
        dd.ino_next = r->ino_first;
        dd.ino_end = r->ino_first + r->ino_count;
    }
    size_t refused = 0;
    Status first_refusal;
    for (size_t i = 0; i < req.ops.size() && i < r->outcomes.size(); ++i) {
        const proto::DirOp& op = req.ops[i];
        proto::DirOpOutcome& o = r->outcomes[i];
        if (o.code != 0) {
            Status s(static_cast<Code>(o.code), o.message);
            if (refused++ == 0) first_refusal = s;
            if (op.kind == 1) {
                if (failed_.size() > kFailedKept) failed_.clear();
                failed_[op.ino] = s;
                auto it = dd.entries.find(op.name);
                if (it != dd.entries.end() && it->second.ino == op.ino) dd.entries.erase(it);
            }
            continue;
        }
        if (op.kind == 1) {
            auto it = dd.entries.find(op.name);
            const bool current = it != dd.entries.end() && it->second.ino == op.ino;
            // The daemon's attributes (the same as made here), kept while the delegation holds:
            // nobody else can know the inode before they recall it, and a request of this
            // client about it forgets them first (before_request).
            if (current && it->second.attr) it->second.attr = o.attr;
        } else if (o.last_link && o.attr.type == 1) {
            gone.push_back(std::move(o.attr));
        }
    }
    if (refused) {
        stats_.lost += refused;
        JOBFS_ERROR("%zu of %zu operations in delegated directory %llu were refused, the first: %s", refused,
                    req.ops.size(), static_cast<unsigned long long>(dir), first_refusal.to_string().c_str());
    }
    if (req.release) forget_locked(dir, dd.recalled && !dd.voluntary);
    cv_.notify_all();
    if (!gone.empty() && release_) {
        lock.unlock();
        for (const auto& a : gone) release_(a);
        lock.lock();
    }
}

void DirDelegations::forget_locked(uint64_t dir, bool cooldown) {
    auto it = dirs_.find(dir);
    if (it == dirs_.end()) return;
    // A delegation given back after answering little did not pay for its grant and release
    // (a file made, then renamed by this client, in a loop): the next one waits, twice as
    // long each time; one that paid resets the wait.
    Interest& in = interest_[dir];
    in.count = 0; // the next one is asked for after kAskAfter operations again
    // Recalled before it was even kept: most often by a request of this very client that was
    // on its way while the grant was (another thread's create, sent before the delegation was
    // asked for). That says nothing of what a delegation pays here: the cool-down only, no
    // doubling. (Doubled each time, 4 threads creating files on a loaded machine lost every
    // grant that way for over 10 s: 0.5 + 1 + 2 + 4 + 8 s.)
    const Dir& d = it->second;
    if (d.answered >= kPaysAfter) {
        in.backoff = std::chrono::milliseconds(0);
    } else if (!d.recalled_at_grant) {
        in.backoff = std::min(kMaxBackoff, std::max(kCooldown, in.backoff * 2));
        in.not_before = Clock::now() + in.backoff;
    }
    for (auto& call : it->second.recalls) transport::rpc::reply<proto::DirRecall>(call, proto::Empty{});
    for (const auto& [name, e] : it->second.entries)
        if (e.attr) made_.erase(e.ino);
    dirs_.erase(it);
    if (cooldown) in.not_before = std::max(in.not_before, Clock::now() + kCooldown);
}

} // namespace jobfs::client
