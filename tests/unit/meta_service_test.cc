// meta_service_test: the namespace RPCs over real UCX between three in-process daemons, each
// with its own SQLite shard; directories spread over the shards and are reached across them.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

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
    // The next request to block_once's daemon waits for gate (a slow peer, for one request).
    std::atomic<int> block_once{-1};
    std::promise<void> gate;
    std::shared_future<void> gate_opened = gate.get_future().share();
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
                int blocked = static_cast<int>(rank);
                if (d.block_once.compare_exchange_strong(blocked, -1)) d.gate_opened.wait();
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
            d->service->stop();
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
        return rpc::call<proto::Create>(at(parent), proto::CreateRequest{cred, parent, name, 0644, true, 0, 0, 0, 0, {}});
    }
    Result<proto::Attr> lookup(uint64_t parent, const std::string& name, proto::Cred cred = kRoot) {
        return rpc::call<proto::Lookup>(at(parent), proto::NameRequest{cred, parent, name});
    }
    Status rmdir(uint64_t parent, const std::string& name, proto::Cred cred = kRoot) {
        return rpc::call<proto::Rmdir>(at(parent), proto::NameRequest{cred, parent, name}).status();
    }

    Result<proto::RenameResponse> rename(uint64_t op, const std::string& on, uint64_t np, const std::string& nn,
                                         uint32_t flags = 0, proto::Cred cred = kRoot) {
        return rpc::call<proto::Rename>(at(op), proto::RenameRequest{cred, op, on, np, nn, flags});
    }
    std::vector<std::string> names(uint64_t d) {
        auto list = rpc::call<proto::Readdir>(at(d), proto::ReaddirRequest{kRoot, d, "", 1000});
        EXPECT_TRUE(list.ok()) << list.status().to_string();
        std::vector<std::string> out;
        if (list.ok())
            for (auto& e : list->entries) out.push_back(e.name);
        return out;
    }
    // Two directories under the root whose inodes (and so entries) are on different shards.
    std::pair<uint64_t, uint64_t> dirs_on_two_shards() {
        uint64_t a = 0, b = 0;
        for (int i = 0; i < 50 && !(a && b); ++i) {
            auto d = mkdir(1, "dir" + std::to_string(i));
            EXPECT_TRUE(d.ok());
            if (!d.ok()) break;
            if (!a) a = d->ino;
            else if (proto::shard_of(d->ino) != proto::shard_of(a)) b = d->ino;
        }
        EXPECT_TRUE(a && b);
        return {a, b};
    }
    MetaShard& shard(uint64_t ino) { return *daemons[proto::shard_of(ino)]->shard; }
    MetaShard& coord_of(uint64_t dir) { return shard(dir); }
    bool no_intents() {
        for (auto& d : daemons) {
            auto l = d->shard->intents();
            if (!l.ok() || !l->empty()) return false;
        }
        return true;
    }
    // Re-drives the intent log of dir's shard (as a restart does) and waits for it to empty.
    void resume(uint64_t dir) {
        TestDaemon& d = *daemons[proto::shard_of(dir)];
        d.service->resume_intents();
        for (int i = 0; i < 500; ++i) {
            auto l = d.shard->intents();
            if (l.ok() && l->empty()) return;
            std::this_thread::sleep_for(10ms);
        }
        ADD_FAILURE() << "intents of shard " << proto::shard_of(dir) << " not resolved";
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

TEST_F(MetaServiceTest, RenameWithinAShard) {
    auto a = create(1, "a");
    ASSERT_TRUE(a.ok());
    auto r = rename(1, "a", 1, "b");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(lookup(1, "b")->ino, a->ino);
    EXPECT_EQ(lookup(1, "a").status().code(), Code::not_found);
}

TEST_F(MetaServiceTest, RenameFilesAcrossShards) {
    auto [d0, d1] = dirs_on_two_shards();
    auto f = create(d0, "f");
    ASSERT_TRUE(f.ok());
    // Into a directory of another shard: the inode stays where it is, the name moves.
    auto r = rename(d0, "f", d1, "g");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_FALSE(r->replaced.has_value());
    EXPECT_EQ(lookup(d0, "f").status().code(), Code::not_found);
    auto g = lookup(d1, "g");
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_EQ(g->ino, f->ino);
    EXPECT_EQ(g->nlink, 1u);
    EXPECT_EQ(names(d0), std::vector<std::string>{});
    EXPECT_EQ(names(d1), std::vector<std::string>{"g"});
    // Over an existing file there: the old one is replaced and its last link reported.
    auto h = create(d0, "h");
    ASSERT_TRUE(h.ok());
    r = rename(d1, "g", d0, "h");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE(r->replaced.has_value());
    EXPECT_EQ(r->replaced->attr.ino, h->ino);
    EXPECT_TRUE(r->replaced->last_link);
    EXPECT_EQ(lookup(d0, "h")->ino, f->ino);
    EXPECT_EQ(rpc::call<proto::Getattr>(at(h->ino), proto::InoRequest{h->ino}).status().code(), Code::not_found);
    // A file whose inode lives elsewhere is unlinked through its entry's shard.
    ASSERT_TRUE(rename(d0, "h", d1, "back").ok());
    auto u = rpc::call<proto::Unlink>(at(d1), proto::NameRequest{kRoot, d1, "back"});
    ASSERT_TRUE(u.ok()) << u.status().to_string();
    EXPECT_TRUE(u->last_link);
    EXPECT_EQ(rpc::call<proto::Getattr>(at(f->ino), proto::InoRequest{f->ino}).status().code(), Code::not_found);
    EXPECT_TRUE(no_intents());
}

// Every cross-shard step leaves a record on the shard it ran on (so that a repeat is a no-op);
// once its intent is finished nobody repeats it, and the next step from the same coordinator
// takes the record away. Without that the table grew by a row per cross-shard mkdir, rename
// and link for the life of the file system.
TEST_F(MetaServiceTest, StepRecordsOfFinishedIntentsAreForgotten) {
    auto applied = [&] {
        uint64_t n = 0;
        for (auto& d : daemons) n += d->shard->counts()->applied;
        return n;
    };
    auto [d0, d1] = dirs_on_two_shards();
    const uint64_t before = applied();
    int cross = 0;
    for (int i = 0; i < 40; ++i) {
        const std::string name = "m" + std::to_string(i);
        auto a = mkdir(d0, name);
        ASSERT_TRUE(a.ok()) << a.status().to_string();
        if (proto::shard_of(a->ino) != proto::shard_of(d0)) cross++;
        auto f = create(d0, "f" + std::to_string(i));
        ASSERT_TRUE(f.ok());
        ASSERT_TRUE(rename(d0, "f" + std::to_string(i), d1, "g" + std::to_string(i)).ok());
    }
    ASSERT_GT(cross, 10); // the directories spread over the shards
    EXPECT_TRUE(no_intents());
    // At most the records of the last intent of each coordinator per shard stay.
    EXPECT_LE(applied(), before + 2 * kDaemons * kDaemons) << "of " << cross << " cross-shard mkdirs and 40 renames";
    // Every renamed file is there, linked once (MetaShardTest.StepRecordsGoOnlyBelowWhat...
    // checks that a live intent's records stay, so that its repeats are still no-ops).
    for (int i = 0; i < 40; ++i) {
        auto g = lookup(d1, "g" + std::to_string(i));
        ASSERT_TRUE(g.ok()) << g.status().to_string();
        EXPECT_EQ(g->nlink, 1u);
    }
}

TEST_F(MetaServiceTest, RenameErrorsAcrossShardsChangeNothing) {
    auto [d0, d1] = dirs_on_two_shards();
    auto f = create(d0, "f");
    auto sub = mkdir(d1, "sub");
    auto full = mkdir(d1, "full");
    ASSERT_TRUE(f.ok() && sub.ok() && full.ok());
    ASSERT_TRUE(create(full->ino, "x").ok());
    auto dir_in_d0 = mkdir(d0, "dir");
    ASSERT_TRUE(dir_in_d0.ok());
    EXPECT_EQ(rename(d0, "missing", d1, "m").status().code(), Code::not_found);
    EXPECT_EQ(rename(d0, "f", d1, "sub").status().code(), Code::is_dir);
    EXPECT_EQ(rename(d0, "dir", d1, "full").status().code(), Code::not_empty);
    ASSERT_TRUE(create(d1, "taken").ok());
    EXPECT_EQ(rename(d0, "f", d1, "taken", kRenameNoReplace).status().code(), Code::exists);
    EXPECT_EQ(rename(d0, "dir", d1, "taken").status().code(), Code::not_dir);
    EXPECT_EQ(rename(d0, "f", d1, "a/b").status().code(), Code::invalid);
    EXPECT_EQ(rename(d0, "f", d1, std::string(256, 'n')).status().code(), Code::name_too_long);
    EXPECT_EQ(rename(d0, "f", f->ino, "x").status().code(), Code::not_dir);
    // RENAME_EXCHANGE is one shard's transaction only.
    EXPECT_EQ(rename(d0, "f", d1, "taken", kRenameExchange).status().code(), Code::cross_device);
    // A user without write permission on the directories (root's 0755).
    EXPECT_EQ(rename(d0, "f", d1, "mine", 0, kUser).status().code(), Code::permission);
    EXPECT_EQ(names(d0), (std::vector<std::string>{"dir", "f"}));
    EXPECT_EQ(names(d1), (std::vector<std::string>{"full", "sub", "taken"}));
    EXPECT_TRUE(no_intents());
}

TEST_F(MetaServiceTest, RenameDirectoriesAcrossShardsKeepsTheTreeAndRefusesLoops) {
    // A chain of directories that crosses shards at (nearly) every level.
    std::vector<uint64_t> chain{1};
    for (int i = 0; i < 6; ++i) {
        auto d = mkdir(chain.back(), "l" + std::to_string(i));
        ASSERT_TRUE(d.ok());
        chain.push_back(d->ino);
    }
    ASSERT_TRUE(create(chain[6], "leaf").ok());
    // Moving l0 below its own descendants is refused, whichever shard holds them.
    for (size_t i = 2; i < chain.size(); ++i) {
        auto r = rename(1, "l0", chain[i], "loop");
        ASSERT_FALSE(r.ok()) << "moving l0 below level " << i;
        EXPECT_EQ(r.status().code(), Code::invalid) << r.status().to_string();
    }
    // Move l3 (with its subtree) to the root, then under l1: contents follow, nlink and ".." too.
    ASSERT_TRUE(rename(chain[3], "l3", 1, "top").ok());
    EXPECT_EQ(lookup(1, "top")->ino, chain[4]);
    EXPECT_EQ(lookup(chain[6], "leaf").status().code(), Code::ok);
    auto root = rpc::call<proto::Getattr>(at(1), proto::InoRequest{1});
    EXPECT_EQ(root->nlink, 4u); // ., .., l0, top
    auto l2 = rpc::call<proto::Getattr>(at(chain[3]), proto::InoRequest{chain[3]});
    EXPECT_EQ(l2->nlink, 2u);
    auto parent = rpc::call<proto::PeerParent>(at(chain[4]), proto::InoRequest{chain[4]});
    ASSERT_TRUE(parent.ok());
    EXPECT_EQ(parent->parent, 1u);
    // Now l0's subtree no longer holds "top": moving l0 under it is still a loop? No: allowed.
    ASSERT_TRUE(rename(1, "top", chain[1], "again").ok());
    EXPECT_EQ(rpc::call<proto::PeerParent>(at(chain[4]), proto::InoRequest{chain[4]})->parent, chain[1]);
    EXPECT_EQ(rename(1, "l0", chain[4], "x").status().code(), Code::invalid);
    EXPECT_TRUE(no_intents());
}

TEST_F(MetaServiceTest, HardLinksAcrossShards) {
    auto [d0, d1] = dirs_on_two_shards();
    auto f = create(d0, "f");
    ASSERT_TRUE(f.ok());
    auto l = rpc::call<proto::Link>(at(d1), proto::LinkRequest{kRoot, f->ino, d1, "link"});
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    EXPECT_EQ(l->nlink, 2u);
    EXPECT_EQ(lookup(d1, "link")->ino, f->ino);
    // A request sent to the inode's daemon is passed to the new entry's.
    auto l2 = rpc::call<proto::Link>(at(f->ino), proto::LinkRequest{kRoot, f->ino, d1, "link2"});
    ASSERT_TRUE(l2.ok()) << l2.status().to_string();
    EXPECT_EQ(l2->nlink, 3u);
    EXPECT_EQ(rpc::call<proto::Link>(at(d1), proto::LinkRequest{kRoot, f->ino, d1, "link"}).status().code(),
              Code::exists);
    EXPECT_EQ(rpc::call<proto::Link>(at(d1), proto::LinkRequest{kRoot, d0, d1, "dirlink"}).status().code(),
              Code::not_permitted);
    EXPECT_EQ(rpc::call<proto::Link>(at(d1), proto::LinkRequest{kUser, f->ino, d1, "nope"}).status().code(),
              Code::permission);
    auto u = rpc::call<proto::Unlink>(at(d0), proto::NameRequest{kRoot, d0, "f"});
    ASSERT_TRUE(u.ok());
    EXPECT_FALSE(u->last_link);
    EXPECT_EQ(u->attr.nlink, 2u);
    u = rpc::call<proto::Unlink>(at(d1), proto::NameRequest{kRoot, d1, "link"});
    ASSERT_TRUE(u.ok()) << u.status().to_string();
    EXPECT_FALSE(u->last_link);
    u = rpc::call<proto::Unlink>(at(d1), proto::NameRequest{kRoot, d1, "link2"});
    ASSERT_TRUE(u.ok()) << u.status().to_string();
    EXPECT_TRUE(u->last_link);
    EXPECT_EQ(rpc::call<proto::Getattr>(at(f->ino), proto::InoRequest{f->ino}).status().code(), Code::not_found);
    EXPECT_TRUE(no_intents());
}

TEST_F(MetaServiceTest, ConcurrentCrossShardRenamesLoseNoFile) {
    auto [d0, d1] = dirs_on_two_shards();
    constexpr int kFiles = 8, kRounds = 20;
    for (int i = 0; i < kFiles; ++i) ASSERT_TRUE(create(d0, "f" + std::to_string(i)).ok());
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            for (int round = 0; round < kRounds; ++round) {
                for (int i = t; i < kFiles; i += 4) {
                    std::string n = "f" + std::to_string(i);
                    uint64_t from = round % 2 ? d1 : d0, to = round % 2 ? d0 : d1;
                    if (!rename(from, n, to, n).ok()) ++failures;
                }
            }
        });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(names(d0).size(), size_t(kFiles)); // an even number of rounds brings all back
    EXPECT_TRUE(names(d1).empty());
    EXPECT_TRUE(no_intents());
}

