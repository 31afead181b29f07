// client.h: libjobfs's C++ API: paths, directories and files of a jobfs file system.
//
// A Client holds one transport worker and a connection to every daemon of the cluster
// descriptor. Each namespace request goes to the daemon that owns the shard of the inode or
// directory it names; file data goes straight to the chunk daemons (FileIO), so N processes
// writing one checkpoint never meet on a metadata daemon while they write. The file length is
// settled at close, fsync or sync (the highest byte written), as docs/design.md explains.
//
// Thread safety: every method may be called from any thread; a File may be used by several
// threads at once (its high-water mark is atomic).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "client/attr_cache.h"
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

struct ClientOptions {
    std::chrono::milliseconds timeout{30000}; // deadline of every request
    // Whose rights requests carry; default: this process's uid, gid and groups.
    std::optional<proto::Cred> cred;
    // How long a directory found on a path stays known to this client, so that an operation
    // on /a/b/f costs one request instead of one per component (0: never cached). Only the
    // path-to-directory step is cached, never attributes or file names; this client's own
    // rename and rmdir forget what they change, and a directory removed by another client is
    // noticed and looked up again. A directory another client renamed may still be reached
    // under its old path for up to this long (as with NFS or FUSE entry timeouts).
    std::chrono::milliseconds dir_cache_ttl{1000};
    // Bytes of writes each open file may have in flight to the daemons while the writer goes
    // on (write_behind.h); 0: every write returns once it is on the daemons. With write
    // behind, failures come back from a later write, fsync or close, and other clients see the
    // data after fsync or close (MPI-IO's and close-to-open consistency).
    size_t write_behind_bytes = 0;
    // Read large pieces of chunks held by daemons of this node from their chunk files
    // (local_reads.h; the daemons' local-reads item must allow it too). Off: every byte over
    // the transport, as from another node (tests that must reach every copy of a chunk).
    bool local_reads = true;
    // Keep what lookups and creates of files and symlinks return while the daemon leases it
    // (attr_cache.h, the daemons' attr-lease-ms), so that stat of such a path costs no
    // request. Consistency is as without it: the daemon recalls a lease before the inode
    // changes. Off: every stat asks.
    bool attr_cache = true;
    // Take directories this client makes or removes many files in as delegated, and answer
    // creates and unlinks there without waiting for the daemons (dir_delegation.h): others
    // see the same namespace (the daemon recalls the directory first), but what was answered
    // and not yet sent (milliseconds' worth) is lost if this process dies, and a queued create
    // the daemon refuses is reported by fsync, flush and close of that file. Off: every
    // create and unlink asks the daemon.
    bool dir_delegation = true;
    // The longest a create or unlink answered in a delegated directory waits before it is sent
    // (sooner when many are queued, at a barrier, or when the daemon recalls the directory).
    std::chrono::milliseconds dir_delegation_flush_delay{2};
};

// What Client::create sets on the file it makes, in the metadata call that makes it.
struct NewFile {
    uint64_t size = 0;  // the file's size from the start (a hole until written)
    std::vector<std::pair<std::string, std::string>> xattrs;  // extended attributes (setxattr's rules)
};

// An open file. Obtained from Client::open, ended with Client::close.
struct File {
    uint64_t ino = 0;
    Layout layout;
    int flags = 0;                        // O_RDONLY / O_WRONLY / O_RDWR, O_APPEND…
    // The settled size this handle last saw (at open, settle, fstat, ftruncate): reads stop
    // at size(). Atomic, as every thread of a File may raise it.
    std::atomic<uint64_t> size_at_open{0};
    // End of the furthest byte this handle wrote since its size was last settled; a settle
    // hands it over (`settling` while the request runs), after which the settled size stands:
    // a truncate made elsewhere since is not undone by this handle's older writes.
    std::atomic<uint64_t> high_water{0};
    std::atomic<uint64_t> settling{0};
    std::atomic<bool> dirty{false};       // written since the size was last settled
    // Client::create made the file this long: writes that end within it settle nothing (as if
    // the file had been written within its length from the start). 0 otherwise, and after
    // this handle's ftruncate.
    std::atomic<uint64_t> created_size{0};
    bool closed = false;                  // Client::close ran (a second close is a no-op)
    std::shared_ptr<WriteBehind> write_behind;  // set when writes are buffered (write_behind_bytes)
    uint64_t size() const { return std::max({size_at_open.load(), high_water.load(), settling.load()}); }
};

