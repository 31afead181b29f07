// file_locks_test: the lock table of a metadata shard (server/file_locks.h) keeps Linux's rules
// for fcntl byte-range locks and flock locks between owners of different clients, and lets a
// dead client's locks go when they stand in another's way.
#include <gtest/gtest.h>

#include <limits>
#include <set>

#include "server/file_locks.h"

namespace jobfs {
namespace {

using server::FileLock;
using server::FileLocks;
using server::LockType;

constexpr uint64_t kEof = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kIno = 77;

FileLock posix(uint64_t client, uint64_t owner, LockType type, uint64_t start, uint64_t end, uint32_t pid = 100) {
    return FileLock{client, owner, pid, false, type, start, end};
}
FileLock whole(uint64_t client, uint64_t owner, LockType type) { return FileLock{client, owner, 1, true, type, 0, kEof}; }

// The ranges an owner holds, as "type:start-end" (sorted).
std::set<std::string> ranges_of(const FileLocks& t, uint64_t client, uint64_t owner) {
    std::set<std::string> out;
    for (const FileLock& l : t.held(kIno))
        if (l.client == client && l.owner == owner && !l.flock)
            out.insert(std::string(l.type == LockType::write ? "w:" : "r:") + std::to_string(l.start) + "-" +
                       (l.end == kEof ? std::string("eof") : std::to_string(l.end)));
    return out;
}

TEST(FileLocks, WriteLocksOfOtherOwnersConflictReadLocksShare) {
    FileLocks t(nullptr);
    EXPECT_FALSE(t.set(kIno, posix(1, 10, LockType::read, 0, 99)));
    EXPECT_FALSE(t.set(kIno, posix(2, 20, LockType::read, 50, 149))) << "two read locks share bytes";
    auto c = t.set(kIno, posix(2, 21, LockType::write, 90, 95));
    ASSERT_TRUE(c) << "a write lock over another owner's read lock";
    EXPECT_EQ(c->client, 1u);
    EXPECT_EQ(c->start, 0u);
    EXPECT_EQ(c->end, 99u);
    EXPECT_EQ(c->pid, 100u);
    EXPECT_FALSE(t.set(kIno, posix(2, 21, LockType::write, 150, kEof))) << "past both: free";
    EXPECT_TRUE(t.conflict(kIno, posix(1, 10, LockType::read, 1000, 1000))) << "a read over a write lock to the end";
    EXPECT_TRUE(t.set(kIno, posix(3, 10, LockType::write, 0, 0))) << "the same owner number on another client is another owner";
    EXPECT_FALSE(t.set(7, posix(3, 10, LockType::write, 0, kEof))) << "another file";
}

TEST(FileLocks, AnOwnersLocksAreSplitReplacedAndMerged) {
    FileLocks t(nullptr);
    ASSERT_FALSE(t.set(kIno, posix(1, 10, LockType::write, 0, 99)));
    ASSERT_FALSE(t.set(kIno, posix(1, 10, LockType::unlock, 40, 59)));
    EXPECT_EQ(ranges_of(t, 1, 10), (std::set<std::string>{"w:0-39", "w:60-99"}));
    ASSERT_FALSE(t.set(kIno, posix(1, 10, LockType::read, 30, 69))) << "its own locks never stand in its way";
    EXPECT_EQ(ranges_of(t, 1, 10), (std::set<std::string>{"w:0-29", "r:30-69", "w:70-99"}));
    ASSERT_FALSE(t.set(kIno, posix(1, 10, LockType::write, 30, 69)));
    EXPECT_EQ(ranges_of(t, 1, 10), (std::set<std::string>{"w:0-99"})) << "adjacent locks of a type merge";
    ASSERT_FALSE(t.set(kIno, posix(1, 10, LockType::write, 100, kEof)));
    EXPECT_EQ(ranges_of(t, 1, 10), (std::set<std::string>{"w:0-eof"}));
    // Another owner gets the bytes once they are given back, and not before.
    EXPECT_TRUE(t.set(kIno, posix(2, 10, LockType::read, 500, 500)));
    ASSERT_FALSE(t.set(kIno, posix(1, 10, LockType::unlock, 0, kEof)));
    EXPECT_TRUE(t.held(kIno).empty());
    EXPECT_EQ(t.count(), 0u);
    EXPECT_FALSE(t.set(kIno, posix(2, 10, LockType::read, 500, 500)));
    EXPECT_EQ(t.count(), 1u);
}

TEST(FileLocks, FlockLocksCoverTheFileConvertAndIgnoreFcntlLocks) {
    FileLocks t(nullptr);
    ASSERT_FALSE(t.set(kIno, whole(1, 5, LockType::read)));
    EXPECT_FALSE(t.set(kIno, whole(2, 6, LockType::read))) << "shared with shared";
    EXPECT_TRUE(t.set(kIno, whole(2, 7, LockType::write))) << "exclusive against shared";
    ASSERT_FALSE(t.set(kIno, whole(2, 6, LockType::unlock)));
    ASSERT_FALSE(t.set(kIno, whole(1, 5, LockType::write))) << "the only holder converts its lock";
    EXPECT_EQ(t.held(kIno).size(), 1u);
    EXPECT_FALSE(t.set(kIno, posix(2, 6, LockType::write, 0, kEof))) << "fcntl locks and flock locks do not meet";
    EXPECT_TRUE(t.set(kIno, whole(3, 1, LockType::read)));
    ASSERT_FALSE(t.set(kIno, whole(1, 5, LockType::unlock)));
    EXPECT_FALSE(t.set(kIno, whole(3, 1, LockType::read)));
}

TEST(FileLocks, ADeadClientsLocksGoWhenTheyStandInTheWay) {
    std::set<uint64_t> dead;
    int asked = 0;
    FileLocks t([&](uint64_t client) {
        asked++;
        return dead.count(client) == 0;
    });
    ASSERT_FALSE(t.set(kIno, posix(1, 10, LockType::write, 0, 9)));
    ASSERT_FALSE(t.set(8, whole(1, 11, LockType::write)));
    ASSERT_FALSE(t.set(kIno, posix(2, 10, LockType::write, 10, 19)));
    EXPECT_TRUE(t.set(kIno, posix(3, 10, LockType::write, 0, 19)));
    EXPECT_EQ(asked, 1) << "only a lock in the way asks whether its client lives";
    dead.insert(1);
    auto c = t.set(kIno, posix(3, 10, LockType::write, 0, 19));
    ASSERT_TRUE(c) << "client 2 lives and holds 10-19";
    EXPECT_EQ(c->client, 2u);
    EXPECT_FALSE(t.set(kIno, posix(3, 10, LockType::write, 0, 9))) << "client 1's lock went";
    EXPECT_TRUE(t.held(8).empty()) << "with its locks on every other file";
    t.release_client(2);
    EXPECT_FALSE(t.set(kIno, posix(3, 10, LockType::write, 10, 19)));
    EXPECT_EQ(t.count(), 1u) << "client 3's two ranges merged";
}

} // namespace
} // namespace jobfs
