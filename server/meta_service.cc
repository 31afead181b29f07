#include "server/meta_service.h"

#include <boost/asio/post.hpp>

#include <sys/stat.h>

#include "daemon_protocol.h"
#include "log.h"

namespace jobfs::server {

using transport::ServerCall;
namespace rpc = transport::rpc;

namespace {

Cred from_wire(const proto::Cred& c) { return Cred{c.uid, c.gid, c.groups}; }

proto::Attr to_wire(const Attr& a) {
    return proto::Attr{a.ino,      static_cast<uint8_t>(a.type), a.mode,     a.uid,        a.gid,
                       a.size,     a.nlink,                      a.atime_ns, a.mtime_ns,   a.ctime_ns,
                       a.rdev,     a.target,                     a.chunk_size, a.stripe_count, a.generation};
}

Attr from_wire(const proto::Attr& w) {
    Attr a;
    a.ino = w.ino;
    a.type = static_cast<FileType>(w.type);
    a.mode = w.mode;
    a.uid = w.uid;
    a.gid = w.gid;
    a.size = w.size;
    a.nlink = w.nlink;
    a.atime_ns = w.atime_ns;
    a.mtime_ns = w.mtime_ns;
    a.ctime_ns = w.ctime_ns;
    a.rdev = w.rdev;
    a.target = w.target;
    a.chunk_size = w.chunk_size;
    a.stripe_count = w.stripe_count;
    a.generation = w.generation;
    return a;
}

proto::UnlinkResponse to_wire(const UnlinkResult& u) { return proto::UnlinkResponse{to_wire(u.attr), u.last_link}; }

uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

const proto::Cred kPeerCred{0, 0, {}}; // daemons act for a client whose rights they checked

} // namespace

uint32_t MetaService::place_directory(uint64_t parent, const std::string& name, uint32_t daemons) {
    if (daemons <= 1) return 0;
    return static_cast<uint32_t>(mix(parent ^ std::hash<std::string>()(name)) % daemons);
}

// The handlers' bodies: each runs on a pool thread and returns what the reply carries.
struct MetaService::Ops {
    MetaService& s;

    Result<transport::Endpoint> peer(uint32_t rank) {
        if (rank >= s.daemons_) return Status(Code::invalid, "no daemon for shard " + std::to_string(rank));
        return s.peer_(rank);
    }

    Result<Attr> remote_getattr(uint64_t ino) {
        auto ep = peer(shard_of(ino));
        if (!ep.ok()) return ep.status();
        auto r = rpc::call<proto::Getattr>(*ep, proto::InoRequest{ino});
        if (!r.ok()) return r.status().with_context("daemon " + std::to_string(shard_of(ino)));
        return from_wire(*r);
    }

    Result<Attr> lookup(const proto::NameRequest& r) {
        Cred cred = from_wire(r.cred);
        auto a = s.shard_.lookup(cred, r.parent, r.name);
        if (a.ok() || a.status().code() != Code::cross_device) return a;
        auto d = s.shard_.lookup_dentry(cred, r.parent, r.name);
        if (!d.ok()) return d.status();
        return remote_getattr(d->ino);
    }

    Result<Attr> mkdir(const proto::MkdirRequest& r) {
        Cred cred = from_wire(r.cred);
        const uint32_t target = place_directory(r.parent, r.name, s.daemons_);
        if (target == s.rank_) return s.shard_.mkdir(cred, r.parent, r.name, r.mode);
        // The checks mkdir would make here, before anything is created there.
        auto parent = s.shard_.getattr(r.parent);
        if (!parent.ok()) return parent.status();
        if (parent->type != FileType::directory) return Status(Code::not_dir, "mkdir in a non-directory");
        if (!may_access(*parent, cred, kMayWrite | kMayExec))
            return Status(Code::permission, "mkdir '" + r.name + "': permission denied");
        auto existing = s.shard_.lookup_dentry(cred, r.parent, r.name);
        if (existing.ok()) return Status(Code::exists, "mkdir '" + r.name + "': exists");
        if (existing.status().code() != Code::not_found) return existing.status();

        proto::Attr tmpl;
        tmpl.type = static_cast<uint8_t>(FileType::directory);
        tmpl.mode = S_IFDIR | (r.mode & 07777);
        tmpl.uid = cred.uid;
        // A setgid directory passes its group, and the bit, on to new subdirectories.
        const bool setgid = parent->mode & S_ISGID;
        tmpl.gid = setgid ? parent->gid : cred.gid;
        if (setgid) tmpl.mode |= S_ISGID;
        tmpl.nlink = 2;
        tmpl.chunk_size = parent->chunk_size;
        tmpl.stripe_count = parent->stripe_count;
        auto ep = peer(target);
        if (!ep.ok()) return ep.status();
        auto made = rpc::call<proto::PeerCreateInode>(*ep, proto::CreateInodeRequest{tmpl});
        if (!made.ok()) return made.status().with_context("mkdir '" + r.name + "' on daemon " + std::to_string(target));
        Status linked = s.shard_.insert_dentry(r.parent, r.name, made->ino, FileType::directory);
        if (!linked.ok()) {
            // Lost a race for the name (or the shard failed): take the new inode back.
            auto undo = rpc::call<proto::PeerDeleteInode>(*ep, proto::InoRequest{made->ino});
            if (!undo.ok())
                JOBFS_WARN("orphan directory inode %llu on daemon %u: %s", static_cast<unsigned long long>(made->ino),
                           target, undo.status().to_string().c_str());
            return linked;
        }
        return from_wire(*made);
    }

