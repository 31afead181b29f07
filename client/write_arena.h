// write_arena.h: this client's write arena, the shared memory through which it hands the
// daemons of its node the bytes of its chunk writes (docs/design.md, "Local writes";
// server/write_arenas.h is the daemons' side).
//
// One memfd, its size sealed, mapped here read-write and by each daemon of the node read-only
// (handed over their local socket, LocalReads::arena_token). A write to such a daemon copies its
// piece into a free region of the arena and names the region in the ChunkWrite instead of
// sending the bytes; the region is free again once the daemon answered. A region whose call
// ended without an answer (a deadline, a broken connection) is never reused: the daemon may
// still read it.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "result.h"

namespace jobfs::client {

class WriteArena {
public:
    static constexpr uint64_t kUnit = 256 * 1024; // allocation unit (page-aligned: O_DIRECT)

    // A sealed memfd of `bytes` (rounded up to kUnit), mapped.
    static Result<std::unique_ptr<WriteArena>> create(uint64_t bytes);
    ~WriteArena();
    WriteArena(const WriteArena&) = delete;
    WriteArena& operator=(const WriteArena&) = delete;

    int fd() const { return fd_; }
    uint64_t size() const { return size_; }

    struct Region {
        uint64_t offset = 0, length = 0; // in the arena; length rounded up to kUnit
        uint8_t* data = nullptr;
    };
    // A free region of at least `length` bytes; nullopt when none is free now.
    std::optional<Region> allocate(uint64_t length);
    // The daemon answered: the region may be reused.
    void release(const Region& r);
    // The call ended without an answer: never reused (counted in retired()).
    void retire(const Region& r);
    uint64_t retired() const;

private:
    WriteArena(int fd, uint8_t* base, uint64_t size);
    int fd_;
    uint8_t* base_;
    uint64_t size_;
    mutable std::mutex mu_;
    std::vector<uint8_t> units_; // per kUnit: 0 free, 1 in use, 2 retired
    size_t hint_ = 0;            // where the next search starts
};

} // namespace jobfs::client
