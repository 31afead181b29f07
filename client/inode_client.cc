#include "client/meta_call.h"
#include "client/inode_client.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <random>

#include "client/local_reads.h"
#include "log.h"

namespace jobfs::client {

namespace rpc = transport::rpc;

namespace {

constexpr uint64_t kDefaultChunkSize = 4ull << 20; // a file whose inode names none (as Client)

void raise(std::atomic<uint64_t>& v, uint64_t to) {
    uint64_t cur = v.load();
    while (to > cur && !v.compare_exchange_weak(cur, to)) {
    }
}

void lower(std::atomic<uint64_t>& v, uint64_t to) {
    uint64_t cur = v.load();
    while (to < cur && !v.compare_exchange_weak(cur, to)) {
    }
}

bool writable(int flags) { return (flags & O_ACCMODE) != O_RDONLY; }

std::string ino_str(uint64_t ino) { return "inode " + std::to_string(ino); }

} // namespace

Result<std::unique_ptr<InodeClient>> InodeClient::connect(const ClusterInfo& cluster,
                                                          const InodeClientOptions& options) {
    std::unique_ptr<InodeClient> c(new InodeClient());
    c->timeout_ = options.timeout;
    transport::WorkerOptions wo;
    wo.shared_memory = false; // every daemon is reached by host:port
    wo.name = options.name + "." + std::to_string(getpid());
    wo.secret = cluster.secret;
    wo.call_timeout = options.timeout;
    auto w = transport::Worker::create(wo);
    if (!w.ok()) return w.status();
    c->worker_ = std::move(*w);
    if (options.dir_delegation) {
        // Before the connections: daemons recall delegations on them.
        InodeClient* self = c.get();
        c->deleg_ = std::make_shared<DirDelegations>(options.dir_delegation_flush_delay, [self](const proto::Attr& gone) {
            Status s = self->drop_data(gone);
            if (!s.ok()) JOBFS_WARN("%s", s.to_string().c_str());
        });
        DirDelegations::serve_recalls(*c->worker_, c->deleg_);
    }
    auto eps = connect_daemons(*c->worker_, cluster);
    if (!eps.ok()) return eps.status();
    c->eps_ = std::move(*eps);
    // Like libjobfs's Client: a daemon restarted after a failure is connected to afresh.
    transport::Worker* worker = c->worker_.get();
    c->io_ = std::make_unique<FileIO>(c->eps_, options.timeout,
                                      [worker, cluster](uint32_t r) { return connect_daemon(*worker, cluster, r); },
                                      options.local_reads ? std::make_shared<LocalReads>(cluster.secret, static_cast<uint32_t>(c->eps_.size()),
                                                                                         LocalReads::kArenaBytes, options.local_cached_reads,
                                                                                         options.local_cold_reads)
                                                          : nullptr);
    std::random_device rd;
    while (c->lock_client_ == 0) c->lock_client_ = (uint64_t{rd()} << 32) | rd();
    c->write_behind_bytes_ = options.write_behind_bytes;
    c->after_attr_reply_ = options.after_attr_reply;
    if (c->write_behind_bytes_) c->writers_ = std::make_unique<boost::asio::thread_pool>(options.writer_threads);
    if (c->deleg_) c->deleg_->start(*c->io_);
    return c;
}

InodeClient::~InodeClient() {
    // Writes on their way land before the transport goes (a handle never released, at an
    // unmount, may keep its OpenInode past this: it then finds nothing in flight).
    std::vector<std::shared_ptr<OpenInode>> open;
    {
        std::lock_guard lock(open_mu_);
        for (auto& [ino, n] : open_) open.push_back(n);
    }
    for (auto& n : open)
        if (n->pending) n->pending->quiesce();
    if (writers_) writers_->join();
    deleg_.reset(); // delegated operations are sent, delegations given back
    // Locks end with the client: the daemons need not find its connection dead first.
    transport::CallOptions o;
    o.timeout = std::chrono::milliseconds(1000);
    for (const auto& ep : lock_eps_)
        if (ep.health().ok()) (void)rpc::call<proto::LeaseRelease>(ep, proto::Empty{}, o);
}

// ---- open inodes ----------------------------------------------------------------------------

std::shared_ptr<OpenInode> InodeClient::find_open(uint64_t ino) {
    std::lock_guard lock(open_mu_);
    auto it = open_.find(ino);
    return it == open_.end() ? nullptr : it->second;
}

uint64_t InodeClient::releases() { return released_count_.load(); }

std::optional<proto::Attr> InodeClient::merge_open(proto::Attr a, uint64_t since) {
    if (a.type != 1) return a;
    std::lock_guard lock(open_mu_);
    if (released_count_ - since > kReleasesKept) return std::nullopt;
    for (uint64_t k = since + 1; k <= released_count_; ++k) {
        const Released& r = released_[k % kReleasesKept];
        if (r.ino == a.ino) a.size = std::max(a.size, r.high_water);
    }
    auto it = open_.find(a.ino);
    if (it == open_.end()) return a;
    OpenInode& n = *it->second;
    n.size.store(a.size);
    a.size = std::max(a.size, n.high_water.load());
    return a;
}

Result<proto::Attr> InodeClient::merged(uint64_t since, Result<proto::Attr> a) {
    while (a.ok()) {
        const uint64_t ino = a->ino;
        if (after_attr_reply_) after_attr_reply_(ino);
        if (auto m = merge_open(std::move(*a), since)) return std::move(*m);
        since = releases();
        a = daemon_attr(ino);
    }
    return a;
}

std::unique_ptr<Handle> InodeClient::add_handle(const proto::Attr& a, int flags) {
    auto h = std::make_unique<Handle>();
    h->flags = flags;
    h->mode = a.mode;
    std::lock_guard lock(open_mu_);
    auto& n = open_[a.ino];
    if (!n) {
        n = std::make_shared<OpenInode>();
        n->ino = a.ino;
        n->layout = Layout{a.chunk_size ? a.chunk_size : kDefaultChunkSize, a.stripe_count, a.replicas};
        // Made with the node, whatever the first open's mode, and never replaced: reads of
        // other handles use it without the lock.
        if (write_behind_bytes_)
            n->pending = std::make_shared<WriteBehind>(*io_, *writers_, a.ino, n->layout, write_behind_bytes_);
    }
    n->size.store(a.size);
    ++n->open_count;
    h->node = n;
    return h;
}

Status InodeClient::drop_data(const proto::Attr& a) {
    {
        std::lock_guard lock(open_mu_);
        auto it = open_.find(a.ino);
        if (it != open_.end()) {
            // Open here: the handles keep reading and writing until the last release.
            OpenInode& n = *it->second;
            n.last = a;
            n.unlinked = true;
            return Status::OK();
        }
    }
    // Recorded length 0: no chunks, unless a writer elsewhere has not settled its length yet
    // (then they stay, as space, until the job's data directories go); saves a request to
    // every daemon per unlinked empty file.
    if (a.size == 0) return Status::OK();
    Status s = io_->remove_file(a.ino);
    return s.ok() ? s : s.with_context("remove the data of " + ino_str(a.ino));
}

// ---- namespace ------------------------------------------------------------------------------

Result<proto::Attr> InodeClient::lookup(const proto::Cred& cred, uint64_t parent, const std::string& name) {
    const uint64_t since = releases();
    if (deleg_)
        if (auto a = deleg_->lookup(cred, parent, name)) return merged(since, std::move(*a));
    return merged(since, meta<proto::Lookup>(parent, proto::NameRequest{cred, parent, name}));
}

Result<proto::Attr> InodeClient::getattr(uint64_t ino) {
    const uint64_t since = releases();
    if (deleg_)
        if (auto d = deleg_->dir_attr(ino)) return std::move(*d);
    auto a = daemon_attr(ino);
    if (a.ok()) return merged(since, std::move(a));
    if (a.status().code() == Code::not_found) {
        // An unlinked file that is still open here lives on in its handles.
        if (auto n = find_open(ino); n && n->unlinked) {
            std::lock_guard lock(open_mu_);
            proto::Attr last = n->last;
            last.size = n->visible_size();
            return last;
        }
    }
    return a.status();
}

Result<proto::Attr> InodeClient::resize(const proto::Cred& cred, uint64_t ino, proto::SetattrRequest set) {
    const uint64_t new_size = *set.size;
    auto n = find_open(ino);
    if (n) JOBFS_RETURN_IF_ERROR(land(*n)); // no write of this process may land after the cut
    auto before = meta<proto::Getattr>(ino, proto::InoRequest{ino});
    if (!before.ok()) {
        // ftruncate of an unlinked open file: only its chunks and this process know it.
        if (before.status().code() != Code::not_found || !n || !n->unlinked) return before.status();
        uint64_t old_size = n->visible_size();
        if (new_size < old_size) JOBFS_RETURN_IF_ERROR(io_->truncate_chunks(ino, n->layout, old_size, new_size));
        n->size.store(new_size);
        lower(n->high_water, new_size);
        lower(n->settled, new_size);
        std::lock_guard lock(open_mu_);
        n->last.size = new_size;
        return n->last;
    }
    if (before->type != 1) {
        // Let the shard answer (is_dir, invalid) with its own words.
        set.cred = cred;
        set.ino = ino;
        return meta<proto::Setattr>(ino, set);
    }
    // Bytes this process wrote and has not settled count as part of the file: they go too.
    uint64_t old_size = std::max(before->size, n ? n->high_water.load() : 0);
    set.cred = cred;
    set.ino = ino;
    auto r = meta<proto::Setattr>(ino, set);
    if (!r.ok()) return r.status();
    if (new_size < old_size) {
        Layout layout{before->chunk_size ? before->chunk_size : kDefaultChunkSize, before->stripe_count, before->replicas};
        Status s = io_->truncate_chunks(ino, layout, old_size, new_size);
        if (!s.ok()) return s.with_context("cut the data of " + ino_str(ino));
    }
    if (n) {
        n->size.store(new_size);
        lower(n->high_water, new_size);
        lower(n->settled, new_size);
    }
    // The size is the one set: releases made meanwhile wrote before it and do not count.
    return merged(releases(), std::move(r));
}

Result<proto::Attr> InodeClient::setattr(const proto::Cred& cred, uint64_t ino, proto::SetattrRequest set) {
    if (set.size) return resize(cred, ino, std::move(set));
    set.cred = cred;
    set.ino = ino;
    const uint64_t since = releases();
    return merged(since, meta<proto::Setattr>(ino, set));
}

Result<proto::Attr> InodeClient::mkdir(const proto::Cred& cred, uint64_t parent, const std::string& name,
                                       uint32_t mode) {
    return meta<proto::Mkdir>(parent, proto::MkdirRequest{cred, parent, name, mode});
}

Result<proto::Attr> InodeClient::symlink(const proto::Cred& cred, uint64_t parent, const std::string& name,
                                         const std::string& target) {
    return meta<proto::Symlink>(parent, proto::SymlinkRequest{cred, parent, name, target});
}

Result<proto::Attr> InodeClient::link(const proto::Cred& cred, uint64_t ino, uint64_t new_parent,
                                      const std::string& name) {
    const uint64_t since = releases();
    if (deleg_) deleg_->before_request(ino); // its link count changes: attributes kept here go
    return merged(since, meta<proto::Link>(new_parent, proto::LinkRequest{cred, ino, new_parent, name}));
}

Status InodeClient::unlink(const proto::Cred& cred, uint64_t parent, const std::string& name) {
    // Answered here in a delegated directory, unless the file is open here: then the daemon's
    // answer (its last link went) must reach the open inode before this returns. Otherwise
    // the data goes when the daemon applied it (drop_data, from the delegation's flusher).
    if (deleg_)
        if (auto done = deleg_->unlink(cred, parent, name, [this](uint64_t ino) { return find_open(ino) != nullptr; }))
            return *done;
    auto r = meta<proto::Unlink>(parent, proto::NameRequest{cred, parent, name});
    if (!r.ok()) return r.status();
    if (r->last_link && r->attr.type == 1) return drop_data(r->attr);
    return Status::OK();
}

Status InodeClient::rmdir(const proto::Cred& cred, uint64_t parent, const std::string& name) {
    auto r = meta<proto::Rmdir>(parent, proto::NameRequest{cred, parent, name});
    return r.ok() ? Status::OK() : r.status();
}

Status InodeClient::rename(const proto::Cred& cred, uint64_t parent, const std::string& name, uint64_t new_parent,
                           const std::string& new_name, uint32_t flags) {
    // A regular file renamed within a delegated directory: answered here, unless the file it
    // replaces is open here (then, as for unlink, the daemon's answer must reach it at once).
    if (deleg_ && parent == new_parent && flags == 0)
        if (auto done = deleg_->rename(cred, parent, name, new_name, [this](uint64_t ino) { return find_open(ino) != nullptr; }))
            return *done;
    auto r = meta<proto::Rename>(parent, proto::RenameRequest{cred, parent, name, new_parent, new_name, flags});
    if (!r.ok()) return r.status();
    if (r->replaced && r->replaced->last_link && r->replaced->attr.type == 1) return drop_data(r->replaced->attr);
    return Status::OK();
}

Result<proto::ReaddirResponse> InodeClient::readdir(const proto::Cred& cred, uint64_t ino, const std::string& after,
                                                    uint32_t max) {
    return meta<proto::Readdir>(ino, proto::ReaddirRequest{cred, ino, after, max});
}

Result<std::string> InodeClient::readlink(uint64_t ino) {
    auto r = meta<proto::Readlink>(ino, proto::InoRequest{ino});
    if (!r.ok()) return r.status();
    return std::move(r->target);
}

Result<std::string> InodeClient::getxattr(const proto::Cred& cred, uint64_t ino, const std::string& name) {
    auto v = meta<proto::Getxattr>(ino, proto::XattrRequest{cred, ino, name, {}, 0});
    if (!v.ok()) return v.status();
    return std::move(v->value);
}

Status InodeClient::setxattr(const proto::Cred& cred, uint64_t ino, const std::string& name, const std::string& value,
                             int flags) {
    auto r = meta<proto::Setxattr>(ino, proto::XattrRequest{cred, ino, name, value, flags});
    return r.ok() ? Status::OK() : r.status();
}

Result<std::vector<std::string>> InodeClient::listxattr(const proto::Cred& cred, uint64_t ino) {
    auto v = meta<proto::Listxattr>(ino, proto::XattrRequest{cred, ino, {}, {}, 0});
    if (!v.ok()) return v.status();
    return std::move(v->names);
}

Status InodeClient::removexattr(const proto::Cred& cred, uint64_t ino, const std::string& name) {
    auto r = meta<proto::Removexattr>(ino, proto::XattrRequest{cred, ino, name, {}, 0});
    return r.ok() ? Status::OK() : r.status();
}

Result<proto::FileLockResponse> InodeClient::lock(proto::FileLockRequest req) {
    req.client = lock_client_;
    transport::Endpoint via;
    auto r = meta_call<proto::FileLockOp>(*io_, req.ino, req, &via);
    if (r.ok() && r->granted && !req.test && req.type != proto::kLockUnlock && via.valid()) {
        std::lock_guard lock(lock_mu_);
        if (std::find(lock_eps_.begin(), lock_eps_.end(), via) == lock_eps_.end()) lock_eps_.push_back(via);
    }
    return r;
}

Result<FsSpace> InodeClient::statfs() {
    FsSpace out;
    for (size_t i = 0; i < eps_.size(); ++i) {
        auto s = rpc::call<proto::DiskSpace>(eps_[i], proto::Empty{});
        if (!s.ok()) return s.status().with_context("disk space of daemon " + std::to_string(i));
        out.total_bytes += s->total_bytes;
        out.free_bytes += s->free_bytes;
        auto c = rpc::call<proto::MetaCounts>(eps_[i], proto::Empty{});
        if (!c.ok()) return c.status().with_context("inode count of daemon " + std::to_string(i));
        out.inodes += c->inodes;
    }
    return out;
}

Status InodeClient::sync_namespace() { return deleg_ ? deleg_->sync() : Status::OK(); }

// ---- files ----------------------------------------------------------------------------------

Result<std::pair<proto::Attr, std::unique_ptr<Handle>>> InodeClient::create(const proto::Cred& cred, uint64_t parent,
                                                                            const std::string& name, uint32_t mode,
                                                                            int flags) {
    uint64_t since = releases();
    const bool exclusive = (flags & O_EXCL) != 0;
    std::optional<Result<proto::Attr>> made;
    if (deleg_) made = deleg_->create(cred, parent, name, mode, exclusive);
    auto a = made ? std::move(*made)
                  : meta<proto::Create>(parent, proto::CreateRequest{cred, parent, name, mode, exclusive, 0, 0, 0, 0, {}});
    if (!a.ok()) return a.status();
    if (a->type != 1) return Status(Code::invalid, "'" + name + "' is not a regular file");
    if ((flags & O_TRUNC) && writable(flags)) {
        // The name existed (else the new file is empty): O_TRUNC empties it.
        auto n = find_open(a->ino);
        if (a->size > 0 || (n && n->high_water.load() > 0)) {
            proto::SetattrRequest set;
            set.size = 0;
            auto r = resize(cred, a->ino, std::move(set));
            if (!r.ok()) return r.status();
            a = std::move(r);
            since = releases(); // as resize says
        }
    }
    auto h = add_handle(*a, flags);
    auto out = merged(since, std::move(a));
    if (!out.ok()) {
        (void)release(std::move(h)); // nothing was written through it
        return out.status();
    }
    return std::make_pair(std::move(*out), std::move(h));
}

Result<std::unique_ptr<Handle>> InodeClient::open(const proto::Cred& cred, uint64_t ino, int flags) {
    // Fresh attributes: the size others settled before we opened (close-to-open).
    auto a = daemon_attr(ino);
    if (!a.ok()) return a.status();
    if (a->type == 2) return Status(Code::is_dir, ino_str(ino) + " is a directory");
    if (a->type != 1) return Status(Code::invalid, ino_str(ino) + " is not a regular file");
    if ((flags & O_TRUNC) && writable(flags)) {
        auto n = find_open(ino);
        if (a->size > 0 || (n && n->high_water.load() > 0)) {
            proto::SetattrRequest set;
            set.size = 0;
            auto r = resize(cred, ino, std::move(set));
            if (!r.ok()) return r.status();
            a->size = 0;
        }
    }
    return add_handle(*a, flags); // a.size: the daemon's, which the node keeps
}

Result<size_t> InodeClient::read(Handle& h, uint64_t offset, std::span<uint8_t> out) {
    if ((h.flags & O_ACCMODE) == O_WRONLY) return Status(Code::bad_handle, "file not open for reading");
    OpenInode& n = *h.node;
    if (n.pending) n.pending->quiesce(); // every handle of this process reads what any wrote
    if (offset + out.size() > n.visible_size() && !n.unlinked) {
        // Past what we know: others may have written and settled more since. (No wait for
        // delegated operations: a file whose create is still queued is not_found there, and
        // this process knows its size anyway.)
        auto a = meta_call<proto::Getattr>(*io_, n.ino, proto::InoRequest{n.ino});
        if (a.ok()) n.size.store(a->size);
        else if (a.status().code() != Code::not_found) return a.status();
    }
    return io_->pread(n.ino, n.layout, n.visible_size(), offset, out);
}

Status InodeClient::write(Handle& h, uint64_t offset, std::span<const uint8_t> data, bool at_offset) {
    if (!writable(h.flags)) return Status(Code::bad_handle, "file not open for writing");
    OpenInode& n = *h.node;
    if ((h.flags & O_APPEND) && !at_offset) return append(n, data);
    if (n.pending) {
        JOBFS_RETURN_IF_ERROR(n.pending->write(offset, data));
    } else {
        JOBFS_RETURN_IF_ERROR(io_->pwrite(n.ino, n.layout, offset, data));
    }
    raise(n.high_water, offset + data.size());
    n.dirty = true;
    return Status::OK();
}

Status InodeClient::append(OpenInode& n, std::span<const uint8_t> data) {
    if (data.empty()) return Status::OK();
    // The kernel placed it at the file's size as this node last learnt it, which misses what
    // other nodes appended since (and what other processes here left on their way): the
    // shard gives it a place of its own at the end, past what this node wrote, and the size
    // covers it from then on. Writes on their way land first, as without write-behind.
    JOBFS_RETURN_IF_ERROR(land(n));
    // Only what is not settled counts: a size settled here may since have been cut elsewhere.
    const uint64_t high = n.high_water.load();
    const uint64_t unsettled_end = high > n.settled.load() ? high : 0;
    // Unlinked while open (also while the call was out): the shard has forgotten it and no one
    // can open it again, so its end is the one this process knows.
    if (deleg_ && !n.unlinked) deleg_->before_request(n.ino); // made here: known to the shard first
    Result<uint64_t> at = n.unlinked ? Result<uint64_t>(n.visible_size())
                                     : meta_reserve_append(*io_, n.ino, unsettled_end, data.size());
    if (!at.ok() && at.status().code() == Code::not_found && n.unlinked) at = n.visible_size();
    if (!at.ok()) return at.status().with_context("find the end of " + ino_str(n.ino) + " for an append");
    JOBFS_RETURN_IF_ERROR(io_->pwrite(n.ino, n.layout, *at, data));
    const uint64_t end = *at + data.size();
    raise(n.size, end);
    raise(n.high_water, end);
    raise(n.settled, end); // the shard's size already covers it
    return Status::OK();
}

Status InodeClient::settle(OpenInode& n) {
    // Writes still on their way land first. If one failed, the size is settled all the same
    // (as a local file keeps the size its failed writeback extended it to): the bytes that
    // did land stay reachable, and an unlink finds the chunks to remove by that size.
    const Status landed = land(n);
    Status settled = settle_size(n);
    return landed.ok() ? settled : landed;
}

Status InodeClient::settle_size(OpenInode& n) {
    if (n.unlinked) return Status::OK();
    // Another handle may have taken the dirty flag and still be waiting for its ExtendSize:
    // returning now would let this close, and then the inode's last release, finish before
    // the daemon has the size (a lookup then reports less, the kernel shrinks its size and
    // the next O_APPEND write lands on the last record). So unless a completed ExtendSize
    // already covers high_water, this call sends its own.
    const bool was_dirty = n.dirty.exchange(false);
    const uint64_t end = n.high_water.load();
    if (!was_dirty && n.settled.load() >= end) return Status::OK();
    auto r = meta<proto::ExtendSize>(n.ino, proto::ExtendSizeRequest{n.ino, end});
    if (!r.ok()) {
        if (r.status().code() == Code::not_found && n.unlinked) return Status::OK(); // no size to keep
        n.dirty = true;
        return r.status().with_context("settle the size of " + ino_str(n.ino));
    }
    raise(n.settled, end);
    n.size.store(r->size);
    return Status::OK();
}

Status InodeClient::lost_create(uint64_t ino) { return deleg_ ? deleg_->error_of(ino) : Status::OK(); }

Status InodeClient::flush(Handle& h) {
    // A reader's close settles nothing: close-to-open asks it of the writers' closes, and a
    // reader would otherwise wait for another process's writes and move the file's mtime
    // (jobfs-fuse: the kernel then drops its cached pages, also while a write is on its way).
    if (!writable(h.flags)) return lost_create(h.node->ino);
    return settle_file(h);
}

Status InodeClient::settle_file(Handle& h) {
    // A delegated create still queued is not waited for: close-to-open holds all the same, as
    // another node's lookup recalls the directory first. One known to have failed is said.
    Status settled = settle(*h.node);
    Status lost = lost_create(h.node->ino);
    return lost.ok() ? settled : lost;
}

Status InodeClient::fsync(Handle& h) {
    OpenInode& n = *h.node;
    if (deleg_) deleg_->barrier(); // its create is at the daemons, or known to have failed
    JOBFS_RETURN_IF_ERROR(lost_create(n.ino));
    JOBFS_RETURN_IF_ERROR(land(n));
    JOBFS_RETURN_IF_ERROR(io_->sync(n.ino, n.layout, n.visible_size()));
    return settle(n);
}

Status InodeClient::release(std::unique_ptr<Handle> h) {
    std::shared_ptr<OpenInode> n = std::move(h->node);
    bool last = false;
    {
        std::lock_guard lock(open_mu_);
        if (--n->open_count == 0) {
            open_.erase(n->ino);
            released_[++released_count_ % kReleasesKept] = Released{n->ino, n->high_water.load()};
            last = true;
        }
    }
    if (last) io_->forget_kept(n->ino);
    // The data of an unlinked file goes with its last handle; nobody can open it again.
    if (n->unlinked) (void)land(*n); // none may land after the removal
    if (n->unlinked) return last ? io_->remove_file(n->ino) : Status::OK();
    // As at flush: a reader's handle has nothing of its own to settle while others hold the
    // file (the writers' handles settle theirs).
    if (!writable(h->flags) && !last) return Status::OK();
    return settle(*n);
}

} // namespace jobfs::client