    Status rmdir(const proto::NameRequest& r) {
        Cred cred = from_wire(r.cred);
        Status local = s.shard_.rmdir(cred, r.parent, r.name);
        if (local.code() != Code::cross_device) return local;
        auto d = s.shard_.lookup_dentry(cred, r.parent, r.name);
        if (!d.ok()) return d.status();
        if (d->type != FileType::directory) return Status(Code::not_dir, "rmdir '" + r.name + "': not a directory");
        auto parent = s.shard_.getattr(r.parent);
        if (!parent.ok()) return parent.status();
        if (!may_access(*parent, cred, kMayWrite | kMayExec))
            return Status(Code::permission, "rmdir '" + r.name + "': permission denied");
        auto ep = peer(shard_of(d->ino));
        if (!ep.ok()) return ep.status();
        if ((parent->mode & S_ISVTX) && cred.uid != 0 && cred.uid != parent->uid) {
            auto child = remote_getattr(d->ino);
            if (!child.ok()) return child.status();
            if (child->uid != cred.uid) return Status(Code::not_permitted, "rmdir '" + r.name + "': sticky directory");
        }
        auto list = rpc::call<proto::Readdir>(*ep, proto::ReaddirRequest{kPeerCred, d->ino, "", 1});
        if (!list.ok()) return list.status();
        if (!list->entries.empty()) return Status(Code::not_empty, "rmdir '" + r.name + "': directory not empty");
        auto removed = s.shard_.remove_dentry(r.parent, r.name);
        if (!removed.ok()) return removed.status();
        auto gone = rpc::call<proto::PeerDeleteInode>(*ep, proto::InoRequest{d->ino});
        if (!gone.ok())
            JOBFS_WARN("rmdir '%s': entry removed, inode %llu left on daemon %u: %s", r.name.c_str(),
                       static_cast<unsigned long long>(d->ino), shard_of(d->ino), gone.status().to_string().c_str());
        return Status::OK();
    }

