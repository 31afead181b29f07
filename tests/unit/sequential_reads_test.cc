// sequential_reads_test.cc: what SequentialReads asks the disks for, for readers in order,
// readers whose reads overtake one another (a FUSE mount's worker threads), random readers and
// hot files.
#include "client/sequential_reads.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace jobfs::client {
namespace {

constexpr uint64_t MiB = 1 << 20;
constexpr uint64_t kFile = 1024 * MiB;

// Reads of 1 MiB at the offsets given (in MiB) of one file; the ranges asked for, in order.
std::vector<SequentialReads::Range> run(SequentialReads& s, const std::vector<uint64_t>& offsets_mib,
                                        uint64_t file_size = kFile, bool cold = true) {
    std::vector<SequentialReads::Range> asked;
    for (uint64_t o : offsets_mib) {
        auto r = s.after_read(7, o * MiB, MiB, file_size, cold);
        if (!r.empty()) asked.push_back(r);
    }
    return asked;
}

// The ranges follow one another without gap or overlap: every byte asked for once.
void expect_contiguous(const std::vector<SequentialReads::Range>& asked) {
    for (size_t i = 1; i < asked.size(); ++i) EXPECT_EQ(asked[i].from, asked[i - 1].to) << "range " << i;
}

// Ascending without overlap: no byte asked for twice. (Gaps are bytes the reads themselves
// reached first: a read that overtook the others was already asking for them.)
void expect_disjoint(const std::vector<SequentialReads::Range>& asked) {
    for (size_t i = 1; i < asked.size(); ++i) EXPECT_GE(asked[i].from, asked[i - 1].to) << "range " << i;
}

TEST(SequentialReads, AReaderInOrderIsReadAheadAWindowPastItsFurthestReadInBatches) {
    SequentialReads s;
    std::vector<uint64_t> offsets;
    for (uint64_t o = 0; o < 64; ++o) offsets.push_back(o);
    const auto asked = run(s, offsets);
    ASSERT_FALSE(asked.empty());
    // The first reads make the run; the third asks for the window past them.
    EXPECT_EQ(asked[0].from, 3 * MiB);
    EXPECT_EQ(asked[0].to, 3 * MiB + SequentialReads::kWindow);
    expect_contiguous(asked);
    for (const auto& r : asked) EXPECT_GE(r.to - r.from, SequentialReads::kBatch);
    // Always ahead of the reader, never more than the window past it.
    EXPECT_LE(asked.back().to, 64 * MiB + SequentialReads::kWindow);
    EXPECT_GE(asked.back().to, 64 * MiB + SequentialReads::kWindow - SequentialReads::kBatch);
}

TEST(SequentialReads, ReadsThatOvertakeOneAnotherStillCountAsARun) {
    // Ten threads answering a kernel's readahead: each group of ten 1 MiB reads finishes in a
    // random order. A test of "starts where the last ended" finds few of them in sequence.
    SequentialReads s;
    std::mt19937 rng(33);
    std::vector<uint64_t> offsets;
    for (uint64_t g = 0; g < 20; ++g) {
        std::vector<uint64_t> group;
        for (uint64_t i = 0; i < 10; ++i) group.push_back(g * 10 + i);
        std::shuffle(group.begin(), group.end(), rng);
        offsets.insert(offsets.end(), group.begin(), group.end());
    }
    const auto asked = run(s, offsets);
    ASSERT_FALSE(asked.empty());
    expect_disjoint(asked);
    uint64_t bytes = 0;
    for (const auto& r : asked) bytes += r.to - r.from;
    EXPECT_GE(bytes, 100 * MiB); // most of what was read was asked for ahead
    EXPECT_LE(asked.front().from, 12 * MiB); // found within the first readahead batch or two
    EXPECT_GE(asked.back().to, 200 * MiB);   // and kept up to the end of the reads
}

TEST(SequentialReads, RandomReadsAreNotReadAhead) {
    // Training samples of 1 MiB at random places of a 64 GiB file.
    SequentialReads s;
    std::mt19937_64 rng(5);
    std::vector<uint64_t> offsets;
    for (int i = 0; i < 2000; ++i) offsets.push_back(rng() % (64 * 1024));
    EXPECT_TRUE(run(s, offsets, 64 * 1024 * MiB).empty());
}

// A reader in 64 KiB pieces (under kMinRead) is not followed; in 128 KiB pieces it is.
TEST(SequentialReads, ReadsShorterThanTheFloorAreNotFollowed) {
    SequentialReads s;
    for (uint64_t off = 0; off < 64 * MiB; off += 64 << 10)
        EXPECT_TRUE(s.after_read(7, off, 64 << 10, kFile, true).empty()) << off;
    bool asked = false;
    for (uint64_t off = 0; off < 64 * MiB; off += SequentialReads::kMinRead)
        asked = !s.after_read(8, off, SequentialReads::kMinRead, kFile, true).empty() || asked;
    EXPECT_TRUE(asked);
}

TEST(SequentialReads, TwoReadsThatHappenToLandNearEachOtherAreNoRun) {
    SequentialReads s;
    EXPECT_TRUE(run(s, {500, 501, 90, 700, 702, 10}).empty());
}

TEST(SequentialReads, AStridedReaderThatSkipsMostBytesIsNotReadAhead) {
    // Every 8th MiB (a rank's share of a strided checkpoint): each read lands within the
    // window beyond the last, yet 7 of every 8 MiB ahead would never be read.
    SequentialReads s;
    std::vector<uint64_t> every8th;
    for (uint64_t i = 0; i < 50; ++i) every8th.push_back(i * 8);
    EXPECT_TRUE(run(s, every8th).empty());
    // Every other MiB: half of what is asked for is read, and the disk reads ahead of it.
    SequentialReads half;
    std::vector<uint64_t> every2nd;
    for (uint64_t i = 0; i < 50; ++i) every2nd.push_back(i * 2);
    EXPECT_FALSE(run(half, every2nd).empty());
}

TEST(SequentialReads, TheFilesEndCutsTheWindowAndAShortLastPieceIsStillAsked) {
    SequentialReads s;
    const uint64_t size = 10 * MiB + 4096;
    const auto asked = run(s, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, size);
    ASSERT_FALSE(asked.empty());
    expect_contiguous(asked);
    EXPECT_EQ(asked.back().to, size);
    for (const auto& r : asked) EXPECT_LE(r.to, size);
}

TEST(SequentialReads, AHotFileIsNotReadAheadUntilAReadFindsBytesNotCached) {
    SequentialReads s;
    ASSERT_FALSE(run(s, {0, 1, 2}).empty());
    s.found_cached(7);
    EXPECT_TRUE(run(s, {3, 4, 5, 6, 7, 8, 9, 10, 11}, kFile, false).empty());
    const auto asked = run(s, {12, 13, 14, 15, 16, 17}, kFile, true);
    ASSERT_FALSE(asked.empty());
    EXPECT_GE(asked.front().from, 13 * MiB);
}

TEST(SequentialReads, LargeReadsAreReadAheadTwiceTheirLengthUpToTheCap) {
    SequentialReads s;
    EXPECT_TRUE(s.after_read(9, 0, 16 * MiB, kFile, true).empty());
    EXPECT_TRUE(s.after_read(9, 16 * MiB, 16 * MiB, kFile, true).empty());
    auto r = s.after_read(9, 32 * MiB, 16 * MiB, kFile, true);
    EXPECT_EQ(r.from, 48 * MiB);
    EXPECT_EQ(r.to, 80 * MiB);
    s.after_read(10, 0, 64 * MiB, kFile, true);
    s.after_read(10, 64 * MiB, 64 * MiB, kFile, true);
    r = s.after_read(10, 128 * MiB, 64 * MiB, kFile, true);
    EXPECT_EQ(r.to - r.from, SequentialReads::kMaxAhead);
}

TEST(SequentialReads, FilesAreFollowedApartAndForgottenPastTheLimit) {
    SequentialReads s;
    // Two files read in turn: each its own run.
    for (uint64_t i = 0; i < 2; ++i) {
        EXPECT_TRUE(s.after_read(1, i * MiB, MiB, kFile, true).empty());
        EXPECT_TRUE(s.after_read(2, (500 + i) * MiB, MiB, kFile, true).empty());
    }
    EXPECT_FALSE(s.after_read(1, 2 * MiB, MiB, kFile, true).empty());
    EXPECT_FALSE(s.after_read(2, 502 * MiB, MiB, kFile, true).empty());
    // Past kMaxFiles, every file starts over.
    for (uint64_t ino = 100; ino < 100 + SequentialReads::kMaxFiles; ++ino) s.after_read(ino, 0, MiB, kFile, true);
    EXPECT_TRUE(s.after_read(1, 3 * MiB, MiB, kFile, true).empty());
    EXPECT_TRUE(s.after_read(1, 4 * MiB, MiB, kFile, true).empty());
    EXPECT_FALSE(s.after_read(1, 5 * MiB, MiB, kFile, true).empty());
}

} // namespace
} // namespace jobfs::client
