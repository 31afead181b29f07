// layout.h: where the bytes of a file live (docs/design.md, "Data").
//
// A file is cut into chunks of `chunk_size` bytes. Its stripe set is S consecutive daemon
// ranks starting at a rank derived from the inode number, and chunk i lives on the (i % S)-th
// daemon of that set. Consecutive chunks therefore land on different daemons, so one large
// write fans out over all of them, and different files start on different daemons, so many
// small files do not pile up on rank 0.
//
// The rule is a pure function of (ino, chunk, layout, cluster size): every client computes the
// same placement without asking anybody. Changing it moves every existing chunk, so it is part
// of the on-disk format.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace jobfs::client {

struct Layout {
    uint64_t chunk_size = 4ull << 20; // bytes per chunk; the daemons' chunk size bounds it
    uint32_t stripe_count = 0;        // daemons a file is spread over; 0 = all of them
};

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

// The part of a byte range that falls into one chunk.
struct ChunkPiece {
    uint64_t chunk_index = 0;
    uint64_t offset_in_chunk = 0;
    uint64_t length = 0;
    uint64_t offset_in_buffer = 0; // where the piece starts in the caller's buffer
    bool operator==(const ChunkPiece&) const = default;
};

// Splits [offset, offset + length) of a file into per-chunk pieces, in file order. A length of
// 0 gives no pieces. Preconditions: chunk_size > 0 and offset + length does not overflow
// (FileIO checks both before calling).
inline std::vector<ChunkPiece> split_range(uint64_t offset, uint64_t length, uint64_t chunk_size) {
    std::vector<ChunkPiece> pieces;
    if (length == 0) return pieces;
    pieces.reserve((offset + length - 1) / chunk_size - offset / chunk_size + 1);
    uint64_t done = 0;
    while (done < length) {
        const uint64_t pos = offset + done;
        const uint64_t in_chunk = pos % chunk_size;
        const uint64_t n = std::min(chunk_size - in_chunk, length - done);
        pieces.push_back(ChunkPiece{pos / chunk_size, in_chunk, n, done});
        done += n;
    }
    return pieces;
}

} // namespace jobfs::client
