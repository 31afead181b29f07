// placement.h: where the bytes of a file live: chunk i of file ino on a chain of daemons.
// A pure function of (ino, chunk, layout, cluster size), shared by clients (client/layout.h)
// and daemons (resync walks the files of their shard), and part of the on-disk format.
// The rules are explained in client/layout.h and docs/replication.md.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

namespace jobfs::placement {


struct Layout {
    uint64_t chunk_size = 4ull << 20; // bytes per chunk; the daemons' chunk size bounds it
    uint32_t stripe_count = 0;        // daemons a file is spread over; 0 = all of them
    uint32_t replicas = 0;            // copies of each chunk (1-3); 0 = the default (a file: 1)
};

constexpr uint32_t kMaxReplicas = 3;

// splitmix64's finaliser: a fixed, well-mixed hash, identical on every client and every build
// (std::hash is neither). Mixing spreads files evenly over the start ranks whatever pattern
// the inode allocator follows.
inline uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Number of daemons the file is striped over on a cluster of n (n > 0).
inline uint32_t stripe_width(const Layout& layout, uint32_t n) {
    return (layout.stripe_count == 0 || layout.stripe_count > n) ? n : layout.stripe_count;
}

// Rank of the daemon that holds chunk `chunk_index` of file `ino` (n > 0 daemons).
inline uint32_t chunk_daemon(uint64_t ino, uint64_t chunk_index, const Layout& layout, uint32_t n) {
    const uint64_t start = splitmix64(ino) % n;
    const uint64_t width = stripe_width(layout, n);
    return static_cast<uint32_t>((start + chunk_index % width) % n);
}

// Copies of each chunk on a cluster of n: the layout's, at most n (distinct daemons), at least 1.
inline uint32_t chain_length(const Layout& layout, uint32_t n) {
    const uint32_t r = std::clamp<uint32_t>(layout.replicas, 1, kMaxReplicas);
    return std::min(r, n);
}

// The daemons holding one chunk, head first (writes enter there), tail last (it acknowledges).
struct Chain {
    std::array<uint32_t, kMaxReplicas> ranks{};
    uint32_t length = 0;
    uint32_t head() const { return ranks[0]; }
    uint32_t tail() const { return ranks[length - 1]; }
    bool contains(uint32_t rank) const { return std::find(ranks.begin(), ranks.begin() + length, rank) != ranks.begin() + length; }
    bool operator==(const Chain&) const = default;
};

// The chain of chunk `chunk_index` of file `ino` (n > 0 daemons), ignoring failures (the chain
// table, proto::ChainTable, says which daemons serve; FileIO::write_chain/read_chain drop the rest).
inline Chain chunk_chain(uint64_t ino, uint64_t chunk_index, const Layout& layout, uint32_t n) {
    Chain c;
    c.ranks[0] = chunk_daemon(ino, chunk_index, layout, n);
    c.length = 1;
    const uint32_t r = chain_length(layout, n);
    for (uint32_t j = 1; j < r; ++j) {
        // A pseudo-random other daemon, moved on past those already in the chain: R <= n, so
        // this ends, and the result is the same on every client.
        uint32_t cand = static_cast<uint32_t>(splitmix64(splitmix64(ino ^ 0x5bd1e995u) + chunk_index * kMaxReplicas + j) % n);
        while (c.contains(cand)) cand = (cand + 1) % n;
        c.ranks[c.length++] = cand;
    }
    return c;
}

} // namespace jobfs::placement
