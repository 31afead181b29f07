// attr_cache.h: the entries and attributes libjobfs keeps under the daemons' leases.
//
// A leased answer (LookupLeased, CreateLeased: server/attr_leases.h) is kept under its entry
// (directory inode, name) until its lease ends, counted from before the request was sent,
// so the copy here always ends before the daemon's. stat of a path whose last entry is here
// costs no request. The daemon recalls a lease before anything about the inode changes
// (LeaseRecall, served on the transport's progress thread): the entries of those inodes go.
//
// Two races, both closed here:
// - A recall that arrives while a leased answer is on its way (the daemon granted, then the
//   inode changed): put() keeps nothing if any recall arrived since the caller's epoch().
// - A daemon that cannot reach this client waits for the lease to end; an entry is used only
//   while the connection it was granted on is healthy, so a client that lost its daemon
//   stops using what that daemon granted at once.
//
// Lock rule: mu_ guards everything; it is held only for map work, never across a call.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon_protocol.h"
#include "worker.h"

namespace jobfs::client {

class AttrCache {
public:
    using Clock = std::chrono::steady_clock;
    static constexpr size_t kMaxEntries = 1 << 16; // a full cache starts over

    // The recall count now; pass it to put() for an answer asked for after this call.
    uint64_t epoch() const;
    // The attributes of `name` in directory `parent` while leased, else nothing.
    std::optional<proto::Attr> get(uint64_t parent, const std::string& name);
    // Keeps a leased answer until `until`, unless a recall arrived since `epoch`.
    void put(uint64_t parent, const std::string& name, const proto::Attr& attr, Clock::time_point until,
             const transport::Endpoint& granted_on, uint64_t epoch);
    // The daemon's LeaseRecall: forgets these inodes.
    void recall(const std::vector<uint64_t>& inos);
    // Forgets everything and returns the connections leases were granted on (each once), to
    // release them (LeaseRelease) before disconnecting.
    std::vector<transport::Endpoint> clear_for_release();

    struct Stats {
        uint64_t hits = 0, misses = 0, recalled = 0, entries = 0;
    };
    Stats stats() const;

private:
    struct Entry {
        proto::Attr attr;
        Clock::time_point until;
        transport::Endpoint granted_on;
    };
    void erase_locked(std::unordered_map<std::string, Entry>::iterator it);

    mutable std::mutex mu_;
    std::unordered_map<std::string, Entry> entries_;
    std::unordered_map<uint64_t, std::vector<std::string>> by_ino_; // keys naming each inode
    uint64_t epoch_ = 0;
    std::vector<transport::Endpoint> granters_; // every connection a kept lease came on
    uint64_t hits_ = 0, misses_ = 0, recalled_ = 0;
};

} // namespace jobfs::client