class Client {
public:
    static Result<std::unique_ptr<Client>> connect(const ClusterInfo& cluster, const ClientOptions& options = {});
    ~Client(); // lets buffered writes (write behind) finish first
    // Connects to the cluster named by $JOBFS_CLUSTER.
    static Result<std::unique_ptr<Client>> connect_env(const ClientOptions& options = {});

    // ---- namespace (paths are absolute within jobfs: "/ckpt/step100") --------------------
    Result<proto::Attr> stat(const std::string& path);   // follows a final symlink
    Result<proto::Attr> lstat(const std::string& path);
    Result<proto::Attr> mkdir(const std::string& path, uint32_t mode = 0755);
    Status rmdir(const std::string& path);
    // The data goes with the last link, or, while this Client has the file open, with the
    // last close (as POSIX has it for one process; see libjobfs(3) for other processes).
    Status unlink(const std::string& path);
    Status rename(const std::string& from, const std::string& to, uint32_t flags = 0);
    // Renames entries of directory `dir`, {old name, new name} each (one component, no '/'),
    // as rename(dir/old, dir/new, flags) would one by one, in requests of up to
    // proto::kMaxRenamesInDir entries instead of one each (in a directory delegated here,
    // regular files are renamed here and the renames queued). A Status per entry, in order; the
    // Result fails only when dir itself cannot be resolved.
    Result<std::vector<Status>> rename_in_dir(const std::string& dir,
                                              const std::vector<std::pair<std::string, std::string>>& names,
                                              uint32_t flags = 0);
    Result<std::vector<proto::DirEntry>> list(const std::string& path);
    Result<proto::Attr> symlink(const std::string& target, const std::string& path);
    Status truncate(const std::string& path, uint64_t size);
    Result<proto::Attr> set_layout(const std::string& path, const Layout& layout);
    // Hard link: a new name for existing (not followed if a symlink, as link(2)).
    Result<proto::Attr> link(const std::string& existing, const std::string& path);
    // The target of a symlink (invalid if path is not one).
    Result<std::string> readlink(const std::string& path);
    // chmod, chown, utimens and truncate in one: every field of `set` present is changed
    // (set.cred and set.ino are filled in here). follow: resolve a final symlink (chmod and
    // utimens do; lchown does not). A smaller size cuts the data as truncate does.
    Result<proto::Attr> setattr(const std::string& path, proto::SetattrRequest set, bool follow = true);
    // Extended attributes (getxattr(2) semantics; a final symlink is followed). flags of
    // setxattr: XATTR_CREATE 1, XATTR_REPLACE 2.
    Result<std::string> getxattr(const std::string& path, const std::string& name);
    Status setxattr(const std::string& path, const std::string& name, const std::string& value, int flags = 0);
    // setxattr on an open file: by its inode, so no lookup of its name (jobfs stage-in's
    // ETag on a temporary file, one metadata call less per object).
    Status fsetxattr(File& f, const std::string& name, const std::string& value, int flags = 0);
    Result<std::vector<std::string>> listxattr(const std::string& path);
    Status removexattr(const std::string& path, const std::string& name);
    // One page of directory `ino`: up to max entries with names after `after` ("" = first).
    // list() reads a whole directory; this serves iterators that must not hold it all.
    Result<proto::ReaddirResponse> readdir(uint64_t ino, const std::string& after, uint32_t max = 1000);

