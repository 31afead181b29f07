// meta_service_test: the namespace RPCs over real UCX between three in-process daemons, each
// with its own SQLite shard; directories spread over the shards and are reached across them.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <boost/asio/thread_pool.hpp>

#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "daemon_protocol.h"
#include "server/meta_service.h"

namespace jobfs::server {
namespace {

namespace rpc = transport::rpc;
using namespace std::chrono_literals;

constexpr uint32_t kDaemons = 3;
const proto::Cred kRoot{0, 0, {}};
const proto::Cred kUser{1000, 1000, {}};

struct TestDaemon {
    std::unique_ptr<MetaShard> shard;
    std::unique_ptr<boost::asio::thread_pool> pool;
    std::unique_ptr<transport::Worker> worker;
    std::unique_ptr<MetaService> service;
    uint16_t port = 0;
    std::mutex mu;
    std::map<uint32_t, transport::Endpoint> peers;
};

class MetaServiceTest : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/jobfs-meta-XXXXXX";
        dir = ::mkdtemp(tmpl);
        for (uint32_t r = 0; r < kDaemons; ++r) daemons.push_back(std::make_unique<TestDaemon>());
        for (uint32_t r = 0; r < kDaemons; ++r) {
            TestDaemon& d = *daemons[r];
            auto sh = MetaShard::open(dir + "/meta" + std::to_string(r) + ".db", r);
            ASSERT_TRUE(sh.ok()) << sh.status().to_string();
            d.shard = std::move(*sh);
            d.pool = std::make_unique<boost::asio::thread_pool>(2);
            transport::WorkerOptions o;
            o.name = "jobfsd." + std::to_string(r);
            auto w = transport::Worker::create(o);
            ASSERT_TRUE(w.ok());
            d.worker = std::move(*w);
            // Peers are connected on first use, as a daemon's peer table would be.
            auto peer = [this, &d](uint32_t rank) -> Result<transport::Endpoint> {
                std::lock_guard l(d.mu);
                auto it = d.peers.find(rank);
                if (it != d.peers.end()) return it->second;
                auto ep = d.worker->connect("127.0.0.1", daemons[rank]->port);
                if (ep.ok()) d.peers[rank] = *ep;
                return ep;
            };
            d.service = std::make_unique<MetaService>(*d.worker, *d.shard, r, kDaemons, peer, *d.pool);
            auto port = d.worker->listen("127.0.0.1", 0);
            ASSERT_TRUE(port.ok());
            d.port = *port;
        }
        transport::WorkerOptions o;
        o.name = "client";
        auto c = transport::Worker::create(o);
        ASSERT_TRUE(c.ok());
        client = std::move(*c);
        for (uint32_t r = 0; r < kDaemons; ++r) {
            auto ep = client->connect("127.0.0.1", daemons[r]->port);
            ASSERT_TRUE(ep.ok());
            eps.push_back(*ep);
        }
    }
    void TearDown() override {
        eps.clear();
        client.reset();
        for (auto& d : daemons) {
            d->peers.clear();
            d->worker.reset();
            d->pool->join();
        }
        daemons.clear();
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }

    const transport::Endpoint& at(uint64_t ino) { return eps[proto::shard_of(ino)]; }

    Result<proto::Attr> mkdir(uint64_t parent, const std::string& name, proto::Cred cred = kRoot, uint32_t mode = 0755) {
        return rpc::call<proto::Mkdir>(at(parent), proto::MkdirRequest{cred, parent, name, mode});
    }
    Result<proto::Attr> create(uint64_t parent, const std::string& name, proto::Cred cred = kRoot) {
        return rpc::call<proto::Create>(at(parent), proto::CreateRequest{cred, parent, name, 0644, true, 0, 0});
    }
    Result<proto::Attr> lookup(uint64_t parent, const std::string& name, proto::Cred cred = kRoot) {
        return rpc::call<proto::Lookup>(at(parent), proto::NameRequest{cred, parent, name});
    }
    Status rmdir(uint64_t parent, const std::string& name, proto::Cred cred = kRoot) {
        return rpc::call<proto::Rmdir>(at(parent), proto::NameRequest{cred, parent, name}).status();
    }

