// dir_delegation.h: directories delegated to this client, where it answers lookups, creates,
// unlinks and renames within the directory itself and sends them to the daemons in batches
// (daemon_protocol.h, DelegateDir, DirOps, DirRecall; the daemon's side:
// server/dir_delegations.h). Used by libjobfs's Client and by the FUSE mount's InodeClient.
//
// Why: a create or unlink is one round trip and one replicated transaction on the directory's
// shard; a job making or removing thousands of files in its own directory waits for each. Like
// CephFS's asynchronous directory operations, a client that works in one directory a lot asks
// for it (after kAskAfter creates or unlinks there within kAskWindow) and gets every entry of
// it, inode numbers for new files, and the promise that nothing else reads or changes its
// entries before the daemon recalled the delegation. Then a create is answered here (exists,
// or the new file's attributes, made as the daemon would make them, also with a size and
// user.* attributes), an unlink and a rename of a regular file too (not found, is a
// directory, or done), and all are queued; the flusher thread sends them, up to kMaxDirOps
// per request, when kBatch are queued, after a flush delay (2 ms), at a barrier, or when the
// daemon recalls the directory (it sends what it holds back, with release, then answers).
// A directory is held for the credentials whose operations asked for it; another user's
// operations there are the daemon's (which recalls it).
//
// Consistency. Other clients see the same namespace as without delegations: they reach the
// directory only through its daemon, which recalls the delegation first (this client's queued
// operations are applied before theirs run). This client's own other metadata requests wait
// for its queue to be applied first (before_request or barrier, called by the client before
// each; sync for fsync of a directory and jobfs_sync_namespace). What differs is
// durability and errors: an operation answered here is lost if this client dies (or is cut off
// from the daemon for longer than the lease) before it was sent, as data in its write-behind
// buffers would be. A queued operation that the daemon then refuses (it should not: the
// answer here followed the daemon's rules) is logged with its directory, and a create that
// failed so is reported by fsync, flush and close of that file (error_of).
//
// Lock rule: mu_ guards every field; it is never held across a request. The flusher thread
// alone sends DirOps; callers ask for a delegation (DelegateDir) and read attributes
// (Getattr) with it released.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "client/file_io.h"
#include "daemon_protocol.h"
#include "result.h"
#include "worker.h"

namespace jobfs::client {

class DirDelegations {
public:
    using Clock = std::chrono::steady_clock;
    static constexpr int kAskAfter = 4;                                // creates/unlinks in a directory…
    static constexpr auto kAskWindow = std::chrono::milliseconds(1000); // …within this long
    static constexpr auto kCooldown = std::chrono::milliseconds(500);   // not asked again after a recall or refusal
    static constexpr uint64_t kPaysAfter = 64;                          // operations a delegation must answer…
    static constexpr auto kMaxBackoff = std::chrono::milliseconds(8000); // …else the next waits (doubling to this)
    static constexpr size_t kBatch = 256;                              // queued operations that start a send
    static constexpr size_t kMaxQueued = 4 * proto::kMaxDirOps;        // callers wait beyond this per directory

    // The data of a file whose last link a queued unlink removed (Client::release_data).
    using ReleaseFn = std::function<void(const proto::Attr& gone)>;
    // flush_delay: the longest a queued operation waits to be sent (ClientOptions).
    DirDelegations(std::chrono::milliseconds flush_delay, ReleaseFn release);
    // Starts the flusher: from now on delegations are asked for through io. (Made before the
    // worker connects, so that its recall handler exists; io needs the connections.)
    void start(const FileIO& io);
    // Sends what is queued and gives every delegation back.
    ~DirDelegations();
    DirDelegations(const DirDelegations&) = delete;
    DirDelegations& operator=(const DirDelegations&) = delete;

    // Serves the daemons' DirRecall on w (before w connects), for as long as self lives.
    static void serve_recalls(transport::Worker& w, std::weak_ptr<DirDelegations> self);

    // Each: nothing when dir is not delegated here to `cred` (the caller asks the daemon),
    // else the outcome. A directory is delegated to the credentials of the caller whose
    // operations asked for it (the daemon checked them, and new files are theirs); a caller
    // with other credentials (another user of a FUSE mount) goes to the daemon.
    // create: O_CREAT, exclusive or not (an existing file's attributes are read); an exclusive
    // one may come with the size and extended attributes the file is made with (NewFile).
    std::optional<Result<proto::Attr>> create(const proto::Cred& cred, uint64_t dir, const std::string& name,
                                              uint32_t mode, bool exclusive, uint64_t size = 0,
                                              const std::vector<proto::XattrPair>& xattrs = {});
    // unlink: `in_use` (optional) names inodes the caller keeps state for (a file open in a
    // FUSE mount): their unlink goes to the daemon, whose answer the caller acts on at once.
    std::optional<Status> unlink(const proto::Cred& cred, uint64_t dir, const std::string& name,
                                 const std::function<bool(uint64_t ino)>& in_use = {});
    std::optional<Result<proto::Attr>> lookup(const proto::Cred& cred, uint64_t dir, const std::string& name);
    // rename of regular file `from` to `to` within dir (rename(2) without flags: a regular
    // file under `to` is replaced, its data released once the daemon applied it). Anything
    // else (a directory or symlink on either side, an inode of another shard, one in use) is
    // the daemon's.
    std::optional<Status> rename(const proto::Cred& cred, uint64_t dir, const std::string& from, const std::string& to,
                                 const std::function<bool(uint64_t ino)>& in_use = {});
    // The attributes of directory dir while it is delegated here: the grant's, with the times
    // the operations answered here gave it (as the daemon sets them when it applies them).
    // Nothing when it is not: the daemon's are current then. (A FUSE mount's kernel asks
    // for them after every create or unlink in the directory, for its permission checks.)
    std::optional<proto::Attr> dir_attr(uint64_t dir);
    // Returns once every operation queued before the call was applied by the daemons (or failed).
    void barrier();
    // barrier, then io if operations were lost since the last sync (the log names them): what
    // Client::sync_namespace and a FUSE mount's fsync of a directory answer.
    Status sync();
    // barrier, and when key (what a request of this client names first: a directory, an
    // inode) is a directory delegated here, gives it back first.
    void before_request(uint64_t key);
    // Why the delegated create of ino failed, if it did, as a file's fsync, flush or close says
    // it (ok otherwise, also while it is queued).
    Status error_of(uint64_t ino);

