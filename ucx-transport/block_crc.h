// block_crc.h: end-to-end checksums of chunk data (docs/replication.md, "Integrity").
//
// A range of a chunk is checksummed in pieces cut at the chunk's 64 KiB block boundaries (the
// blocks of server/chunk_store), one CRC32C (ISA-L) each: the writer computes them over its
// buffer and every replica checks them before it stores the bytes; the daemon answering a read
// sends them for the bytes it returns and the reader checks them before it hands them out.
// Header-only so that client and server share one definition; users link ISA-L.
#pragma once

#include <isa-l/crc.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace jobfs::transport {

constexpr uint64_t kCrcBlock = 64 * 1024;

// CRC32C of data; `before`: the CRC32C of bytes that come before data, to go on from (a
// block checked piece by piece).
inline uint32_t crc32c(std::span<const uint8_t> data, uint32_t before = 0) {
    return crc32_iscsi(const_cast<unsigned char*>(data.data()), static_cast<int>(data.size()), before);
}

// Calls fn(done, n) for each piece of a range of `size` bytes at `chunk_offset` within its
// chunk, cut at the chunk's block boundaries: bytes [done, done + n) of the range.
template <class Fn>
void for_each_block_piece(uint64_t chunk_offset, uint64_t size, Fn&& fn) {
    for (uint64_t done = 0; done < size;) {
        const uint64_t n = std::min<uint64_t>(kCrcBlock - (chunk_offset + done) % kCrcBlock, size - done);
        fn(done, n);
        done += n;
    }
}

// CRC32C of each piece of `data`, which sits at `chunk_offset` within its chunk.
inline std::vector<uint32_t> block_crcs(uint64_t chunk_offset, std::span<const uint8_t> data) {
    std::vector<uint32_t> out;
    out.reserve(data.size() / kCrcBlock + 2);
    for_each_block_piece(chunk_offset, data.size(), [&](uint64_t done, uint64_t n) { out.push_back(crc32c(data.subspan(done, n))); });
    return out;
}

// The index of the first piece whose checksum does not match, or -1 when all do (and their
// number is right).
inline int64_t first_bad_block(uint64_t chunk_offset, std::span<const uint8_t> data, const std::vector<uint32_t>& crcs) {
    size_t i = 0;
    int64_t bad = -1;
    for_each_block_piece(chunk_offset, data.size(), [&](uint64_t done, uint64_t n) {
        if (bad < 0 && (i >= crcs.size() || crc32c(data.subspan(done, n)) != crcs[i])) bad = static_cast<int64_t>(i);
        ++i;
    });
    if (bad >= 0) return bad;
    return i == crcs.size() ? -1 : static_cast<int64_t>(i);
}

} // namespace jobfs::transport
