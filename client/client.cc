#include "client/meta_call.h"
#include "client/client.h"

#include <fcntl.h>
#include <grp.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "client/kept_chunks.h"
#include "log.h"

namespace jobfs::client {

namespace rpc = transport::rpc;

namespace {

constexpr uint64_t kRoot = 1;
constexpr int kMaxSymlinkDepth = 40; // as Linux's ELOOP limit

proto::Cred process_cred() {
    proto::Cred c{static_cast<uint32_t>(getuid()), static_cast<uint32_t>(getgid()), {}};
    int n = getgroups(0, nullptr);
    if (n > 0) {
        std::vector<gid_t> g(static_cast<size_t>(n));
        n = getgroups(n, g.data());
        for (int i = 0; i < n; ++i) c.groups.push_back(static_cast<uint32_t>(g[static_cast<size_t>(i)]));
    }
    return c;
}

constexpr size_t kMaxPath = 4096; // PATH_MAX, with its terminating NUL

// The components of an absolute jobfs path, "." dropped and ".." taken lexically (as a shell's
// `cd -L` does; above the root stays at the root).
Result<std::vector<std::string>> components(const std::string& path) {
    if (path.size() >= kMaxPath)
        return Status(Code::name_too_long, "path of " + std::to_string(path.size()) + " bytes (limit " +
                                               std::to_string(kMaxPath - 1) + ")");
    if (path.find('\0') != std::string::npos) return Status(Code::invalid, "path contains a NUL byte");
    if (path.empty() || path[0] != '/') return Status(Code::invalid, "jobfs paths are absolute ('" + path + "')");
    std::vector<std::string> out;
    std::stringstream ss(path);
    for (std::string c; std::getline(ss, c, '/');) {
        if (c.empty() || c == ".") continue;
        if (c == "..") {
            if (!out.empty()) out.pop_back();
            continue;
        }
        out.push_back(c);
    }
    return out;
}

Status with_path(const Status& s, const std::string& op, const std::string& path) {
    return s.with_context(op + " " + path);
}

void raise(std::atomic<uint64_t>& v, uint64_t to) {
    uint64_t cur = v.load();
    while (to > cur && !v.compare_exchange_weak(cur, to)) {
    }
}

} // namespace

Result<std::unique_ptr<Client>> Client::connect(const ClusterInfo& cluster, const ClientOptions& options) {
    std::unique_ptr<Client> c(new Client());
    c->cred_ = options.cred ? *options.cred : process_cred();
    c->timeout_ = options.timeout;
    c->dir_cache_ttl_ = options.dir_cache_ttl;
    c->write_behind_bytes_ = options.write_behind_bytes;
    // Before the worker's threads start: growing the descriptor table then waits for nothing
    // (kept_chunks.h).
    if (options.local_reads) KeptChunks::reserve_descriptors();
    transport::WorkerOptions wo;
    wo.shared_memory = false; // every daemon is reached by host:port
    wo.name = "libjobfs." + std::to_string(getpid());
    wo.secret = cluster.secret;
    wo.call_timeout = options.timeout;
    auto w = transport::Worker::create(wo);
    if (!w.ok()) return w.status();
    c->worker_ = std::move(*w);
    if (options.attr_cache) {
        // Daemons recall leases on the connections this client makes (attr_cache.h).
        c->attr_cache_ = std::make_shared<AttrCache>();
        transport::rpc::serve<proto::LeaseRecall>(
            *c->worker_, [cache = c->attr_cache_](transport::ServerCall call, proto::LeaseRecallRequest&& r) {
                cache->recall(r.inos);
                transport::rpc::reply<proto::LeaseRecall>(call, proto::Empty{});
            });
    }
    if (options.dir_delegation) {
        Client* self = c.get();
        c->deleg_ = std::make_shared<DirDelegations>(options.dir_delegation_flush_delay, [self](const proto::Attr& gone) {
            Status s = self->release_data(gone, "inode " + std::to_string(gone.ino));
            if (!s.ok()) JOBFS_WARN("%s", s.to_string().c_str());
        });
        DirDelegations::serve_recalls(*c->worker_, c->deleg_);
    }
    auto eps = connect_daemons(*c->worker_, cluster);
    if (!eps.ok()) return eps.status();
    c->eps_ = std::move(*eps);
    transport::Worker* worker = c->worker_.get();
    c->io_ = std::make_unique<FileIO>(c->eps_, options.timeout,
                                      [worker, cluster](uint32_t r) { return connect_daemon(*worker, cluster, r); },
                                      options.local_reads ? std::make_shared<LocalReads>(cluster.secret, static_cast<uint32_t>(c->eps_.size()))
                                                          : nullptr);
    if (c->write_behind_bytes_) c->writers_ = std::make_unique<boost::asio::thread_pool>(WriteBehind::kWriterThreads);
    if (c->deleg_) c->deleg_->start(*c->io_);
    return c;
}

Client::~Client() {
    if (writers_) writers_->join(); // every queued write runs, while io_ still exists
    deleg_.reset();                  // delegated operations are sent, delegations given back
    if (attr_cache_) {
        // Leases end here: daemons need not wait for them to run out before the next change
        // of these files (a killed process's leases are waited out: at most attr-lease-ms).
        std::vector<transport::Endpoint> granters = attr_cache_->clear_for_release();
        transport::CallOptions o;
        o.timeout = std::chrono::milliseconds(1000);
        for (const auto& ep : granters)
            if (ep.health().ok()) (void)transport::rpc::call<proto::LeaseRelease>(ep, proto::Empty{}, o);
    }
}

Result<std::unique_ptr<Client>> Client::connect_env(const ClientOptions& options) {
    auto info = read_cluster_from_env();
    if (!info.ok()) return info.status();
    return connect(*info, options);
}

// ---- path resolution ------------------------------------------------------------------------

namespace {

constexpr size_t kDirCacheMax = 4096; // entries; a full cache starts over

std::string joined(const std::vector<std::string>& parts, size_t n) {
    std::string out;
    for (size_t i = 0; i < n; ++i) out += "/" + parts[i];
    return out.empty() ? "/" : out;
}

bool stale_code(Code c) { return c == Code::not_found || c == Code::not_dir; }
bool stale(const Status& s) { return stale_code(s.code()); }

} // namespace

std::optional<uint64_t> Client::dir_cache_get(const std::string& path) {
    if (dir_cache_ttl_.count() == 0) return std::nullopt;
    std::lock_guard lock(dir_cache_mu_);
    auto it = dir_cache_.find(path);
    if (it == dir_cache_.end()) return std::nullopt;
    if (std::chrono::steady_clock::now() >= it->second.expires) {
        dir_cache_.erase(it);
        return std::nullopt;
    }
    return it->second.ino;
}

void Client::dir_cache_put(const std::string& path, uint64_t ino) {
    if (dir_cache_ttl_.count() == 0) return;
    std::lock_guard lock(dir_cache_mu_);
    if (dir_cache_.size() >= kDirCacheMax) dir_cache_.clear();
    dir_cache_[path] = CachedDir{ino, std::chrono::steady_clock::now() + dir_cache_ttl_};
}

void Client::dir_cache_forget(const std::string& path) {
    if (path == "/") { // everything is below the root
        std::lock_guard lock(dir_cache_mu_);
        dir_cache_.clear();
        return;
    }
    const auto slash = path.rfind('/');
    dir_cache_forget_in(slash == 0 ? "/" : path.substr(0, slash), {std::string_view(path).substr(slash + 1)});
}

void Client::dir_cache_forget_in(const std::string& dir, const std::vector<std::string_view>& names) {
    if (names.empty()) return;
    const std::string prefix = dir == "/" ? "/" : dir + "/";
    const std::unordered_set<std::string_view> gone(names.begin(), names.end());
    std::lock_guard lock(dir_cache_mu_);
    for (auto it = dir_cache_.begin(); it != dir_cache_.end();) {
        const std::string_view k = it->first;
        bool hit = false;
        if (k.size() > prefix.size() && k.compare(0, prefix.size(), prefix) == 0) {
            const std::string_view rest = k.substr(prefix.size());
            hit = gone.count(rest.substr(0, rest.find('/'))) != 0; // the name itself or a path below it
        }
        it = hit ? dir_cache_.erase(it) : std::next(it);
    }
}

Result<proto::Attr> Client::walk(const std::string& path, bool follow_last, int depth, bool use_cache) {
    if (depth > kMaxSymlinkDepth) return Status(Code::loop, "too many levels of symbolic links");
    auto parts = components(path);
    if (!parts.ok()) return parts.status();
    if (parts->empty()) return meta<proto::Getattr>(kRoot, proto::InoRequest{kRoot});
    // The root is always directory 1; a cached directory on the way lets the walk start there.
    proto::Attr cur;
    cur.ino = kRoot;
    cur.type = 2;
    size_t start = 0;
    for (size_t k = use_cache ? parts->size() - 1 : 0; k >= 1; --k) {
        if (auto ino = dir_cache_get(joined(*parts, k))) {
            cur.ino = *ino;
            start = k;
            break;
        }
    }
    std::string walked = start ? joined(*parts, start) : std::string();
    for (size_t i = start; i < parts->size(); ++i) {
        const std::string& name = (*parts)[i];
        if (cur.type != 2) return Status(Code::not_dir, walked + " is not a directory");
        const bool last_part = i + 1 == parts->size();
        auto next = last_part ? lookup_entry(cur.ino, name)
                              : meta<proto::Lookup>(cur.ino, proto::NameRequest{cred_, cur.ino, name});
        if (!next.ok()) {
            if (start > 0 && stale(next.status())) {
                // The cached directory may be gone: ask again from the root.
                dir_cache_forget(joined(*parts, start));
                return walk(path, follow_last, depth, false);
            }
            return next.status();
        }
        walked += "/" + name;
        const bool last = i + 1 == parts->size();
        if (next->type == 3 && (!last || follow_last)) {
            // A symlink: continue from its target (absolute within jobfs, or relative to cur).
            const std::string& target = next->target;
            std::string base = walked.substr(0, walked.rfind('/'));
            std::string rest;
            for (size_t j = i + 1; j < parts->size(); ++j) rest += "/" + (*parts)[j];
            std::string resolved = (target.size() && target[0] == '/' ? target : base + "/" + target) + rest;
            return walk(resolved, follow_last, depth + 1, use_cache);
        }
        if (next->type == 2 && !last) dir_cache_put(walked, next->ino);
        cur = std::move(*next);
    }
    return cur;
}

bool Client::leases_refused(const Status& s) {
    // A daemon of an older version does not know the leased requests: ask it the old way.
    if (s.code() != Code::unsupported || s.message().find("unknown opcode") == std::string::npos) return false;
    leases_off_ = true;
    return true;
}

template <class Leased, class Plain>
Result<proto::Attr> Client::leased_call(uint64_t dir, const std::string& name, const typename Plain::Request& req) {
    if (!attr_cache_ || leases_off_) return meta<Plain>(dir, req);
    const uint64_t epoch = attr_cache_->epoch();
    const auto sent = std::chrono::steady_clock::now(); // the lease counts from before the daemon's
    transport::Endpoint via;
    auto r = meta<Leased>(dir, req, &via);
    if (!r.ok() && leases_refused(r.status())) return meta<Plain>(dir, req);
    if (!r.ok()) return r.status();
    if (r->lease_ms)
        attr_cache_->put(dir, name, r->attr, sent + std::chrono::milliseconds(r->lease_ms), via, epoch);
    return std::move(r->attr);
}

Result<proto::Attr> Client::lookup_entry(uint64_t dir, const std::string& name) {
    if (attr_cache_ && !leases_off_)
        if (auto a = attr_cache_->get(dir, name)) return *a;
    if (deleg_)
        if (auto a = deleg_->lookup(cred_, dir, name)) return std::move(*a);
    return leased_call<proto::LookupLeased, proto::Lookup>(dir, name, proto::NameRequest{cred_, dir, name});
}

Result<std::pair<uint64_t, std::string>> Client::parent_of(const std::string& path, bool* cached, bool use_cache) {
    if (cached) *cached = false;
    auto parts = components(path);
    if (!parts.ok()) return parts.status();
    if (parts->empty()) return Status(Code::invalid, "the root has no parent");
    if (parts->size() == 1) return std::make_pair(kRoot, parts->back());
    auto d = dir_ino(joined(*parts, parts->size() - 1), cached, use_cache);
    if (!d.ok()) return d.status();
    return std::make_pair(*d, parts->back());
}

Result<uint64_t> Client::dir_ino(const std::string& dir, bool* cached, bool use_cache) {
    if (cached) *cached = false;
    if (use_cache) {
        if (auto ino = dir_cache_get(dir)) {
            if (cached) *cached = true;
            return *ino;
        }
    }
    auto d = walk(dir, true, 0, use_cache);
    if (!d.ok()) return d.status();
    if (d->type != 2) return Status(Code::not_dir, dir + " is not a directory");
    dir_cache_put(dir, d->ino);
    return d->ino;
}

template <class Op>
auto Client::in_parent(const std::string& path, Op op) -> decltype(op(uint64_t{}, std::string{})) {
    bool cached = false;
    auto p = parent_of(path, &cached);
    if (!p.ok()) return p.status();
    auto r = op(p->first, p->second);
    if (r.ok() || !cached || !stale(r.status())) return r;
    auto parts = components(path);
    if (parts.ok() && !parts->empty()) dir_cache_forget(joined(*parts, parts->size() - 1));
    p = parent_of(path, nullptr, false);
    if (!p.ok()) return p.status();
    return op(p->first, p->second);
}

// ---- namespace ------------------------------------------------------------------------------

Result<proto::Attr> Client::stat(const std::string& path) {
    auto a = walk(path, true);
    if (!a.ok()) return with_path(a.status(), "stat", path);
    return a;
}

Result<proto::Attr> Client::lstat(const std::string& path) {
    auto a = walk(path, false);
    if (!a.ok()) return with_path(a.status(), "lstat", path);
    return a;
}

Result<proto::Attr> Client::mkdir(const std::string& path, uint32_t mode) {
    auto a = in_parent(path, [&](uint64_t dir, const std::string& name) {
        return meta<proto::Mkdir>(dir, proto::MkdirRequest{cred_, dir, name, mode});
    });
    if (!a.ok()) return with_path(a.status(), "mkdir", path);
    return a;
}

Status Client::rmdir(const std::string& path) {
    auto r = in_parent(path, [&](uint64_t dir, const std::string& name) {
        return meta<proto::Rmdir>(dir, proto::NameRequest{cred_, dir, name});
    });
    auto parts = components(path);
    if (parts.ok()) dir_cache_forget(joined(*parts, parts->size()));
    return r.ok() ? Status::OK() : with_path(r.status(), "rmdir", path);
}

Status Client::unlink(const std::string& path) {
    auto r = in_parent(path, [&](uint64_t dir, const std::string& name) {
        // Not answered here for a file open here: its close must know at once that the last
        // link went (release_data), not race the batch that takes the unlink to the daemon.
        if (deleg_)
            if (auto done = deleg_->unlink(cred_, dir, name, [this](uint64_t ino) { return open_here(ino); })) {
                // Answered here; the data of its last link goes once the daemon made it so.
                if (!done->ok()) return Result<proto::UnlinkResponse>(*done);
                return Result<proto::UnlinkResponse>(proto::UnlinkResponse{});
            }
        return meta<proto::Unlink>(dir, proto::NameRequest{cred_, dir, name});
    });
    if (!r.ok()) return with_path(r.status(), "unlink", path);
    if (r->last_link && r->attr.type == 1) return release_data(r->attr, path);
    return Status::OK();
}

bool Client::open_here(uint64_t ino) {
    std::lock_guard lock(open_mu_);
    return open_count_.count(ino) != 0;
}

Status Client::release_data(const proto::Attr& gone, const std::string& path) {
    {
        std::lock_guard lock(open_mu_);
        if (open_count_.count(gone.ino)) {
            unlinked_open_.insert(gone.ino);
            return Status::OK();
        }
    }
    // A file of recorded length 0 has no chunks, unless a writer elsewhere has not settled
    // its length yet: those chunks would stay (space, never data, lost until the job's data
    // directories go). Skipping saves a request to every daemon per unlinked empty file.
    if (gone.size == 0) return Status::OK();
    Status s = io_->remove_file(gone.ino);
    return s.ok() ? s : with_path(s, "remove data of", path);
}

Status Client::rename(const std::string& from, const std::string& to, uint32_t flags) {
    Result<proto::RenameResponse> r = Status(Code::internal, "unset");
    for (bool use_cache : {true, false}) {
        bool ca = false, cb = false;
        auto a = parent_of(from, &ca, use_cache);
        if (!a.ok()) return with_path(a.status(), "rename", from);
        auto b = parent_of(to, &cb, use_cache);
        if (!b.ok()) return with_path(b.status(), "rename to", to);
        // A regular file renamed within a directory delegated here (a checkpoint written under a
        // temporary name, then put in place): answered here and queued, as unlink is.
        if (deleg_ && flags == 0 && a->first == b->first)
            if (auto done = deleg_->rename(cred_, a->first, a->second, b->second, [this](uint64_t f) { return open_here(f); }))
                return done->ok() ? *done : with_path(*done, "rename " + from + " to", to);
        r = meta<proto::Rename>(a->first,
                                     proto::RenameRequest{cred_, a->first, a->second, b->first, b->second, flags});
        if (r.ok() || !(ca || cb) || !stale(r.status())) break;
        dir_cache_forget("/"); // a cached parent may be gone: walk both from the root
    }
    // What this client knew under either name is no longer true.
    for (const std::string& p : {from, to}) {
        auto parts = components(p);
        if (parts.ok()) dir_cache_forget(joined(*parts, parts->size()));
    }
    if (!r.ok()) return with_path(r.status(), "rename " + from + " to", to);
    if (r->replaced && r->replaced->last_link && r->replaced->attr.type == 1)
        return release_data(r->replaced->attr, to);
    return Status::OK();
}

Result<std::vector<Status>> Client::rename_in_dir(const std::string& dir,
                                                  const std::vector<std::pair<std::string, std::string>>& names,
                                                  uint32_t flags) {
    auto parts = components(dir);
    if (!parts.ok()) return with_path(parts.status(), "rename in", dir);
    const std::string d = joined(*parts, parts->size());
    const std::string prefix = d == "/" ? "/" : d + "/";
    std::vector<Status> out(names.size());
    // Requests go out for the entries whose names are single components, in order.
    std::vector<size_t> todo;
    for (size_t i = 0; i < names.size(); ++i) {
        const auto& [a, b] = names[i];
        const bool one = !a.empty() && !b.empty() && a.find('/') == std::string::npos && b.find('/') == std::string::npos;
        if (one) todo.push_back(i);
        else out[i] = Status(Code::invalid, "rename " + prefix + a + " to " + prefix + b + ": not a name in " + d);
    }
    // In a directory delegated here, renames of regular files are answered here and queued,
    // in order, up to the first one that is the daemon's (it and the rest go below, after the
    // queue: meta waits for it).
    size_t answered = 0;
    if (deleg_ && flags == 0 && !todo.empty()) {
        bool cached = false;
        auto ino = dir_ino(d, &cached, true);
        for (; ino.ok() && answered < todo.size(); ++answered) {
            const size_t i = todo[answered];
            auto done = deleg_->rename(cred_, *ino, names[i].first, names[i].second,
                                       [this](uint64_t f) { return open_here(f); });
            if (!done) break;
            out[i] = done->ok() ? *done : with_path(*done, "rename " + prefix + names[i].first + " to", prefix + names[i].second);
        }
    }
    todo.erase(todo.begin(), todo.begin() + static_cast<std::ptrdiff_t>(answered));
    for (size_t first = 0; first < todo.size(); first += proto::kMaxRenamesInDir) {
        const size_t n = std::min<size_t>(proto::kMaxRenamesInDir, todo.size() - first);
        proto::RenameInDirRequest req;
        req.cred = cred_;
        req.flags = flags;
        for (size_t k = 0; k < n; ++k) {
            const auto& [a, b] = names[todo[first + k]];
            req.entries.push_back(proto::RenameInDirEntry{a, b});
        }
        Result<proto::RenameInDirResponse> r = Status(Code::internal, "unset");
        for (bool use_cache : {true, false}) {
            bool cached = false;
            auto ino = dir_ino(d, &cached, use_cache);
            if (!ino.ok()) return with_path(ino.status(), "rename in", d);
            req.parent = *ino;
            r = meta<proto::RenameInDir>(*ino, req);
            // A cached directory removed meanwhile: every entry comes back not found.
            const bool all_stale = r.ok() && std::all_of(r->outcomes.begin(), r->outcomes.end(), [](const auto& o) {
                return stale_code(static_cast<Code>(o.code));
            });
            if (!cached || !(all_stale || (!r.ok() && stale(r.status())))) break;
            dir_cache_forget(d);
        }
        if (r.ok() && r->outcomes.size() != n)
            r = Status(Code::protocol, std::to_string(r->outcomes.size()) + " outcomes for " + std::to_string(n) + " renames");
        std::vector<std::string_view> moved; // both names of each entry: a cached directory under either is out of date
        for (size_t k = 0; k < n; ++k) {
            moved.push_back(names[todo[first + k]].first);
            moved.push_back(names[todo[first + k]].second);
        }
        dir_cache_forget_in(d, moved);
        for (size_t k = 0; k < n; ++k) {
            const size_t i = todo[first + k];
            const std::string from = prefix + names[i].first, to = prefix + names[i].second;
            if (!r.ok()) {
                out[i] = with_path(r.status(), "rename " + from + " to", to);
                continue;
            }
            const proto::RenameOutcome& o = r->outcomes[k];
            if (o.code != 0) {
                out[i] = with_path(Status(static_cast<Code>(o.code), o.message), "rename " + from + " to", to);
                continue;
            }
            if (o.replaced && o.replaced->last_link && o.replaced->attr.type == 1)
                out[i] = release_data(o.replaced->attr, to);
        }
    }
    return out;
}

Result<std::vector<proto::DirEntry>> Client::list(const std::string& path) {
    auto d = walk(path, true);
    if (!d.ok()) return with_path(d.status(), "list", path);
    if (d->type != 2) return Status(Code::not_dir, "list " + path + ": not a directory");
    std::vector<proto::DirEntry> all;
    std::string after;
    for (;;) {
        auto page = readdir(d->ino, after);
        if (!page.ok()) return with_path(page.status(), "list", path);
        for (auto& e : page->entries) all.push_back(std::move(e));
        if (!page->more || all.empty()) break;
        after = all.back().name;
    }
    return all;
}

Result<proto::Attr> Client::symlink(const std::string& target, const std::string& path) {
    auto a = in_parent(path, [&](uint64_t dir, const std::string& name) {
        return meta<proto::Symlink>(dir, proto::SymlinkRequest{cred_, dir, name, target});
    });
    if (!a.ok()) return with_path(a.status(), "symlink", path);
    return a;
}

Status Client::truncate(const std::string& path, uint64_t size) {
    auto a = stat(path);
    if (!a.ok()) return a.status();
    if (a->type == 2) return Status(Code::is_dir, "truncate " + path + ": is a directory");
    proto::SetattrRequest set;
    set.size = size;
    auto r = apply_setattr(*a, std::move(set));
    return r.ok() ? Status::OK() : with_path(r.status(), "truncate", path);
}

Result<proto::Attr> Client::apply_setattr(const proto::Attr& a, proto::SetattrRequest set) {
    set.cred = cred_;
    set.ino = a.ino;
    auto r = meta<proto::Setattr>(a.ino, set);
    if (!r.ok()) return r.status();
    if (set.size && *set.size < a.size) {
        Status s = io_->truncate_chunks(a.ino, Layout{a.chunk_size, a.stripe_count, a.replicas}, a.size, *set.size);
        if (!s.ok()) return s.with_context("cut the data");
    }
    return r;
}

Result<proto::Attr> Client::setattr(const std::string& path, proto::SetattrRequest set, bool follow) {
    auto a = walk(path, follow);
    if (!a.ok()) return with_path(a.status(), "setattr", path);
    auto r = apply_setattr(*a, std::move(set));
    if (!r.ok()) return with_path(r.status(), "setattr", path);
    return r;
}

Result<proto::Attr> Client::link(const std::string& existing, const std::string& path) {
    auto a = walk(existing, false);
    if (!a.ok()) return with_path(a.status(), "link", existing);
    auto r = in_parent(path, [&](uint64_t dir, const std::string& name) {
        return meta<proto::Link>(dir, proto::LinkRequest{cred_, a->ino, dir, name});
    });
    if (!r.ok()) return with_path(r.status(), "link " + existing + " to", path);
    return r;
}

Result<std::string> Client::readlink(const std::string& path) {
    auto a = walk(path, false);
    if (!a.ok()) return with_path(a.status(), "readlink", path);
    if (a->type != 3) return Status(Code::invalid, "readlink " + path + ": not a symbolic link");
    return a->target; // a lookup answers with the whole inode, target included
}

Result<std::string> Client::getxattr(const std::string& path, const std::string& name) {
    auto a = walk(path, true);
    if (!a.ok()) return with_path(a.status(), "getxattr", path);
    auto v = meta<proto::Getxattr>(a->ino, proto::XattrRequest{cred_, a->ino, name, {}, 0});
    if (!v.ok()) return with_path(v.status(), "getxattr " + name + " of", path);
    return std::move(v->value);
}

Status Client::setxattr(const std::string& path, const std::string& name, const std::string& value, int flags) {
    auto a = walk(path, true);
    if (!a.ok()) return with_path(a.status(), "setxattr", path);
    auto r = meta<proto::Setxattr>(a->ino, proto::XattrRequest{cred_, a->ino, name, value, flags});
    return r.ok() ? Status::OK() : with_path(r.status(), "setxattr " + name + " of", path);
}

Status Client::fsetxattr(File& f, const std::string& name, const std::string& value, int flags) {
    auto r = meta<proto::Setxattr>(f.ino, proto::XattrRequest{cred_, f.ino, name, value, flags});
    return r.ok() ? Status::OK() : r.status().with_context("setxattr " + name + " of inode " + std::to_string(f.ino));
}

Result<std::vector<std::string>> Client::listxattr(const std::string& path) {
    auto a = walk(path, true);
    if (!a.ok()) return with_path(a.status(), "listxattr", path);
    auto v = meta<proto::Listxattr>(a->ino, proto::XattrRequest{cred_, a->ino, {}, {}, 0});
    if (!v.ok()) return with_path(v.status(), "listxattr", path);
    return std::move(v->names);
}

Status Client::removexattr(const std::string& path, const std::string& name) {
    auto a = walk(path, true);
    if (!a.ok()) return with_path(a.status(), "removexattr", path);
    auto r = meta<proto::Removexattr>(a->ino, proto::XattrRequest{cred_, a->ino, name, {}, 0});
    return r.ok() ? Status::OK() : with_path(r.status(), "removexattr " + name + " of", path);
}

Result<proto::ReaddirResponse> Client::readdir(uint64_t ino, const std::string& after, uint32_t max) {
    return meta<proto::Readdir>(ino, proto::ReaddirRequest{cred_, ino, after, max});
}

Result<proto::Attr> Client::set_layout(const std::string& path, const Layout& layout) {
    auto a = stat(path);
    if (!a.ok()) return a.status();
    auto r = meta<proto::SetLayout>(
        a->ino, proto::LayoutRequest{cred_, a->ino, static_cast<uint32_t>(layout.chunk_size), layout.stripe_count,
                                        layout.replicas});
    if (!r.ok()) return with_path(r.status(), "set layout of", path);
    return r;
}

Result<proto::ChainTable> Client::chain_table() {
    JOBFS_RETURN_IF_ERROR(io_->refresh_table());
    return io_->table();
}

// ---- files ----------------------------------------------------------------------------------

Result<std::unique_ptr<File>> Client::open(const std::string& path, int flags, uint32_t mode, const Layout& layout) {
    return open_or_create(path, flags, mode, layout, nullptr);
}

Result<std::unique_ptr<File>> Client::create(const std::string& path, int flags, uint32_t mode, const NewFile& init,
                                             const Layout& layout) {
    if ((flags & (O_CREAT | O_EXCL)) != (O_CREAT | O_EXCL) || (flags & O_ACCMODE) == O_RDONLY)
        return Status(Code::invalid, "create " + path + ": needs O_CREAT | O_EXCL and a writable mode");
    return open_or_create(path, flags, mode, layout, &init);
}

Result<std::unique_ptr<File>> Client::open_or_create(const std::string& path, int flags, uint32_t mode,
                                                     const Layout& layout, const NewFile* init) {
    Result<proto::Attr> a = Status(Code::internal, "unset");
    if (flags & O_CREAT) {
        proto::CreateRequest req;
        req.cred = cred_;
        req.mode = mode;
        req.exclusive = (flags & O_EXCL) != 0;
        req.chunk_size = static_cast<uint32_t>(layout.chunk_size);
        req.stripe_count = layout.stripe_count;
        req.replicas = layout.replicas;
        if (init) {
            req.size = init->size;
            for (const auto& [n, v] : init->xattrs) req.xattrs.push_back(proto::XattrPair{n, v});
        }
        a = in_parent(path, [&](uint64_t dir, const std::string& name) -> Result<proto::Attr> {
            req.parent = dir;
            req.name = name;
            if (deleg_ && layout.chunk_size == 0 && layout.stripe_count == 0 && layout.replicas == 0)
                if (auto made = deleg_->create(cred_, dir, name, mode, req.exclusive, req.size, req.xattrs))
                    return std::move(*made);
            return leased_call<proto::CreateLeased, proto::Create>(dir, name, req);
        });
    } else {
        a = walk(path, true);
    }
    if (!a.ok()) return with_path(a.status(), init ? "create" : "open", path);
    // Directories are listed, never opened: their inode has no chunks to read.
    if (a->type == 2) return Status(Code::is_dir, "open " + path + ": is a directory");
    auto f = std::make_unique<File>();
    f->ino = a->ino;
    f->layout = Layout{a->chunk_size ? a->chunk_size : 4ull << 20, a->stripe_count, a->replicas};
    f->flags = flags;
    f->size_at_open.store(a->size);
    if (init) f->created_size.store(a->size);
    if ((flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY && a->size > 0) {
        proto::SetattrRequest req;
        req.cred = cred_;
        req.ino = a->ino;
        req.size = 0;
        auto r = meta<proto::Setattr>(a->ino, req);
        if (!r.ok()) return with_path(r.status(), "truncate", path);
        Status s = io_->truncate_chunks(a->ino, f->layout, a->size, 0);
        if (!s.ok()) return with_path(s, "truncate", path);
        f->size_at_open.store(0);
    }
    if (a->type == 1) {
        std::lock_guard lock(open_mu_);
        ++open_count_[f->ino];
    }
    if (write_behind_bytes_ && (flags & O_ACCMODE) != O_RDONLY)
        f->write_behind = std::make_shared<WriteBehind>(*io_, *writers_, f->ino, f->layout, write_behind_bytes_);
    return f;
}

Status Client::pwrite(File& f, uint64_t offset, std::span<const uint8_t> data) {
    if ((f.flags & O_ACCMODE) == O_RDONLY) return Status(Code::bad_handle, "file not open for writing");
    Status s = f.write_behind ? f.write_behind->write(offset, data) : io_->pwrite(f.ino, f.layout, offset, data);
    if (!s.ok()) return s;
    raise(f.high_water, offset + data.size());
    f.dirty = true;
    return Status::OK();
}

Result<uint64_t> Client::append(File& f, std::span<const uint8_t> data) {
    if ((f.flags & O_ACCMODE) == O_RDONLY) return Status(Code::bad_handle, "file not open for writing");
    if (f.write_behind) JOBFS_RETURN_IF_ERROR(f.write_behind->flush()); // this handle's writes come first
    const uint64_t unsettled_end = std::max(f.high_water.load(), f.settling.load());
    if (deleg_) deleg_->before_request(f.ino); // its create first
    auto at = meta_reserve_append(*io_, f.ino, unsettled_end, data.size());
    if (!at.ok() && at.status().code() == Code::not_found) {
        // Unlinked while open here: nobody else can open it, its end is the one we know.
        std::lock_guard lock(open_mu_);
        if (unlinked_open_.count(f.ino)) at = f.size();
    }
    if (!at.ok()) return at.status().with_context("find the end of inode " + std::to_string(f.ino) + " for an append");
    if (!data.empty()) JOBFS_RETURN_IF_ERROR(io_->pwrite(f.ino, f.layout, *at, data));
    raise(f.size_at_open, *at + data.size());
    return *at;
}

Result<size_t> Client::pread(File& f, uint64_t offset, std::span<uint8_t> out) {
    if ((f.flags & O_ACCMODE) == O_WRONLY) return Status(Code::bad_handle, "file not open for reading");
    if (f.write_behind) f.write_behind->quiesce(); // this handle reads what it wrote
    if (offset + out.size() > f.size()) {
        // Past what this handle knows: others may have settled more (their close or fsync)
        // or less (a truncate) since. An unlinked open file has no attributes left to ask.
        auto a = fstat(f);
        if (!a.ok() && a.status().code() != Code::not_found) return a.status();
    }
    return io_->pread(f.ino, f.layout, f.size(), offset, out);
}

Status Client::settle_size(File& f) {
    if (!f.dirty.exchange(false)) return Status::OK();
    // (A write that sets dirty raised high_water first: what dirty showed is in this load.)
    if (f.high_water.load() <= f.created_size.load()) return Status::OK();
    // Visible through size() until the daemon's answer is: reads of this handle never miss
    // its own bytes meanwhile.
    raise(f.settling, f.high_water.load());
    const uint64_t end = f.high_water.exchange(0);
    raise(f.settling, end);
    auto r = meta<proto::ExtendSize>(f.ino, proto::ExtendSizeRequest{f.ino, end});
    if (!r.ok()) {
        if (r.status().code() == Code::not_found) {
            std::lock_guard lock(open_mu_);
            if (unlinked_open_.count(f.ino)) return Status::OK(); // open but unlinked: no size to keep
        }
        raise(f.high_water, end);
        f.settling = 0;
        f.dirty = true;
        return r.status().with_context("settle file size");
    }
    f.size_at_open.store(r->size); // the settled size: our writes, others', a truncate since
    f.settling = 0;
    return Status::OK();
}

Status Client::sync_namespace() { return deleg_ ? deleg_->sync() : Status::OK(); }

Status Client::lost_create(File& f) { return deleg_ ? deleg_->error_of(f.ino) : Status::OK(); }

Status Client::fsync(File& f) {
    if (deleg_) deleg_->barrier(); // its create is at the daemons, or known to have failed
    JOBFS_RETURN_IF_ERROR(lost_create(f));
    if (f.write_behind) JOBFS_RETURN_IF_ERROR(f.write_behind->flush());
    Status s = io_->sync(f.ino, f.layout, f.size());
    if (!s.ok()) return s;
    return settle_size(f);
}

Status Client::flush(File& f) {
    if (deleg_) deleg_->barrier();
    JOBFS_RETURN_IF_ERROR(lost_create(f));
    if (f.write_behind) JOBFS_RETURN_IF_ERROR(f.write_behind->flush());
    return settle_size(f);
}

Status Client::close(File& f) {
    if (f.closed) return Status::OK();
    f.closed = true;
    // Buffered writes land first; a failure among them is the close's (after the bookkeeping).
    const Status flushed = f.write_behind ? f.write_behind->flush() : Status::OK();
    bool doomed = false, last = false;
    {
        std::lock_guard lock(open_mu_);
        auto it = open_count_.find(f.ino);
        if (it != open_count_.end() && --it->second == 0) {
            open_count_.erase(it);
            last = true;
        }
        doomed = unlinked_open_.count(f.ino) != 0;
        if (doomed && last) unlinked_open_.erase(f.ino);
    }
    if (last) io_->forget_kept(f.ino);
    // An unlinked file has no size to settle any more; its data goes with its last close.
    if (doomed) return last ? io_->remove_file(f.ino) : flushed;
    Status settled = settle_size(f);
    // A delegated create still queued is not waited for (close-to-open holds all the same:
    // another client's open recalls the directory first); one known to have failed is said.
    const Status lost = lost_create(f);
    return !lost.ok() ? lost : flushed.ok() ? settled : flushed;
}

Result<proto::Attr> Client::fstat(File& f) {
    // Also how pread learns a length others settled: it keeps what it learns.
    auto a = meta<proto::Getattr>(f.ino, proto::InoRequest{f.ino});
    if (!a.ok()) return a.status().with_context("fstat inode " + std::to_string(f.ino));
    f.size_at_open.store(a->size); // the settled size now: others' settled writes, a truncate
    a->size = f.size();
    return a;
}

Status Client::ftruncate(File& f, uint64_t size) {
    const std::string what = "ftruncate inode " + std::to_string(f.ino);
    if ((f.flags & O_ACCMODE) == O_RDONLY) return Status(Code::bad_handle, what + ": file not open for writing");
    if (f.write_behind) JOBFS_RETURN_IF_ERROR(f.write_behind->flush()); // none may land after the cut
    auto a = meta<proto::Getattr>(f.ino, proto::InoRequest{f.ino});
    if (!a.ok()) return a.status().with_context(what);
    a->size = std::max(a->size, f.size()); // this handle's unsettled bytes past `size` go too
    proto::SetattrRequest set;
    set.size = size;
    auto r = apply_setattr(*a, std::move(set));
    if (!r.ok()) return r.status().with_context(what);
    uint64_t hw = f.high_water.load();
    while (hw > size && !f.high_water.compare_exchange_weak(hw, size)) {
    }
    f.size_at_open.store(size);
    f.created_size.store(0); // writes below the old length settle again
    return Status::OK();
}

} // namespace jobfs::client