    // Returns once every create and unlink this client answered itself in a delegated
    // directory (ClientOptions::dir_delegation) is at the daemons; io if any of those was
    // lost since the last call (the log says which).
    Status sync_namespace();

    // ---- files ---------------------------------------------------------------------------
    // flags as open(2): O_RDONLY, O_WRONLY, O_RDWR, O_CREAT, O_EXCL, O_TRUNC. A directory is
    // refused (is_dir): list() reads it.
    Result<std::unique_ptr<File>> open(const std::string& path, int flags, uint32_t mode = 0644,
                                       const Layout& layout = {0, 0});
    // Creates path exclusively (flags must hold O_CREAT | O_EXCL and allow writing) with
    // init's size and extended attributes set in the same metadata call, atomically: no
    // ftruncate or setxattr call follows, and a close after writes within that size has no
    // size to settle (jobfs stage-in: one call each per object, not three).
    Result<std::unique_ptr<File>> create(const std::string& path, int flags, uint32_t mode, const NewFile& init,
                                         const Layout& layout = {0, 0});
    Status pwrite(File& f, uint64_t offset, std::span<const uint8_t> data);
    // Writes data at the file's end and returns where: the file's metadata daemon gives each
    // append a place of its own (ReserveAppend) and the size covers it at once, so appends of
    // every client and handle land whole, one after another (a log shared by the ranks of a
    // job). The end counts this handle's unsettled writes. A write that fails after its place
    // was given leaves a hole there.
    Result<uint64_t> append(File& f, std::span<const uint8_t> data);
    Result<size_t> pread(File& f, uint64_t offset, std::span<uint8_t> out);
    Status fsync(File& f);  // data durable on the daemons, size settled
    // Writes made so far visible to every client: buffered ones (write behind) on the daemons,
    // the size settled; nothing forced to disk (MPI-IO's atomic mode).
    Status flush(File& f);
    Status close(File& f);  // size settled
    // The inode's attributes with the size as this handle sees it: the settled size, or more
    // if this handle wrote past it (unsettled writes of other clients show after their fsync
    // or close). Raises f's view of the size, so reads see what others settled.
    Result<proto::Attr> fstat(File& f);
    // Sets the size of an open file (writable handle), cutting chunks when it shrinks.
    Status ftruncate(File& f, uint64_t size);
    // How the file's bytes are spread (its chunk size and stripe count).
    const Layout& layout(const File& f) const { return f.layout; }

