// jobfs-fuse: jobfs as a POSIX file system, a low-level libfuse3 server (man jobfs-fuse.8).
//
//   jobfs-fuse [--cluster FILE] MOUNTPOINT [-o OPTIONS] [-f] [-d] [-s]
//
// Shape. FUSE inode numbers are jobfs inode numbers (the root is 1 in both), so this server
// keeps no inode table: lookup counts need no bookkeeping and forget is a no-op. Every request
// becomes InodeClient calls (client/inode_client.h): namespace RPCs to the daemon of the shard
// (lookups, creates, unlinks and renames in a directory delegated to the mount answered by it,
// and sent in batches: client/dir_delegation.h), data straight to the chunk daemons. Each
// request carries the caller's uid, gid and groups (fuse_req_ctx, fuse_req_getgroups), so the
// daemons make the namespace permission checks; the kernel checks data access
// (default_permissions) from the attributes we return.
//
// Consistency: close-to-open. flush (every close(2)) settles the size on the metadata shard
// before close returns; open fetches fresh attributes and tells the kernel to drop its cached
// ones (and, without keep_cache, its cached pages), so an open after another node's close sees
// its bytes. Between those points attributes and names are cached for attr_timeout and
// entry_timeout seconds; missing names are not cached unless negative_timeout is set.
//
// Threads and lock rules:
//   * fuse_session_loop_mt runs the handlers on up to max_threads threads at once; every
//     handler may run concurrently with any other, also on the same inode.
//   * InodeClient is thread-safe (its lock rules are in inode_client.h). Handlers here hold no
//     lock of their own except DirHandle::mu, held while one readdir fills its buffer and
//     never while replying: the reply lets the kernel send releasedir, which frees the
//     DirHandle, at once (on another thread); and Fs::locked_mu, held only to look at or add
//     to the set it guards.
//   * A blocking lock (F_SETLKW, flock without LOCK_NB) keeps its handler's thread until it
//     gets the lock or is interrupted; libfuse starts more threads for the other requests.
//   * A Handle (fi->fh of a file) is shared by the threads of one open file description; it
//     is freed in release, which the kernel sends after every other request on it has been
//     answered. Hence the rule for every handler: the reply is the last thing it does.
//   * Signals (SIGTERM, SIGINT, SIGHUP) are blocked in every thread but the main one (the
//     transport's progress thread and libfuse's workers inherit the mask), so libfuse's
//     handler always wakes the main thread, which ends the loop and unmounts.
//
// Errors: every failure is a fuse_reply_err(req, errno) of the jobfs Status (to_errno()).
// Failures that are not the caller's doing (I/O, transport) are also logged to stderr with the
// prefix "jobfs-fuse:", as is everything that keeps the mount from starting.
#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/file.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <limits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "client/cluster.h"
#include "client/fuse_session_io.h"
#include "client/huge_buffer.h"
#include "client/inode_client.h"
#include "priority.h"

