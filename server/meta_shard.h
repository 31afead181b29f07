// meta_shard.h: one shard of the jobfs namespace, kept in one SQLite database.
//
// Each daemon owns one shard. A higher layer routes requests and coordinates operations that
// span shards; this class offers both whole single-shard operations (mkdir, unlink, rename…,
// each one transaction with POSIX checks and errors) and the primitive steps a cross-shard
// coordinator needs (insert_dentry, create_inode, adjust_nlink…).
//
// Placement rule assumed here: a directory's entries live on the shard of the directory's
// inode (shard_of(dir)), and every inode created by a whole operation lives with its entry.
// A dentry may still name an inode on another shard (a directory placed elsewhere, a hard link
// across shards). A whole operation that needs the attributes of such an inode (lookup,
// unlink, rmdir, rename of or onto it or into a directory of another shard, link to it, a
// directory-loop walk that leaves the shard) fails with Code::cross_device and leaves the work
// to the coordinator (meta_coordinator.h), which uses lookup_dentry, the intent log and the
// idempotent steps below.
//
// Lock rule: one mutex per MetaShard guards the SQLite connection, its cached statements and
// the operation context used in error messages. Every public method holds it for its whole
// run (one transaction for anything that writes), so any thread may call any method. No method
// calls back into user code or into another public method while holding it.
//
// Durability: WAL with synchronous=NORMAL. A committed operation survives a crash of the
// process; a power loss may lose the last commits but never corrupts the database.
//
// Times are nanoseconds since the epoch (CLOCK_REALTIME). Reads (lookup, readdir, getxattr) do
// not update atime (as with noatime); a client sets it through setattr when it wants to.
// readdir does not return "." and "..": the caller synthesises them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "placement.h"
#include "result.h"
#include "status.h"

