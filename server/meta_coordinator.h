// meta_coordinator.h: namespace operations that span two or more metadata shards.
//
// A directory's entries live on the shard of the directory's inode, but an entry may name an
// inode on another shard: every directory is placed by hash(parent, name), and renames and
// hard links across directories leave files where they were created. Operations that touch
// more than one shard are coordinated by the daemon that holds the entry they start from,
// with an intent log in its own SQLite database (docs/design.md, "Cross-shard operations"):
//
//   1. the coordinator logs the intent (for unlink/rmdir in the same transaction that removes
//      the entry);
//   2. the other shards apply their steps, each keyed by (intent, step) so a repeat is a
//      no-op, and a step can be aborted so that a late duplicate never applies;
//   3. the coordinator finishes its own part and deletes the intent in one transaction.
//
// A crash at any point leaves an intent row; resume() re-drives every row when the daemon
// starts (and after a step failed because a peer was unreachable), rolling forward whatever
// has passed its point of no return and back whatever has not. Observers may see a moving
// entry under both names for the length of one step (never under neither), and a rename over
// an existing name replaces it in one transaction on its shard, so the destination name never
// disappears.
//
// Lock rule: a coordinator holds no lock of its own across a step; MetaShard serialises its
// transactions and steps run on the calling (pool) thread, blocking on peers' replies.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <set>

#include "daemon_protocol.h"
#include "server/meta_shard.h"
#include "worker.h"

namespace jobfs::server {

class MetaCoordinator {
public:
    // peer(rank) gives the endpoint to daemon `rank` (never called for this daemon's rank).
    using PeerFn = std::function<Result<transport::Endpoint>(uint32_t rank)>;

    MetaCoordinator(MetaShard& shard, uint32_t rank, uint32_t daemons, PeerFn peer);

    // The shard a new directory named `name` in `parent` is placed on.
    static uint32_t place_directory(uint64_t parent, const std::string& name, uint32_t daemons);

    // Each is the whole POSIX operation, for the cases the local shard reports cross_device.
    Result<Attr> lookup(const Cred& cred, uint64_t parent, const std::string& name);
    Result<Attr> mkdir(const Cred& cred, uint64_t parent, const std::string& name, uint32_t mode);
    Status rmdir(const Cred& cred, uint64_t parent, const std::string& name);
    Result<UnlinkResult> unlink(const Cred& cred, uint64_t parent, const std::string& name);
    Result<Attr> link(const Cred& cred, uint64_t ino, uint64_t new_parent, const std::string& name);
    Result<RenameResult> rename(const Cred& cred, uint64_t old_parent, const std::string& old_name,
                                uint64_t new_parent, const std::string& new_name, uint32_t flags);
    // Renames inside one directory, an outcome each, in order: as many as the shard can do
    // alone go in one transaction (MetaShard::rename_in_dir), the others as rename() above.
    // When the first transaction fails as a whole, nothing changed and that is the answer (a
    // directory delegated to a client: Code::recall, which the caller recalls and runs again).
    Result<std::vector<Result<RenameResult>>> rename_in_dir(const Cred& cred, uint64_t parent,
                                                            MetaShard::RenamePairs names, uint32_t flags);

    // Re-drives every intent of the log to its end. Safe to call at any time; a call while
    // another runs returns at once.
    void resume();

    // Tests only: runs in rename between its checks (the loop check included) and its first
    // change, to hold a rename there while another runs (MetaServiceTest).
    std::function<void()> after_rename_checks_for_test;

    // ---- the steps, here or on the shard that owns the object ----------------------------
    Result<Attr> getattr_at(uint64_t ino);
    Result<std::optional<DirEntry>> dentry_at(const Cred& cred, uint64_t parent, const std::string& name);
    Result<bool> has_entries_at(uint64_t dir);
    Result<uint64_t> parent_at(uint64_t ino);

private:
    Result<transport::Endpoint> peer(uint32_t rank);
    // A step on shard s, sent to the daemon serving it now; asked again while the shard is
    // changing hands or its copies catch up (`again`, its daemon lost: the next table names
    // another), for up to kStepRetry. Every step is idempotent (keyed by intent and step) or a
    // read, so a repeat is harmless.
    static constexpr std::chrono::seconds kStepRetry{20};
    template <class Rpc>
    Result<typename Rpc::Response> step_call(uint32_t s, const typename Rpc::Request& req);
    // What steps sent to other shards say as done_below: this shard's oldest unfinished intent
    // (0 if unknown).
    uint64_t done_below();
    // rename once the local shard said cross_device: the operation across shards.
    Result<RenameResult> rename_across(const Cred& cred, uint64_t old_parent, const std::string& old_name,
                                       uint64_t new_parent, const std::string& new_name, uint32_t flags);
    Result<RenameInsertResult> rename_insert_at(const Intent& in);
    Result<UnlinkResult> nlink_at(uint64_t intent, IntentStep step, uint64_t ino, int delta);
    Result<std::optional<int64_t>> abort_at(uint32_t shard, uint64_t intent, IntentStep step);
    Result<Attr> create_inode_at(uint32_t shard, uint64_t intent, const Attr& tmpl);
    Status delete_inode_at(uint64_t ino);
    Status set_parent_at(uint64_t ino, uint64_t parent);

    // Drivers: run (or re-run) an intent from its first remote step to its end.
    Result<RenameResult> drive_rename(const Intent& in);
    Result<Attr> drive_link(const Intent& in);
    Result<UnlinkResult> drive_unlink(const Intent& in);
    Status drive_rmdir(const Intent& in);
    Status undo_mkdir(const Intent& in);
    // A step could not be settled (a peer unreachable): the intent stays for resume().
    Status left_pending(const Intent& in, const Status& why);
    // An intent a request drives from begin_live to the end of its LiveIntent: resume() (a
    // start-up, or a retry another request triggers) leaves it alone meanwhile; driving it
    // from two threads at once would undo what the request is doing.
    Result<uint64_t> begin_live(const std::function<Result<uint64_t>()>& begin);
    class LiveIntent {
    public:
        LiveIntent(MetaCoordinator& co, uint64_t id) : co_(co), id_(id) {}
        ~LiveIntent();
        LiveIntent(const LiveIntent&) = delete;
        LiveIntent& operator=(const LiveIntent&) = delete;

    private:
        MetaCoordinator& co_;
        uint64_t id_;
    };

    MetaShard& shard_;
    uint32_t rank_;
    uint32_t daemons_;
    PeerFn peer_;
    std::atomic<bool> pending_{false};
    std::mutex resume_mu_;
    std::mutex live_mu_;       // guards live_; held while an intent is logged and while resume() reads the log
    std::set<uint64_t> live_;  // intents their requests are driving
};

} // namespace jobfs::server
