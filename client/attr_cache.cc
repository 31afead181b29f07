// attr_cache.cc: see attr_cache.h.
#include "client/attr_cache.h"

#include <algorithm>
#include <utility>

namespace jobfs::client {

uint64_t AttrCache::epoch() const {
    std::lock_guard lock(mu_);
    return epoch_;
}

void AttrCache::erase_locked(std::unordered_map<std::string, Entry>::iterator it) {
    auto b = by_ino_.find(it->second.attr.ino);
    if (b != by_ino_.end()) {
        auto& keys = b->second;
        keys.erase(std::remove(keys.begin(), keys.end(), it->first), keys.end());
        if (keys.empty()) by_ino_.erase(b);
    }
    entries_.erase(it);
}

std::optional<proto::Attr> AttrCache::get(uint64_t parent, const std::string& name) {
    const std::string k = proto::entry_key(parent, name);
    std::lock_guard lock(mu_);
    auto it = entries_.find(k);
    if (it == entries_.end()) {
        ++misses_;
        return std::nullopt;
    }
    if (Clock::now() >= it->second.until || !it->second.granted_on.health().ok()) {
        erase_locked(it);
        ++misses_;
        return std::nullopt;
    }
    ++hits_;
    return it->second.attr;
}

void AttrCache::put(uint64_t parent, const std::string& name, const proto::Attr& attr, Clock::time_point until,
                    const transport::Endpoint& granted_on, uint64_t epoch) {
    std::string k = proto::entry_key(parent, name);
    std::lock_guard lock(mu_);
    // Given back at disconnect even when not kept: the daemon holds it for this client.
    if (std::find(granters_.begin(), granters_.end(), granted_on) == granters_.end()) granters_.push_back(granted_on);
    if (epoch != epoch_) return; // a recall came meanwhile: this answer may be one it covered
    if (entries_.size() >= kMaxEntries) {
        entries_.clear();
        by_ino_.clear();
    }
    auto it = entries_.find(k);
    if (it != entries_.end()) erase_locked(it);
    by_ino_[attr.ino].push_back(k);
    entries_.emplace(std::move(k), Entry{attr, until, granted_on});
}

void AttrCache::recall(const std::vector<uint64_t>& inos) {
    std::lock_guard lock(mu_);
    ++epoch_;
    for (uint64_t ino : inos) {
        auto b = by_ino_.find(ino);
        if (b == by_ino_.end()) continue;
        for (const auto& k : b->second) {
            entries_.erase(k);
            ++recalled_;
        }
        by_ino_.erase(b);
    }
}

std::vector<transport::Endpoint> AttrCache::clear_for_release() {
    std::lock_guard lock(mu_);
    ++epoch_;
    entries_.clear();
    by_ino_.clear();
    return std::exchange(granters_, {});
}

AttrCache::Stats AttrCache::stats() const {
    std::lock_guard lock(mu_);
    return Stats{hits_, misses_, recalled_, entries_.size()};
}

} // namespace jobfs::client
