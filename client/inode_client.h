// inode_client.h: jobfs addressed by inode numbers, for the FUSE client (jobfs-fuse).
//
// Client (client.h) resolves paths; the kernel, talking to a FUSE server, has already resolved
// them and names everything by (parent inode, name) or by inode. InodeClient is that shape of
// the same protocol: each namespace call is one RPC to the daemon whose shard holds the inode
// or directory it names (shard_of(ino) % daemons, as Client does), with the caller's
// credentials, so the daemons make every permission check. The exception, as in Client: a
// directory delegated to this client (InodeClientOptions::dir_delegation) has its lookups,
// creates, unlinks and renames answered here, under the daemon's rules, for the user it was
// delegated to; every other request first waits for those to reach the daemons (meta,
// daemon_attr), and its own attributes are the grant's (getattr).
// File data goes straight to the chunk daemons (FileIO); the size is settled lazily
// (ExtendSize at flush, fsync and release, docs/design.md).
//
// Open files. Every open of a regular file returns a Handle; the handles of one inode share an
// OpenInode, which holds what this process knows beyond the daemons:
//   * high_water: the end of the furthest byte written through any of its handles. Until it is
//     settled the daemons report a smaller size, so attributes returned for an open inode carry
//     max(daemon size, high_water): the kernel must never see an open file shrink under it.
//   * pending: writes not yet at the daemons (write-behind, InodeClientOptions::
//     write_behind_bytes): shared by the inode's handles, so a read through any handle of this
//     process first waits for them, as do flush, fsync, release and a resize.
//   * unlinked: its last link went (unlink, or a rename over it) while it was open. Its data is
//     then removed at the last release, not at the unlink, and its attributes (the daemon no
//     longer has them) are served from `last`.
// An inode's OpenInode goes at its last release, but an attribute reply the daemon gave just
// before that inode's size was settled can still be on its way to a thread here: merged after
// the release, it would report the size without the last writes, the kernel would take it, and
// the next O_APPEND write would land on the last record (1 record in 800 lost, fuse_test in CI).
// So each release is remembered in a ring (`released_`, inode and high_water) and every
// attribute call merges the releases made while it was out; one that saw more releases than
// the ring keeps asks the daemon again.
//
// Lock rule: open_mu_ guards the table of OpenInodes (open/release/unlink/rename change it)
// and the non-atomic fields of every OpenInode (open_count, last); `unlinked` changes under it.
// It is never held across an RPC. The sizes of an OpenInode are atomics, raised with compare-exchange, so reads and
// writes of many threads proceed without it. A Handle may be used by several threads at once.
//
// Thread safety: every method may be called from any thread except a transport callback.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "client/cluster.h"
#include "client/dir_delegation.h"
#include "client/file_io.h"
#include "client/layout.h"
#include "client/meta_call.h"
#include "client/write_behind.h"
#include "daemon_protocol.h"
#include "result.h"
#include "worker.h"