namespace jobfs::server {

// Inode numbers carry their shard: ino = shard_id << 48 | seq. seq starts at 2 on every shard
// and is never reused; inode 1 is the root directory, on shard 0.
constexpr unsigned kShardShift = 48;
constexpr uint64_t kSeqMask = (uint64_t(1) << kShardShift) - 1;
constexpr uint64_t kRootIno = 1;
constexpr uint64_t kFirstSeq = 2;
constexpr uint32_t kMaxShardId = 0x7fff;  // keeps every ino a positive SQLite integer

inline uint32_t shard_of(uint64_t ino) { return static_cast<uint32_t>(ino >> kShardShift); }
inline uint64_t make_ino(uint32_t shard_id, uint64_t seq) {
    return (uint64_t(shard_id) << kShardShift) | (seq & kSeqMask);
}

// Limits, as Linux has them.
constexpr size_t kMaxNameLen = 255;          // one path component (NAME_MAX)
constexpr size_t kMaxSymlinkLen = 4095;      // PATH_MAX - 1
constexpr size_t kMaxXattrNameLen = 255;     // XATTR_NAME_MAX
constexpr size_t kMaxXattrValueLen = 65536;  // XATTR_SIZE_MAX
constexpr uint32_t kMaxLinks = 65000;        // hard links per inode (as ext4)

// Striping defaults and bounds. stripe_count 0 means "all daemons".
constexpr uint32_t kDefaultChunkSize = 4u << 20;
constexpr uint32_t kMinChunkSize = 4096;
constexpr uint32_t kMaxChunkSize = 1u << 30;
// Copies of each chunk (chain replication, docs/replication.md). 0 = inherit / default.
constexpr uint32_t kMaxReplicas = placement::kMaxReplicas;

// rename flags (values of <linux/fs.h>) and setxattr flags (values of <sys/xattr.h>).
constexpr uint32_t kRenameNoReplace = 1;
constexpr uint32_t kRenameExchange = 2;
constexpr int kXattrCreate = 1;
constexpr int kXattrReplace = 2;

// Access masks for may_access (the bits of R_OK, W_OK, X_OK).
constexpr int kMayRead = 4;
constexpr int kMayWrite = 2;
constexpr int kMayExec = 1;

enum class FileType : uint8_t { regular = 1, directory = 2, symlink = 3 };

// Who asks. uid 0 passes every permission check, as root does. A Cred nobody filled in is
// "nobody" (65534), never root.
struct Cred {
    uint32_t uid = 65534;
    uint32_t gid = 65534;
    std::vector<uint32_t> groups;  // supplementary groups
    bool in_group(uint32_t g) const;
};

// Striping of a file, or the default for new files of a directory. 0 = inherit / default.
struct Layout {
    uint32_t chunk_size = 0;
    uint32_t stripe_count = 0;
    uint32_t replicas = 0;
};

// What an exclusive create sets on the file it makes, in its transaction: the size (a hole
// until written) and extended attributes (checked as setxattr checks them).
struct NewFile {
    uint64_t size = 0;
    std::vector<std::pair<std::string, std::string>> xattrs;
};

struct Attr {
    uint64_t ino = 0;
    FileType type = FileType::regular;
    uint32_t mode = 0;  // as st_mode: type bits | permission bits (07777)
    uint32_t uid = 0;
    uint32_t gid = 0;
    uint64_t size = 0;  // regular file: recorded length; symlink: length of target
    uint32_t nlink = 0;
    int64_t atime_ns = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
    uint64_t rdev = 0;
    std::string target;  // symlink target
    uint32_t chunk_size = 0;    // file: its layout; directory: default for new children (0: none)
    uint32_t stripe_count = 0;
    uint64_t generation = 0;    // 1: inode numbers are never reused within a file system
    uint64_t parent = 0;        // directory: the directory that holds it (0: the root); file,
                                // symlink: the directory it was made or last renamed in (0:
                                // made before 2026-12, or elsewhere by another shard)
    uint32_t replicas = 0;      // file: copies of each chunk (1-3); directory: default (0: none)
};

struct DirEntry {
    std::string name;
    uint64_t ino = 0;
    FileType type = FileType::regular;
};

struct ReadDirResult {
    std::vector<DirEntry> entries;  // sorted by name (bytewise)
    bool more = false;              // entries after the last one exist
};

// What an unlink-like step did to the inode. attr is the state after the change (nlink
// already decremented); when last_link is set the inode row and its xattrs are gone and the
// caller deletes the file's data chunks.
struct UnlinkResult {
    Attr attr;
    bool last_link = false;
};

struct RenameResult {
    std::optional<UnlinkResult> replaced;  // the inode a rename overwrote, if any
};

// setattr: each field present is changed. *_now set the time to the server's clock.
struct SetAttr {
    std::optional<uint32_t> mode;  // permission bits (07777); the type cannot change
    std::optional<uint32_t> uid;
    std::optional<uint32_t> gid;
    std::optional<uint64_t> size;  // only the recorded size; the data is the caller's
    std::optional<int64_t> atime_ns;
    std::optional<int64_t> mtime_ns;
    bool atime_now = false;
    bool mtime_now = false;
};

// A cross-shard operation this shard coordinates, as its intent log keeps it until every
// step is done (docs/design.md, "Cross-shard operations").
enum class IntentOp : uint8_t { rename = 1, link = 2, unlink = 3, rmdir = 4, mkdir = 5 };
struct Intent {
    uint64_t id = 0;        // given by intent_begin*: shard << 48 | seq, never reused
    IntentOp op = IntentOp::rename;
    uint64_t parent = 0;    // the entry this shard holds: rename's source, link's and
    std::string name;       // mkdir's new name, unlink's and rmdir's victim
    uint64_t ino = 0;       // the inode that entry names (mkdir: 0 until it exists)
    FileType type = FileType::regular;
    uint64_t new_parent = 0;  // rename: the destination (on any shard)
    std::string new_name;
    uint64_t expect_ino = 0;  // rename: the inode the destination named when checked (0: none)
    uint32_t peer = 0;        // mkdir: the shard that creates the inode
};

// Steps other shards apply for an intent, each at most once per (intent, step).
enum class IntentStep : uint32_t {
    rename_insert = 1,  // rename: the new entry, on the destination directory's shard
    drop_replaced = 2,  // rename: one link less for the inode the new entry replaced
    add_link = 3,       // link: one link more on the inode's shard
    drop_link = 4,      // unlink, and undoing add_link: one link less
    create_inode = 5,   // mkdir: the new directory's inode
};

// What rename_insert did: the entry it replaced, if any. When that inode lives here its link
// was dropped in the same transaction (replaced_here); otherwise the coordinator drops it.
struct RenameInsertResult {
    uint64_t replaced_ino = 0;
    FileType replaced_type = FileType::regular;
    std::optional<UnlinkResult> replaced_here;
    bool repeated = false;  // the step had been applied before (a re-drive)
};

struct Counts {
    uint64_t inodes = 0;
    uint64_t dentries = 0;
    uint64_t applied = 0; // step records of other shards' intents (see note_intents_done)
    uint64_t xattrs = 0;  // extended attributes of all inodes
};

// POSIX permission check of mask (kMayRead | kMayWrite | kMayExec) on attr for cred.
bool may_access(const Attr& attr, const Cred& cred, int mask);

class MetaShard {
public:
    // Opens or creates the shard database at path. A new shard 0 gets the root directory.
    // Reopening an existing file serves the same data; a file of another shard is refused.
    // defaults: the layout of new files whose directory sets none (jobfsd's chunk-size and
    // stripe-count).
    static Result<std::unique_ptr<MetaShard>> open(const std::string& path, uint32_t shard_id,
                                                   Layout defaults = {kDefaultChunkSize, 0, 1});
    ~MetaShard();
    MetaShard(const MetaShard&) = delete;
    MetaShard& operator=(const MetaShard&) = delete;