namespace {

using jobfs::Code;
using jobfs::Status;
using jobfs::client::FsSpace;
using jobfs::client::Handle;
using jobfs::client::InodeClient;
namespace proto = jobfs::proto;

constexpr unsigned kMaxIo = 1u << 20; // max_write, max_read and the st_blksize we advertise
// Requests the kernel keeps in flight in the background (readahead, for one), and the number
// past which it skips an asynchronous readahead (congestion). libfuse's 12 and 9 held a
// sequential reader to the pages of one window: the next was not asked for while the kernel
// counted the requests of the last as in flight, and the threads that had answered them waited
// for it. With 128 (96), fio's 1 MiB cold sequential read of 1 GiB went from 1158-1303 to
// 1344-1547 MiB/s here (one job) and from 1247-1269 to 1391-1473 (four jobs), session 31.
constexpr unsigned kMaxBackground = 128;
// Every request of the job's programs through the mount waits for this server, so it runs ahead
// of them as jobfsd does (ucx-transport/priority.h). Without the right to (not root), a default
// it cannot take is skipped quietly and one given with -o nice is an error.
constexpr int kDefaultNice = -10;
constexpr int kNiceUnset = INT_MIN;

// ---- configuration ----------------------------------------------------------------------

struct Config {
    char* cluster = nullptr;
    double attr_timeout = 1.0;
    double entry_timeout = 1.0;
    double negative_timeout = 0.0;
    int no_allow_other = 0;
    int no_default_permissions = 0;
    int allow_other = 0;         // given explicitly
    int default_permissions = 0; // given explicitly
    unsigned readahead_kb = 4096;   // the mount's kernel readahead; 0: the kernel's default
    int writeback_cache = 0;        // -o writeback_cache: the kernel buffers writes (see jf_init)
    int no_direct_writes = 0;       // -o no_direct_writes: writable handles go through the page cache
    int no_direct_reads = 0;        // -o no_direct_reads: cold chunk ranges through their page cache, read ahead
    unsigned write_behind_mib = 8;  // per open file: writes on their way after write(2) returned
    int no_local_io = 0;            // -o no_local_io: no local reads, no write arena (all over the transport)
    int no_dir_delegation = 0;      // -o no_dir_delegation: every create, lookup and unlink asks the daemons
    int local_locks = 0;            // -o local_locks: flock/fcntl locks kept by this node's kernel only
    int nice = kNiceUnset;          // -o nice=N: the threads' nice value (kDefaultNice unless given)
};

enum { kKeyAllowOther = 1, kKeyDefaultPermissions };

#define JOBFS_OPT(t, field, v) {t, offsetof(Config, field), v}
const fuse_opt kOptions[] = {
    JOBFS_OPT("--cluster=%s", cluster, 0),
    JOBFS_OPT("--cluster %s", cluster, 0),
    JOBFS_OPT("cluster=%s", cluster, 0),
    JOBFS_OPT("attr_timeout=%lf", attr_timeout, 0),
    JOBFS_OPT("entry_timeout=%lf", entry_timeout, 0),
    JOBFS_OPT("negative_timeout=%lf", negative_timeout, 0),
    JOBFS_OPT("readahead_kb=%u", readahead_kb, 0),
    JOBFS_OPT("write_behind_mib=%u", write_behind_mib, 0),
    JOBFS_OPT("no_local_io", no_local_io, 1),
    JOBFS_OPT("no_direct_reads", no_direct_reads, 1),
    JOBFS_OPT("no_dir_delegation", no_dir_delegation, 1),
    JOBFS_OPT("local_locks", local_locks, 1),
    JOBFS_OPT("nice=%d", nice, 0),
    JOBFS_OPT("writeback_cache", writeback_cache, 1),
    JOBFS_OPT("no_writeback_cache", writeback_cache, 0),
    JOBFS_OPT("direct_writes", no_direct_writes, 0),
    JOBFS_OPT("no_direct_writes", no_direct_writes, 1),
    JOBFS_OPT("no_allow_other", no_allow_other, 1),
    JOBFS_OPT("no_default_permissions", no_default_permissions, 1),
    FUSE_OPT_KEY("allow_other", kKeyAllowOther),
    FUSE_OPT_KEY("default_permissions", kKeyDefaultPermissions),
    FUSE_OPT_END,
};
#undef JOBFS_OPT

int opt_proc(void* data, const char*, int key, fuse_args*) {
    auto* c = static_cast<Config*>(data);
    if (key == kKeyAllowOther) c->allow_other = 1;
    if (key == kKeyDefaultPermissions) c->default_permissions = 1;
    return 1; // keep every option libfuse should see
}
// (Options matched by a template in kOptions are consumed and never reach libfuse.)

// ---- the file system ----------------------------------------------------------------------

// The kernel asks for security.capability before every write to a file (file_remove_privs,
// to drop it if set), and jobfs-fuse used to ask the file's metadata daemon each time: a
// round trip per write that doubled the time of a 4 KiB one. The inodes known not to have it
// are kept here until attr_timeout after the daemon said so, like cached attributes: a
// capability set on this mount is seen at once (a finished set or remove forgets the inode,
// and an answer asked for before it is not kept), one set through another mount within
// attr_timeout. Presence is never cached (the write that finds it removes it).
class NoCapabilities {
public:
    static constexpr const char* kName = "security.capability";
    using Clock = std::chrono::steady_clock;
    // nullopt: known not to have it, answer at once. Otherwise the generation to give to note
    // after asking the daemon: an answer asked for before a set on this mount finished (a
    // forget since) is not kept.
    std::optional<uint64_t> ask(fuse_ino_t ino) {
        std::lock_guard lock(mu_);
        auto it = until_.find(ino);
        if (it != until_.end() && Clock::now() < it->second) return std::nullopt;
        return generation_;
    }
    void note(fuse_ino_t ino, double seconds, uint64_t asked_at) {
        if (seconds <= 0) return;
        std::lock_guard lock(mu_);
        if (asked_at != generation_) return;
        if (until_.size() >= kMax) until_.clear(); // a bounded cache: starting over costs a question each
        until_[ino] = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    }
    // After a set or remove of the name has finished.
    void forget(fuse_ino_t ino) {
        std::lock_guard lock(mu_);
        until_.erase(ino);
        ++generation_;
    }

private:
    static constexpr size_t kMax = 65536;
    std::mutex mu_;
    std::unordered_map<fuse_ino_t, Clock::time_point> until_;
    uint64_t generation_ = 0;
};

struct Fs {
    std::unique_ptr<InodeClient> client;
    NoCapabilities no_capabilities;
    fuse_session* session = nullptr;
    double attr_timeout = 1.0;
    double entry_timeout = 1.0;
    double negative_timeout = 0.0;
    bool default_permissions = true; // the kernel checks access from our attributes
    bool writeback_cache = false;    // asked for; jf_init says whether the kernel grants it
    std::atomic<bool> writeback{false}; // granted: the kernel buffers writes and owns the size
    bool direct_writes = true;          // handles opened for writing bypass the page cache (see direct_io)
    std::atomic<bool> initialized{false}; // the kernel's INIT has been answered (jf_init ran)
    bool cluster_locks = true; // flock/fcntl locks are the daemons' (else the kernel's, this node only)
    std::mutex locked_mu;      // guards posix_locked
    // Files this mount took fcntl locks on: a flush (a close) of them gives back the closing
    // owner's locks. (Never emptied: at most one more request per close of such a file.)
    std::unordered_set<uint64_t> posix_locked;
    std::mutex cache_writers_mu; // guards cache_writers
    // Inodes with handles open for writing through the page cache, and how many (open_keeps_cache).
    std::unordered_map<uint64_t, int> cache_writers;
};

Fs& fs_of(fuse_req_t req) { return *static_cast<Fs*>(fuse_req_userdata(req)); }

// An open directory: the entries read so far, in the daemon's (name) order. The offset of the
// k-th entry handed to the kernel is k+1, with "." and ".." first; seekdir and telldir work
// within one open directory, and rewinddir (offset 0) reads it afresh.
struct DirHandle {
    std::mutex mu;
    std::vector<proto::DirEntry> entries;
    bool more = true;
};

void log_error(const char* op, uint64_t ino, const Status& s) {
    std::fprintf(stderr, "jobfs-fuse: %s of inode %llu: %s\n", op, static_cast<unsigned long long>(ino),
                 s.to_string().c_str());
}

// Errors the caller did not cause (the file system's or the network's) are worth a log line.
bool worth_logging(const Status& s) {
    switch (s.code()) {
    case Code::io:
    case Code::internal:
    case Code::timeout:
    case Code::peer_gone:
    case Code::refused:
    case Code::protocol:
    case Code::cancelled:
        return true;
    default:
        return false;
    }
}

void reply_status(fuse_req_t req, const char* op, uint64_t ino, const Status& s) {
    if (s.ok()) {
        fuse_reply_err(req, 0);
        return;
    }
    if (worth_logging(s)) log_error(op, ino, s);
    fuse_reply_err(req, s.to_errno());
}

// An inode the daemons no longer know, reached by a name the kernel still caches (another node
// removed or replaced it within entry_timeout): ESTALE, as NFS answers, makes the kernel look
// the name up again (LOOKUP_REVAL) and retry the open or stat, which then finds what the name
// is now: the new file, or nothing (ENOENT). With ENOENT the name stayed unusable until the
// cache ran out, even with a new file under it.
void reply_gone_stale(fuse_req_t req, const char* op, uint64_t ino, const Status& s) {
    if (s.code() == Code::not_found) return (void)fuse_reply_err(req, ESTALE);
    reply_status(req, op, ino, s);
}

// fuse_req_getgroups reads /proc/PID/status: a process's supplementary groups are kept here
// for a second (they change only through setgroups, which needs privilege; a changed uid or
// gid misses the cache). Root needs none: it passes every check on the daemons.
struct GroupCache {
    struct Entry {
        uid_t uid;
        gid_t gid;
        std::vector<uint32_t> groups;
        std::chrono::steady_clock::time_point expires;
    };
    std::mutex mu;
    std::unordered_map<pid_t, Entry> by_pid;
};
GroupCache group_cache;

proto::Cred cred_of(fuse_req_t req) {
    const fuse_ctx* ctx = fuse_req_ctx(req);
    proto::Cred c{static_cast<uint32_t>(ctx->uid), static_cast<uint32_t>(ctx->gid), {}};
    if (ctx->uid == 0) return c;
    const auto now = std::chrono::steady_clock::now();
    {
        std::lock_guard lock(group_cache.mu);
        auto it = group_cache.by_pid.find(ctx->pid);
        if (it != group_cache.by_pid.end() && it->second.uid == ctx->uid && it->second.gid == ctx->gid &&
            now < it->second.expires) {
            c.groups = it->second.groups;
            return c;
        }
    }
    std::vector<gid_t> groups(32);
    int n = fuse_req_getgroups(req, static_cast<int>(groups.size()), groups.data());
    if (n > static_cast<int>(groups.size())) {
        groups.resize(static_cast<size_t>(n));
        n = fuse_req_getgroups(req, n, groups.data());
    }
    for (int i = 0; i < n && i < static_cast<int>(groups.size()); ++i)
        c.groups.push_back(static_cast<uint32_t>(groups[static_cast<size_t>(i)]));
    std::lock_guard lock(group_cache.mu);
    if (group_cache.by_pid.size() >= 4096) group_cache.by_pid.clear();
    group_cache.by_pid[ctx->pid] = GroupCache::Entry{ctx->uid, ctx->gid, c.groups, now + std::chrono::seconds(1)};
    return c;
}

uint32_t type_bits(uint8_t type) {
    switch (type) {
    case 2: return S_IFDIR;
    case 3: return S_IFLNK;
    default: return S_IFREG;
    }
}

struct stat to_stat(const proto::Attr& a) {
    struct stat st {};
    st.st_ino = a.ino;
    st.st_mode = (a.mode & S_IFMT) ? a.mode : (a.mode | type_bits(a.type));
    st.st_nlink = a.nlink;
    st.st_uid = a.uid;
    st.st_gid = a.gid;
    st.st_size = static_cast<off_t>(a.size);
    st.st_rdev = a.rdev;
    st.st_blksize = kMaxIo;
    st.st_blocks = static_cast<blkcnt_t>((a.size + 511) / 512);
    st.st_atim = {a.atime_ns / 1000000000, a.atime_ns % 1000000000};
    st.st_mtim = {a.mtime_ns / 1000000000, a.mtime_ns % 1000000000};
    st.st_ctim = {a.ctime_ns / 1000000000, a.ctime_ns % 1000000000};
    return st;
}

void reply_entry(fuse_req_t req, const proto::Attr& a) {
    const Fs& fs = fs_of(req);
    fuse_entry_param e{};
    e.ino = a.ino;
    e.generation = a.generation;
    e.attr = to_stat(a);
    e.attr_timeout = fs.attr_timeout;
    e.entry_timeout = fs.entry_timeout;
    fuse_reply_entry(req, &e);
}

// POSIX permission bits of a for c (root: everything, but execute only if someone may).
bool may_access(const proto::Attr& a, const proto::Cred& c, int mask) {
    if (c.uid == 0) return !(mask & X_OK) || a.type == 2 || (a.mode & 0111);
    unsigned bits;
    bool in_group = c.gid == a.gid;
    for (uint32_t g : c.groups) in_group = in_group || g == a.gid;
    if (c.uid == a.uid) bits = (a.mode >> 6) & 7;
    else if (in_group) bits = (a.mode >> 3) & 7;
    else bits = a.mode & 7;
    return (bits & static_cast<unsigned>(mask)) == static_cast<unsigned>(mask);
}

int access_mask(int flags) {
    int mask = 0;
    switch (flags & O_ACCMODE) {
    case O_RDONLY: mask = R_OK; break;
    case O_WRONLY: mask = W_OK; break;
    default: mask = R_OK | W_OK; break;
    }
    if (flags & O_TRUNC) mask |= W_OK;
    return mask;
}

Handle* handle_of(fuse_file_info* fi) { return reinterpret_cast<Handle*>(fi->fh); }

// ---- handlers -----------------------------------------------------------------------------

void jf_init(void* userdata, fuse_conn_info* conn) {
    Fs& fs = *static_cast<Fs*>(userdata);
    fs.initialized = true;
    conn->max_write = kMaxIo;
    conn->max_read = kMaxIo; // and -o max_read, which main passes to the kernel
    if (conn->max_readahead > kMaxIo) conn->max_readahead = kMaxIo;
    conn->time_gran = 1; // nanosecond timestamps
    if (conn->max_background < kMaxBackground) {
        conn->max_background = kMaxBackground;
        conn->congestion_threshold = kMaxBackground * 3 / 4;
    }
    if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
    if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA) conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    // flock and fcntl locks go to the daemons (jf_getlk, jf_setlk, jf_flock), unless -o
    // local_locks leaves them to this node's kernel. No splice: FileIO sends straight from
    // libfuse's buffer by rendezvous already.
    conn->want &= ~(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
    if (fs.cluster_locks) {
        conn->want |= conn->capable & (FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
    } else {
        conn->want &= ~(FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
    }
    // Writeback cache (-o writeback_cache): writes complete in the page cache and reach us in
    // large batches. The kernel flushes a file's dirty pages before it sends FLUSH at close, so
    // close-to-open between nodes still holds; it may read pages of a file opened write-only
    // (jf_open opens such files for reading too) and does O_APPEND itself.
    if (fs.writeback_cache && (conn->capable & FUSE_CAP_WRITEBACK_CACHE)) {
        conn->want |= FUSE_CAP_WRITEBACK_CACHE;
        fs.writeback = true;
    }
}

// With the writeback cache the kernel reads pages around partial writes, also through a
// write-only handle, and applies O_APPEND itself (passthrough_hp does the same).
int open_flags(const Fs& fs, int flags) {
    if (!fs.writeback) return flags;
    if ((flags & O_ACCMODE) == O_WRONLY) flags = (flags & ~O_ACCMODE) | O_RDWR;
    return flags & ~O_APPEND;
}

void jf_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    Fs& fs = fs_of(req);
    auto a = fs.client->lookup(cred_of(req), parent, name);
    if (a.ok()) return reply_entry(req, *a);
    if (a.status().code() == Code::not_found && fs.negative_timeout > 0) {
        fuse_entry_param e{}; // ino 0: a negative entry, cached for negative_timeout
        e.entry_timeout = fs.negative_timeout;
        fuse_reply_entry(req, &e);
        return;
    }
    reply_status(req, "lookup", parent, a.status());
}

void jf_forget(fuse_req_t req, fuse_ino_t, uint64_t) { fuse_reply_none(req); }

void jf_forget_multi(fuse_req_t req, size_t, fuse_forget_data*) { fuse_reply_none(req); }

void jf_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
    auto a = fs_of(req).client->getattr(ino);
    if (!a.ok()) return reply_gone_stale(req, "getattr", ino, a.status());
    struct stat st = to_stat(*a);
    fuse_reply_attr(req, &st, fs_of(req).attr_timeout);
}

void jf_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
    proto::SetattrRequest set;
    if (to_set & FUSE_SET_ATTR_MODE) set.mode = attr->st_mode & 07777;
    if (to_set & FUSE_SET_ATTR_UID) set.uid = attr->st_uid;
    if (to_set & FUSE_SET_ATTR_GID) set.gid = attr->st_gid;
    if (to_set & FUSE_SET_ATTR_SIZE) set.size = static_cast<uint64_t>(attr->st_size);
    if (to_set & FUSE_SET_ATTR_ATIME_NOW) set.atime_now = true;
    else if (to_set & FUSE_SET_ATTR_ATIME)
        set.atime_ns = int64_t(attr->st_atim.tv_sec) * 1000000000 + attr->st_atim.tv_nsec;
    if (to_set & FUSE_SET_ATTR_MTIME_NOW) set.mtime_now = true;
    else if (to_set & FUSE_SET_ATTR_MTIME)
        set.mtime_ns = int64_t(attr->st_mtim.tv_sec) * 1000000000 + attr->st_mtim.tv_nsec;
    auto a = fs_of(req).client->setattr(cred_of(req), ino, std::move(set));
    if (!a.ok()) return reply_status(req, "setattr", ino, a.status());
    struct stat st = to_stat(*a);
    fuse_reply_attr(req, &st, fs_of(req).attr_timeout);
}

