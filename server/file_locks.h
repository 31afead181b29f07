// file_locks.h: the flock(2) and fcntl(2) byte-range locks of the files of a metadata shard,
// kept by the daemon that serves the shard, so that a lock taken through one node's mount holds
// against the processes of every other node (docs/design.md, "Locks").
//
// Semantics are Linux's: fcntl locks belong to an owner (a process, as the kernel of its node
// names it, on one client) and cover byte ranges; an owner's new lock replaces its own locks
// where they overlap (splitting them), and merges with its own adjacent locks of the same type.
// flock locks belong to an open file description and cover the whole file; a new one converts
// the owner's own. The two kinds never conflict with each other. A read (shared) lock conflicts
// only with another owner's write (exclusive) lock over the same bytes.
//
// Nothing waits here: a blocked F_SETLKW or flock waits in the client, asking again (as Linux's
// NFSv4 client does). Locks live in memory: a daemon that restarts, or a shard that fails over
// to another daemon, forgets them (documented in jobfs-fuse(8)).
//
// A client that died does not give its locks back. When its lock stands in the way of another,
// `alive(client)` is asked (the daemon: is the connection it came on still up?); a dead
// client's locks, on every file, go.
//
// Thread safety: every method may be called from any thread (one mutex).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

namespace jobfs::server {

enum class LockType : uint8_t { read = 0, write = 1, unlock = 2 };

struct FileLock {
    uint64_t client = 0; // the client (a mount, a libjobfs process) that took it
    uint64_t owner = 0;  // its owner there: a process (fcntl) or an open file (flock)
    uint32_t pid = 0;    // the process, as its node names it (F_GETLK reports it)
    bool flock = false;  // an flock(2) lock (the whole file), else an fcntl(2) byte range
    LockType type = LockType::read;
    uint64_t start = 0, end = 0; // bytes [start, end]; end UINT64_MAX: however long the file gets
};

class FileLocks {
public:
    using AliveFn = std::function<bool(uint64_t client)>;
    explicit FileLocks(AliveFn alive);

    // The lock that keeps `want` from being taken on file ino (F_GETLK), if any.
    std::optional<FileLock> conflict(uint64_t ino, const FileLock& want);
    // Takes `want` on file ino, or with LockType::unlock gives back what its owner holds over
    // the range (flock: the owner's lock). Nothing changes when another owner's lock is in the
    // way: that lock is returned.
    std::optional<FileLock> set(uint64_t ino, const FileLock& want);
    // Every lock of `client` goes (it ended, or is dead).
    void release_client(uint64_t client);
    // Locks held now, all files (each range of an owner counts once).
    size_t count() const;
    // The locks on file ino, in no particular order (tests).
    std::vector<FileLock> held(uint64_t ino) const;

private:
    std::optional<FileLock> first_conflict(uint64_t ino, const FileLock& want);
    void release_client_locked(uint64_t client);

    mutable std::mutex mu_;
    AliveFn alive_;
    std::unordered_map<uint64_t, std::vector<FileLock>> files_;
};

} // namespace jobfs::server
