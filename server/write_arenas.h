// write_arenas.h: the shared-memory arenas through which clients on this daemon's node hand it
// the bytes of their chunk writes (docs/design.md, "Local writes").
//
// A client makes one memfd, seals its size (F_SEAL_SHRINK | F_SEAL_GROW: a file that shrank
// under the mapping would kill the daemon with SIGBUS) and hands it over the daemon's local
// socket (server/local_read_server.h, LocalOp::map_arena). The daemon maps it read-only and
// answers a token. A ChunkWrite naming that token and an offset (ChunkWriteRequest::arena)
// carries no bulk: the daemon checks the writer's CRC32Cs over the bytes in the arena and
// writes them to the chunk file (with O_DIRECT) straight from there. Why: over the transport
// every byte is copied into the tcp socket and out of it on the node's CPUs before it is
// written; through the arena the client copies it once, as a local write() does.
//
// An arena stays mapped while the connection that brought it is open and while any write
// still uses it (shared_ptr). Thread safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <unordered_map>

#include "result.h"

namespace jobfs::server {

class WriteArenas {
public:
    struct Arena {
        const uint8_t* base = nullptr;
        size_t size = 0;
        Arena(const uint8_t* b, size_t s) : base(b), size(s) {}
        ~Arena(); // unmaps
        Arena(const Arena&) = delete;
        Arena& operator=(const Arena&) = delete;
    };
    // The largest arena a client may hand over.
    static constexpr size_t kMaxSize = 1ull << 30;

    // Maps `memfd` (not taken: the caller closes it) read-only; its token. Refused (invalid) if
    // its size is not sealed, it is empty or larger than kMaxSize.
    Result<uint64_t> map(int memfd);
    void unmap(uint64_t token);
    // The arena of `token` and the range [offset, offset + length) in it; not_found for a token
    // this daemon does not know (its client's connection closed, or the daemon restarted),
    // invalid for a range outside it. The span is valid while the returned arena is held.
    Result<std::pair<std::shared_ptr<const Arena>, std::span<const uint8_t>>> range(uint64_t token, uint64_t offset,
                                                                                   uint64_t length) const;
    size_t mapped() const;

private:
    mutable std::mutex mu_;
    std::unordered_map<uint64_t, std::shared_ptr<const Arena>> arenas_;
    std::mt19937_64 tokens_{std::random_device{}()};
};

} // namespace jobfs::server