void jf_readlink(fuse_req_t req, fuse_ino_t ino) {
    auto t = fs_of(req).client->readlink(ino);
    if (!t.ok()) return reply_status(req, "readlink", ino, t.status());
    fuse_reply_readlink(req, t->c_str());
}

void jf_mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t) {
    // Regular files only: jobfs keeps no devices, FIFOs or sockets.
    if (!S_ISREG(mode)) return (void)fuse_reply_err(req, EPERM);
    InodeClient& c = *fs_of(req).client;
    auto r = c.create(cred_of(req), parent, name, mode & 07777, O_CREAT | O_EXCL | O_RDONLY);
    if (!r.ok()) return reply_status(req, "mknod", parent, r.status());
    Status s = c.release(std::move(r->second));
    if (!s.ok()) log_error("mknod", parent, s);
    reply_entry(req, r->first);
}

void jf_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
    auto a = fs_of(req).client->mkdir(cred_of(req), parent, name, mode & 07777);
    if (!a.ok()) return reply_status(req, "mkdir", parent, a.status());
    reply_entry(req, *a);
}

void jf_symlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
    auto a = fs_of(req).client->symlink(cred_of(req), parent, name, target);
    if (!a.ok()) return reply_status(req, "symlink", parent, a.status());
    reply_entry(req, *a);
}