namespace jobfs::client {

inline constexpr uint64_t kRootIno = 1; // the root directory, on shard 0 (FUSE_ROOT_ID too)

struct InodeClientOptions {
    std::chrono::milliseconds timeout{30000}; // deadline of every request
    std::string name = "jobfs-fuse";           // the transport worker's name (daemon logs)
    // Bytes of writes per open file that may be on their way to the daemons after write
    // returned (0: every write waits for its daemons). A failed one is reported by a later
    // write, flush, fsync or close of the file (client/write_behind.h).
    size_t write_behind_bytes = 0;
    // Threads sending them, shared by all open files: a mount serves many writers at once (8
    // wrote 1 and 4 sequential streams 1.3x and 1.15x as fast as 4 in bench/run fuse).
    int writer_threads = 8;
    // Chunks of this node's daemons read straight from their files, and large writes handed
    // over through a shared-memory arena, as libjobfs does (ClientOptions::local_reads,
    // local_reads.h). Off: every byte over the transport.
    bool local_reads = true;
    // How local reads read chunk ranges already in the page cache (LocalReads::CachedReads).
    // jobfs-fuse's many workers read with pread: cold 1 MiB reads of 1 GiB by fio's 4 jobs took
    // 609-622 ms of its CPU time against 681-710 mapped and ran 5-14 % faster, and warm ones
    // 2.70-2.98 GB/s against 2.34-2.75 (session 33, alternating runs).
    LocalReads::CachedReads local_cached_reads = LocalReads::CachedReads::mapped;
    // How local reads read ranges not in the page cache (LocalReads::ColdReads). jobfs-fuse
    // reads them direct: the kernel caches what the mount read in its own page cache.
    LocalReads::ColdReads local_cold_reads = LocalReads::ColdReads::buffered;
    // Directories where this mount makes or removes many files are delegated to it, and it
    // answers their lookups, creates, unlinks and renames itself (ClientOptions::dir_delegation,
    // dir_delegation.h): a create is no longer two round trips (lookup, create). Each caller's
    // credentials are its own: a directory is delegated to the user whose operations asked
    // for it, and other users' operations there go to the daemons, which recall it first.
    bool dir_delegation = true;
    std::chrono::milliseconds dir_delegation_flush_delay{2};
    // Test seam: runs between the reply of an attribute call and its merge with the open
    // inodes (a unit test widens that window to prove a release inside it is merged).
    std::function<void(uint64_t ino)> after_attr_reply;
};

// What this process knows of one open regular file (see the top of this file).
struct OpenInode {
    uint64_t ino = 0;
    Layout layout;
    int open_count = 0;                  // handles; guarded by InodeClient::open_mu_
    std::atomic<bool> unlinked{false};   // set under open_mu_, read anywhere
    proto::Attr last;                    // the attributes at unlink; guarded by open_mu_
    std::atomic<uint64_t> size{0};       // the settled size as last seen from the daemons
    std::atomic<uint64_t> high_water{0}; // end of the furthest byte written here
    std::atomic<bool> dirty{false};      // written since the size was last settled
    std::atomic<uint64_t> settled{0};    // the end a completed ExtendSize of this process covered
    std::shared_ptr<WriteBehind> pending; // write-behind on: set when the node is made, then constant
    uint64_t visible_size() const { return std::max(size.load(), high_water.load()); }
};

struct Handle {
    std::shared_ptr<OpenInode> node;
    int flags = 0; // open(2) flags
    // The file's mode when it was opened, or as a later call through the handle found it
    // (jobfs-fuse: once a direct write dropped setuid and setgid; jobfs_fuse.cc, drop_setid).
    std::atomic<uint32_t> mode{0};
};

// Capacity of the file system: the daemons' disks summed, and the inodes in use.
struct FsSpace {
    uint64_t total_bytes = 0;
    uint64_t free_bytes = 0;
    uint64_t inodes = 0;
};

class InodeClient {
public:
    static Result<std::unique_ptr<InodeClient>> connect(const ClusterInfo& cluster,
                                                        const InodeClientOptions& options = {});
    ~InodeClient();

