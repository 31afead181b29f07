// attr_lease_test: what libjobfs keeps under the daemons' leases (client/attr_cache.h,
// server/attr_leases.h), against three real jobfsd processes on loopback (LocalCluster).
// Every case first makes sure the reader answers from its cache (its hit count grows), so a
// recall that did not happen would show as an old answer.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include "child_process.h"
#include "client/client.h"
#include "test_util.h"
#include "two_clients_fixture.h"

namespace jobfs::client {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class AttrLeaseTest : public test::TwoClients {
protected:
    static Status write(Client& c, const std::string& path, size_t bytes, int flags = O_WRONLY | O_CREAT | O_TRUNC) {
        auto f = c.open(path, flags, 0644);
        if (!f.ok()) return f.status();
        std::vector<uint8_t> data(bytes, 0x5a);
        JOBFS_RETURN_IF_ERROR(c.pwrite(**f, 0, data));
        return c.close(**f);
    }
    // stat from c's cache: asserts it was a hit (the answer a missed recall would leave stale).
    static proto::Attr cached_stat(Client& c, const std::string& path) {
        const uint64_t hits = c.attr_cache_stats().hits;
        auto s = c.stat(path);
        EXPECT_TRUE(s.ok()) << path << ": " << s.status().to_string();
        EXPECT_EQ(c.attr_cache_stats().hits, hits + 1) << path << " was not answered from the cache";
        return s.ok() ? *s : proto::Attr{};
    }
    // a's answer is the daemon's own (asked by a client without a cache).
    void expect_as_the_daemon_says(const std::string& path) {
        ClientOptions o;
        o.attr_cache = false;
        auto truth = connect(o);
        ASSERT_TRUE(truth);
        auto want = truth->stat(path);
        auto got = a->stat(path);
        ASSERT_TRUE(want.ok() && got.ok()) << path;
        EXPECT_EQ(got->ino, want->ino) << path;
        EXPECT_EQ(got->mode, want->mode) << path;
        EXPECT_EQ(got->size, want->size) << path;
        EXPECT_EQ(got->nlink, want->nlink) << path;
        EXPECT_EQ(got->mtime_ns, want->mtime_ns) << path;
        EXPECT_EQ(got->ctime_ns, want->ctime_ns) << path;
    }
    static Result<proto::Attr> chmod(Client& c, const std::string& path, uint32_t mode) {
        proto::SetattrRequest set;
        set.mode = mode;
        return c.setattr(path, set);
    }

    // A lease_holder process that stat'ed path (mode 0644, 1 byte), then stopped (SIGSTOP): a
    // client holding a lease that cannot answer its recall. SIGCONT, then SIGUSR1 to stat again.
    // A daemon may refuse a grant (attr_leases.h: a change it cannot rule out, or the grace
    // after taking up a shard, which a chain table past version 1 at start-up also gives);
    // then the test has no holder, so another is started (said in the log), for up to 25 s.
    std::unique_ptr<test::ChildProcess> stopped_holder(const std::string& path) {
        const auto give_up = std::chrono::steady_clock::now() + 25s;
        while (std::chrono::steady_clock::now() < give_up) {
            const uint64_t granted = stats_sum(*b, &proto::DaemonStatsResponse::leases_granted);
            auto h = std::make_unique<test::ChildProcess>(std::vector<std::string>{
                test::ChildProcess::beside_test("../helpers/lease_holder"), cluster->descriptor_path(), path});
            auto first = h->read_line(10s);
            EXPECT_TRUE(first) << "lease_holder said nothing";
            if (!first) return nullptr;
            EXPECT_EQ(*first, "mode 0644 size 1");
            auto leased = h->read_line(10s);
            EXPECT_TRUE(test::stop_process(h->pid())) << "lease_holder did not stop";
            // Its own cache says it holds the file's lease: the daemons' count of grants alone
            // also counts a grant of anything else it looked up.
            if (leased && *leased == "leased yes" &&
                stats_sum(*b, &proto::DaemonStatsResponse::leases_granted) > granted)
                return h;
            std::printf("# lease_holder's stat of %s was granted no lease; another holder\n", path.c_str());
            h->kill_hard();
            std::this_thread::sleep_for(500ms);
        }
        ADD_FAILURE() << "no lease_holder was granted a lease on " << path;
        return nullptr;
    }
    // A DaemonStats field summed over all daemons, asked through client c.
    static uint64_t stats_sum(Client& c, uint64_t proto::DaemonStatsResponse::*field) {
        uint64_t n = 0;
        for (const auto& ep : c.daemons()) {
            auto s = transport::rpc::call<proto::DaemonStats>(ep, proto::Empty{});
            EXPECT_TRUE(s.ok()) << s.status().to_string();
            if (s.ok()) n += (*s).*field;
        }
        return n;
    }
    // What a continued holder's next stat says (it answers SIGUSR1 with a line).
    static std::string ask_again(test::ChildProcess& holder) {
        holder.signal(SIGUSR1);
        auto line = holder.read_line(10s);
        return line ? *line : "(lease_holder said nothing)";
    }
    // Readers stat a file while a writer changes its mode in a loop (see below).
    void readers_race(const std::vector<std::string>& args);

};

TEST_F(AttrLeaseTest, EveryChangeAnotherClientMakesIsSeenAtOnce) {
    start();
    ASSERT_TRUE(a->mkdir("/d").ok());
    ASSERT_TRUE(write(*a, "/d/f", 100).ok());
    // The creator keeps what its create returned; the size settled at close recalled it.
    ASSERT_TRUE(a->stat("/d/f").ok());
    EXPECT_EQ(cached_stat(*a, "/d/f").size, 100u);

    ASSERT_TRUE(chmod(*b, "/d/f", 0600).ok());
    auto s = a->stat("/d/f");
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->mode & 07777, 0600u);