void jf_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t new_parent, const char* name) {
    auto a = fs_of(req).client->link(cred_of(req), ino, new_parent, name);
    if (!a.ok()) return reply_status(req, "link", ino, a.status());
    reply_entry(req, *a);
}

void jf_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
    reply_status(req, "unlink", parent, fs_of(req).client->unlink(cred_of(req), parent, name));
}

void jf_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
    reply_status(req, "rmdir", parent, fs_of(req).client->rmdir(cred_of(req), parent, name));
}

void jf_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t new_parent, const char* new_name,
               unsigned int flags) {
    if (flags & ~unsigned(RENAME_NOREPLACE | RENAME_EXCHANGE)) return (void)fuse_reply_err(req, EINVAL);
    reply_status(req, "rename", parent,
                 fs_of(req).client->rename(cred_of(req), parent, name, new_parent, new_name, flags));
}

// Direct writes. A handle opened for writing bypasses the page cache (FOPEN_DIRECT_IO): the
// kernel hands us the writer's own pages, where a cached handle first copies every write into
// the page cache and then to us, one more copy on the writer's path. fio's 1 MiB sequential
// writes went from 1.0 to 1.4-1.6 GB/s with it (one job), and the kernel alone, with a server
// that answered every write at once, from 1.5 to 4.0 GB/s. What it costs:
//   * reads through such a handle skip the page cache and the kernel's readahead too (read-only
//     handles, the usual readers, keep both);
//   * a shared mmap of it needs FUSE_DIRECT_IO_ALLOW_MMAP (fuse_session_io.h);
//   * the kernel drops the cached pages of the range before it sends a direct write (and
//     writes back a mapping's dirty ones first), so readers through cached handles see it
//     (posix_check: "a process rereading a page sees every write"). Kernels before 6.6 did
//     not (it came with FUSE_DIRECT_IO_ALLOW_MMAP's series): there, without that flag, writable
//     handles stay cached;
//   * setuid and setgid are ours to drop before a direct write (drop_setid).
// O_APPEND writes are placed by the daemons, not at the kernel's offset (InodeClient::write):
// such a handle bypasses the page cache whatever the mode, which would keep each write at the
// kernel's guess. (With the writeback cache, open_flags leaves O_APPEND to the kernel, and
// writes go through the page cache, as that mode means.) -o no_direct_writes keeps writable
// handles cached.
unsigned direct_io(const Fs& fs, const Handle& h) {
    if (h.flags & O_APPEND) return 1;
    if (!fs.direct_writes || fs.writeback) return 0;
    // The session's I/O grants FUSE_DIRECT_IO_ALLOW_MMAP whenever the kernel offers it.
    return (h.flags & O_ACCMODE) != O_RDONLY && jobfs::fuse::session_direct_mmap_offered() ? 1 : 0;
}

// Whether the kernel writes through the page cache for this handle: a writable handle that is
// not direct, without the writeback cache (which writes back dirty pages instead).
bool writes_through_cache(const Fs& fs, const Handle& h) {
    return (h.flags & O_ACCMODE) != O_RDONLY && !direct_io(fs, h) && !fs.writeback;
}

// Whether an open keeps the file's cached pages, and counts h in Fs::cache_writers (before the
// reply: the kernel may write through it at once). An open drops the pages (close-to-open: they
// may be from before another node's close) unless a process of this node has the file open for
// writing through the page cache. Then the pages hold that writer's bytes, and dropping them
// while one of its writes is on its way would lose it for readers here: the kernel's
// write-through path copies the write into the pages and unlocks them before it sends it to us,
// so a reader that refills a dropped page meanwhile gets the bytes from before the write, and
// the stale page stays after the write returned (posix_check, "a process rereading a page
// sees every write", failed 2 of 30 times so with -o no_direct_writes). Another node's change
// is still found: the open drops the attributes (finish_open), and a changed mtime or size
// drops the pages at the next read (FUSE_CAP_AUTO_INVAL_DATA).
bool open_keeps_cache(Fs& fs, uint64_t ino, const Handle& h) {
    std::lock_guard lock(fs.cache_writers_mu);
    const bool keep = fs.cache_writers.contains(ino);
    if (writes_through_cache(fs, h)) ++fs.cache_writers[ino];
    return keep;
}

// h is gone (released, or its open interrupted): counts it out of Fs::cache_writers.
void forget_cache_writer(Fs& fs, uint64_t ino, const Handle& h) {
    if (!writes_through_cache(fs, h)) return;
    std::lock_guard lock(fs.cache_writers_mu);
    auto it = fs.cache_writers.find(ino);
    if (it != fs.cache_writers.end() && --it->second == 0) fs.cache_writers.erase(it);
}

// Gives the kernel an open handle (open and create): fi->fh is h if the reply arrived, else h is
// released here (the opener was interrupted: no release will come for it).
void reply_handle(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, std::unique_ptr<Handle> h,
                 const fuse_entry_param* created) {
    Fs& fs = fs_of(req);
    fi->keep_cache = open_keeps_cache(fs, ino, *h) ? 1 : 0;
    fi->direct_io = direct_io(fs, *h);
    fi->fh = reinterpret_cast<uint64_t>(h.get());
    if ((created ? fuse_reply_create(req, created, fi) : fuse_reply_open(req, fi)) == 0) {
        h.release(); // the kernel owns it until release
    } else {
        forget_cache_writer(fs, ino, *h);
        Status s = fs.client->release(std::move(h));
        if (!s.ok()) log_error(created ? "create (interrupted)" : "open (interrupted)", ino, s);
    }
}

// Opens for the kernel: the handle, and fresh attributes for close-to-open consistency.
void finish_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, std::unique_ptr<Handle> h) {
    // The kernel may hold attributes (the size) from before another node's close: drop them,
    // so that the next stat or read past the cached size asks us. Cached pages go too unless
    // open_keeps_cache says otherwise. Only attributes (offset -1): no page lock is taken, so
    // this is safe from inside the open.
    fuse_lowlevel_notify_inval_inode(fs_of(req).session, ino, -1, 0);
    reply_handle(req, ino, fi, std::move(h), nullptr);
}

void jf_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    Fs& fs = fs_of(req);
    proto::Cred cred = cred_of(req);
    if (!fs.default_permissions) {
        // Nobody else checks the bits for data access: the kernel leaves it to us.
        auto a = fs.client->getattr(ino);
        if (!a.ok()) return reply_gone_stale(req, "open", ino, a.status());
        if (!may_access(*a, cred, access_mask(fi->flags))) return (void)fuse_reply_err(req, EACCES);
    }
    auto h = fs.client->open(cred, ino, open_flags(fs, fi->flags));
    // The kernel checked write access only: a write-only opener without read permission
    // gets a write-only handle (partial-page writes then fail with EACCES, as the kernel's
    // read of the page does).
    if (!h.ok() && h.status().code() == Code::permission && open_flags(fs, fi->flags) != fi->flags)
        h = fs.client->open(cred, ino, fi->flags & ~O_APPEND);
    if (!h.ok()) return reply_gone_stale(req, "open", ino, h.status());
    finish_open(req, ino, fi, std::move(*h));
}

