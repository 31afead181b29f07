#include "server/meta_service.h"

#include <boost/asio/post.hpp>

#include <sys/stat.h>

#include <optional>

#include "daemon_protocol.h"
#include "log.h"
#include "server/meta_wire.h"

namespace jobfs::server {

using transport::ServerCall;
namespace rpc = transport::rpc;

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
    : coordinator_(std::make_shared<MetaCoordinator>(shard, rank, daemons, peer)),
      coord_pool_(std::make_shared<boost::asio::thread_pool>(kCoordinatorThreads)),
      rename_lock_(std::make_shared<RenameLock>(w, rank, peer)) {
    auto co = coordinator_;
    auto cpool = coord_pool_;
    MetaShard& sh = shard;
    serve_on_pool<proto::Getattr>(w, pool, [&sh](const proto::InoRequest& r) { return attr_out(sh.getattr(r.ino)); });
    serve_on_pool<proto::Lookup>(w, *cpool, [co](const proto::NameRequest& r) {
        return attr_out(co->lookup(from_wire(r.cred), r.parent, r.name));
    });
    serve_on_pool<proto::Create>(w, pool, [&sh](const proto::CreateRequest& r) {
        return attr_out(sh.create(from_wire(r.cred), r.parent, r.name, r.mode, r.exclusive,
                                  Layout{r.chunk_size, r.stripe_count, r.replicas}));
    });
    serve_on_pool<proto::Mkdir>(w, *cpool, [co](const proto::MkdirRequest& r) {
        return attr_out(co->mkdir(from_wire(r.cred), r.parent, r.name, r.mode));
    });
    serve_on_pool<proto::Symlink>(w, pool, [&sh](const proto::SymlinkRequest& r) {
        return attr_out(sh.symlink(from_wire(r.cred), r.parent, r.name, r.target));
    });
    serve_on_pool<proto::Readlink>(w, pool, [&sh](const proto::InoRequest& r) -> Result<proto::LinkTarget> {
        auto t = sh.readlink(r.ino);
        if (!t.ok()) return t.status();
        return proto::LinkTarget{*t};
    });
    // A link is coordinated by the shard of its new entry; a request that reached another
    // daemon is passed on to it without holding a thread while it waits.
    rpc::serve<proto::Link>(w, [co, rank, peer, cpool, &pool](ServerCall call, proto::LinkRequest&& r) {
        const uint32_t owner = proto::shard_of(r.new_parent);
        if (owner == rank) {
            boost::asio::post(*cpool, [co, call, r = std::move(r)] {
                auto a = co->link(from_wire(r.cred), r.ino, r.new_parent, r.name);
                if (!a.ok()) return call.reply(a.status());
                rpc::reply<proto::Link>(call, to_wire(*a));
            });
            return;
        }
        boost::asio::post(pool, [peer, owner, call, r = std::move(r)] {
            auto ep = peer(owner);
            if (!ep.ok()) return call.reply(ep.status());
            rpc::call_async<proto::Link>(*ep, r, {}, [call](Result<proto::Attr> a, size_t) {
                if (!a.ok()) return call.reply(a.status());
                rpc::reply<proto::Link>(call, *a);
            });
        });
    });
    serve_on_pool<proto::Unlink>(w, *cpool, [co](const proto::NameRequest& r) -> Result<proto::UnlinkResponse> {
        auto u = co->unlink(from_wire(r.cred), r.parent, r.name);
        if (!u.ok()) return u.status();
        return to_wire(*u);
    });
    serve_on_pool<proto::Rmdir>(w, *cpool, [co](const proto::NameRequest& r) {
        return co->rmdir(from_wire(r.cred), r.parent, r.name);
    });
    auto renames = rename_lock_;
    serve_on_pool<proto::Rename>(w, *cpool, [co, renames](const proto::RenameRequest& r) -> Result<proto::RenameResponse> {
        // Between two directories: under the file system's rename lock, from before the loop
        // check to the end (rename_lock.h).
        std::optional<RenameLock::Held> held;
        if (r.old_parent != r.new_parent) {
            auto h = renames->acquire();
            if (!h.ok()) return h.status();
            held.emplace(std::move(*h));
        }
        auto res = co->rename(from_wire(r.cred), r.old_parent, r.old_name, r.new_parent, r.new_name, r.flags);
        if (!res.ok()) return res.status();
        proto::RenameResponse out;
        if (res->replaced) out.replaced = to_wire(*res->replaced);
        return out;
    });
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
        return attr_out(sh.set_layout(from_wire(r.cred), r.ino, Layout{r.chunk_size, r.stripe_count, r.replicas}));
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

    // The other shards' steps of cross-shard operations (meta_coordinator.h).
    serve_on_pool<proto::PeerCreateInode>(w, pool, [&sh](const proto::CreateInodeRequest& r) {
        Attr tmpl = from_wire(r.tmpl);
        tmpl.parent = r.parent;
        return attr_out(r.intent ? sh.create_inode_once(r.intent, tmpl) : sh.create_inode(tmpl));
    });
    serve_on_pool<proto::PeerDeleteInode>(w, pool, [&sh](const proto::InoRequest& r) { return sh.delete_inode(r.ino); });
    serve_on_pool<proto::PeerLookupDentry>(w, pool, [&sh](const proto::NameRequest& r) -> Result<proto::DirEntry> {
        auto e = sh.lookup_dentry(from_wire(r.cred), r.parent, r.name);
        if (!e.ok()) return e.status();
        return proto::DirEntry{e->name, e->ino, static_cast<uint8_t>(e->type)};
    });
    serve_on_pool<proto::PeerRenameInsert>(w, pool, [&sh](const proto::RenameInsertRequest& r)
                                                         -> Result<proto::RenameInsertResponse> {
        auto i = sh.rename_insert(r.intent, r.parent, r.name, r.ino, static_cast<FileType>(r.type), r.expect_ino);
        if (!i.ok()) return i.status();
        proto::RenameInsertResponse out;
        out.replaced_ino = i->replaced_here ? 0 : i->replaced_ino;
        out.replaced_type = static_cast<uint8_t>(i->replaced_type);
        if (i->replaced_here) out.replaced_here = to_wire(*i->replaced_here);
        return out;
    });
    serve_on_pool<proto::PeerAdjustNlink>(w, pool, [&sh](const proto::NlinkRequest& r) -> Result<proto::UnlinkResponse> {
        auto u = sh.adjust_nlink_once(r.intent, static_cast<IntentStep>(r.step), r.ino, r.delta);
        if (!u.ok()) return u.status();
        return to_wire(*u);
    });
    serve_on_pool<proto::PeerAbortStep>(w, pool, [&sh](const proto::StepRequest& r) -> Result<proto::StepResult> {
        auto a = sh.abort_step_result(r.intent, static_cast<IntentStep>(r.step));
        if (!a.ok()) return a.status();
        return proto::StepResult{a->has_value(), a->value_or(0)};
    });
    serve_on_pool<proto::PeerSetParent>(w, pool, [&sh](const proto::SetParentRequest& r) {
        return sh.set_parent(r.ino, r.parent);
    });
    serve_on_pool<proto::PeerParent>(w, pool, [&sh](const proto::InoRequest& r) -> Result<proto::ParentResponse> {
        auto p = sh.parent_of(r.ino);
        if (!p.ok()) return p.status();
        return proto::ParentResponse{*p};
    });
}

MetaService::~MetaService() { stop(); }

void MetaService::stop() { coord_pool_->join(); }

void MetaService::resume_intents() {
    auto co = coordinator_;
    boost::asio::post(*coord_pool_, [co] { co->resume(); });
}

} // namespace jobfs::server