    EXPECT_EQ(cached_stat(*a, "/d/f").mode & 07777, 0600u);
    ASSERT_TRUE(write(*b, "/d/f", 5000, O_WRONLY).ok()); // the size settles at b's close
    EXPECT_EQ(a->stat("/d/f")->size, 5000u);

    EXPECT_EQ(cached_stat(*a, "/d/f").size, 5000u);
    ASSERT_TRUE(b->truncate("/d/f", 10).ok());
    EXPECT_EQ(a->stat("/d/f")->size, 10u);

    EXPECT_EQ(cached_stat(*a, "/d/f").nlink, 1u);
    ASSERT_TRUE(b->link("/d/f", "/d/g").ok());
    EXPECT_EQ(a->stat("/d/f")->nlink, 2u);

    cached_stat(*a, "/d/f");
    ASSERT_TRUE(b->setxattr("/d/f", "user.k", "v").ok());
    expect_as_the_daemon_says("/d/f");
    cached_stat(*a, "/d/f");
    proto::SetattrRequest times;
    times.mtime_ns = 1234567890;
    ASSERT_TRUE(b->setattr("/d/f", times).ok());
    EXPECT_EQ(a->stat("/d/f")->mtime_ns, 1234567890);
    expect_as_the_daemon_says("/d/f");

    cached_stat(*a, "/d/f");
    ASSERT_TRUE(b->rename("/d/f", "/d/h").ok());
    EXPECT_EQ(a->stat("/d/f").status().code(), Code::not_found);
    EXPECT_EQ(a->stat("/d/h")->size, 10u);

    cached_stat(*a, "/d/h");
    ASSERT_TRUE(a->stat("/d/g").ok());
    cached_stat(*a, "/d/g");
    ASSERT_TRUE(b->unlink("/d/h").ok());
    EXPECT_EQ(a->stat("/d/h").status().code(), Code::not_found);
    EXPECT_EQ(a->stat("/d/g")->nlink, 1u); // the other name of the inode, also recalled

    // A rename onto a kept name replaces the inode behind it.
    ASSERT_TRUE(write(*b, "/d/new", 7).ok());
    EXPECT_EQ(cached_stat(*a, "/d/g").size, 10u);
    ASSERT_TRUE(b->rename("/d/new", "/d/g").ok());
    EXPECT_EQ(a->stat("/d/g")->size, 7u);
    expect_as_the_daemon_says("/d/g");
    EXPECT_GT(a->attr_cache_stats().recalled, 0u);
}

// Lookups are checked against the directory's mode: a directory closed to the reader after
// it looked is closed at once, though the file itself did not change.
TEST_F(AttrLeaseTest, ADirectoryClosedToTheReaderIsClosedAtOnce) {
    start();
    ASSERT_TRUE(b->mkdir("/open", 0755).ok());
    ASSERT_TRUE(write(*b, "/open/f", 1).ok());
    ClientOptions o;
    o.cred = proto::Cred{4242, 4242, {}};
    auto user = connect(o);
    ASSERT_TRUE(user);
    ASSERT_TRUE(user->stat("/open/f").ok());
    cached_stat(*user, "/open/f");
    ASSERT_TRUE(chmod(*b, "/open", 0700).ok());
    EXPECT_EQ(user->stat("/open/f").status().code(), Code::permission);
}

