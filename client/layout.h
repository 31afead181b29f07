// layout.h: where the bytes of a file live (docs/design.md, "Data").
//
// A file is cut into chunks of `chunk_size` bytes. Its stripe set is S consecutive daemon
// ranks starting at a rank derived from the inode number, and chunk i lives on the (i % S)-th
// daemon of that set. Consecutive chunks therefore land on different daemons, so one large
// write fans out over all of them, and different files start on different daemons, so many
// small files do not pile up on rank 0.
//
// With replication (docs/replication.md) chunk i lives on a chain of R distinct daemons: the
// head is the daemon above (so R=1 places every chunk where it always was), the others are
// drawn from a sequence seeded by (ino, i), so that the copies of one daemon's chunks are
// spread over all the others and re-copying them after a loss loads every daemon alike.
//
// The rule is a pure function of (ino, chunk, layout, cluster size): every client computes the
// same placement without asking anybody. Changing it moves every existing chunk, so it is part
// of the on-disk format.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "placement.h"

namespace jobfs::client {

// The placement rules live in ucx-transport/placement.h (the daemons use them too).
using placement::Chain;
using placement::chain_length;
using placement::chunk_chain;
using placement::chunk_daemon;
using placement::kMaxReplicas;
using placement::Layout;
using placement::splitmix64;
using placement::stripe_width;

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
