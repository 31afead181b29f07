// block_crc.h: end-to-end checksums of chunk data (docs/replication.md, "Integrity").
//
// A range of a chunk is checksummed in pieces cut at the chunk's 64 KiB block boundaries (the
// blocks of server/chunk_store), one CRC32C (ISA-L) each: the writer computes them over its
// buffer and every replica checks them before it stores the bytes; the daemon answering a read
// sends them for the bytes it returns and the reader checks them before it hands them out.
// Header-only so that client and server share one definition; users link ISA-L.
#pragma once

#include <isa-l/crc.h>

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

// CRC32C of each piece of `data`, which sits at `chunk_offset` within its chunk.
inline std::vector<uint32_t> block_crcs(uint64_t chunk_offset, std::span<const uint8_t> data) {
    std::vector<uint32_t> out;
    out.reserve(data.size() / kCrcBlock + 2);
    uint64_t done = 0;
    while (done < data.size()) {
        const uint64_t pos = chunk_offset + done;
        const uint64_t n = std::min<uint64_t>(kCrcBlock - pos % kCrcBlock, data.size() - done);
        out.push_back(crc32c(data.subspan(done, n)));
        done += n;
    }
    return out;
}

// The index of the first piece whose checksum does not match, or -1 when all do (and their
// number is right).
inline int64_t first_bad_block(uint64_t chunk_offset, std::span<const uint8_t> data, const std::vector<uint32_t>& crcs) {
    uint64_t done = 0;
    size_t i = 0;
    while (done < data.size()) {
        const uint64_t pos = chunk_offset + done;
        const uint64_t n = std::min<uint64_t>(kCrcBlock - pos % kCrcBlock, data.size() - done);
        if (i >= crcs.size() || crc32c(data.subspan(done, n)) != crcs[i]) return static_cast<int64_t>(i);
        done += n;
        ++i;
    }
    return i == crcs.size() ? -1 : static_cast<int64_t>(i);
}

} // namespace jobfs::transport