// A holder that does not answer (stopped, as a node that hangs) holds the change up until its
// lease ends, and then no longer answers from it: after the change returned, its first stat
// asks again and sees the change. Without the wait the change returned at once and the holder,
// continued within its lease, answered with the old mode.
TEST_F(AttrLeaseTest, AHolderThatDoesNotAnswerIsWaitedOut) {
    start({"--attr-lease-ms", "2000"});
    ASSERT_TRUE(write(*b, "/f", 1).ok());
    ASSERT_TRUE(chmod(*b, "/f", 0644).ok());
    auto held = stopped_holder("/f");
    ASSERT_TRUE(held);
    test::ChildProcess& holder = *held;
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(chmod(*b, "/f", 0600).ok());
    const auto waited = std::chrono::steady_clock::now() - t0;
    holder.signal(SIGCONT);
    EXPECT_EQ(ask_again(holder), "mode 0600 size 1");
    EXPECT_LT(waited, 10s) << "the change waited longer than the lease and its recall";
}

// A stopped holder keeps the first change waiting; a second change of the same file, by
// another client, while that recall is out, waits for it too (here a size settled at close,
// which reads nothing first). It returned at once before, while the holder could still show
// neither change. (The test looks while the holder's lease lasts, 1-2 s after the grant here:
// 8 s leave room for a loaded machine; SIGCONT ends the wait anyway.)
TEST_F(AttrLeaseTest, AChangeWaitsForTheRecallAnEarlierChangeBegan) {
    start({"--attr-lease-ms", "8000"});
    ASSERT_TRUE(write(*b, "/f", 1).ok());
    auto f = a->open("/f", O_WRONLY);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    auto held = stopped_holder("/f");
    ASSERT_TRUE(held);
    test::ChildProcess& holder = *held;
    auto chmod_done = std::async(std::launch::async, [&] { return chmod(*b, "/f", 0600).status(); });
    std::this_thread::sleep_for(300ms); // its recall is out, to a holder that cannot answer
    std::vector<uint8_t> data(77, 1);
    ASSERT_TRUE(a->pwrite(**f, 0, data).ok());
    auto close_done = std::async(std::launch::async, [&] { return a->close(**f); });
    EXPECT_EQ(close_done.wait_for(1s), std::future_status::timeout)
        << "the size was settled while a holder could still show the file as it was";
    holder.signal(SIGCONT); // it lets go: both changes return
    EXPECT_TRUE(chmod_done.get().ok());
    EXPECT_TRUE(close_done.get().ok());
    EXPECT_EQ(ask_again(holder), "mode 0600 size 77");
}

// A name being removed is reported gone to nobody while a holder may still show it: the
// lookup that finds it gone waits for the recall. It answered at once before. (An 8 s lease,
// as above.)
TEST_F(AttrLeaseTest, ANameIsNotGoneForOneWhileAnotherStillShowsIt) {
    start({"--attr-lease-ms", "8000"});
    ASSERT_TRUE(write(*b, "/f", 1).ok());
    auto held = stopped_holder("/f");
    ASSERT_TRUE(held);
    test::ChildProcess& holder = *held;
    auto unlink_done = std::async(std::launch::async, [&] { return b->unlink("/f"); });
    std::this_thread::sleep_for(300ms);
    ClientOptions o;
    o.attr_cache = false;
    auto c = connect(o);
    ASSERT_TRUE(c);
    auto stat_done = std::async(std::launch::async, [&] { return c->stat("/f").status(); });
    EXPECT_EQ(stat_done.wait_for(1s), std::future_status::timeout)
        << "the name was reported gone while a holder could still show it";
    holder.signal(SIGCONT);
    EXPECT_TRUE(unlink_done.get().ok());
    EXPECT_EQ(stat_done.get().code(), Code::not_found);
    EXPECT_EQ(ask_again(holder), "error not_found");
}