void jf_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
    Fs& fs = fs_of(req);
    auto r = fs.client->create(cred_of(req), parent, name, mode & 07777, open_flags(fs, fi->flags));
    if (!r.ok()) return reply_status(req, "create", parent, r.status());
    fuse_entry_param e{};
    e.ino = r->first.ino;
    e.generation = r->first.generation;
    e.attr = to_stat(r->first);
    e.attr_timeout = fs.attr_timeout;
    e.entry_timeout = fs.entry_timeout;
    reply_handle(req, e.ino, fi, std::move(r->second), &e);
}

void jf_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
    // Cold ranges are read into it with direct I/O (LocalReads::ColdReads): aligned, and in huge
    // pages, one disk segment each (huge_buffer.h).
    thread_local jobfs::client::HugeBuffer buf;
    if (!buf.reserve(size)) return reply_status(req, "read", ino, Status(Code::no_memory, "no memory for a read buffer"));
    auto n = fs_of(req).client->read(*handle_of(fi), static_cast<uint64_t>(off), {buf.data(), size});
    if (!n.ok()) return reply_status(req, "read", ino, n.status());
    fuse_reply_buf(req, reinterpret_cast<const char*>(buf.data()), *n);
}

// What the kernel does before a write through its page cache (file_remove_privs) and leaves
// to us before a direct one, which it flags (FUSE_WRITE_KILL_SUIDGID: the writer may not keep
// them): drop setuid, and setgid with group execute, with a chmod in the writer's name (the
// shard lets a writer do that much). Asked of the shard only while the handle's mode (from the
// open, then from the last look here) still has a bit to drop, so that the common write costs
// nothing here; a look that failed is made again by the next write. (O_APPEND writes: the
// shard drops them as it places the write.)
uint32_t setid_bits_a_write_drops(uint32_t mode) {
    return (mode & S_ISUID) | ((mode & S_IXGRP) ? (mode & S_ISGID) : 0);
}

Status drop_setid(fuse_req_t req, fuse_ino_t ino, Handle& h) {
    if (!setid_bits_a_write_drops(h.mode) || !jobfs::fuse::session_write_kills_setid()) return Status::OK();
    Fs& fs = fs_of(req);
    auto a = fs.client->getattr(ino);
    if (!a.ok()) return a.status();
    const uint32_t keep = a->mode & ~setid_bits_a_write_drops(a->mode);
    if (keep != a->mode) {
        proto::SetattrRequest set;
        set.mode = keep & 07777;
        auto r = fs.client->setattr(cred_of(req), ino, std::move(set));
        if (!r.ok()) return r.status();
    }
    h.mode = keep;
    return Status::OK();
}

void jf_write(fuse_req_t req, fuse_ino_t ino, const char* data, size_t size, off_t off, fuse_file_info* fi) {
    Fs& fs = fs_of(req);
    Handle& h = *handle_of(fi);
    if (!fi->writepage && direct_io(fs, h) && !(h.flags & O_APPEND))
        if (Status s = drop_setid(req, ino, h); !s.ok()) return reply_status(req, "write", ino, s);
    // The kernel's write-back of a shared mapping's pages goes where they are, also when it
    // picked an O_APPEND handle to send them.
    Status s = fs.client->write(h, static_cast<uint64_t>(off), {reinterpret_cast<const uint8_t*>(data), size},
                                fi->writepage != 0);
    if (!s.ok()) return reply_status(req, "write", ino, s);
    fuse_reply_write(req, size);
}

// ---- locks --------------------------------------------------------------------------------
// flock and fcntl locks are kept by the daemon of the file's shard (server/file_locks.h), so a
// lock taken on one node holds on every other. A waiter (F_SETLKW, flock without LOCK_NB) asks
// again, 5 ms after a refusal and twice as long each time up to 100 ms, until it gets the lock
// or its caller is interrupted (EINTR): Linux's NFSv4 client waits for a lock so too.

constexpr uint64_t kToEof = std::numeric_limits<uint64_t>::max();

proto::FileLockRequest lock_request(fuse_ino_t ino, uint64_t owner, bool flock, short type) {
    proto::FileLockRequest r;
    r.ino = ino;
    r.owner = owner;
    r.flock = flock;
    r.type = type == F_WRLCK ? proto::kLockWrite : type == F_RDLCK ? proto::kLockRead : proto::kLockUnlock;
    r.end = kToEof;
    return r;
}

// libfuse hands the kernel's range as l_start and l_len (0: to the end of the file).
proto::FileLockRequest posix_request(fuse_ino_t ino, const fuse_file_info* fi, const struct flock& l) {
    proto::FileLockRequest r = lock_request(ino, fi->lock_owner, false, l.l_type);
    r.pid = static_cast<uint32_t>(l.l_pid);
    r.start = static_cast<uint64_t>(l.l_start);
    r.end = l.l_len <= 0 ? kToEof : r.start + static_cast<uint64_t>(l.l_len) - 1;
    return r;
}

// Takes (or gives back) the lock, waiting for it if asked: 0 or an errno.
//
// What a lock protects is seen as it is (as an NFS client does): before a lock is given back,
// this mount's writes to the file land and its size is settled (the caller flushes: `h`);
// once one is taken, the kernel's attributes of the file are dropped, so that its next read
// asks for them and, finding another node's change (mtime; FUSE_CAP_AUTO_INVAL_DATA), drops
// the pages it cached too. (Only attributes here: dropping pages takes their locks, which a
// read waiting for this mount may hold.)
int lock_wait(fuse_req_t req, const char* op, const proto::FileLockRequest& r, bool wait) {
    auto delay = std::chrono::milliseconds(5);
    for (;;) {
        auto a = fs_of(req).client->lock(r);
        if (!a.ok()) {
            if (worth_logging(a.status())) log_error(op, r.ino, a.status());
            return a.status().to_errno();
        }
        if (a->granted && r.type != proto::kLockUnlock)
            fuse_lowlevel_notify_inval_inode(fs_of(req).session, r.ino, -1, 0);
        if (a->granted) return 0;
        if (!wait) return EAGAIN;
        if (fuse_req_interrupted(req)) return EINTR;
        std::this_thread::sleep_for(delay);
        delay = std::min(delay * 2, std::chrono::milliseconds(100));
        if (fuse_req_interrupted(req)) return EINTR;
    }
}

void jf_getlk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock) {
    proto::FileLockRequest r = posix_request(ino, fi, *lock);
    r.test = 1;
    auto a = fs_of(req).client->lock(r);
    if (!a.ok()) return reply_status(req, "getlk", ino, a.status());
    struct flock out = *lock;
    if (a->granted) {
        out.l_type = F_UNLCK;
    } else {
        out.l_type = a->type == proto::kLockWrite ? F_WRLCK : F_RDLCK;
        out.l_whence = SEEK_SET;
        out.l_start = static_cast<off_t>(a->start);
        out.l_len = a->end == kToEof ? 0 : static_cast<off_t>(a->end - a->start + 1);
        out.l_pid = static_cast<pid_t>(a->pid);
    }
    fuse_reply_lock(req, &out);
}

// Before a lock is given back: this mount's writes to the file are at the daemons, its size
// settled (lock_wait). 0 or an errno.
int settle_before_unlock(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    Status s = fs_of(req).client->settle_file(*handle_of(fi));
    if (s.ok()) return 0;
    if (worth_logging(s)) log_error("unlock", ino, s);
    return s.to_errno();
}

