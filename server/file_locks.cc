#include "server/file_locks.h"

#include <algorithm>
#include <limits>

namespace jobfs::server {

namespace {

bool same_owner(const FileLock& a, const FileLock& b) { return a.client == b.client && a.owner == b.owner; }
bool overlap(const FileLock& a, const FileLock& b) { return a.start <= b.end && b.start <= a.end; }
bool in_way(const FileLock& held, const FileLock& want) {
    return held.flock == want.flock && !same_owner(held, want) && overlap(held, want) &&
           (held.type == LockType::write || want.type == LockType::write);
}

// The owner's fcntl locks after it took (or, unlock: gave back) want's range: its locks there
// cut away, the new one put in and merged with its own of the same type that touch it.
void posix_apply(std::vector<FileLock>& locks, const FileLock& want) {
    std::vector<FileLock> out;
    out.reserve(locks.size() + 2);
    FileLock add = want;
    for (const FileLock& l : locks) {
        if (l.flock || !same_owner(l, want)) {
            out.push_back(l);
            continue;
        }
        const bool touches = (l.end != std::numeric_limits<uint64_t>::max() && l.end + 1 == want.start) ||
                             (want.end != std::numeric_limits<uint64_t>::max() && want.end + 1 == l.start);
        if (want.type != LockType::unlock && l.type == want.type && (overlap(l, want) || touches)) {
            add.start = std::min(add.start, l.start); // merged into the new one
            add.end = std::max(add.end, l.end);
            continue;
        }
        if (!overlap(l, want)) {
            out.push_back(l);
            continue;
        }
        if (l.start < want.start) { // what is left of it before the range
            FileLock before = l;
            before.end = want.start - 1;
            out.push_back(before);
        }
        if (l.end > want.end) { // and after it
            FileLock after = l;
            after.start = want.end + 1;
            out.push_back(after);
        }
    }
    if (want.type != LockType::unlock) out.push_back(add);
    locks = std::move(out);
}

} // namespace

FileLocks::FileLocks(AliveFn alive) : alive_(std::move(alive)) {}

std::optional<FileLock> FileLocks::first_conflict(uint64_t ino, const FileLock& want) {
    if (want.type == LockType::unlock) return std::nullopt; // giving back is never refused
    for (;;) {
        auto it = files_.find(ino);
        if (it == files_.end()) return std::nullopt;
        const auto held = std::find_if(it->second.begin(), it->second.end(), [&](const FileLock& l) { return in_way(l, want); });
        if (held == it->second.end()) return std::nullopt;
        if (!alive_ || alive_(held->client)) return *held;
        release_client_locked(held->client); // dead: none of its locks stands in anyone's way
    }
}

std::optional<FileLock> FileLocks::conflict(uint64_t ino, const FileLock& want) {
    std::lock_guard lock(mu_);
    return first_conflict(ino, want);
}

std::optional<FileLock> FileLocks::set(uint64_t ino, const FileLock& want) {
    std::lock_guard lock(mu_);
    if (auto c = first_conflict(ino, want)) return c;
    std::vector<FileLock>& locks = files_[ino];
    if (want.flock) {
        std::erase_if(locks, [&](const FileLock& l) { return l.flock && same_owner(l, want); });
        if (want.type != LockType::unlock) {
            FileLock whole = want;
            whole.start = 0;
            whole.end = std::numeric_limits<uint64_t>::max();
            locks.push_back(whole);
        }
    } else {
        posix_apply(locks, want);
    }
    if (locks.empty()) files_.erase(ino);
    return std::nullopt;
}

void FileLocks::release_client_locked(uint64_t client) {
    for (auto it = files_.begin(); it != files_.end();) {
        std::erase_if(it->second, [&](const FileLock& l) { return l.client == client; });
        it = it->second.empty() ? files_.erase(it) : std::next(it);
    }
}

void FileLocks::release_client(uint64_t client) {
    std::lock_guard lock(mu_);
    release_client_locked(client);
}

size_t FileLocks::count() const {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const auto& [ino, locks] : files_) n += locks.size();
    return n;
}

std::vector<FileLock> FileLocks::held(uint64_t ino) const {
    std::lock_guard lock(mu_);
    auto it = files_.find(ino);
    return it == files_.end() ? std::vector<FileLock>{} : it->second;
}

} // namespace jobfs::server