    uint32_t shard_id() const { return shard_id_; }

    // Told of every change this shard makes to an inode (its row written or removed, or an
    // entry naming it removed) and of every change to a directory's mode or owner (which
    // lookups in it are checked against), inside the transaction, under the shard's lock,
    // also for a transaction that then rolls back, and for changesets a replica applies.
    // Attribute leases (attr_leases.h) are recalled so. The functions must not call back into
    // the shard or wait.
    struct ChangeObserver {
        std::function<void(uint64_t ino)> inode;
        std::function<void(uint64_t dir)> dir_access;
    };
    void set_change_observer(ChangeObserver observer);

    // ---- whole single-shard operations --------------------------------------------------
    Result<Attr> getattr(uint64_t ino);
    Result<Attr> lookup(const Cred& cred, uint64_t parent, const std::string& name);
    // getattr, lookup, create and unlink for a caller that must not wait (the transport's
    // progress thread): nullopt, without an answer and with nothing changed, while another
    // operation holds the shard; for create and unlink also while the shard ships its changes
    // to replicas (calls to other daemons) or when the commit would have to checkpoint the WAL
    // (fsyncs; the next ordinary commit does it).
    std::optional<Result<Attr>> try_getattr(uint64_t ino);
    std::optional<Result<Attr>> try_lookup(const Cred& cred, uint64_t parent, const std::string& name);
    std::optional<Result<Attr>> try_create(const Cred& cred, uint64_t parent, const std::string& name, uint32_t mode,
                                           bool exclusive, Layout layout = {}, const NewFile& init = {});
    std::optional<Result<UnlinkResult>> try_unlink(const Cred& cred, uint64_t parent, const std::string& name);
    // Regular file. If the name exists: exclusive → exists; otherwise the existing file's
    // attributes (a directory → is_dir). Layout fields of 0 come from the parent directory's,
    // then from the defaults (4 MiB chunks, all daemons). `init` (exclusive only) is applied to
    // the new file; any part of it failing fails the create.
    Result<Attr> create(const Cred& cred, uint64_t parent, const std::string& name, uint32_t mode,
                        bool exclusive, Layout layout = {}, const NewFile& init = {});
    // New directories inherit the parent's default layout (and its setgid bit).
    Result<Attr> mkdir(const Cred& cred, uint64_t parent, const std::string& name, uint32_t mode);
    Result<Attr> symlink(const Cred& cred, uint64_t parent, const std::string& name,
                         const std::string& target);
    Result<std::string> readlink(uint64_t ino);
    Result<Attr> link(const Cred& cred, uint64_t ino, uint64_t new_parent,
                      const std::string& name);
    Result<UnlinkResult> unlink(const Cred& cred, uint64_t parent, const std::string& name);
    Status rmdir(const Cred& cred, uint64_t parent, const std::string& name);
    Result<RenameResult> rename(const Cred& cred, uint64_t old_parent, const std::string& old_name,
                                uint64_t new_parent, const std::string& new_name,
                                uint32_t flags = 0);
    // Renames inside directory `parent`, in order, in one transaction (one commit, one
    // changeset shipped to the replicas): each entry as rename() alone would do it, with an
    // outcome each; one that fails changes nothing and stops none of the others. An entry
    // that needs another shard ends the batch: its outcome is cross_device and the entries
    // after it have none (the caller renames it through the coordinator, then goes on). An
    // error of the database itself fails the whole batch, and then nothing changed.
    using RenamePairs = std::span<const std::pair<std::string, std::string>>;
    Result<std::vector<Result<RenameResult>>> rename_in_dir(const Cred& cred, uint64_t parent, RenamePairs names,
                                                            uint32_t flags = 0);
    // Entries of directory ino with names strictly after after_name ("" = from the start),
    // at most max_entries of them (1 or more).
    Result<ReadDirResult> readdir(const Cred& cred, uint64_t ino, const std::string& after_name,
                                  uint32_t max_entries);
    Result<Attr> setattr(const Cred& cred, uint64_t ino, const SetAttr& set);
    // Sets a file's layout (only while it is empty: busy otherwise) or a directory's default
    // for new children. Owner or root.
    Result<Attr> set_layout(const Cred& cred, uint64_t ino, Layout layout);
    // size = max(size, current), mtime = ctime = now. No permission check: writers that
    // already hold the file open report what they wrote (at close, fsync, sync).
    Result<Attr> extend_size(uint64_t ino, uint64_t size);
    // The place of an O_APPEND write of `length` bytes: size = max(size, at_least) + length,
    // mtime = ctime = now; the write goes at the returned size - length. No permission check,
    // as extend_size. Drops setuid, setgid (with group execute) and security.capability, as
    // the kernel does before a write (for root too). `token` (not 0): the requester's id of
    // this reservation; asked again with it, the same place is returned and nothing changes
    // (a retry after the answer was lost), for about the file's last 256 reservations.
    Result<Attr> reserve_append(uint64_t ino, uint64_t at_least, uint64_t length, uint64_t token = 0);