void jf_setlk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock, int sleep) {
    Fs& fs = fs_of(req);
    if (lock->l_type != F_UNLCK) {
        std::lock_guard l(fs.locked_mu);
        fs.posix_locked.insert(ino);
    } else if (int e = settle_before_unlock(req, ino, fi); e != 0) {
        return (void)fuse_reply_err(req, e);
    }
    fuse_reply_err(req, lock_wait(req, "setlk", posix_request(ino, fi, *lock), sleep != 0));
}

void jf_flock(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, int op) {
    const short type = (op & LOCK_EX) ? F_WRLCK : (op & LOCK_SH) ? F_RDLCK : F_UNLCK;
    if (type == F_UNLCK)
        if (int e = settle_before_unlock(req, ino, fi); e != 0) return (void)fuse_reply_err(req, e);
    fuse_reply_err(req, lock_wait(req, "flock", lock_request(ino, fi->lock_owner, true, type), !(op & LOCK_NB)));
}

// What a close gives back: the closing process's fcntl locks of the file (every close, as
// POSIX has it), the open file's flock lock (its last close: release).
void give_back(fuse_req_t req, fuse_ino_t ino, uint64_t owner, bool flock) {
    // (An unlock is never refused: it only fails with the daemons.)
    int e = lock_wait(req, flock ? "flock release" : "unlock at close", lock_request(ino, owner, flock, F_UNLCK), false);
    if (e != 0) std::fprintf(stderr, "jobfs-fuse: locks of inode %llu not given back at close: %s\n",
                                            static_cast<unsigned long long>(ino), std::strerror(e));
}

void jf_flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    Fs& fs = fs_of(req);
    bool locked = false;
    if (fs.cluster_locks) {
        std::lock_guard l(fs.locked_mu);
        locked = fs.posix_locked.count(ino) != 0;
    }
    // The file's writes land (and its size is settled) before its locks go: another node that
    // takes one next reads what was written under it, also through other descriptors than
    // the one whose close gives the locks back (a reader's close alone settles nothing).
    Handle& h = *handle_of(fi);
    Status flushed = locked ? fs.client->settle_file(h) : fs.client->flush(h);
    if (locked) give_back(req, ino, fi->lock_owner, false);
    reply_status(req, "flush", ino, flushed);
}

void jf_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    std::unique_ptr<Handle> h(handle_of(fi));
    if (fi->flock_release && fs_of(req).cluster_locks) {
        // What the flock lock protected lands first, written through whichever descriptor
        // (the flush of a reader's close settled nothing).
        Status s = fs_of(req).client->settle_file(*h);
        if (!s.ok() && worth_logging(s)) log_error("release of a flock lock", ino, s);
        give_back(req, ino, fi->lock_owner, true);
    }
    forget_cache_writer(fs_of(req), ino, *h);
    Status s = fs_of(req).client->release(std::move(h));
    if (!s.ok()) log_error("release", ino, s); // nobody waits for this answer
    fuse_reply_err(req, 0);
}

void jf_fsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info* fi) {
    reply_status(req, "fsync", ino, fs_of(req).client->fsync(*handle_of(fi)));
}

void jf_opendir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
    fi->fh = reinterpret_cast<uint64_t>(new DirHandle());
    if (fuse_reply_open(req, fi) != 0) delete reinterpret_cast<DirHandle*>(fi->fh);
}

// Fills buf with the entries from offset off on. Holds d->mu, and returns before the reply
// is sent: once the kernel has its answer it may release the directory (and free d) at once.
Status fill_dir(fuse_req_t req, fuse_ino_t ino, DirHandle& d, off_t off, std::vector<char>& buf) {
    std::lock_guard lock(d.mu);
    if (off == 0) { // the first read, or rewinddir: from the start, as the directory is now
        d.entries.clear();
        d.more = true;
    }
    const size_t size = buf.size();
    size_t used = 0;
    const proto::Cred cred = cred_of(req);
    for (size_t k = static_cast<size_t>(off);; ++k) {
        // Entry k: 0 ".", 1 "..", k >= 2 the daemon's entry k-2, fetched a page at a time.
        while (k >= 2 && k - 2 >= d.entries.size() && d.more) {
            auto page = fs_of(req).client->readdir(cred, ino, d.entries.empty() ? "" : d.entries.back().name);
            if (!page.ok()) {
                if (used == 0) return page.status();
                // hand over what we have; the error comes with the next call
                buf.resize(used);
                return Status::OK();
            }
            d.more = page->more && !page->entries.empty();
            for (auto& e : page->entries) d.entries.push_back(std::move(e));
        }
        struct stat st {};
        const char* name;
        if (k == 0) {
            name = ".";
            st.st_ino = ino;
            st.st_mode = S_IFDIR;
        } else if (k == 1) {
            name = "..";
            st.st_ino = 1; // the kernel answers ".." itself; readdir only shows a number
            st.st_mode = S_IFDIR;
        } else if (k - 2 < d.entries.size()) {
            const proto::DirEntry& e = d.entries[k - 2];
            name = e.name.c_str();
            st.st_ino = e.ino;
            st.st_mode = type_bits(e.type);
        } else {
            break; // the end
        }
        size_t need = fuse_add_direntry(req, buf.data() + used, size - used, name, &st, static_cast<off_t>(k + 1));
        if (need > size - used) break; // full
        used += need;
    }
    buf.resize(used);
    return Status::OK();
}

void jf_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
    std::vector<char> buf(size);
    Status s = fill_dir(req, ino, *reinterpret_cast<DirHandle*>(fi->fh), off, buf);
    if (!s.ok()) return reply_status(req, "readdir", ino, s);
    fuse_reply_buf(req, buf.data(), buf.size());
}

void jf_releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
    delete reinterpret_cast<DirHandle*>(fi->fh);
    fuse_reply_err(req, 0);
}

void jf_fsyncdir(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
    // Namespace changes are committed on their shard once there; those this mount answered in
    // a delegated directory are queued until then (a few milliseconds): fsync of a directory
    // waits for them, and fails if some were lost.
    reply_status(req, "fsyncdir", ino, fs_of(req).client->sync_namespace());
}

void jf_statfs(fuse_req_t req, fuse_ino_t ino) {
    auto sp = fs_of(req).client->statfs();
    if (!sp.ok()) return reply_status(req, "statfs", ino, sp.status());
    constexpr uint64_t kFrag = 4096;
    constexpr uint64_t kFreeInodes = 1ull << 32; // SQLite shards: no fixed inode table
    struct statvfs s {};
    s.f_bsize = kMaxIo;
    s.f_frsize = kFrag;
    s.f_blocks = sp->total_bytes / kFrag;
    s.f_bfree = sp->free_bytes / kFrag;
    s.f_bavail = sp->free_bytes / kFrag;
    s.f_files = sp->inodes + kFreeInodes;
    s.f_ffree = kFreeInodes;
    s.f_favail = kFreeInodes;
    s.f_namemax = 255;
    fuse_reply_statfs(req, &s);
}

void jf_setxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags) {
    Status s = fs_of(req).client->setxattr(cred_of(req), ino, name, std::string(value, size), flags);
    if (std::strcmp(name, NoCapabilities::kName) == 0) fs_of(req).no_capabilities.forget(ino);
    reply_status(req, "setxattr", ino, s);
}

void jf_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
    Fs& fs = fs_of(req);
    const bool capability = std::strcmp(name, NoCapabilities::kName) == 0;
    std::optional<uint64_t> asked_at = 0;
    if (capability && !(asked_at = fs.no_capabilities.ask(ino))) return (void)fuse_reply_err(req, ENODATA);
    auto v = fs.client->getxattr(cred_of(req), ino, name);
    if (capability && v.status().code() == Code::no_data) fs.no_capabilities.note(ino, fs.attr_timeout, *asked_at);
    if (!v.ok()) return reply_status(req, "getxattr", ino, v.status());
    if (size == 0) return (void)fuse_reply_xattr(req, v->size());
    if (v->size() > size) return (void)fuse_reply_err(req, ERANGE);
    fuse_reply_buf(req, v->data(), v->size());
}