    // ---- namespace ------------------------------------------------------------------------
    Result<proto::Attr> lookup(const proto::Cred& cred, uint64_t parent, const std::string& name);
    Result<proto::Attr> getattr(uint64_t ino);
    // Every field of set present is changed (set.cred and set.ino are filled in here). A smaller
    // size cuts the data past it (truncate and ftruncate alike: open handles share the inode's
    // state here, so unsettled bytes of this process past the new size go too).
    Result<proto::Attr> setattr(const proto::Cred& cred, uint64_t ino, proto::SetattrRequest set);
    Result<proto::Attr> mkdir(const proto::Cred& cred, uint64_t parent, const std::string& name, uint32_t mode);
    Result<proto::Attr> symlink(const proto::Cred& cred, uint64_t parent, const std::string& name,
                                const std::string& target);
    Result<proto::Attr> link(const proto::Cred& cred, uint64_t ino, uint64_t new_parent, const std::string& name);
    Status unlink(const proto::Cred& cred, uint64_t parent, const std::string& name);
    Status rmdir(const proto::Cred& cred, uint64_t parent, const std::string& name);
    // flags: RENAME_NOREPLACE 1, RENAME_EXCHANGE 2 (as renameat2).
    Status rename(const proto::Cred& cred, uint64_t parent, const std::string& name, uint64_t new_parent,
                  const std::string& new_name, uint32_t flags);
    // One page of directory ino: up to max entries with names after `after` ("" = the first).
    Result<proto::ReaddirResponse> readdir(const proto::Cred& cred, uint64_t ino, const std::string& after,
                                           uint32_t max = 1000);
    Result<std::string> readlink(uint64_t ino);
    Result<std::string> getxattr(const proto::Cred& cred, uint64_t ino, const std::string& name);
    Status setxattr(const proto::Cred& cred, uint64_t ino, const std::string& name, const std::string& value,
                    int flags);
    Result<std::vector<std::string>> listxattr(const proto::Cred& cred, uint64_t ino);
    Status removexattr(const proto::Cred& cred, uint64_t ino, const std::string& name);
    // Asks every daemon (DiskSpace, MetaCounts) and sums.
    Result<FsSpace> statfs();
    // Returns once every create, unlink and rename answered here in a delegated directory is at
    // the daemons (fsyncdir); io if some were lost since the last call (Client::sync_namespace).
    Status sync_namespace();

    // ---- locks ----------------------------------------------------------------------------
    // An flock or fcntl lock (req.ino, owner, type, range; req.client is this client's), kept
    // by the daemon of the file's shard for every node (server/file_locks.h): whether it was
    // granted (test: whether nothing is in the way), and if not, the lock in the way. The
    // locks still held when this client ends are given back (LeaseRelease).
    Result<proto::FileLockResponse> lock(proto::FileLockRequest req);

    // ---- files ----------------------------------------------------------------------------
    // Creates (O_EXCL: must not exist) or opens the regular file name in parent; O_TRUNC
    // empties an existing one. Returns its attributes and the open handle.
    Result<std::pair<proto::Attr, std::unique_ptr<Handle>>> create(const proto::Cred& cred, uint64_t parent,
                                                                   const std::string& name, uint32_t mode,
                                                                   int flags);
    // Opens regular file ino (permissions are the kernel's business: default_permissions).
    Result<std::unique_ptr<Handle>> open(const proto::Cred& cred, uint64_t ino, int flags);
    // Reads up to out.size() bytes at offset; short at the end of the file (0 past it). A read
    // past the size this process knows asks the daemon first: others may have settled more.
    Result<size_t> read(Handle& h, uint64_t offset, std::span<uint8_t> out);
    // A handle opened with O_APPEND writes at the file's end as the daemons know it (every
    // node's appends included), whatever offset says (see append), unless `at_offset`: the
    // kernel writing back the pages of a shared mapping through whichever handle it picks.
    Status write(Handle& h, uint64_t offset, std::span<const uint8_t> data, bool at_offset = false);
    // close(2) of one descriptor: a writable handle lands and settles what this process wrote
    // to the file (close-to-open); a reader's settles nothing.
    Status flush(Handle& h);
    // Lands and settles what this process wrote to h's file through any of its handles, whatever
    // h's mode: before a lock is given back, through whichever descriptor that happens.
    Status settle_file(Handle& h);
    Status fsync(Handle& h); // data durable on the daemons, size settled
    // The last handle of an inode settles its size, or removes the data of an unlinked file.
    Status release(std::unique_ptr<Handle> h);