// `mv /a /b/` and `mv /b /a/` at the same time, both through daemon 0 (the root's shard), with
// the first held after its loop check until the second is done (a hook in the coordinator):
// without the rename lock both passed their checks and together made a loop cut off from the
// root. Now the second waits for the first and its check sees the first's move: exactly one
// succeeds, the other is refused with EINVAL, and both directories still reach the root.
TEST_F(MetaServiceTest, ConcurrentDirectoryMovesCannotMakeALoop) {
    uint64_t a = 0, b = 0;
    for (int i = 0; i < 100 && !(a && b); ++i) {
        const std::string n = "m" + std::to_string(i);
        if (MetaService::place_directory(1, n, kDaemons) == 0) continue; // not through the coordinator
        auto d = mkdir(1, n);
        ASSERT_TRUE(d.ok()) << d.status().to_string();
        (a ? b : a) = d->ino;
    }
    ASSERT_TRUE(a && b);
    auto name_of = [&](uint64_t ino) {
        for (int i = 0; i < 100; ++i) {
            auto l = lookup(1, "m" + std::to_string(i));
            if (l.ok() && l->ino == ino) return "m" + std::to_string(i);
        }
        return std::string();
    };
    const std::string na = name_of(a), nb = name_of(b);
    std::promise<void> first_checked, second_done;
    auto checked = first_checked.get_future();
    auto done = second_done.get_future().share();
    std::atomic<int> calls{0};
    daemons[0]->service->coordinator_for_test().after_rename_checks_for_test = [&] {
        if (calls.fetch_add(1) != 0) return;
        first_checked.set_value();
        done.wait_for(3s); // the second rename ends first, if it can
    };
    Result<proto::RenameResponse> r1 = Status(Code::internal, "not run"), r2 = r1;
    std::thread t1([&] { r1 = rename(1, na, b, na); });
    ASSERT_EQ(checked.wait_for(10s), std::future_status::ready);
    std::thread t2([&] {
        r2 = rename(1, nb, a, nb);
        second_done.set_value();
    });
    t1.join();
    t2.join();
    daemons[0]->service->coordinator_for_test().after_rename_checks_for_test = nullptr;
    EXPECT_NE(r1.ok(), r2.ok()) << "first: " << r1.status().to_string() << "; second: " << r2.status().to_string();
    const Status& refused = r1.ok() ? r2.status() : r1.status();
    EXPECT_EQ(refused.code(), Code::invalid) << refused.to_string();
    auto reaches_root = [&](uint64_t ino) {
        for (int depth = 0; depth < 10; ++depth) {
            if (ino == 1) return true;
            auto p = rpc::call<proto::PeerParent>(at(ino), proto::InoRequest{ino});
            if (!p.ok()) return false;
            ino = p->parent == 0 ? 1 : p->parent;
        }
        return false;
    };
    EXPECT_TRUE(reaches_root(a));
    EXPECT_TRUE(reaches_root(b));
    EXPECT_TRUE(no_intents());
}