    Result<proto::RenameResponse> rename(const proto::RenameRequest& r) {
        if (shard_of(r.new_parent) != s.rank_)
            return Status(Code::cross_device, "rename between directories on different daemons is not supported yet");
        auto res = s.shard_.rename(from_wire(r.cred), r.old_parent, r.old_name, r.new_parent, r.new_name, r.flags);
        if (!res.ok()) return res.status();
        proto::RenameResponse out;
        if (res->replaced) out.replaced = to_wire(*res->replaced);
        return out;
    }
};

namespace {

// Posts `work` to the pool and replies with its result (a Status or a Result of a wire type).
template <class Rpc, class Work>
void serve_on_pool(transport::Worker& w, boost::asio::thread_pool& pool, Work work) {
    rpc::serve<Rpc>(w, [&pool, work](ServerCall call, typename Rpc::Request&& req) {
        boost::asio::post(pool, [call, req = std::move(req), work] {
            auto r = work(req);
            if constexpr (std::is_same_v<decltype(r), Status>) {
                call.reply(r);
            } else {
                if (!r.ok()) return call.reply(r.status());
                rpc::reply<Rpc>(call, *r);
            }
        });
    });
}

template <class T>
Result<proto::Attr> attr_out(const Result<T>& r) {
    if (!r.ok()) return r.status();
    return to_wire(*r);
}

} // namespace

MetaService::MetaService(transport::Worker& w, MetaShard& shard, uint32_t rank, uint32_t daemons, PeerFn peer,
                         boost::asio::thread_pool& pool)
    : shard_(shard), rank_(rank), daemons_(daemons), peer_(std::move(peer)) {
    auto ops = std::make_shared<Ops>(Ops{*this});
    MetaShard& sh = shard_;
    serve_on_pool<proto::Getattr>(w, pool, [&sh](const proto::InoRequest& r) { return attr_out(sh.getattr(r.ino)); });
    serve_on_pool<proto::Lookup>(w, pool, [ops](const proto::NameRequest& r) { return attr_out(ops->lookup(r)); });
    serve_on_pool<proto::Create>(w, pool, [&sh](const proto::CreateRequest& r) {
        return attr_out(sh.create(from_wire(r.cred), r.parent, r.name, r.mode, r.exclusive,
                                  Layout{r.chunk_size, r.stripe_count}));
    });
    serve_on_pool<proto::Mkdir>(w, pool, [ops](const proto::MkdirRequest& r) { return attr_out(ops->mkdir(r)); });
    serve_on_pool<proto::Symlink>(w, pool, [&sh](const proto::SymlinkRequest& r) {
        return attr_out(sh.symlink(from_wire(r.cred), r.parent, r.name, r.target));
    });
    serve_on_pool<proto::Readlink>(w, pool, [&sh](const proto::InoRequest& r) -> Result<proto::LinkTarget> {
        auto t = sh.readlink(r.ino);
        if (!t.ok()) return t.status();
        return proto::LinkTarget{*t};
    });
    serve_on_pool<proto::Link>(w, pool, [&sh](const proto::LinkRequest& r) {
        return attr_out(sh.link(from_wire(r.cred), r.ino, r.new_parent, r.name));
    });
    serve_on_pool<proto::Unlink>(w, pool, [&sh](const proto::NameRequest& r) -> Result<proto::UnlinkResponse> {
        auto u = sh.unlink(from_wire(r.cred), r.parent, r.name);
        if (!u.ok()) return u.status();
        return to_wire(*u);
    });
    serve_on_pool<proto::Rmdir>(w, pool, [ops](const proto::NameRequest& r) { return ops->rmdir(r); });
    serve_on_pool<proto::Rename>(w, pool, [ops](const proto::RenameRequest& r) { return ops->rename(r); });
    serve_on_pool<proto::Readdir>(w, pool, [&sh](const proto::ReaddirRequest& r) -> Result<proto::ReaddirResponse> {
        auto d = sh.readdir(from_wire(r.cred), r.ino, r.after, r.max_entries ? r.max_entries : 1000);
        if (!d.ok()) return d.status();
        proto::ReaddirResponse out;
        out.more = d->more;
        for (auto& e : d->entries) out.entries.push_back(proto::DirEntry{e.name, e.ino, static_cast<uint8_t>(e.type)});
        return out;
    });
    serve_on_pool<proto::Setattr>(w, pool, [&sh](const proto::SetattrRequest& r) {
        SetAttr set;
        set.mode = r.mode;
        set.uid = r.uid;
        set.gid = r.gid;
        set.size = r.size;
        set.atime_ns = r.atime_ns;
        set.mtime_ns = r.mtime_ns;
        set.atime_now = r.atime_now;
        set.mtime_now = r.mtime_now;
        return attr_out(sh.setattr(from_wire(r.cred), r.ino, set));
    });
    serve_on_pool<proto::ExtendSize>(w, pool, [&sh](const proto::ExtendSizeRequest& r) {
        return attr_out(sh.extend_size(r.ino, r.size));
    });
    serve_on_pool<proto::SetLayout>(w, pool, [&sh](const proto::LayoutRequest& r) {
        return attr_out(sh.set_layout(from_wire(r.cred), r.ino, Layout{r.chunk_size, r.stripe_count}));
    });
    serve_on_pool<proto::Setxattr>(w, pool, [&sh](const proto::XattrRequest& r) {
        return sh.setxattr(from_wire(r.cred), r.ino, r.name, r.value, r.flags);
    });
    serve_on_pool<proto::Getxattr>(w, pool, [&sh](const proto::XattrRequest& r) -> Result<proto::XattrValue> {
        auto v = sh.getxattr(from_wire(r.cred), r.ino, r.name);
        if (!v.ok()) return v.status();
        return proto::XattrValue{*v};
    });
    serve_on_pool<proto::Listxattr>(w, pool, [&sh](const proto::XattrRequest& r) -> Result<proto::XattrList> {
        auto v = sh.listxattr(from_wire(r.cred), r.ino);
        if (!v.ok()) return v.status();
        return proto::XattrList{*v};
    });
    serve_on_pool<proto::Removexattr>(w, pool, [&sh](const proto::XattrRequest& r) {
        return sh.removexattr(from_wire(r.cred), r.ino, r.name);
    });
    serve_on_pool<proto::MetaCounts>(w, pool, [&sh](const proto::Empty&) -> Result<proto::CountsResponse> {
        auto c = sh.counts();
        if (!c.ok()) return c.status();
        return proto::CountsResponse{c->inodes, c->dentries};
    });
    serve_on_pool<proto::PeerCreateInode>(w, pool, [&sh](const proto::CreateInodeRequest& r) {
        return attr_out(sh.create_inode(from_wire(r.tmpl)));
    });
    serve_on_pool<proto::PeerDeleteInode>(w, pool, [&sh](const proto::InoRequest& r) { return sh.delete_inode(r.ino); });
}

} // namespace jobfs::server
