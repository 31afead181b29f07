// crc_table_cache_test: the checksum tables ChunkStore keeps in memory (server/crc_table_cache.h).
#include <gtest/gtest.h>

#include <vector>

#include "server/crc_table_cache.h"

namespace jobfs::server {
namespace {

std::vector<CrcEntry> table(uint32_t n, uint32_t base) {
    std::vector<CrcEntry> t;
    for (uint32_t i = 0; i < n; ++i) t.push_back(CrcEntry{base + i, 1});
    return t;
}

bool same(const std::vector<CrcEntry>& a, const std::vector<CrcEntry>& b) {
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](CrcEntry x, CrcEntry y) { return x.crc == y.crc && x.written == y.written; });
}

TEST(CrcTableCache, GivesOnlyEntriesItHolds) {
    CrcTableCache c;
    const ChunkId id{5, 2};
    std::vector<CrcEntry> out(3);
    EXPECT_FALSE(c.get(id, 0, out));
    c.put(id, table(8, 100));
    ASSERT_TRUE(c.get(id, 5, out));
    EXPECT_TRUE(same(out, table(3, 105)));
    EXPECT_FALSE(c.get(id, 6, out)) << "entries 6..8 reach past the table's 8";
    EXPECT_FALSE(c.get(ChunkId{5, 3}, 0, out)) << "another chunk's";
    c.forget(id);
    EXPECT_FALSE(c.get(id, 0, out));
    EXPECT_EQ(c.tables(), 0u);
    EXPECT_EQ(c.bytes(), 0u);
}

TEST(CrcTableCache, WrittenEntriesReplaceAndExtendATable) {
    CrcTableCache c;
    const ChunkId id{9, 0};
    c.put(id, table(4, 0));
    const auto written = table(3, 50);
    c.update(id, 2, written); // entries 2, 3 replaced, 4 added
    std::vector<CrcEntry> out(5);
    ASSERT_TRUE(c.get(id, 0, out));
    EXPECT_TRUE(same(out, std::vector<CrcEntry>{{0, 1}, {1, 1}, {50, 1}, {51, 1}, {52, 1}}));
    c.update(id, 5, table(1, 70)); // right after its end: grows
    std::vector<CrcEntry> six(6);
    EXPECT_TRUE(c.get(id, 0, six));
    EXPECT_EQ(six[5].crc, 70u);
}

// What lies between a table's end and entries written past it is not known to the cache: it
// must not answer for it.
TEST(CrcTableCache, EntriesWrittenPastAGapDropTheTable) {
    CrcTableCache c;
    const ChunkId id{9, 1};
    c.put(id, table(4, 0));
    c.update(id, 6, table(2, 60));
    std::vector<CrcEntry> out(1);
    EXPECT_FALSE(c.get(id, 0, out));
    c.update(ChunkId{1, 1}, 1, table(2, 0)); // not cached, and entry 0 unknown: stays so
    EXPECT_FALSE(c.get(ChunkId{1, 1}, 0, out));
}

// Entries written from the first block on are a table of their own: a chunk written as a
// stream of pieces is cached without reading its file.
TEST(CrcTableCache, EntriesWrittenFromTheStartMakeATable) {
    CrcTableCache c;
    const ChunkId id{3, 7};
    c.update(id, 0, table(2, 10));
    c.update(id, 2, table(2, 20));
    std::vector<CrcEntry> out(4);
    ASSERT_TRUE(c.get(id, 0, out));
    EXPECT_TRUE(same(out, std::vector<CrcEntry>{{10, 1}, {11, 1}, {20, 1}, {21, 1}}));
    EXPECT_EQ(c.tables(), 1u);
    EXPECT_EQ(c.bytes(), 4 * sizeof(CrcEntry) + CrcTableCache::kTableOverhead);
}

TEST(CrcTableCache, KeepsTheMostRecentlyUsedWithinItsBound) {
    const uint64_t one = 64 * sizeof(CrcEntry) + CrcTableCache::kTableOverhead;
    CrcTableCache c(3 * one);
    for (uint64_t i = 0; i < 3; ++i) c.put(ChunkId{1, i}, table(64, 0));
    std::vector<CrcEntry> out(1);
    ASSERT_TRUE(c.get(ChunkId{1, 0}, 0, out)); // 0 is now the most recently used, 1 the least
    c.put(ChunkId{1, 3}, table(64, 0));
    EXPECT_EQ(c.tables(), 3u);
    EXPECT_LE(c.bytes(), 3 * one);
    EXPECT_TRUE(c.get(ChunkId{1, 0}, 0, out));
    EXPECT_FALSE(c.get(ChunkId{1, 1}, 0, out));
    EXPECT_TRUE(c.get(ChunkId{1, 2}, 0, out));
    EXPECT_TRUE(c.get(ChunkId{1, 3}, 0, out));
    c.update(ChunkId{1, 2}, 64, table(64, 0)); // grows past the bound: the least recent goes
    EXPECT_LE(c.bytes(), 3 * one);
    EXPECT_TRUE(c.get(ChunkId{1, 2}, 100, out));
}

} // namespace
} // namespace jobfs::server
