// stall_watch_test: the watcher of calls that wait too long (client/stall_watch.h), with an
// action of the test's own: it runs while a registered call is older than the threshold, and
// not for calls that end sooner or after the last one ended.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "client/stall_watch.h"

namespace jobfs::client {
namespace {

using namespace std::chrono_literals;

TEST(StallWatch, ActsOnlyWhileACallWaitsLongerThanItShould) {
    std::atomic<int> ran{0};
    StallWatch w([&] { ran++; }, 200ms, 100ms);
    for (int i = 0; i < 20; ++i) {
        auto quick = w.watch(); // ends long before 200 ms
    }
    std::this_thread::sleep_for(400ms);
    EXPECT_EQ(ran.load(), 0) << "acted for calls that ended at once";
    {
        auto slow = w.watch();
        auto quick = w.watch();
        for (int i = 0; i < 300 && ran.load() < 3; ++i) std::this_thread::sleep_for(10ms);
        EXPECT_GE(ran.load(), 3) << "a call waiting 3 s made the watcher act fewer than 3 times";
    }
    std::this_thread::sleep_for(150ms); // an action already under way ends
    const int after = ran.load();
    std::this_thread::sleep_for(500ms);
    EXPECT_EQ(ran.load(), after) << "acted after the last call ended";
}

TEST(StallWatch, AMovedGuardUnregistersOnce) {
    std::atomic<int> ran{0};
    StallWatch w([&] { ran++; }, 100ms, 50ms);
    {
        auto a = w.watch();
        StallWatch::Watched b(std::move(a));
    }
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(ran.load(), 0);
}

TEST(StallWatch, StopsWithoutEverBeingUsedOrWhileACallIsRegistered) {
    { StallWatch unused([] {}, 100ms, 100ms); }
    std::atomic<int> ran{0};
    auto w = std::make_unique<StallWatch>([&] { ran++; }, 50ms, 50ms);
    auto held = std::make_unique<StallWatch::Watched>(w->watch());
    for (int i = 0; i < 200 && ran.load() == 0; ++i) std::this_thread::sleep_for(10ms);
    EXPECT_GE(ran.load(), 1);
    held.reset(); // guards go before their watch
    w.reset();    // joins the watcher
}

} // namespace
} // namespace jobfs::client