    // Extended attributes: user.* (read/write permission of the inode; regular files and
    // directories only), trusted.* and security.* (writable by root only; trusted.* hidden
    // from others). system.* (ACLs) is not supported.
    Status setxattr(const Cred& cred, uint64_t ino, const std::string& name,
                    const std::string& value, int flags);
    Result<std::string> getxattr(const Cred& cred, uint64_t ino, const std::string& name);
    Result<std::vector<std::string>> listxattr(const Cred& cred, uint64_t ino);
    Status removexattr(const Cred& cred, uint64_t ino, const std::string& name);

    // ---- primitives for cross-shard operations (no permission checks) --------------------
    // The dentry of name in parent, after the search-permission check lookup does; the inode
    // may live on another shard.
    Result<DirEntry> lookup_dentry(const Cred& cred, uint64_t parent, const std::string& name);
    // Adds a name (exists if taken). parent's mtime/ctime are updated and, for a directory
    // entry, parent's nlink goes up by one; remove_dentry undoes both and returns the entry.
    Status insert_dentry(uint64_t parent, const std::string& name, uint64_t ino, FileType type);
    Result<DirEntry> remove_dentry(uint64_t parent, const std::string& name);
    // A new inode on this shard from tmpl's type, mode, uid, gid, nlink (>= 1), rdev, target
    // and layout fields; times are now and size is the target's length for a symlink, else 0.
    Result<Attr> create_inode(const Attr& tmpl);
    // nlink += delta; at 0 the inode and its xattrs are deleted (last_link). A directory with
    // entries cannot be deleted (not_empty).
    Result<UnlinkResult> adjust_nlink(uint64_t ino, int delta);
    Status delete_inode(uint64_t ino);