void jf_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
    auto names = fs_of(req).client->listxattr(cred_of(req), ino);
    if (!names.ok()) return reply_status(req, "listxattr", ino, names.status());
    std::string all;
    for (const std::string& n : *names) all.append(n).push_back('\0');
    if (size == 0) return (void)fuse_reply_xattr(req, all.size());
    if (all.size() > size) return (void)fuse_reply_err(req, ERANGE);
    fuse_reply_buf(req, all.data(), all.size());
}

void jf_removexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
    Status s = fs_of(req).client->removexattr(cred_of(req), ino, name);
    if (std::strcmp(name, NoCapabilities::kName) == 0) fs_of(req).no_capabilities.forget(ino);
    reply_status(req, "removexattr", ino, s);
}

// Only called without default_permissions (otherwise the kernel decides access(2) itself).
void jf_access(fuse_req_t req, fuse_ino_t ino, int mask) {
    auto a = fs_of(req).client->getattr(ino);
    if (!a.ok()) return reply_status(req, "access", ino, a.status());
    fuse_reply_err(req, mask == F_OK || may_access(*a, cred_of(req), mask) ? 0 : EACCES);
}

fuse_lowlevel_ops make_ops() {
    fuse_lowlevel_ops ops{};
    ops.init = jf_init;
    ops.lookup = jf_lookup;
    ops.forget = jf_forget;
    ops.forget_multi = jf_forget_multi;
    ops.getattr = jf_getattr;
    ops.setattr = jf_setattr;
    ops.readlink = jf_readlink;
    ops.mknod = jf_mknod;
    ops.mkdir = jf_mkdir;
    ops.symlink = jf_symlink;
    ops.link = jf_link;
    ops.unlink = jf_unlink;
    ops.rmdir = jf_rmdir;
    ops.rename = jf_rename;
    ops.open = jf_open;
    ops.create = jf_create;
    ops.read = jf_read;
    ops.write = jf_write;
    ops.flush = jf_flush;
    ops.release = jf_release;
    ops.fsync = jf_fsync;
    ops.opendir = jf_opendir;
    ops.readdir = jf_readdir;
    ops.releasedir = jf_releasedir;
    ops.fsyncdir = jf_fsyncdir;
    ops.statfs = jf_statfs;
    ops.setxattr = jf_setxattr;
    ops.getxattr = jf_getxattr;
    ops.listxattr = jf_listxattr;
    ops.removexattr = jf_removexattr;
    ops.access = jf_access;
    ops.getlk = jf_getlk;
    ops.setlk = jf_setlk;
    ops.flock = jf_flock;
    return ops;
}

// ---- start-up -----------------------------------------------------------------------------

void usage(FILE* out) {
    std::fprintf(out,
                 "usage: jobfs-fuse [--cluster FILE] MOUNTPOINT [-o OPTIONS] [-f] [-d] [-s]\n"
                 "\n"
                 "Mounts the jobfs file system whose daemons the cluster descriptor names\n"
                 "(--cluster FILE, -o cluster=FILE, or $JOBFS_CLUSTER). man jobfs-fuse.8\n"
                 "\n"
                 "jobfs options (-o):\n"
                 "    attr_timeout=SECONDS      cache attributes this long (1)\n"
                 "    entry_timeout=SECONDS     cache names this long (1)\n"
                 "    negative_timeout=SECONDS  cache missing names this long (0)\n"
                 "    readahead_kb=KIB          the kernel's readahead on the mount (4096; 0: its default)\n"
                 "    write_behind_mib=MIB      per open file, writes still on their way after write(2)\n"
                 "                              returned (8; 0: each write waits for the daemons)\n"
                 "    writeback_cache           let the kernel buffer writes (off; see the man page)\n"
                 "    no_direct_writes          writable descriptors through the page cache (by default\n"
                 "                              they bypass it: see the man page)\n"
                 "    no_local_io               every byte over the transport: no reads from this node's\n"
                 "                              chunk files, no write arena (both on by default)\n"
                 "    no_direct_reads           read chunk files not in the page cache through it, and\n"
                 "                              read ahead (default: direct I/O, see the man page)\n"
                 "    no_dir_delegation         ask the daemons for every create, lookup and unlink, also\n"
                 "                              in directories this mount works in (delegated by default)\n"
                 "    local_locks               flock and fcntl locks hold between the processes of this\n"
                 "                              node only (default: on every node, kept by the daemons)\n"
                 "    nice=N                    the server's nice value, -20 to 19 (-10, as jobfsd's)\n"
                 "    no_allow_other            only the mounting user may enter (default when not root)\n"
                 "    no_default_permissions    check access here instead of in the kernel\n"
                 "\n");
}

// The nice value of the server's threads: -o nice=N, or the default where permitted.
Status set_priority(int wanted) {
    const bool given = wanted != kNiceUnset;
    const int nice = given ? wanted : kDefaultNice;
    if (nice == jobfs::daemon_priority_get()) return Status::OK();
    Status s = jobfs::daemon_priority_set(nice);
    return s.ok() || !given ? Status::OK() : s;
}

int fail_start(const char* what) {
    std::fprintf(stderr, "jobfs-fuse: %s\n", what);
    return 1;
}

// Sends the parent of a daemonised jobfs-fuse the outcome of the start (0: mounted).
void tell_parent(int fd, char status) {
    if (fd < 0) return;
    ssize_t n = write(fd, &status, 1);
    (void)n;
    close(fd);
}

// The kernel offers FUSE mounts 128 KiB of readahead at most and takes only less in the INIT
// reply; its per-mount setting (the mount's bdi in sysfs) may be raised afterwards. 1 MiB, one
// request of max_read, reads sequential files half again as fast here. Runs on its own thread
// until INIT has been answered (or `stop`), then writes
// /sys/class/bdi/MAJOR:MINOR/read_ahead_kb of the mount found in /proc/self/mountinfo.
void raise_readahead(const Fs& fs, const std::string& mountpoint, unsigned kb, const std::atomic<bool>& stop) {
    for (int i = 0; i < 500 && !fs.initialized && !stop; ++i) usleep(10000);
    if (!fs.initialized) return;
    usleep(100000); // the INIT reply, which sets the kernel's own limit, is processed by now
    std::string device;
    if (FILE* f = std::fopen("/proc/self/mountinfo", "r")) {
        char line[4096];
        while (device.empty() && std::fgets(line, sizeof line, f)) {
            char majmin[64], mp[2048];
            if (std::sscanf(line, "%*s %*s %63s %*s %2047s", majmin, mp) == 2 && mountpoint == mp) device = majmin;
        }
        std::fclose(f);
    }
    const std::string path = "/sys/class/bdi/" + device + "/read_ahead_kb";
    FILE* f = device.empty() ? nullptr : std::fopen(path.c_str(), "w");
    if (!f || std::fprintf(f, "%u\n", kb) < 0 || std::fclose(f) != 0) {
        std::fprintf(stderr, "jobfs-fuse: cannot set the readahead of %s to %u KiB (%s); it stays the kernel's\n",
                     mountpoint.c_str(), kb, device.empty() ? "mount not found" : path.c_str());
    }
}

