// crc_table_cache.h: the checksum entries of recently used chunks, kept in the daemon's memory.
//
// Why: every read of a chunk needs the checksums of the blocks it reads, and they sit at the
// front of the chunk's file (chunk_store.cc). Once the kernel has dropped that page, each read
// of a chunk (or each describe for a local reader) first waits for a 4 KiB read of it, queued
// in the disk behind the large reads of other chunks, before its own bytes are even asked for.
// 4 MPI ranks reading a 1 GiB checkpoint back with the page cache dropped (256 chunks of 4 MiB
// on 3 daemons): 1160-1437 MB/s, and 1565-1640 once those pages were read beforehand (session
// 36, alternating runs). The entries are 8 bytes per 64 KiB block: the default 32 MiB holds
// those of 256 GiB of chunks.
//
// Coherence: ChunkStore puts a table it read from a chunk's file, updates it after writing
// entries there and forgets it before it removes or replaces the file, all under the chunk's
// stripe lock, so a cached table is what the file holds. Only checksums are kept, never bytes:
// a block changed behind the daemon's back still fails its check. (A checksum entry changed
// behind its back goes unseen while its table is cached; after a restart it shows as a block
// that fails its check, and is repaired from another copy like any other.)
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "local_read_socket.h"
#include "server/chunk_store.h"

namespace jobfs::server {

// One block's entry, as stored in the chunk file (local readers read them too): the CRC32C of
// the block's bytes (up to the chunk's length) and 1 once the block was written (0: a hole,
// which reads as zeros).
using CrcEntry = transport::ChunkFileEntry;

class CrcTableCache {
public:
    static constexpr uint64_t kDefaultBytes = 32ull << 20;
    // What a table costs besides its entries (list and map nodes), for the bound.
    static constexpr uint64_t kTableOverhead = 96;

    explicit CrcTableCache(uint64_t max_bytes = kDefaultBytes) : max_bytes_(max_bytes) {}

    // Copies entries [first, first + out.size()) of chunk `id` to out, if its cached table
    // reaches that far.
    bool get(ChunkId id, uint64_t first, std::span<CrcEntry> out);
    // The entries [0, table.size()) of chunk `id`, as just read from its file.
    void put(ChunkId id, std::vector<CrcEntry> table);
    // Entries [first, first + e.size()) of chunk `id` were just written to its file. A cached
    // table that reaches `first` takes them (and grows); one that ends short of it is dropped,
    // as the entries in between are not known here. Entries written from the first block on
    // make a table where there was none.
    void update(ChunkId id, uint64_t first, std::span<const CrcEntry> e);
    // The chunk's file is about to be removed or replaced, or its entries are in doubt.
    void forget(ChunkId id);

    uint64_t bytes() const;
    uint64_t tables() const;

private:
    struct Table {
        ChunkId id;
        std::vector<CrcEntry> entries;
    };
    static uint64_t cost(const Table& t) { return t.entries.size() * sizeof(CrcEntry) + kTableOverhead; }
    void insert_locked(ChunkId id, std::vector<CrcEntry> table); // none cached for id
    void erase_locked(std::list<Table>::iterator it);
    void evict_locked();

    const uint64_t max_bytes_;
    mutable std::mutex mu_; // guards all below
    std::list<Table> lru_;  // most recently used first
    std::unordered_map<ChunkId, std::list<Table>::iterator, ChunkIdHash> index_;
    uint64_t bytes_ = 0;
};

} // namespace jobfs::server