    // ---- cross-shard operations, coordinator side: the intent log ---------------------
    // Logs an intent (rename, link, mkdir) and returns its id.
    Result<uint64_t> intent_begin(Intent intent);
    // unlink/rmdir of an entry whose inode is elsewhere: removes the entry (which must still
    // name intent.ino) and logs the intent in one transaction; returns the id.
    Result<uint64_t> intent_begin_remove(Intent intent);
    // link/mkdir, last step: adds the entry and ends the intent in one transaction.
    Status intent_finish_insert(uint64_t id, uint64_t parent, const std::string& name, uint64_t ino,
                                FileType type);
    // rename, last step: removes the source entry if it still names ino, ends the intent.
    Status intent_finish_rename(const Intent& intent);
    Status intent_end(uint64_t id);
    Result<std::vector<Intent>> intents();
    // The id below which every intent of this shard is finished: the oldest one in the log,
    // or the next to be handed out. Sent with each step (done_below) so that the other
    // shards can forget the records of finished intents' steps.
    Result<uint64_t> intents_done_below();

    // ---- cross-shard operations, the other shards' steps (each idempotent) ------------
    // Step records (applied) are what makes a repeated step a no-op, and a coordinator repeats
    // only the steps of intents still in its log. note_intents_done(id) says that every intent
    // of shard_of(id) below id is finished: the next step recorded here drops their records
    // in its own transaction (so the table stays as small as the intents in flight, instead of
    // growing by a row per cross-shard mkdir, rename or link). Kept in memory: a new primary
    // starts trimming with the first step it is sent. This shard's own intents need no note:
    // their steps here read the intent log in the same transaction.
    void note_intents_done(uint64_t done_below);
    // rename: makes (parent, name) name ino, replacing the entry expect_ino (0: none may be
    // there); busy if the entry changed since the coordinator looked.
    Result<RenameInsertResult> rename_insert(uint64_t intent, uint64_t parent, const std::string& name,
                                             uint64_t ino, FileType type, uint64_t expect_ino);
    // nlink += delta once for (intent, step); a repeat returns the inode as it is now.
    Result<UnlinkResult> adjust_nlink_once(uint64_t intent, IntentStep step, uint64_t ino, int delta);
    // create_inode once per intent; a repeat returns the same inode.
    Result<Attr> create_inode_once(uint64_t intent, const Attr& tmpl);
    // Makes sure (intent, step) never runs from now on; true if it had already run (the
    // coordinator then undoes it).
    Result<bool> abort_step(uint64_t intent, IntentStep step);
    // The same, with the result the step recorded (create_inode: the inode it made).
    Result<std::optional<int64_t>> abort_step_result(uint64_t intent, IntentStep step);
    // An inode moved to another directory: ctime, and its parent pointer (a file's: the
    // directory of its last name).
    Status set_parent(uint64_t ino, uint64_t parent);
    // The directory holding directory ino (0 for the root).
    Result<uint64_t> parent_of(uint64_t ino);

    Result<Counts> counts();

    // ---- directory delegations (daemon_protocol.h, server/dir_delegations.h) ----------------
    // While a directory is delegated (a row of dir_delegations, replicated with the shard),
    // every operation that reads or changes its entries, removes it, or changes its attributes
    // fails with Code::recall and changes nothing, unless it acts under the delegation's own
    // token (delegate_dir, dir_ops): the daemon recalls the delegation, then runs it again.
    struct Delegation {
        Attr dir;
        std::vector<DirEntry> entries; // every entry
        uint64_t ino_first = 0;        // inode numbers reserved for the holder's new files
        uint32_t ino_count = 0;
        Layout layout;                 // of files made in dir (its default, else the shard's)
    };
    // Delegates dir to `token` (write and search permission needed; a sticky directory only to
    // its owner or root), unless it has more than max_entries entries (too_large). Every
    // lease on an entry in dir is recalled (ChangeObserver::dir_access).
    Result<Delegation> delegate_dir(const Cred& cred, uint64_t dir, uint64_t token, uint32_t max_entries,
                                    uint32_t inos);
    static constexpr uint8_t kDirOpCreate = 1, kDirOpUnlink = 2, kDirOpRename = 3;
    struct DirOp {
        uint8_t kind = 0;
        std::string name;
        uint64_t ino = 0;    // create: the new file's (from a range the holder was given); else the entry's
        uint32_t mode = 0;   // create
        int64_t time_ns = 0; // create: its times; rename: the file's ctime and the directory's times (0: now)
        NewFile init;        // create: its size and extended attributes
        std::string new_name; // rename: the entry's new name in the directory (a file there is replaced)
    };
    struct DirOpsResult {
        std::vector<Result<UnlinkResult>> outcomes; // the file made, or what the unlink did
        uint64_t ino_first = 0; // more_inos: another range
        uint32_t ino_count = 0;
    };
    // The holder's operations in dir, in order, in one transaction: each as create (exclusive,
    // with its NewFile), unlink, or rename of a regular file within dir alone would make it,
    // with an outcome each (as rename_in_dir; a rename's is the file it replaced, if any). One
    // already made (the batch asked again after a failover) is not made twice: a create that
    // finds its own inode under its name, an unlink that finds the name gone or naming another
    // inode, a rename that finds its inode under the new name, are done. busy, and nothing made, when `token` does not hold dir. release: the delegation
    // ends with them.
    Result<DirOpsResult> dir_ops(const Cred& cred, uint64_t dir, uint64_t token, std::span<const DirOp> ops,
                                 bool release, uint32_t more_inos);
    // Ends dir's delegation if `token` holds it; ok when none does.
    Status end_delegation(uint64_t dir, uint64_t token);
    // The directory whose delegation the last operation on this thread that failed with
    // Code::recall met.
    static uint64_t recall_dir();
    static uint64_t recall_token(); // the token that holds it
    // Fails the running request with Code::recall of dir's delegation to `token`, as the
    // shard's own refusals do (for a caller that decides it outside the shard).
    static Status must_recall(uint64_t dir, uint64_t token);