    std::string dir;
    std::vector<std::unique_ptr<TestDaemon>> daemons;
    std::unique_ptr<transport::Worker> client;
    std::vector<transport::Endpoint> eps;
};

TEST_F(MetaServiceTest, DirectoriesSpreadOverShardsAndResolveAcrossThem) {
    std::set<uint32_t> shards;
    std::map<std::string, uint64_t> made;
    for (int i = 0; i < 30; ++i) {
        std::string name = "dir" + std::to_string(i);
        auto a = mkdir(1, name);
        ASSERT_TRUE(a.ok()) << name << ": " << a.status().to_string();
        EXPECT_EQ(a->type, 2);
        EXPECT_EQ(a->nlink, 2u);
        EXPECT_EQ(proto::shard_of(a->ino), MetaService::place_directory(1, name, kDaemons));
        shards.insert(proto::shard_of(a->ino));
        made[name] = a->ino;
    }
    EXPECT_EQ(shards.size(), kDaemons) << "30 directories all landed on the same shards";
    for (auto& [name, ino] : made) {
        auto a = lookup(1, name);
        ASSERT_TRUE(a.ok()) << a.status().to_string();
        EXPECT_EQ(a->ino, ino);
        EXPECT_EQ(a->mode & 0777, 0755u);
        // Files go to their directory's shard, wherever that is.
        auto f = create(ino, "file");
        ASSERT_TRUE(f.ok()) << f.status().to_string();
        EXPECT_EQ(proto::shard_of(f->ino), proto::shard_of(ino));
        EXPECT_EQ(lookup(ino, "file")->ino, f->ino);
    }
    auto root = rpc::call<proto::Getattr>(at(1), proto::InoRequest{1});
    ASSERT_TRUE(root.ok());
    EXPECT_EQ(root->nlink, 32u); // . and .. plus one for each subdirectory
    auto list = rpc::call<proto::Readdir>(at(1), proto::ReaddirRequest{kRoot, 1, "", 1000});
    ASSERT_TRUE(list.ok());
    EXPECT_EQ(list->entries.size(), 30u);
}

TEST_F(MetaServiceTest, NestedDirectoriesAcrossShards) {
    uint64_t parent = 1;
    for (int depth = 0; depth < 8; ++depth) {
        auto a = mkdir(parent, "level" + std::to_string(depth));
        ASSERT_TRUE(a.ok()) << a.status().to_string();
        parent = a->ino;
    }
    auto f = create(parent, "deep.bin");
    ASSERT_TRUE(f.ok());
    auto w = rpc::call<proto::ExtendSize>(at(f->ino), proto::ExtendSizeRequest{f->ino, 12345});
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(w->size, 12345u);
}

TEST_F(MetaServiceTest, MkdirErrorsAreExact) {
    ASSERT_TRUE(mkdir(1, "taken").ok());
    EXPECT_EQ(mkdir(1, "taken").status().code(), Code::exists);
    EXPECT_EQ(mkdir(1, "a/b").status().code(), Code::invalid);
    EXPECT_EQ(mkdir(1, std::string(300, 'x')).status().code(), Code::name_too_long);
    auto f = create(1, "plain");
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(mkdir(f->ino, "sub").status().code(), Code::not_dir);
    // A user without write permission on the root (0755 root) may not add names there.
    for (int i = 0; i < 10; ++i) {
        auto r = mkdir(1, "denied" + std::to_string(i), kUser);
        ASSERT_FALSE(r.ok());
        EXPECT_EQ(r.status().code(), Code::permission) << r.status().to_string();
    }
    EXPECT_EQ(lookup(1, "denied0").status().code(), Code::not_found);
}