    struct Stats {
        uint64_t granted = 0;  // delegations obtained
        uint64_t ops = 0;      // creates and unlinks answered here
        uint64_t batches = 0;  // DirOps sent
        uint64_t recalled = 0; // DirRecall served
        uint64_t lost = 0;     // queued operations the daemons refused or never got
    };
    Stats stats() const;

private:
    struct Entry {
        uint64_t ino = 0;
        uint8_t type = 0;
        std::optional<proto::Attr> attr; // made here, and not asked about since (before_request)
    };
    struct Dir {
        proto::Cred cred; // the holder's: of its new files and of every DirOps
        uint64_t token = 0;
        transport::Endpoint granted_on;
        proto::Attr attr;
        uint32_t chunk_size = 0, stripe_count = 0, replicas = 0; // of new files
        std::chrono::milliseconds lease{0};
        Clock::time_point use_until; // new operations are taken until then (half a lease)
        std::unordered_map<std::string, Entry> entries;
        uint64_t ino_next = 0, ino_end = 0;
        bool want_inos = false;
        std::vector<proto::DirOp> queued;
        std::vector<uint64_t> seqs;  // each queued operation's number (barrier)
        uint64_t sending_first = 0;  // the first number of the batch on its way (0: none)
        std::vector<uint64_t> sending_moved; // the inodes its unlinks and renames name (attr_of)
        Clock::time_point queued_since;
        bool recalled = false;                      // no new operations; release when the queue is sent
        bool voluntary = false;                     // recalled by before_request: no cooldown
        bool recalled_at_grant = false;             // the recall came before the grant was kept (forget_locked)
        uint64_t answered = 0;                      // operations answered under it
        std::vector<transport::ServerCall> recalls; // answered once released
    };
    struct Interest {
        int count = 0;
        Clock::time_point since;
        Clock::time_point not_before; // cooldown
        std::chrono::milliseconds backoff{0}; // after delegations that answered little
        bool asking = false;
        uint64_t asking_token = 0;
    };

    // A DirRecall: released once what is queued was sent.
    void recalled(transport::ServerCall call, uint64_t dir, uint64_t token);
    // The number of the oldest operation not applied yet (UINT64_MAX: none).
    uint64_t oldest_locked() const;
    // barrier with mu_ held (released while it waits).
    void barrier_locked(std::unique_lock<std::mutex>& lock);
    // The delegated directory, usable for new operations (caller holds mu_), or null.
    Dir* usable_locked(uint64_t dir);
    // Counts an operation in dir and asks for the delegation when they are many; true if it
    // is delegated now. Takes and gives back the lock.
    bool want(std::unique_lock<std::mutex>& lock, const proto::Cred& cred, uint64_t dir);
    Status ask(const proto::Cred& cred, uint64_t dir);
    // usable_locked, for operations of `cred` (null for another's).
    Dir* usable_by_locked(const proto::Cred& cred, uint64_t dir);
    // The directory delegated here for an operation of cred: held (null if for another
    // user's), or asked for now if wanted (want). Null: the daemon's to answer.
    Dir* held_for_locked(std::unique_lock<std::mutex>& lock, const proto::Cred& cred, uint64_t dir);
    // Waits while dir's queue is full; dir may go meanwhile, or be another user's (then null).
    Dir* room_locked(std::unique_lock<std::mutex>& lock, const proto::Cred& cred, uint64_t dir);
    void queue_locked(Dir& d, proto::DirOp op);
    // Attributes of an existing entry, from the daemon (the queue first if it changes them).
    // d is the directory holding it; lock held on entry, released on return.
    Result<proto::Attr> attr_of(std::unique_lock<std::mutex>& lock, const Dir& d, uint64_t ino);
    void flusher();
    // Sends up to kMaxDirOps of d's queue (all of it and release when `release`); lock held
    // on entry and exit, released while sending.
    void send_locked(std::unique_lock<std::mutex>& lock, uint64_t dir, bool release);
    void forget_locked(uint64_t dir, bool cooldown);

    const FileIO* io_ = nullptr; // set by start
    const std::chrono::milliseconds flush_delay_;
    ReleaseFn release_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::unordered_map<uint64_t, Dir> dirs_;
    std::unordered_map<uint64_t, Interest> interest_;
    std::unordered_map<uint64_t, Status> failed_; // delegated creates that failed, by inode
    std::unordered_map<uint64_t, std::pair<uint64_t, std::string>> made_; // inode -> (dir, name) of entries with attr
    uint64_t queued_total_ = 0; // operations queued so far (their numbers)
    struct EarlyRecall {
        uint64_t dir = 0;
        uint64_t token = 0;
        transport::ServerCall call;
    };
    std::vector<EarlyRecall> early_recalls_; // recalls of a grant not kept yet (ask)
    bool flush_now_ = false;
    bool stopping_ = false;
    Stats stats_;
    uint64_t lost_reported_ = 0; // stats_.lost at the last sync
    std::thread flusher_; // last: started once everything above exists
};

} // namespace jobfs::client