    uint32_t daemon_count() const { return static_cast<uint32_t>(eps_.size()); }
    const std::vector<transport::Endpoint>& daemons() const { return eps_; }
    // The daemons' newest chain table (which daemons serve, sync or are offline), fetched now.
    Result<proto::ChainTable> chain_table();
    // The data path (chain table in use, placement), for tools and tests.
    const FileIO& io() const { return *io_; }
    const proto::Cred& cred() const { return cred_; }
    // What the attribute cache did (all zero when it is off).
    AttrCache::Stats attr_cache_stats() const { return attr_cache_ ? attr_cache_->stats() : AttrCache::Stats{}; }
    // What directory delegations did (all zero when they are off).
    DirDelegations::Stats delegation_stats() const { return deleg_ ? deleg_->stats() : DirDelegations::Stats{}; }

private:
    Client() = default;
    const transport::Endpoint& at(uint64_t ino) const { return eps_[proto::shard_of(ino) % eps_.size()]; }
    // A namespace request (meta_call), once this client's delegated operations before it are
    // at the daemons.
    template <class Rpc>
    Result<typename Rpc::Response> meta(uint64_t key, const typename Rpc::Request& req, transport::Endpoint* via = nullptr) {
        if (deleg_) deleg_->before_request(key);
        return meta_call<Rpc>(*io_, key, req, via);
    }
    // Resolves path to its parent directory's inode and the last component; *cached tells
    // whether the directory came from the directory cache.
    Result<std::pair<uint64_t, std::string>> parent_of(const std::string& path, bool* cached = nullptr,
                                                       bool use_cache = true);
    // The inode of directory `dir` (lexical path, at least one component), as parent_of.
    Result<uint64_t> dir_ino(const std::string& dir, bool* cached, bool use_cache);
    Result<proto::Attr> walk(const std::string& path, bool follow_last, int depth = 0, bool use_cache = true);
    // Looks `name` up in directory dir: from the attribute cache, else with a leased lookup
    // whose answer is kept (a plain Lookup when the cache is off).
    Result<proto::Attr> lookup_entry(uint64_t dir, const std::string& name);
    // Whether file ino is open through this client (a File not closed yet).
    bool open_here(uint64_t ino);
    // True (and leases off from now on) when s says the daemon does not know leased requests.
    bool leases_refused(const Status& s);
    // Sends `Leased` (LookupLeased, CreateLeased) about (dir, name) and keeps its answer in the
    // attribute cache for the lease granted; `Plain` (Lookup, Create) when the cache is off or
    // the daemon does not know leases.
    template <class Leased, class Plain>
    Result<proto::Attr> leased_call(uint64_t dir, const std::string& name, const typename Plain::Request& req);
    // open(), and create() when init is given.
    Result<std::unique_ptr<File>> open_or_create(const std::string& path, int flags, uint32_t mode,
                                                 const Layout& layout, const NewFile* init);
    // Runs op(parent ino, name) in path's parent directory; when that came from the cache and
    // op finds it gone (not_found, not_dir), forgets it and runs op once more from a fresh walk.
    template <class Op>
    auto in_parent(const std::string& path, Op op) -> decltype(op(uint64_t{}, std::string{}));

    // The directory cache: lexical path -> directory inode (see dir_cache_ttl).
    struct CachedDir {
        uint64_t ino = 0;
        std::chrono::steady_clock::time_point expires;
    };
    std::optional<uint64_t> dir_cache_get(const std::string& path);
    void dir_cache_put(const std::string& path, uint64_t ino);
    void dir_cache_forget(const std::string& path);  // path and everything below it
    // dir/name and everything below it, for each of the names: one pass over the cache.
    void dir_cache_forget_in(const std::string& dir, const std::vector<std::string_view>& names);
    Status settle_size(File& f);
    // The failure of f's delegated create, if it is known to have failed.
    Status lost_create(File& f);
    // The data of a file whose last link went: removed now, or at the last close here.
    Status release_data(const proto::Attr& gone, const std::string& path);
    // Sends set for inode a (its state before) and cuts the chunks past a smaller size.
    Result<proto::Attr> apply_setattr(const proto::Attr& a, proto::SetattrRequest set);

    std::mutex open_mu_;                          // guards the two below
    std::unordered_map<uint64_t, int> open_count_;  // files open through this Client
    std::unordered_set<uint64_t> unlinked_open_;    // of those, the ones whose last link went

    std::mutex dir_cache_mu_;  // guards dir_cache_
    std::unordered_map<std::string, CachedDir> dir_cache_;
    std::chrono::milliseconds dir_cache_ttl_{1000};

    std::shared_ptr<AttrCache> attr_cache_; // null when ClientOptions::attr_cache is off
    std::atomic<bool> leases_off_{false};   // the daemons do not grant leases (older version)
    std::unique_ptr<transport::Worker> worker_;
    std::vector<transport::Endpoint> eps_;
    std::unique_ptr<FileIO> io_;
    // Directories delegated here (null when ClientOptions::dir_delegation is off); goes before
    // io_, which it sends with.
    std::shared_ptr<DirDelegations> deleg_;
    proto::Cred cred_;
    std::chrono::milliseconds timeout_{30000};
    size_t write_behind_bytes_ = 0;
    // Writer threads of write behind; declared last, so it is joined first (before io_ goes).
    std::unique_ptr<boost::asio::thread_pool> writers_;
};

} // namespace jobfs::client