    uint32_t daemon_count() const { return static_cast<uint32_t>(eps_.size()); }
    // What directory delegations did (all zero when they are off).
    DirDelegations::Stats delegation_stats() const { return deleg_ ? deleg_->stats() : DirDelegations::Stats{}; }
    // The chunk I/O (its counters, for tests).
    const FileIO& io() const { return *io_; }

private:
    InodeClient() = default;
    const transport::Endpoint& at(uint64_t ino) const { return eps_[proto::shard_of(ino) % eps_.size()]; }
    std::shared_ptr<OpenInode> find_open(uint64_t ino);
    // A namespace request about `key` (a directory, an inode) that may change it, once this
    // client's delegated operations before it are at the daemons; a directory delegated here
    // is given back first (DirDelegations::before_request).
    template <class Rpc>
    Result<typename Rpc::Response> meta(uint64_t key, const typename Rpc::Request& req) {
        if (deleg_) deleg_->before_request(key);
        return meta_call<Rpc>(*io_, key, req);
    }
    // The daemon's attributes of ino, once this client's delegated operations are at the
    // daemons (a file made here is known there). Keeps delegations: nothing changes.
    Result<proto::Attr> daemon_attr(uint64_t ino) {
        if (deleg_) deleg_->barrier();
        return meta_call<proto::Getattr>(*io_, ino, proto::InoRequest{ino});
    }
    // Releases made so far (the `since` of merge_open).
    uint64_t releases();
    // Attributes as this process must report them: the size of an inode open here, or released
    // since `since` (releases() before the call that returned a), is never below what it wrote;
    // the daemons' size is remembered for reads. Empty when more releases than the ring keeps
    // were made since: ask again.
    std::optional<proto::Attr> merge_open(proto::Attr a, uint64_t since);
    // merge_open of the reply a of a call started at `since`, asking again (Getattr) as it
    // says; errors are passed through.
    Result<proto::Attr> merged(uint64_t since, Result<proto::Attr> a);
    std::unique_ptr<Handle> add_handle(const proto::Attr& a, int flags);
    // The last link of a file went: its data goes now, or at the last release here.
    Status drop_data(const proto::Attr& a);
    // Lands the inode's pending writes, then settles its size (ExtendSize) if it was written.
    Status settle(OpenInode& n);
    // An O_APPEND write: placed and counted in the size by the shard (ReserveAppend), then
    // written there. A failed write leaves its place in the file as a hole.
    Status append(OpenInode& n, std::span<const uint8_t> data);
    Status settle_size(OpenInode& n);
    // Why the delegated create of ino failed at the daemons, if it did (ok otherwise).
    Status lost_create(uint64_t ino);
    // Waits for the inode's writes still on their way; their error, if one failed.
    static Status land(OpenInode& n) { return n.pending ? n.pending->flush() : Status::OK(); }
    // Sets the size (and whatever else set holds): the shard first, then the chunks past a
    // smaller size are cut, then this process's view of the open inode follows.
    Result<proto::Attr> resize(const proto::Cred& cred, uint64_t ino, proto::SetattrRequest set);

    // Declared before open_: an OpenInode's WriteBehind waits on this pool when it goes.
    size_t write_behind_bytes_ = 0;
    std::unique_ptr<boost::asio::thread_pool> writers_;
    uint64_t lock_client_ = 0;                  // names this client to the lock tables (random)
    std::mutex lock_mu_;                        // guards lock_eps_
    std::vector<transport::Endpoint> lock_eps_; // the daemons it took locks from
    std::mutex open_mu_;
    std::unordered_map<uint64_t, std::shared_ptr<OpenInode>> open_;
    // The last releases (see the top of this file); written under open_mu_ (the count may be
    // read without it). Release number k (released_count_ after it) is in slot k % kReleasesKept.
    struct Released {
        uint64_t ino = 0;
        uint64_t high_water = 0;
    };
    static constexpr uint64_t kReleasesKept = 256;
    std::array<Released, kReleasesKept> released_{};
    std::atomic<uint64_t> released_count_{0};
    std::function<void(uint64_t)> after_attr_reply_;

    std::unique_ptr<transport::Worker> worker_;
    std::vector<transport::Endpoint> eps_;
    std::unique_ptr<FileIO> io_;
    std::chrono::milliseconds timeout_{30000};
    // Directories delegated here (null when InodeClientOptions::dir_delegation is off); reset
    // first in the destructor, while everything its flusher calls (drop_data) still exists.
    std::shared_ptr<DirDelegations> deleg_;
};

} // namespace jobfs::client