// Directory delegations and operations of several shards. A holder is played by the test's
// client connection: it answers a recall at once (it holds nothing queued).
void answer_recalls(transport::Worker& w, std::atomic<int>& recalls) {
    rpc::serve<proto::DirRecall>(w, [&recalls](transport::ServerCall call, proto::DirRecallRequest&&) {
        recalls++;
        rpc::reply<proto::DirRecall>(call, proto::Empty{});
    });
}

// A directory delegated while a rename of one of its files to another shard has passed its
// checks (granted from the coordinator's hook, before the rename logs its intent): the intent
// is not logged while the directory is delegated; the delegation is recalled and the rename
// runs again, to its end. (Logged anyway, the rename met the delegation in its last step, the
// old name's removal, after the new name was in place: EIO, and the file under both names
// until the intent was re-driven after the delegation ended.)
TEST_F(MetaServiceTest, ARenameOutOfADirectoryDelegatedMeanwhileRecallsItAndFinishes) {
    std::atomic<int> recalls{0};
    answer_recalls(*client, recalls);
    const auto [a, b] = dirs_on_two_shards();
    ASSERT_TRUE(create(a, "f").ok());
    MetaCoordinator& co = daemons[proto::shard_of(a)]->service->coordinator_for_test();
    std::atomic<int> checked{0};
    Result<proto::DelegateResponse> granted = Status(Code::internal, "not asked");
    co.after_rename_checks_for_test = [&] {
        if (checked.fetch_add(1) == 0) granted = rpc::call<proto::DelegateDir>(at(a), proto::DelegateRequest{kRoot, a, 77});
    };
    auto r = rename(a, "f", b, "f");
    co.after_rename_checks_for_test = nullptr;
    ASSERT_TRUE(granted.ok()) << granted.status().to_string();
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(checked.load(), 2); // checked again after the recall
    EXPECT_EQ(recalls.load(), 1);
    EXPECT_TRUE(names(a).empty());
    EXPECT_EQ(names(b), std::vector<std::string>{"f"});
    EXPECT_TRUE(no_intents());
}

