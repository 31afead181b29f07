#include <chrono>
#include <thread>

#include "server/meta_coordinator.h"

#include <sys/stat.h>

#include "log.h"
#include "server/meta_wire.h"

namespace jobfs::server {

namespace rpc = transport::rpc;

namespace {

const proto::Cred kPeerCred{0, 0, {}}; // daemons act for a client whose rights they checked
const Cred kRoot{0, 0, {}};
constexpr int kMaxWalk = 4096;         // directory depth a loop check follows

uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Outcomes after which nobody knows whether the peer applied the step: retry later.
bool unsettled(const Status& s) {
    switch (s.code()) {
    case Code::timeout:
    case Code::peer_gone:
    case Code::refused:
    case Code::cancelled:
    case Code::io:
    case Code::internal: return true;
    default: return false;
    }
}

std::string quoted(const std::string& name) { return "'" + name + "'"; }

Status denied(const std::string& op, const std::string& name) {
    return Status(Code::permission, op + " " + quoted(name) + ": permission denied");
}

// In a sticky directory only the owner of the entry or of the directory (or root) may remove
// or rename it.
bool sticky_blocks(const Attr& dir, const Attr& victim, const Cred& cred) {
    return (dir.mode & S_ISVTX) && cred.uid != 0 && cred.uid != dir.uid && cred.uid != victim.uid;
}

} // namespace

MetaCoordinator::MetaCoordinator(MetaShard& shard, uint32_t rank, uint32_t daemons, PeerFn peer)
    : shard_(shard), rank_(rank), daemons_(daemons), peer_(std::move(peer)) {}

uint32_t MetaCoordinator::place_directory(uint64_t parent, const std::string& name, uint32_t daemons) {
    if (daemons <= 1) return 0;
    return static_cast<uint32_t>(mix(parent ^ std::hash<std::string>()(name)) % daemons);
}

template <class Rpc>
Result<typename Rpc::Response> MetaCoordinator::step_call(uint32_t s, const typename Rpc::Request& req) {
    const auto deadline = std::chrono::steady_clock::now() + kStepRetry;
    for (;;) {
        auto ep = peer(s);
        Result<typename Rpc::Response> r = ep.ok() ? rpc::call<Rpc>(*ep, req) : Result<typename Rpc::Response>(ep.status());
        if (r.ok()) return r;
        if (!cured_by_newer_table(r.status().code()) || std::chrono::steady_clock::now() >= deadline) return r;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}

Result<transport::Endpoint> MetaCoordinator::peer(uint32_t rank) {
    if (rank >= daemons_) return Status(Code::invalid, "no daemon for shard " + std::to_string(rank));
    return peer_(rank);
}

// ---- steps ---------------------------------------------------------------------------------
Result<Attr> MetaCoordinator::getattr_at(uint64_t ino) {
    const uint32_t s = proto::shard_of(ino);
    if (s == rank_) return shard_.getattr(ino);
    auto r = step_call<proto::Getattr>(s, proto::InoRequest{ino});
    if (!r.ok()) return r.status().with_context("daemon " + std::to_string(s));
    return from_wire(*r);
}

Result<std::optional<DirEntry>> MetaCoordinator::dentry_at(const Cred& cred, uint64_t parent,
                                                           const std::string& name) {
    const uint32_t s = proto::shard_of(parent);
    Result<DirEntry> e = Status(Code::internal, "unset");
    if (s == rank_) {
        e = shard_.lookup_dentry(cred, parent, name);
    } else {
        auto r = step_call<proto::PeerLookupDentry>(s, proto::NameRequest{proto::Cred{cred.uid, cred.gid, cred.groups}, parent, name});
        if (r.ok())
            e = DirEntry{r->name, r->ino, static_cast<FileType>(r->type)};
        else
            e = r.status().with_context("daemon " + std::to_string(s));
    }
    if (e.ok()) return std::optional<DirEntry>(std::move(*e));
    if (e.status().code() == Code::not_found) return std::optional<DirEntry>();
    return e.status();
}

Result<bool> MetaCoordinator::has_entries_at(uint64_t dir) {
    const uint32_t s = proto::shard_of(dir);
    if (s == rank_) {
        auto d = shard_.readdir(kRoot, dir, "", 1);
        if (!d.ok()) return d.status();
        return !d->entries.empty();
    }
    auto r = step_call<proto::Readdir>(s, proto::ReaddirRequest{kPeerCred, dir, "", 1});
    if (!r.ok()) return r.status().with_context("daemon " + std::to_string(s));
    return !r->entries.empty();
}

Result<uint64_t> MetaCoordinator::parent_at(uint64_t ino) {
    const uint32_t s = proto::shard_of(ino);
    if (s == rank_) return shard_.parent_of(ino);
    auto r = step_call<proto::PeerParent>(s, proto::InoRequest{ino});
    if (!r.ok()) return r.status().with_context("daemon " + std::to_string(s));
    return r->parent;
}

uint64_t MetaCoordinator::done_below() {
    auto d = shard_.intents_done_below();
    return d.ok() ? *d : 0; // (unsaid this time: the records stay until a later step)
}

Result<RenameInsertResult> MetaCoordinator::rename_insert_at(const Intent& in) {
    const uint32_t s = proto::shard_of(in.new_parent);
    if (s == rank_) return shard_.rename_insert(in.id, in.new_parent, in.new_name, in.ino, in.type, in.expect_ino);
    auto r = step_call<proto::PeerRenameInsert>(s, proto::RenameInsertRequest{in.id, in.new_parent, in.new_name, in.ino, static_cast<uint8_t>(in.type),
                                        in.expect_ino, done_below()});
    if (!r.ok()) return r.status().with_context("daemon " + std::to_string(s));
    RenameInsertResult out;
    out.replaced_ino = r->replaced_ino;
    out.replaced_type = static_cast<FileType>(r->replaced_type);
    if (r->replaced_here) out.replaced_here = from_wire(*r->replaced_here);
    return out;
}

Result<UnlinkResult> MetaCoordinator::nlink_at(uint64_t intent, IntentStep step, uint64_t ino, int delta) {
    const uint32_t s = proto::shard_of(ino);
    if (s == rank_) return shard_.adjust_nlink_once(intent, step, ino, delta);
    auto r = step_call<proto::PeerAdjustNlink>(s, proto::NlinkRequest{intent, uint32_t(step), ino, delta, done_below()});
    if (!r.ok()) return r.status().with_context("daemon " + std::to_string(s));
    return from_wire(*r);
}

Result<std::optional<int64_t>> MetaCoordinator::abort_at(uint32_t s, uint64_t intent, IntentStep step) {
    if (s == rank_) return shard_.abort_step_result(intent, step);
    auto r = step_call<proto::PeerAbortStep>(s, proto::StepRequest{intent, uint32_t(step), s, done_below()});
    if (!r.ok()) return r.status().with_context("daemon " + std::to_string(s));
    if (!r->ran) return std::optional<int64_t>();
    return std::optional<int64_t>(r->result);
}

Result<Attr> MetaCoordinator::create_inode_at(uint32_t s, uint64_t intent, const Attr& tmpl) {
    if (s == rank_) return shard_.create_inode_once(intent, tmpl);
    auto r = step_call<proto::PeerCreateInode>(s, proto::CreateInodeRequest{to_wire(tmpl), tmpl.parent, intent, s, done_below()});
    if (!r.ok()) return r.status().with_context("daemon " + std::to_string(s));
    return from_wire(*r);
}

Status MetaCoordinator::delete_inode_at(uint64_t ino) {
    const uint32_t s = proto::shard_of(ino);
    Status st;
    if (s == rank_) {
        st = shard_.delete_inode(ino);
    } else {
        auto r = step_call<proto::PeerDeleteInode>(s, proto::InoRequest{ino});
        st = r.ok() ? Status::OK() : r.status().with_context("daemon " + std::to_string(s));
    }
    // Gone already (a repeat): the step's aim is reached.
    return st.code() == Code::not_found ? Status::OK() : st;
}

Status MetaCoordinator::set_parent_at(uint64_t ino, uint64_t parent) {
    const uint32_t s = proto::shard_of(ino);
    if (s == rank_) return shard_.set_parent(ino, parent);
    auto r = step_call<proto::PeerSetParent>(s, proto::SetParentRequest{ino, parent});
    return r.ok() ? Status::OK() : r.status().with_context("daemon " + std::to_string(s));
}

Result<uint64_t> MetaCoordinator::begin_live(const std::function<Result<uint64_t>()>& begin) {
    std::lock_guard l(live_mu_);
    auto id = begin();
    if (id.ok()) live_.insert(*id);
    return id;
}

MetaCoordinator::LiveIntent::~LiveIntent() {
    std::lock_guard l(co_.live_mu_);
    co_.live_.erase(id_);
}

Status MetaCoordinator::left_pending(const Intent& in, const Status& why) {
    pending_ = true;
    JOBFS_WARN("intent %llu (%s in %llu) kept for a retry: %s", static_cast<unsigned long long>(in.id),
               quoted(in.name).c_str(), static_cast<unsigned long long>(in.parent), why.to_string().c_str());
    return Status(Code::io, why.message() + " (the operation is finished or undone once that daemon answers)");
}

// ---- lookup --------------------------------------------------------------------------------
Result<Attr> MetaCoordinator::lookup(const Cred& cred, uint64_t parent, const std::string& name) {
    auto a = shard_.lookup(cred, parent, name);
    if (a.ok() || a.status().code() != Code::cross_device) return a;
    auto d = shard_.lookup_dentry(cred, parent, name);
    if (!d.ok()) return d.status();
    return getattr_at(d->ino);
}

// ---- mkdir ---------------------------------------------------------------------------------
Result<Attr> MetaCoordinator::mkdir(const Cred& cred, uint64_t parent, const std::string& name, uint32_t mode) {
    const uint32_t target = place_directory(parent, name, daemons_);
    if (target == rank_) return shard_.mkdir(cred, parent, name, mode);
    if (pending_) resume();
    // The checks mkdir makes here, in Linux's order, before anything is created there.
    auto dir = shard_.getattr(parent);
    if (!dir.ok()) return dir.status();
    if (dir->type != FileType::directory) return Status(Code::not_dir, "mkdir in a non-directory");
    auto existing = shard_.lookup_dentry(cred, parent, name);
    if (existing.ok()) return Status(Code::exists, "mkdir " + quoted(name) + ": exists");
    if (existing.status().code() != Code::not_found) return existing.status();
    if (!may_access(*dir, cred, kMayWrite | kMayExec)) return denied("mkdir", name);

    Attr tmpl;
    tmpl.type = FileType::directory;
    tmpl.mode = S_IFDIR | (mode & 07777);
    tmpl.uid = cred.uid;
    // A setgid directory passes its group, and the bit, on to new subdirectories.
    const bool setgid = dir->mode & S_ISGID;
    tmpl.gid = setgid ? dir->gid : cred.gid;
    if (setgid) tmpl.mode |= S_ISGID;
    tmpl.nlink = 2;
    tmpl.chunk_size = dir->chunk_size;
    tmpl.stripe_count = dir->stripe_count;
    tmpl.replicas = dir->replicas;
    tmpl.parent = parent;

    Intent in;
    in.op = IntentOp::mkdir;
    in.parent = parent;
    in.name = name;
    in.type = FileType::directory;
    in.peer = target;
    auto id = begin_live([&] { return shard_.intent_begin(in); });
    if (!id.ok()) return id.status();
    in.id = *id;
    const LiveIntent live(*this, in.id);
    auto made = create_inode_at(target, in.id, tmpl);
    if (!made.ok()) {
        Status undone = undo_mkdir(in);
        if (!undone.ok()) return undone;
        return made.status().with_context("mkdir " + quoted(name) + " on daemon " + std::to_string(target));
    }
    Status linked = shard_.intent_finish_insert(in.id, parent, name, made->ino, FileType::directory);
    if (!linked.ok()) {
        // Lost a race for the name (or the shard failed): take the new inode back.
        in.ino = made->ino;
        Status undone = undo_mkdir(in);
        if (!undone.ok()) return undone;
        return linked;
    }
    return made;
}

Status MetaCoordinator::undo_mkdir(const Intent& in) {
    auto ran = abort_at(in.peer, in.id, IntentStep::create_inode);
    if (!ran.ok()) return left_pending(in, ran.status());
    if (ran->has_value()) {
        Status gone = delete_inode_at(uint64_t(**ran));
        if (!gone.ok()) return left_pending(in, gone);
    }
    return shard_.intent_end(in.id);
}

// ---- rmdir and unlink of an inode that lives elsewhere -------------------------------------
Status MetaCoordinator::rmdir(const Cred& cred, uint64_t parent, const std::string& name) {
    Status local = shard_.rmdir(cred, parent, name);
    if (local.code() != Code::cross_device) return local;
    if (pending_) resume();
    auto d = shard_.lookup_dentry(cred, parent, name);
    if (!d.ok()) return d.status();
    if (d->type != FileType::directory) return Status(Code::not_dir, "rmdir " + quoted(name) + ": not a directory");
    auto dir = shard_.getattr(parent);
    if (!dir.ok()) return dir.status();
    if (!may_access(*dir, cred, kMayWrite | kMayExec)) return denied("rmdir", name);
    if ((dir->mode & S_ISVTX) && cred.uid != 0 && cred.uid != dir->uid) {
        auto child = getattr_at(d->ino);
        if (!child.ok()) return child.status();
        if (sticky_blocks(*dir, *child, cred))
            return Status(Code::not_permitted, "rmdir " + quoted(name) + ": sticky directory");
    }
    auto full = has_entries_at(d->ino);
    if (!full.ok()) return full.status();
    if (*full) return Status(Code::not_empty, "rmdir " + quoted(name) + ": directory not empty");
    Intent in;
    in.op = IntentOp::rmdir;
    in.parent = parent;
    in.name = name;
    in.ino = d->ino;
    in.type = FileType::directory;
    auto id = begin_live([&] { return shard_.intent_begin_remove(in); });
    if (!id.ok()) return id.status();
    in.id = *id;
    const LiveIntent live(*this, in.id);
    return drive_rmdir(in);
}

Status MetaCoordinator::drive_rmdir(const Intent& in) {
    Status gone = delete_inode_at(in.ino);
    if (gone.code() == Code::not_empty) {
        // Someone created an entry in it meanwhile: the directory stays, under its name.
        Status back = shard_.intent_finish_insert(in.id, in.parent, in.name, in.ino, FileType::directory);
        if (!back.ok()) {
            JOBFS_ERROR("rmdir %s: cannot put back the entry of non-empty directory %llu: %s", quoted(in.name).c_str(),
                        static_cast<unsigned long long>(in.ino), back.to_string().c_str());
            (void)shard_.intent_end(in.id);
        }
        return Status(Code::not_empty, "rmdir " + quoted(in.name) + ": directory not empty");
    }
    if (!gone.ok()) {
        if (unsettled(gone)) return left_pending(in, gone);
        JOBFS_ERROR("rmdir %s: entry removed, inode %llu not: %s", quoted(in.name).c_str(),
                    static_cast<unsigned long long>(in.ino), gone.to_string().c_str());
    }
    return shard_.intent_end(in.id);
}

Result<UnlinkResult> MetaCoordinator::unlink(const Cred& cred, uint64_t parent, const std::string& name) {
    auto local = shard_.unlink(cred, parent, name);
    if (local.ok() || local.status().code() != Code::cross_device) return local;
    if (pending_) resume();
    auto d = shard_.lookup_dentry(cred, parent, name);
    if (!d.ok()) return d.status();
    if (d->type == FileType::directory) return Status(Code::is_dir, "unlink " + quoted(name) + ": is a directory");
    auto dir = shard_.getattr(parent);
    if (!dir.ok()) return dir.status();
    if (!may_access(*dir, cred, kMayWrite | kMayExec)) return denied("unlink", name);
    if ((dir->mode & S_ISVTX) && cred.uid != 0 && cred.uid != dir->uid) {
        auto victim = getattr_at(d->ino);
        if (!victim.ok()) return victim.status();
        if (sticky_blocks(*dir, *victim, cred))
            return Status(Code::not_permitted, "unlink " + quoted(name) + ": sticky directory");
    }
    Intent in;
    in.op = IntentOp::unlink;
    in.parent = parent;
    in.name = name;
    in.ino = d->ino;
    in.type = d->type;
    auto id = begin_live([&] { return shard_.intent_begin_remove(in); });
    if (!id.ok()) return id.status();
    in.id = *id;
    const LiveIntent live(*this, in.id);
    return drive_unlink(in);
}

Result<UnlinkResult> MetaCoordinator::drive_unlink(const Intent& in) {
    auto dropped = nlink_at(in.id, IntentStep::drop_link, in.ino, -1);
    if (!dropped.ok()) {
        if (unsettled(dropped.status())) return left_pending(in, dropped.status());
        // The name is gone either way; a link count that cannot drop is logged, not retried.
        JOBFS_ERROR("unlink %s: entry removed, link count of %llu unchanged: %s", quoted(in.name).c_str(),
                    static_cast<unsigned long long>(in.ino), dropped.status().to_string().c_str());
        Status ended = shard_.intent_end(in.id);
        if (!ended.ok()) return ended;
        UnlinkResult none;
        none.attr.ino = in.ino;
        return none;
    }
    Status ended = shard_.intent_end(in.id);
    if (!ended.ok()) return ended;
    return dropped;
}

// ---- link to an inode that lives elsewhere -------------------------------------------------
Result<Attr> MetaCoordinator::link(const Cred& cred, uint64_t ino, uint64_t new_parent, const std::string& name) {
    auto local = shard_.link(cred, ino, new_parent, name);
    if (local.ok() || local.status().code() != Code::cross_device) return local;
    if (pending_) resume();
    auto dir = shard_.getattr(new_parent);
    if (!dir.ok()) return dir.status();
    if (dir->type != FileType::directory) return Status(Code::not_dir, "link in a non-directory");
    auto existing = shard_.lookup_dentry(cred, new_parent, name);
    if (existing.ok()) return Status(Code::exists, "link " + quoted(name) + ": exists");
    if (existing.status().code() != Code::not_found) return existing.status();
    if (!may_access(*dir, cred, kMayWrite | kMayExec)) return denied("link", name);
    auto target = getattr_at(ino);
    if (!target.ok()) return target.status();
    if (target->type == FileType::directory)
        return Status(Code::not_permitted, "link " + quoted(name) + ": hard link to a directory");
    Intent in;
    in.op = IntentOp::link;
    in.parent = new_parent;
    in.name = name;
    in.ino = ino;
    in.type = target->type;
    auto id = begin_live([&] { return shard_.intent_begin(in); });
    if (!id.ok()) return id.status();
    in.id = *id;
    const LiveIntent live(*this, in.id);
    return drive_link(in);
}

Result<Attr> MetaCoordinator::drive_link(const Intent& in) {
    const uint32_t s = proto::shard_of(in.ino);
    auto added = nlink_at(in.id, IntentStep::add_link, in.ino, +1);
    if (!added.ok()) {
        auto ran = abort_at(s, in.id, IntentStep::add_link);
        if (!ran.ok()) return left_pending(in, ran.status());
        if (!ran->has_value()) {
            Status ended = shard_.intent_end(in.id);
            if (!ended.ok()) return ended;
            return added.status();
        }
        // It had run after all: go on as if it had answered.
        auto now = getattr_at(in.ino);
        if (!now.ok()) return left_pending(in, now.status());
        added = UnlinkResult{std::move(*now), false};
    }
    Status linked = shard_.intent_finish_insert(in.id, in.parent, in.name, in.ino, in.type);
    if (!linked.ok()) {
        auto undone = nlink_at(in.id, IntentStep::drop_link, in.ino, -1);
        if (!undone.ok() && unsettled(undone.status())) return left_pending(in, undone.status());
        Status ended = shard_.intent_end(in.id);
        if (!ended.ok()) return ended;
        return linked;
    }
    return added->attr;
}

// ---- rename --------------------------------------------------------------------------------
Result<std::vector<Result<RenameResult>>> MetaCoordinator::rename_in_dir(const Cred& cred, uint64_t parent,
                                                                        MetaShard::RenamePairs names, uint32_t flags) {
    std::vector<Result<RenameResult>> out;
    out.reserve(names.size());
    while (out.size() < names.size()) {
        const auto rest = names.subspan(out.size());
        auto batch = shard_.rename_in_dir(cred, parent, rest, flags);
        if (!batch.ok()) { // nothing of this batch changed
            if (out.empty()) return batch.status(); // nor of the request: that is its answer
            // Each entry of this batch and after fails with it.
            while (out.size() < names.size()) out.push_back(batch.status());
            break;
        }
        if (batch->empty()) break; // cannot be: a batch takes at least its first entry
        for (auto& r : *batch) out.push_back(std::move(r));
        if (!out.empty() && !out.back().ok() && out.back().status().code() == Code::cross_device) {
            const auto& [from, to] = names[out.size() - 1];
            out.back() = rename_across(cred, parent, from, parent, to, flags); // the shard's own try was the batch's
        }
    }
    return out;
}

Result<RenameResult> MetaCoordinator::rename(const Cred& cred, uint64_t old_parent, const std::string& old_name,
                                             uint64_t new_parent, const std::string& new_name, uint32_t flags) {
    auto local = shard_.rename(cred, old_parent, old_name, new_parent, new_name, flags);
    if (local.ok() || local.status().code() != Code::cross_device) return local;
    return rename_across(cred, old_parent, old_name, new_parent, new_name, flags);
}

Result<RenameResult> MetaCoordinator::rename_across(const Cred& cred, uint64_t old_parent, const std::string& old_name,
                                                    uint64_t new_parent, const std::string& new_name, uint32_t flags) {
    if (flags & kRenameExchange)
        return Status(Code::cross_device, "RENAME_EXCHANGE of entries on different daemons is not supported");
    if (pending_) resume();
    const std::string what = "rename " + quoted(old_name) + " to " + quoted(new_name);

    // Everything is checked before anything changes, in the order Linux reports errors.
    auto odir = shard_.getattr(old_parent);
    if (!odir.ok()) return odir.status();
    auto src = shard_.lookup_dentry(cred, old_parent, old_name);
    if (!src.ok()) return src.status();
    auto ndir = getattr_at(new_parent);
    if (!ndir.ok()) return ndir.status();
    if (ndir->type != FileType::directory) return Status(Code::not_dir, what + ": target parent is not a directory");
    if (!may_access(*ndir, cred, kMayExec)) return denied("rename to", new_name);
    auto dst = dentry_at(cred, new_parent, new_name);
    if (!dst.ok()) return dst.status();
    if ((flags & kRenameNoReplace) && dst->has_value()) return Status(Code::exists, what + ": target exists");
    if (!may_access(*odir, cred, kMayWrite | kMayExec)) return denied("rename", old_name);
    if (!may_access(*ndir, cred, kMayWrite | kMayExec)) return denied("rename to", new_name);
    // Two names of one inode: POSIX says do nothing, successfully.
    if (dst->has_value() && (*dst)->ino == src->ino) return RenameResult{};

    auto sattr = getattr_at(src->ino);
    if (!sattr.ok()) return sattr.status();
    const bool src_dir = sattr->type == FileType::directory;
    std::optional<Attr> dattr;
    if (dst->has_value()) {
        auto d = getattr_at((*dst)->ino);
        if (!d.ok()) return d.status();
        dattr = std::move(*d);
        const bool dst_dir = dattr->type == FileType::directory;
        if (src_dir && !dst_dir) return Status(Code::not_dir, what + ": target is not a directory");
        if (!src_dir && dst_dir) return Status(Code::is_dir, what + ": target is a directory");
        if (dst_dir) {
            auto full = has_entries_at(dattr->ino);
            if (!full.ok()) return full.status();
            if (*full) return Status(Code::not_empty, what + ": target directory not empty");
        }
    }
    if (sticky_blocks(*odir, *sattr, cred)) return Status(Code::not_permitted, what + ": sticky directory");
    if (dattr && sticky_blocks(*ndir, *dattr, cred)) return Status(Code::not_permitted, what + ": sticky target directory");
    if (src_dir && old_parent != new_parent) {
        // Its ".." changes: that needs write permission on it, and it must not move below itself.
        if (!may_access(*sattr, cred, kMayWrite)) return denied("rename", old_name);
        uint64_t cur = new_parent;
        for (int depth = 0; cur != 0; ++depth) {
            if (cur == src->ino) return Status(Code::invalid, what + ": would move a directory into its own subtree");
            if (depth == kMaxWalk) return Status(Code::loop, what + ": directory tree deeper than " + std::to_string(kMaxWalk));
            auto up = parent_at(cur);
            if (!up.ok()) return up.status();
            cur = *up;
        }
    }

    if (after_rename_checks_for_test) after_rename_checks_for_test();

    Intent in;
    in.op = IntentOp::rename;
    in.parent = old_parent;
    in.name = old_name;
    in.ino = src->ino;
    in.type = src->type;
    in.new_parent = new_parent;
    in.new_name = new_name;
    in.expect_ino = dst->has_value() ? (*dst)->ino : 0;
    auto id = begin_live([&] { return shard_.intent_begin(in); });
    if (!id.ok()) return id.status();
    in.id = *id;
    const LiveIntent live(*this, in.id);
    return drive_rename(in);
}

Result<RenameResult> MetaCoordinator::drive_rename(const Intent& in) {
    const uint32_t dest = proto::shard_of(in.new_parent);
    auto ins = rename_insert_at(in);
    if (!ins.ok()) {
        auto ran = abort_at(dest, in.id, IntentStep::rename_insert);
        if (!ran.ok()) return left_pending(in, ran.status());
        if (!ran->has_value()) {
            // Never applied, and now never will be: the rename did not happen.
            Status ended = shard_.intent_end(in.id);
            if (!ended.ok()) return ended;
            return ins.status();
        }
        RenameInsertResult late;
        late.replaced_ino = uint64_t(**ran);
        late.repeated = true;
        ins = late;
    }
    // Past the point of no return: the new name is in place. Every step below only moves
    // forward; one that cannot be settled now keeps the intent for resume().
    RenameResult out;
    Status unsettled_step;
    if (ins->replaced_here) {
        out.replaced = std::move(ins->replaced_here);
    } else if (ins->replaced_ino != 0) {
        auto dropped = nlink_at(in.id, IntentStep::drop_replaced, ins->replaced_ino, -1);
        if (dropped.ok()) {
            out.replaced = std::move(*dropped);
        } else if (unsettled(dropped.status())) {
            unsettled_step = dropped.status();
        } else {
            JOBFS_ERROR("rename %s: the replaced inode %llu keeps a link: %s", quoted(in.name).c_str(),
                        static_cast<unsigned long long>(ins->replaced_ino), dropped.status().to_string().c_str());
        }
    }
    if (in.parent != in.new_parent) {
        Status moved = set_parent_at(in.ino, in.new_parent);
        if (!moved.ok() && unsettled(moved)) unsettled_step = moved;
    }
    Intent finish = in;
    Status removed = unsettled_step.ok() ? shard_.intent_finish_rename(finish) : Status::OK();
    if (!unsettled_step.ok() || !removed.ok()) return left_pending(in, unsettled_step.ok() ? removed : unsettled_step);
    return out;
}

// ---- re-driving the log --------------------------------------------------------------------
void MetaCoordinator::resume() {
    std::unique_lock lock(resume_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    pending_ = false;
    Result<std::vector<Intent>> list = Status(Code::internal, "unread");
    std::set<uint64_t> live;
    {
        std::lock_guard l(live_mu_);
        list = shard_.intents();
        live = live_;
    }
    if (!list.ok()) {
        JOBFS_ERROR("cannot read the intent log: %s", list.status().to_string().c_str());
        pending_ = true;
        return;
    }
    for (const Intent& in : *list) {
        if (live.count(in.id)) continue; // its request is driving it now
        Status s;
        switch (in.op) {
        case IntentOp::rename: s = drive_rename(in).status(); break;
        case IntentOp::link: s = drive_link(in).status(); break;
        case IntentOp::unlink: s = drive_unlink(in).status(); break;
        case IntentOp::rmdir: s = drive_rmdir(in); break;
        case IntentOp::mkdir: s = undo_mkdir(in); break;
        }
        JOBFS_INFO("re-drove intent %llu (op %d, %s in %llu): %s", static_cast<unsigned long long>(in.id), int(in.op),
                   quoted(in.name).c_str(), static_cast<unsigned long long>(in.parent), s.to_string().c_str());
    }
}

} // namespace jobfs::server