TEST_F(MetaServiceTest, RmdirAcrossShards) {
    for (int i = 0; i < 12; ++i) {
        std::string name = "gone" + std::to_string(i);
        auto d = mkdir(1, name);
        ASSERT_TRUE(d.ok());
        ASSERT_TRUE(create(d->ino, "f").ok());
        EXPECT_EQ(rmdir(1, name).code(), Code::not_empty);
        ASSERT_TRUE(rpc::call<proto::Unlink>(at(d->ino), proto::NameRequest{kRoot, d->ino, "f"}).ok());
        Status s = rmdir(1, name);
        ASSERT_TRUE(s.ok()) << name << ": " << s.to_string();
        EXPECT_EQ(lookup(1, name).status().code(), Code::not_found);
        EXPECT_EQ(rpc::call<proto::Getattr>(at(d->ino), proto::InoRequest{d->ino}).status().code(), Code::not_found);
    }
    EXPECT_EQ(rmdir(1, "never-there").code(), Code::not_found);
    auto f = create(1, "file-not-dir");
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(rmdir(1, "file-not-dir").code(), Code::not_dir);
    auto root = rpc::call<proto::Getattr>(at(1), proto::InoRequest{1});
    EXPECT_EQ(root->nlink, 2u);
}

TEST_F(MetaServiceTest, RenameWithinAShardAndRefusedAcrossShards) {
    auto a = create(1, "a");
    ASSERT_TRUE(a.ok());
    auto r = rpc::call<proto::Rename>(at(1), proto::RenameRequest{kRoot, 1, "a", 1, "b", 0});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(lookup(1, "b")->ino, a->ino);
    // Find a directory on another shard than the root's, and try to move a file there.
    uint64_t other = 0;
    for (int i = 0; i < 20 && !other; ++i) {
        auto d = mkdir(1, "d" + std::to_string(i));
        ASSERT_TRUE(d.ok());
        if (proto::shard_of(d->ino) != 0) other = d->ino;
    }
    ASSERT_NE(other, 0u);
    auto x = rpc::call<proto::Rename>(at(1), proto::RenameRequest{kRoot, 1, "b", other, "b", 0});
    ASSERT_FALSE(x.ok());
    EXPECT_EQ(x.status().code(), Code::cross_device);
    EXPECT_EQ(x.status().to_errno(), EXDEV);
    EXPECT_EQ(lookup(1, "b")->ino, a->ino); // nothing moved
}

TEST_F(MetaServiceTest, AttributesXattrsAndSymlinks) {
    auto f = create(1, "f");
    ASSERT_TRUE(f.ok());
    proto::SetattrRequest sa;
    sa.cred = kRoot;
    sa.ino = f->ino;
    sa.mode = 0600;
    sa.uid = 1000;
    auto s = rpc::call<proto::Setattr>(at(f->ino), sa);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->mode & 07777, 0600u);
    EXPECT_EQ(s->uid, 1000u);
    ASSERT_TRUE(rpc::call<proto::Setxattr>(at(f->ino), proto::XattrRequest{kRoot, f->ino, "user.k", "v", 0}).ok());
    auto v = rpc::call<proto::Getxattr>(at(f->ino), proto::XattrRequest{kRoot, f->ino, "user.k", "", 0});
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(v->value, "v");
    EXPECT_EQ(rpc::call<proto::Getxattr>(at(f->ino), proto::XattrRequest{kRoot, f->ino, "user.none", "", 0}).status().code(),
              Code::no_data);
    auto l = rpc::call<proto::Symlink>(at(1), proto::SymlinkRequest{kRoot, 1, "ln", "f"});
    ASSERT_TRUE(l.ok());
    EXPECT_EQ(rpc::call<proto::Readlink>(at(l->ino), proto::InoRequest{l->ino})->target, "f");
    auto counts = rpc::call<proto::MetaCounts>(at(1), proto::Empty{});
    ASSERT_TRUE(counts.ok());
    EXPECT_GE(counts->inodes, 3u);
}

} // namespace
} // namespace jobfs::server