// The other order: a rename to another shard has logged its intent and waits for the target's
// shard (a slow peer), and a client asks for the source directory meanwhile. The grant is
// refused (EBUSY: the asker tries later) until the rename is done; then it is given. (Granted,
// the rename's last step met the delegation: EIO, the file under both names.)
TEST_F(MetaServiceTest, NoDelegationOfADirectoryWhileARenameOfSeveralShardsIsInItsLog) {
    std::atomic<int> recalls{0};
    answer_recalls(*client, recalls);
    const auto [a, b] = dirs_on_two_shards();
    ASSERT_TRUE(create(a, "f").ok());
    TestDaemon& coordinator = *daemons[proto::shard_of(a)];
    // Past its checks, the rename's next call to the target's daemon (its insertion) waits.
    coordinator.service->coordinator_for_test().after_rename_checks_for_test = [&] {
        coordinator.block_once = static_cast<int>(proto::shard_of(b));
    };
    auto r = std::async(std::launch::async, [&] { return rename(a, "f", b, "f"); });
    bool logged = false;
    for (int i = 0; i < 500 && !logged; ++i) {
        auto l = shard(a).intents();
        logged = l.ok() && !l->empty();
        if (!logged) std::this_thread::sleep_for(10ms);
    }
    ASSERT_TRUE(logged);
    auto refused = rpc::call<proto::DelegateDir>(at(a), proto::DelegateRequest{kRoot, a, 77});
    EXPECT_EQ(refused.status().code(), Code::busy) << refused.status().to_string();
    coordinator.gate.set_value();
    auto done = r.get();
    coordinator.service->coordinator_for_test().after_rename_checks_for_test = nullptr;
    ASSERT_TRUE(done.ok()) << done.status().to_string();
    EXPECT_TRUE(names(a).empty());
    EXPECT_EQ(names(b), std::vector<std::string>{"f"});
    EXPECT_TRUE(no_intents());
    auto granted = rpc::call<proto::DelegateDir>(at(a), proto::DelegateRequest{kRoot, a, 78});
    EXPECT_TRUE(granted.ok()) << granted.status().to_string();
    EXPECT_EQ(recalls.load(), 0);
}


