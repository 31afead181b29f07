// crc_table_cache.cc: see crc_table_cache.h.
#include "server/crc_table_cache.h"

#include <algorithm>

namespace jobfs::server {

bool CrcTableCache::get(ChunkId id, uint64_t first, std::span<CrcEntry> out) {
    std::lock_guard l(mu_);
    auto it = index_.find(id);
    if (it == index_.end()) return false;
    const std::vector<CrcEntry>& e = it->second->entries;
    if (first > e.size() || out.size() > e.size() - first) return false;
    std::copy_n(e.begin() + static_cast<ptrdiff_t>(first), out.size(), out.begin());
    lru_.splice(lru_.begin(), lru_, it->second);
    return true;
}

void CrcTableCache::put(ChunkId id, std::vector<CrcEntry> table) {
    std::lock_guard l(mu_);
    if (auto it = index_.find(id); it != index_.end()) erase_locked(it->second);
    insert_locked(id, std::move(table));
}

void CrcTableCache::update(ChunkId id, uint64_t first, std::span<const CrcEntry> e) {
    std::lock_guard l(mu_);
    auto it = index_.find(id);
    if (it == index_.end()) {
        // Entries from the first on are all known now: a chunk written from its start (the
        // first piece of a stream) is cached without a read.
        if (first == 0) insert_locked(id, std::vector<CrcEntry>(e.begin(), e.end()));
        return;
    }
    Table& t = *it->second;
    if (first > t.entries.size()) {
        erase_locked(it->second);
        return;
    }
    bytes_ -= cost(t);
    if (first + e.size() > t.entries.size()) t.entries.resize(first + e.size());
    std::copy(e.begin(), e.end(), t.entries.begin() + static_cast<ptrdiff_t>(first));
    bytes_ += cost(t);
    lru_.splice(lru_.begin(), lru_, it->second);
    evict_locked();
}

void CrcTableCache::forget(ChunkId id) {
    std::lock_guard l(mu_);
    if (auto it = index_.find(id); it != index_.end()) erase_locked(it->second);
}

uint64_t CrcTableCache::bytes() const {
    std::lock_guard l(mu_);
    return bytes_;
}

uint64_t CrcTableCache::tables() const {
    std::lock_guard l(mu_);
    return lru_.size();
}

void CrcTableCache::insert_locked(ChunkId id, std::vector<CrcEntry> table) {
    lru_.push_front(Table{id, std::move(table)});
    index_[id] = lru_.begin();
    bytes_ += cost(lru_.front());
    evict_locked();
}

void CrcTableCache::erase_locked(std::list<Table>::iterator it) {
    bytes_ -= cost(*it);
    index_.erase(it->id);
    lru_.erase(it);
}

void CrcTableCache::evict_locked() {
    while (bytes_ > max_bytes_ && !lru_.empty()) erase_locked(std::prev(lru_.end()));
}

} // namespace jobfs::server