    // ---- replication of the shard (docs/replication.md, "Metadata shards") ---------------
    // A replica's place in the shard's stream of changes: changesets are numbered (seq, one
    // per committed transaction that changed something) and stamped with the term (the chain
    // table version in which the primary that made them began). Kept in the database, so it
    // survives restarts and travels with changesets and snapshots.
    struct ReplPosition {
        uint64_t term = 0;
        uint64_t seq = 0;
        bool operator==(const ReplPosition&) const = default;
    };
    // Primary side: from now on every transaction that changes the database hands its
    // changeset (SQLite's session extension) to `ship`, with the position it moves the shard
    // from (prev) and to (at), after its body succeeded and before it commits, under the
    // shard's lock, so changesets go out in commit order. An error from ship rolls the
    // transaction back and is the operation's error: nothing is committed here that a replica
    // refused. An empty ship stops it.
    using ShipFn = std::function<Status(const ReplPosition& prev, const ReplPosition& at,
                                        std::span<const uint8_t> changeset)>;
    Status start_shipping(uint64_t term, ShipFn ship);
    // Follower side: applies a changeset in one transaction if this replica is exactly at
    // `prev` (Raft's log-matching rule: the same position means the same history). One it has
    // already applied (at `at` or past it in the same term) is ok and changes nothing. Anything
    // else (behind, or a history the primary does not share) is refused with Code::again: the
    // replica needs a snapshot. So is a changeset that does not apply cleanly.
    Status apply_changeset(const ReplPosition& prev, const ReplPosition& at, std::span<const uint8_t> changeset);
    // The whole database as one image, and its position (for a replica that is behind).
    struct Snapshot {
        ReplPosition at;
        std::vector<uint8_t> image;
    };
    Result<Snapshot> snapshot();
    // Replaces the whole database with a snapshot of the same shard (another shard's is
    // refused). Then the replica is at the snapshot's position.
    Status install_snapshot(const Snapshot& snap);
    Result<ReplPosition> position();
    // A copy made fresh (or of unknown history) is in step with no primary: its position
    // becomes {0, kOutOfStep}, which no changeset follows, so its first one is refused and it
    // gets a snapshot.
    static constexpr uint64_t kOutOfStep = uint64_t(INT64_MAX);
    Status forget_position();
    // Every regular file of this shard with its size and layout, in inode order (resync walks
    // them to find the chunks a restarted daemon must copy). One query; a shard of a million
    // files is ~40 MB here.
    Result<std::vector<Attr>> regular_files();
    // The replicated regular files whose last link went, with their layouts only (ino,
    // chunk_size, stripe_count, replicas): one still open on a client has chunks but no inode,
    // and a resync must copy them all the same.
    Result<std::vector<Attr>> removed_files();

private:
    struct Impl;
    MetaShard(uint32_t shard_id, std::unique_ptr<Impl> impl);

    uint32_t shard_id_;
    std::unique_ptr<Impl> impl_;
};

} // namespace jobfs::server