// ---- crash safety: intents left in the log are finished or undone by resume ---------------

TEST_F(MetaServiceTest, ResumeFinishesARenameLoggedBeforeACrash) {
    auto [d0, d1] = dirs_on_two_shards();
    auto f = create(d0, "f");
    ASSERT_TRUE(f.ok());
    MetaShard& coord = shard(d0);
    Intent in;
    in.op = IntentOp::rename;
    in.parent = d0;
    in.name = "f";
    in.ino = f->ino;
    in.new_parent = d1;
    in.new_name = "g";
    // Crash 1: logged, nothing else done.
    auto id = coord.intent_begin(in);
    ASSERT_TRUE(id.ok());
    resume(d0);
    EXPECT_EQ(lookup(d1, "g")->ino, f->ino);
    EXPECT_EQ(lookup(d0, "f").status().code(), Code::not_found);
    // Crash 2: logged and the new entry made, the old one still there.
    in.parent = d1;
    in.name = "g";
    in.new_parent = d0;
    in.new_name = "back";
    id = coord_of(d1).intent_begin(in);
    ASSERT_TRUE(id.ok());
    auto ins = shard(d0).rename_insert(*id, d0, "back", f->ino, FileType::regular, 0);
    ASSERT_TRUE(ins.ok()) << ins.status().to_string();
    EXPECT_EQ(names(d1), std::vector<std::string>{"g"}); // both names, for now
    resume(d1);
    EXPECT_EQ(names(d1), std::vector<std::string>{});
    EXPECT_EQ(names(d0), std::vector<std::string>{"back"});
    EXPECT_EQ(lookup(d0, "back")->nlink, 1u);
}