// Runs the mount; `ready_fd` (or -1) learns when it is up or failed.
int serve(Config& cfg, fuse_args& args, fuse_cmdline_opts& opts, int ready_fd) {
    // Block the signals that end the mount in every thread this process will start (UCX's,
    // libfuse's); the main thread takes them again just before it runs the loop.
    sigset_t stop_signals, old_mask;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);

    std::string cluster_path = cfg.cluster ? cfg.cluster : (std::getenv("JOBFS_CLUSTER") ? std::getenv("JOBFS_CLUSTER") : "");
    auto info = jobfs::client::read_cluster(cluster_path);
    if (!info.ok()) {
        tell_parent(ready_fd, 1);
        return fail_start(("cluster descriptor: " + info.status().to_string()).c_str());
    }
    Fs fs;
    fs.attr_timeout = cfg.attr_timeout;
    fs.entry_timeout = cfg.entry_timeout;
    fs.negative_timeout = cfg.negative_timeout;
    fs.default_permissions = !cfg.no_default_permissions;
    fs.writeback_cache = cfg.writeback_cache != 0;
    fs.direct_writes = cfg.no_direct_writes == 0;
    fs.cluster_locks = cfg.local_locks == 0;
    // Before the first thread (the client's) starts: every thread inherits it.
    if (Status s = set_priority(cfg.nice); !s.ok()) {
        tell_parent(ready_fd, 1);
        return fail_start(s.to_string().c_str());
    }
    jobfs::client::InodeClientOptions client_options;
    client_options.write_behind_bytes = static_cast<size_t>(cfg.write_behind_mib) << 20;
    client_options.local_reads = !cfg.no_local_io;
    client_options.local_cached_reads = jobfs::client::LocalReads::CachedReads::copied; // many workers: no munmap per read
    client_options.local_cold_reads = cfg.no_direct_reads ? jobfs::client::LocalReads::ColdReads::buffered
                                                          : jobfs::client::LocalReads::ColdReads::direct; // the kernel caches what we read
    client_options.dir_delegation = !cfg.no_dir_delegation;
    auto client = InodeClient::connect(*info, client_options);
    if (!client.ok()) {
        tell_parent(ready_fd, 1);
        return fail_start(("connect to the daemons of " + cluster_path + ": " + client.status().to_string()).c_str());
    }
    fs.client = std::move(*client);

    const fuse_lowlevel_ops ops = make_ops();
    fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), &fs);
    if (!se) {
        tell_parent(ready_fd, 1);
        return fail_start("bad mount options (see above)");
    }
    fs.session = se;
    int rc = 1;
    if (fuse_set_signal_handlers(se) != 0) {
        tell_parent(ready_fd, 1);
        fail_start("cannot install signal handlers");
    } else {
        fuse_custom_io session_io{};
        session_io.read = jobfs::fuse::session_io_read;
        session_io.writev = jobfs::fuse::session_io_writev;
        if (fuse_session_mount(se, opts.mountpoint) != 0) {
            tell_parent(ready_fd, 1);
            fail_start((std::string("cannot mount on ") + opts.mountpoint).c_str());
        } else if (fuse_session_custom_io(se, &session_io, fuse_session_fd(se)) != 0) {
            tell_parent(ready_fd, 1);
            fail_start("cannot set the session's I/O");
            fuse_session_unmount(se);
        } else {
            char real[PATH_MAX];
            const std::string mount_path = realpath(opts.mountpoint, real) ? real : opts.mountpoint;
            if (ready_fd >= 0) {
                // Daemonised: detach from the terminal now that the mount is up.
                if (chdir("/") != 0) {
                }
                int null = open("/dev/null", O_RDWR);
                if (null >= 0) {
                    dup2(null, 0);
                    dup2(null, 1);
                    dup2(null, 2);
                    if (null > 2) close(null);
                }
            }
            tell_parent(ready_fd, 0);
            fuse_loop_config* lc = fuse_loop_cfg_create();
            fuse_loop_cfg_set_clone_fd(lc, static_cast<unsigned>(opts.clone_fd));
            fuse_loop_cfg_set_max_threads(lc, opts.max_threads);
            if (opts.max_idle_threads != UINT_MAX) fuse_loop_cfg_set_idle_threads(lc, opts.max_idle_threads);
            std::atomic<bool> loop_done{false};
            std::thread readahead;
            if (cfg.readahead_kb)
                readahead = std::thread(raise_readahead, std::cref(fs), mount_path, cfg.readahead_kb, std::cref(loop_done));
            pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
            int loop = opts.singlethread ? fuse_session_loop(se) : fuse_session_loop_mt(se, lc);
            pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
            loop_done = true;
            if (readahead.joinable()) readahead.join();
            fuse_loop_cfg_destroy(lc);
            // A signal (SIGTERM, SIGINT) or an unmount ends the loop: both are a clean exit.
            rc = loop < 0 && loop != -EINTR ? 1 : 0;
            if (rc) std::fprintf(stderr, "jobfs-fuse: the session ended with %s\n", std::strerror(-loop));
            fuse_session_unmount(se);
        }
        fuse_remove_signal_handlers(se);
    }
    fuse_session_destroy(se);
    fs.client.reset(); // after the session: no handler runs any more
    return rc;
}

} // namespace

int main(int argc, char** argv) {
    fuse_args args = FUSE_ARGS_INIT(argc, argv);
    Config cfg;
    if (fuse_opt_parse(&args, &cfg, kOptions, opt_proc) != 0) return 2;
    // Our defaults, before libfuse parses: it keeps the first fsname/subtype it sees.
    fuse_opt_add_arg(&args, "-ofsname=jobfs,subtype=jobfs");
    fuse_opt_add_arg(&args, ("-omax_read=" + std::to_string(kMaxIo)).c_str());
    if (geteuid() == 0 && !cfg.no_allow_other && !cfg.allow_other) fuse_opt_add_arg(&args, "-oallow_other");
    if (!cfg.no_default_permissions && !cfg.default_permissions) fuse_opt_add_arg(&args, "-odefault_permissions");

    fuse_cmdline_opts opts{};
    if (fuse_parse_cmdline(&args, &opts) != 0) return 2;
    int rc = 0;
    if (opts.show_help) {
        usage(stdout);
        fuse_cmdline_help();
        fuse_lowlevel_help();
    } else if (opts.show_version) {
        std::printf("jobfs-fuse %s\n", PACKAGE_VERSION);
        fuse_lowlevel_version();
    } else if (!opts.mountpoint) {
        usage(stderr);
        std::fprintf(stderr, "jobfs-fuse: no mount point given\n");
        rc = 2;
    } else if (opts.foreground) {
        rc = serve(cfg, args, opts, -1);
    } else {
        // Daemonise before any thread exists (the transport starts one): the child mounts and
        // serves, the parent waits to hear that the mount is up and exits with that outcome.
        int p[2];
        if (pipe2(p, O_CLOEXEC) != 0) return fail_start("pipe failed");
        pid_t pid = fork();
        if (pid < 0) return fail_start("fork failed");
        if (pid == 0) {
            close(p[0]);
            setsid();
            rc = serve(cfg, args, opts, p[1]);
        } else {
            close(p[1]);
            char status = 1;
            if (read(p[0], &status, 1) != 1) {
                std::fprintf(stderr, "jobfs-fuse: the mount process ended before the mount was up\n");
                status = 1;
            }
            rc = status;
        }
    }
    free(opts.mountpoint);
    fuse_opt_free_args(&args);
    free(cfg.cluster);
    return rc;
}