// A lease ends by itself: the next stat after it asks the daemon again. A holder that went
// away (killed, its lease not given back) holds a change up for its lease at most.
TEST_F(AttrLeaseTest, LeasesEndAndGoneHoldersAreNotWaitedForLong) {
    start({"--attr-lease-ms", "300"});
    ASSERT_TRUE(write(*a, "/f", 1).ok());
    ASSERT_TRUE(a->stat("/f").ok());
    cached_stat(*a, "/f");
    std::this_thread::sleep_for(400ms);
    const uint64_t misses = a->attr_cache_stats().misses;
    ASSERT_TRUE(a->stat("/f").ok());
    EXPECT_EQ(a->attr_cache_stats().misses, misses + 1) << "an ended lease answered";
    // A holder killed with its lease (no LeaseRelease): the change waits for that lease at
    // most, not for a recall's own time limit.
    auto held = stopped_holder("/f");
    ASSERT_TRUE(held);
    held->kill_hard();
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(chmod(*b, "/f", 0600).ok());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "a gone holder was waited for past its lease";
    EXPECT_EQ(b->stat("/f")->mode & 07777, 0600u);
}

// A client gives its leases back as it disconnects (LeaseRelease): the daemons hold none for
// it, and a change of its files right after waits for nobody. Without it, the chmod below
// waited for the lease to end (the daemon cannot tell a client that exited from one cut off).
TEST_F(AttrLeaseTest, ADisconnectingClientGivesItsLeasesBack) {
    start({"--attr-lease-ms", "20000"});
    ASSERT_TRUE(write(*b, "/f", 1).ok());
    b.reset();
    auto c = connect();
    ASSERT_TRUE(c);
    EXPECT_EQ(stats_sum(*c, &proto::DaemonStatsResponse::leases_held), 0u);
    ASSERT_TRUE(a->stat("/f").ok());
    EXPECT_EQ(stats_sum(*c, &proto::DaemonStatsResponse::leases_held), 1u);
    a.reset();
    EXPECT_EQ(stats_sum(*c, &proto::DaemonStatsResponse::leases_held), 0u);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(chmod(*c, "/f", 0600).ok());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "the change waited for a lease given back";
}

// attr-lease-ms 0: every stat asks.
TEST_F(AttrLeaseTest, NoLeasesNoCache) {
    start({"--attr-lease-ms", "0"});
    ASSERT_TRUE(write(*a, "/f", 1).ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(a->stat("/f").ok());
    EXPECT_EQ(a->attr_cache_stats().hits, 0u);
    EXPECT_EQ(a->attr_cache_stats().entries, 0u);
}

// Many readers keep a file while a writer changes it in a loop: no reader ever sees a mode
// older than one the writer's last change had returned before the reader asked (readers_race).
TEST_F(AttrLeaseTest, ReadersNeverSeeAChangeUndone) { readers_race({}); }

// The same with replicated metadata: a primary ships each change to its replicas with a call
// it waits for, and may serve other requests on that thread meanwhile (their change notes must
// not end the waiting one's).
TEST_F(AttrLeaseTest, ReadersNeverSeeAChangeUndoneWithReplicatedMetadata) { readers_race({"--replicas", "2"}); }

void AttrLeaseTest::readers_race(const std::vector<std::string>& args) {
    start(args);
    ASSERT_TRUE(write(*b, "/f", 1).ok());
    std::atomic<uint32_t> returned{0}; // the last mode whose chmod returned (modes only grow)
    std::atomic<bool> stop{false};
    std::atomic<int> stale{0}, reads{0};
    std::vector<std::unique_ptr<Client>> readers;
    for (int i = 0; i < 3; ++i) readers.push_back(connect());
    std::vector<std::thread> ts;
    for (auto& r : readers)
        ts.emplace_back([&, c = r.get()] {
            while (!stop) {
                const uint32_t floor = returned.load();
                auto s = c->stat("/f");
                if (s.ok() && (s->mode & 0777) < floor) ++stale;
                ++reads;
            }
        });
    // The writer starts once every reader has a read done: on a loaded machine the readers'
    // first stats came after the writer's last change, and the race was not run at all.
    const auto ready_by = std::chrono::steady_clock::now() + 30s;
    while (reads.load() < static_cast<int>(readers.size()) && std::chrono::steady_clock::now() < ready_by)
        std::this_thread::sleep_for(1ms);
    for (uint32_t m = 0400; m <= 0777; m += 7) {
        ASSERT_TRUE(chmod(*b, "/f", m).ok());
        returned = m;
    }
    stop = true;
    for (auto& t : ts) t.join();
    EXPECT_EQ(stale.load(), 0) << "of " << reads.load() << " reads";
    EXPECT_GE(reads.load(), static_cast<int>(readers.size()));
}

} // namespace
} // namespace jobfs::client