TEST_F(MetaServiceTest, ResumeUndoesARenameWhoseTargetChanged) {
    auto [d0, d1] = dirs_on_two_shards();
    auto f = create(d0, "f");
    ASSERT_TRUE(f.ok());
    Intent in;
    in.op = IntentOp::rename;
    in.parent = d0;
    in.name = "f";
    in.ino = f->ino;
    in.new_parent = d1;
    in.new_name = "g";
    ASSERT_TRUE(shard(d0).intent_begin(in).ok());
    // Before the daemon came back, someone else took the name: the rename is undone.
    auto other = create(d1, "g");
    ASSERT_TRUE(other.ok());
    resume(d0);
    EXPECT_EQ(lookup(d0, "f")->ino, f->ino);
    EXPECT_EQ(lookup(d1, "g")->ino, other->ino);
}

TEST_F(MetaServiceTest, ResumeUndoesAnUnfinishedMkdir) {
    // Find a name that mkdir in the root places on another shard.
    std::string name;
    for (int i = 0; name.empty(); ++i) {
        std::string n = "m" + std::to_string(i);
        if (MetaService::place_directory(1, n, kDaemons) != 0) name = n;
    }
    uint32_t target = MetaService::place_directory(1, name, kDaemons);
    Intent in;
    in.op = IntentOp::mkdir;
    in.parent = 1;
    in.name = name;
    in.type = FileType::directory;
    in.peer = target;
    auto id = daemons[0]->shard->intent_begin(in);
    ASSERT_TRUE(id.ok());
    Attr tmpl;
    tmpl.type = FileType::directory;
    tmpl.mode = S_IFDIR | 0755;
    tmpl.nlink = 2;
    tmpl.parent = 1;
    auto made = daemons[target]->shard->create_inode_once(*id, tmpl);
    ASSERT_TRUE(made.ok());
    auto before = daemons[target]->shard->counts();
    resume(1);
    EXPECT_EQ(lookup(1, name).status().code(), Code::not_found);
    EXPECT_EQ(daemons[target]->shard->getattr(made->ino).status().code(), Code::not_found);
    EXPECT_EQ(daemons[target]->shard->counts()->inodes, before->inodes - 1);
    // A late duplicate of the aborted step does not create it again.
    EXPECT_FALSE(daemons[target]->shard->create_inode_once(*id, tmpl).ok());
    // The name is free for a real mkdir.
    EXPECT_TRUE(mkdir(1, name).ok());
}

// resume() runs while requests are being served (at a daemon's start, or as a retry another
// request triggers): it must leave alone an intent whose request is still driving it.
TEST_F(MetaServiceTest, ResumeLeavesAnIntentItsRequestIsDrivingAlone) {
    std::string name;
    for (int i = 0; name.empty(); ++i) {
        std::string n = "live" + std::to_string(i);
        if (MetaService::place_directory(1, n, kDaemons) != 0) name = n;
    }
    const uint32_t target = MetaService::place_directory(1, name, kDaemons);
    daemons[0]->block_once = static_cast<int>(target);
    std::thread req([&] {
        auto d = mkdir(1, name);
        EXPECT_TRUE(d.ok()) << d.status().to_string();
    });
    // The mkdir has logged its intent and waits for the target's shard.
    bool logged = false;
    for (int i = 0; i < 500 && !logged; ++i, std::this_thread::sleep_for(10ms)) {
        auto l = daemons[0]->shard->intents();
        logged = l.ok() && !l->empty() && daemons[0]->block_once == -1;
    }
    EXPECT_TRUE(logged) << "the mkdir never reached its remote step";
    daemons[0]->service->resume_intents();
    std::this_thread::sleep_for(500ms); // a resume that drove the intent would have undone it by now
    daemons[0]->gate.set_value();
    req.join();
    auto back = lookup(1, name);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(proto::shard_of(back->ino), target);
    EXPECT_TRUE(no_intents());
}

TEST_F(MetaServiceTest, ResumeFinishesAnUnlinkAndALink) {
    auto [d0, d1] = dirs_on_two_shards();
    auto f = create(d0, "f");
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(rename(d0, "f", d1, "f").ok()); // the entry on d1's shard, the inode on d0's
    // link: logged, link count raised, entry not yet made.
    Intent link;
    link.op = IntentOp::link;
    link.parent = d1;
    link.name = "l";
    link.ino = f->ino;
    auto lid = shard(d1).intent_begin(link);
    ASSERT_TRUE(lid.ok());
    ASSERT_TRUE(shard(d0).adjust_nlink_once(*lid, IntentStep::add_link, f->ino, +1).ok());
    resume(d1);
    EXPECT_EQ(lookup(d1, "l")->ino, f->ino);
    EXPECT_EQ(lookup(d1, "l")->nlink, 2u); // raised once, not twice
    // unlink: entry removed with the intent logged, link count not yet dropped.
    Intent un;
    un.op = IntentOp::unlink;
    un.parent = d1;
    un.name = "f";
    un.ino = f->ino;
    ASSERT_TRUE(shard(d1).intent_begin_remove(un).ok());
    EXPECT_EQ(lookup(d1, "f").status().code(), Code::not_found);
    resume(d1);
    EXPECT_EQ(lookup(d1, "l")->nlink, 1u);
}

// Lookups and getattrs are answered on the daemon's progress thread when the shard is free,
// and wait on the pool while another operation holds it: the progress thread never waits for
// a shard, so the daemon goes on answering meanwhile. (With the shard's lock waited for there,
// the probe below timed out.)
TEST_F(MetaServiceTest, ALookupOfABusyShardWaitsOnThePoolNotOnTheProgressThread) {
    auto there = create(1, "there");
    ASSERT_TRUE(there.ok()) << there.status().to_string();
    const auto [a, b] = dirs_on_two_shards();
    const uint64_t elsewhere = proto::shard_of(a) != 0 ? a : b; // an inode daemon 0 does not serve
    ASSERT_NE(proto::shard_of(elsewhere), 0u);
    // The next change of shard 0 stops, holding the shard, in its shipping (before its commit).
    std::promise<void> entered, release;
    std::shared_future<void> released = release.get_future().share();
    std::atomic<bool> first{true};
    ASSERT_TRUE(daemons[0]->shard->start_shipping(1, [&](const MetaShard::ReplPosition&, const MetaShard::ReplPosition&,
                                                         std::span<const uint8_t>) {
                    if (first.exchange(false)) {
                        entered.set_value();
                        released.wait();
                    }
                    return Status::OK();
                }).ok());
    auto held = std::async(std::launch::async, [&] { return create(1, "held"); });
    ASSERT_EQ(entered.get_future().wait_for(10s), std::future_status::ready);
    auto looked = std::async(std::launch::async, [&] { return lookup(1, "there"); });
    std::this_thread::sleep_for(200ms); // the lookup has reached daemon 0 and found the shard busy
    EXPECT_EQ(looked.wait_for(0s), std::future_status::timeout) << "answered while the shard was held";
    transport::CallOptions quick;
    quick.timeout = 3000ms;
    auto probe = rpc::call<proto::Getattr>(eps[0], proto::InoRequest{elsewhere}, quick);
    EXPECT_EQ(probe.status().code(), Code::again) << probe.status().to_string();
    release.set_value();
    auto h = held.get();
    EXPECT_TRUE(h.ok()) << h.status().to_string();
    auto l = looked.get();
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    EXPECT_EQ(l->ino, there->ino);
    // A free shard answers at once again, and what the held create made is there.
    EXPECT_TRUE(lookup(1, "held").ok());
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
