// daemon_protocol.h: the messages between clients and jobfsd, and between daemons.
//
// This header is the one place that lists them: every RPC is one JOBFS_RPC line with its
// request and response, next to the structs that carry its fields (wire.h explains the
// encoding). Opcodes are part of the protocol: append, never renumber. Bulk payloads (chunk
// data) travel beside the message, not inside it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rpc.h"

namespace jobfs::proto {

struct Empty {
    JOBFS_NO_FIELDS
};

// ---- chunks (server/chunk_service) ----------------------------------------------------------

struct ChunkRef {
    uint64_t ino = 0;
    uint64_t index = 0;
    JOBFS_FIELDS(ino, index)
};

// Request bulk: `length` bytes to write at `offset` within the chunk.
// Replication (docs/replication.md): `chain` lists the chunk's serving daemons, head first; a
// daemon stores the bytes and passes the request to its successor, and answers once the rest
// of the chain has (the tail has stored it). Empty or one entry: no replication, no hop.
// `crcs` are the writer's CRC32C of the payload cut at the chunk's 64 KiB blocks
// (ucx-transport/block_crc.h): every replica checks them before storing (empty: not sent).
// `version` is 0 from the client; the head numbers the chunk's writes (CRAQ) and passes on.
// `table_version` is the chain table the sender used: a daemon that knows a newer one answers
// Code::again, and the sender refreshes its table and retries.
// `arena` (not 0): a client on the daemon's node put the bytes at `arena_offset` of the write
// arena it mapped into this daemon with that token (server/write_arenas.h), and sends no bulk;
// a daemon that does not know the token answers Code::not_found. Never passed down a chain.
struct ChunkWriteRequest {
    ChunkRef chunk;
    uint64_t offset = 0;
    uint64_t length = 0;
    std::vector<uint32_t> chain;
    std::vector<uint32_t> crcs;
    uint64_t version = 0;
    uint64_t table_version = 0;
    uint64_t arena = 0;
    uint64_t arena_offset = 0;
    JOBFS_FIELDS(chunk, offset, length, chain, crcs, version, table_version, arena, arena_offset)
};

// Reply bulk: the bytes read; `length` says how many the chunk holds there (short at its end).
// `chain` as for writes (the daemon needs the tail, and the other copies for a repair).
// The reply carries the CRC32C of the bytes returned, cut as a write's; `dirty`: this replica
// holds a write the tail has not committed yet, ask the tail instead (CRAQ).
// (Readers on the daemon's node read large ranges from the chunk files themselves, asking the
// daemon over its Unix socket instead: ucx-transport/local_read_socket.h.)
struct ChunkReadRequest {
    ChunkRef chunk;
    uint64_t offset = 0;
    uint64_t length = 0;
    std::vector<uint32_t> chain;
    uint64_t table_version = 0;
    JOBFS_FIELDS(chunk, offset, length, chain, table_version)
};
struct ChunkReadResponse {
    uint64_t length = 0;
    std::vector<uint32_t> crcs;
    bool dirty = false;
    JOBFS_FIELDS(length, crcs, dirty)
};

// Scrub (jobfs scrub): the daemon reads its whole copy of the chunk and checks every block. A
// corrupt copy is repaired from another member of `chain`; `repair_from` (a rank; kNoRank:
// none) makes it replace its copy with that daemon's even when its own checks out (the scrub
// found the replicas differ: a write this daemon missed). The answer describes the copy
// after any repair: its length and the CRC32C of all its bytes, to compare replicas.
constexpr uint32_t kNoRank = 0xffffffffu;
struct ChunkScrubRequest {
    ChunkRef chunk;
    std::vector<uint32_t> chain;
    uint32_t repair_from = kNoRank;
    JOBFS_FIELDS(chunk, chain, repair_from)
};
struct ChunkScrubResponse {
    uint64_t length = 0;
    uint32_t crc = 0;
    bool corrupt = false;  // the copy failed its checks
    bool repaired = false; // and was replaced (or replaced on request)
    JOBFS_FIELDS(length, crc, corrupt, repaired)
};

// Resync (server/resync): a restarted daemon copies the chunks it missed. ResyncShard asks a
// daemon to walk the files of its metadata shard and, for every chunk whose chain includes
// `target`, to send `target` a ChunkResync naming a serving copy (`source`); the target
// replaces its copy with the source's once the source holds every write the target has seen.
struct ChunkResyncRequest {
    ChunkRef chunk;
    uint32_t source = 0;
    JOBFS_FIELDS(chunk, source)
};
struct ResyncShardRequest {
    uint32_t target = 0;
    JOBFS_FIELDS(target)
};
struct ResyncResponse {
    uint64_t chunks = 0;
    uint64_t bytes = 0;
    uint64_t removed_files = 0; // deleted files whose chunks the target still held (ResyncShard)
    JOBFS_FIELDS(chunks, bytes, removed_files)
};

// Resync: every file a daemon holds chunks of, with one past the highest chunk it holds
// (inos[i], chunks[i]); a walker goes by these too, since an open file's size is not settled.
struct ChunkExtentsResponse {
    std::vector<uint64_t> inos;
    std::vector<uint64_t> chunks;
    JOBFS_FIELDS(inos, chunks)
};

// Between daemons: the newest version of a chunk whose write the tail has stored.
struct ChunkVersionResponse {
    uint64_t committed = 0;
    uint64_t pending = 0; // the highest version begun (committed unless writes are in flight)
    JOBFS_FIELDS(committed, pending)
};

struct ChunkTruncateRequest {
    ChunkRef chunk;
    uint64_t length = 0;
    JOBFS_FIELDS(chunk, length)
};

struct FileChunksRequest {
    uint64_t ino = 0;
    JOBFS_FIELDS(ino)
};

struct SpaceResponse {
    uint64_t total_bytes = 0;
    uint64_t free_bytes = 0;
    uint64_t chunk_files = 0;
    JOBFS_FIELDS(total_bytes, free_bytes, chunk_files)
};

// What a daemon costs its node (server/daemon_stats): resident memory, CPU time used since
// it started, threads, and how long it has run.
struct DaemonStatsResponse {
    uint64_t rss_bytes = 0;
    uint64_t cpu_user_us = 0;
    uint64_t cpu_system_us = 0;
    uint32_t threads = 0;
    uint64_t uptime_ms = 0;
    // This node's clients bypassing the transport: reads of a chunk file this daemon let them
    // make themselves (local socket), bytes written that came from their write arenas.
    uint64_t local_reads = 0;
    uint64_t arena_write_bytes = 0;
    // Heartbeats this daemon sent to its peers (fewer per second at rest: server/membership.h).
    uint64_t heartbeats_sent = 0;
    // Bytes this daemon forwarded down chains through shared memory to daemons of its node
    // (server/same_node_peers.h), and the shared-memory connections it made for that.
    uint64_t shm_forward_bytes = 0;
    uint64_t shm_connections = 0;
    // Attribute leases (server/attr_leases.h): inodes leased to clients now, leases granted,
    // LeaseRecall calls sent, and holders that did not answer one (waited out).
    uint64_t leases_held = 0;
    uint64_t leases_granted = 0;
    uint64_t lease_recalls = 0;
    uint64_t lease_recall_failures = 0;
    // Directory delegations (server/dir_delegations.h): known now, granted, DirRecall calls
    // sent, holders that did not answer one (waited out).
    uint64_t delegations_held = 0;
    uint64_t delegations_granted = 0;
    uint64_t delegation_recalls = 0;
    uint64_t delegation_recall_failures = 0;
    // Connections this daemon accepted since it started: its peers' and every client's (one per
    // client process, for as long as that process stays connected).
    uint64_t connections_accepted = 0;
    // flock and fcntl locks held now on the files of the metadata shards it serves.
    uint64_t locks_held = 0;
    JOBFS_FIELDS(rss_bytes, cpu_user_us, cpu_system_us, threads, uptime_ms, local_reads, arena_write_bytes,
                 heartbeats_sent, shm_forward_bytes, shm_connections, leases_held, leases_granted, lease_recalls,
                 lease_recall_failures, delegations_held, delegations_granted, delegation_recalls,
                 delegation_recall_failures, connections_accepted, locks_held)
};

// A daemon's UCX worker address, for a daemon of its node to connect to it by address, which
// gets shared memory (server/same_node_peers.h).
struct WorkerAddressResponse {
    std::vector<uint8_t> address;
    JOBFS_FIELDS(address)
};

JOBFS_RPC(ChunkWrite, 32, ChunkWriteRequest, Empty);
JOBFS_RPC(ChunkRead, 33, ChunkReadRequest, ChunkReadResponse);
JOBFS_RPC(ChunkTruncate, 34, ChunkTruncateRequest, Empty);
JOBFS_RPC(ChunkSync, 35, ChunkRef, Empty);
JOBFS_RPC(FileRemoveChunks, 36, FileChunksRequest, Empty);
JOBFS_RPC(FileSync, 46, FileChunksRequest, Empty); // every chunk of the file held by this daemon
JOBFS_RPC(WorkerAddress, 47, Empty, WorkerAddressResponse);
JOBFS_RPC(DiskSpace, 37, Empty, SpaceResponse);
JOBFS_RPC(DaemonStats, 38, Empty, DaemonStatsResponse);
JOBFS_RPC(ChunkVersion, 39, ChunkRef, ChunkVersionResponse);
JOBFS_RPC(ChunkScrub, 43, ChunkScrubRequest, ChunkScrubResponse);
JOBFS_RPC(ChunkResync, 44, ChunkResyncRequest, ResyncResponse);
JOBFS_RPC(ResyncShard, 45, ResyncShardRequest, ResyncResponse);
JOBFS_RPC(ChunkExtents, 94, Empty, ChunkExtentsResponse);

// ---- membership (server/membership): heartbeats and the chain table ------------------------
// The chain table says which daemons serve chunks. A chunk's chain is the placement of
// client/layout.h with the daemons that are not serving left out; `version` grows with every
// change, published by the manager (the lowest-ranked daemon alive). Between two tables of one
// version (two managers during a partition) the one of the lower manager wins.
enum : uint8_t { kDaemonServing = 0, kDaemonSyncing = 1, kDaemonOffline = 2 };

struct ChainTable {
    uint64_t version = 0;          // 0: no table (every daemon serves)
    uint32_t manager = 0;          // the daemon that published it
    std::vector<uint8_t> states;   // by rank: kDaemon*
    std::vector<uint64_t> sync_done;  // by rank: bytes resynced so far (state syncing)
    std::vector<uint64_t> sync_total; // by rank: bytes to resync
    uint32_t meta_replicas = 1;       // copies of each metadata shard (its meta chain's length)
    JOBFS_FIELDS(version, manager, states, sync_done, sync_total, meta_replicas)
};

// The daemons holding metadata shard `shard` (docs/replication.md, "Metadata shards"): its own
// rank, then the next ones, min(replicas, n) in all.
inline std::vector<uint32_t> meta_chain(uint32_t shard, uint32_t n, uint32_t replicas) {
    std::vector<uint32_t> c;
    for (uint32_t k = 0; k < std::min(std::max(replicas, 1u), n); ++k) c.push_back((shard + k) % n);
    return c;
}

struct HeartbeatRequest {
    uint32_t rank = 0;
    uint64_t table_version = 0;
    JOBFS_FIELDS(rank, table_version)
};
struct HeartbeatResponse {
    uint64_t table_version = 0;
    JOBFS_FIELDS(table_version)
};

// The daemon that serves metadata shard `shard` under t: the first serving member of its meta
// chain; -1 when none serves. Without a table (version 0) every daemon serves its own shard.
inline int64_t meta_primary(uint32_t shard, const ChainTable& t) {
    // Unreplicated: the shard's daemon serves it in any state (syncing: its chunks, not its
    // metadata, are behind).
    if (t.version == 0 || t.states.empty() || t.meta_replicas <= 1) return shard;
    for (uint32_t r : meta_chain(shard, static_cast<uint32_t>(t.states.size()), t.meta_replicas))
        if (t.states[r] == kDaemonServing) return r;
    return -1;
}

// True if a is newer than b: a higher version, or the same version from a lower-ranked manager.
inline bool newer_table(const ChainTable& a, const ChainTable& b) {
    return a.version > b.version || (a.version == b.version && a.version != 0 && a.manager < b.manager);
}

JOBFS_RPC(Heartbeat, 40, HeartbeatRequest, HeartbeatResponse);
JOBFS_RPC(ChainTableGet, 41, Empty, ChainTable);
JOBFS_RPC(ChainTablePublish, 42, ChainTable, Empty);

// ---- namespace (server/meta_service) ------------------------------------------------------
// A request goes to the daemon whose shard holds the inode it names first: shard_of(ino) for
// requests about an inode, shard_of(parent) for requests about a name in a directory, the old
// parent's shard for a rename, the new parent's for a link. (shard_of: ino >> 48.)

struct Cred {
    uint32_t uid = 65534;
    uint32_t gid = 65534;
    std::vector<uint32_t> groups;
    JOBFS_FIELDS(uid, gid, groups)
};

struct Attr {
    uint64_t ino = 0;
    uint8_t type = 0; // 1 regular, 2 directory, 3 symlink
    uint32_t mode = 0;
    uint32_t uid = 0;
    uint32_t gid = 0;
    uint64_t size = 0;
    uint32_t nlink = 0;
    int64_t atime_ns = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
    uint64_t rdev = 0;
    std::string target;
    uint32_t chunk_size = 0;
    uint32_t stripe_count = 0;
    uint64_t generation = 0;
    uint32_t replicas = 0; // copies of each chunk (file: 1-3; directory: default for new files, 0 none)
    JOBFS_FIELDS(ino, type, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns, rdev, target, chunk_size,
                 stripe_count, generation, replicas)
};

struct LeasedAttr {
    Attr attr;
    uint32_t lease_ms = 0;
    JOBFS_FIELDS(attr, lease_ms)
};

// A directory entry (parent, name) as one map key, for the daemon's leases and the client's
// attribute cache alike (a lease is granted and recalled by entry as well as by inode).
inline std::string entry_key(uint64_t parent, const std::string& name) {
    std::string k(sizeof parent, '\0');
    for (size_t i = 0; i < sizeof parent; ++i) k[i] = static_cast<char>(parent >> (8 * i));
    return k + name;
}

struct LeaseRecallRequest {
    std::vector<uint64_t> inos; // forget what you keep of these inodes, then answer
    JOBFS_FIELDS(inos)
};

struct InoRequest {
    uint64_t ino = 0;
    JOBFS_FIELDS(ino)
};

struct NameRequest {
    Cred cred;
    uint64_t parent = 0;
    std::string name;
    JOBFS_FIELDS(cred, parent, name)
};

struct XattrPair {
    std::string name;
    std::string value;
    JOBFS_FIELDS(name, value)
};
// `size` and `xattrs` are set on a file this call creates, in the same transaction (an
// exclusive create only: jobfs stage-in makes each file with its final size and ETag, so no
// ftruncate, setxattr or size settle follows). A bad attribute fails the create.
struct CreateRequest {
    Cred cred;
    uint64_t parent = 0;
    std::string name;
    uint32_t mode = 0;
    bool exclusive = false;
    uint32_t chunk_size = 0;   // 0: the directory's default
    uint32_t stripe_count = 0; // 0: the directory's default
    uint32_t replicas = 0;     // 0: the directory's default
    uint64_t size = 0;
    std::vector<XattrPair> xattrs;
    JOBFS_FIELDS(cred, parent, name, mode, exclusive, chunk_size, stripe_count, replicas, size, xattrs)
};

struct MkdirRequest {
    Cred cred;
    uint64_t parent = 0;
    std::string name;
    uint32_t mode = 0;
    JOBFS_FIELDS(cred, parent, name, mode)
};

struct SymlinkRequest {
    Cred cred;
    uint64_t parent = 0;
    std::string name;
    std::string target;
    JOBFS_FIELDS(cred, parent, name, target)
};

struct LinkTarget {
    std::string target;
    JOBFS_FIELDS(target)
};

struct LinkRequest {
    Cred cred;
    uint64_t ino = 0;
    uint64_t new_parent = 0;
    std::string name;
    JOBFS_FIELDS(cred, ino, new_parent, name)
};

// The inode a name pointed at, after the unlink; last_link: its data must go.
struct UnlinkResponse {
    Attr attr;
    bool last_link = false;
    JOBFS_FIELDS(attr, last_link)
};

struct RenameRequest {
    Cred cred;
    uint64_t old_parent = 0;
    std::string old_name;
    uint64_t new_parent = 0;
    std::string new_name;
    uint32_t flags = 0; // RENAME_NOREPLACE 1, RENAME_EXCHANGE 2
    JOBFS_FIELDS(cred, old_parent, old_name, new_parent, new_name, flags)
};
struct RenameResponse {
    std::optional<UnlinkResponse> replaced;
    JOBFS_FIELDS(replaced)
};

// Renames inside one directory, each as Rename would make it alone, in order, in one request
// (stage-in puts the files it wrote under temporary names in place by the batch). Each entry
// gets its own outcome; one that fails does not stop the others.
constexpr uint32_t kMaxRenamesInDir = 256;
struct RenameInDirEntry {
    std::string old_name;
    std::string new_name;
    JOBFS_FIELDS(old_name, new_name)
};
struct RenameInDirRequest {
    Cred cred;
    uint64_t parent = 0;
    uint32_t flags = 0; // as RenameRequest's, for every entry
    std::vector<RenameInDirEntry> entries;
    JOBFS_FIELDS(cred, parent, flags, entries)
};
struct RenameOutcome {
    int32_t code = 0;    // a Code; 0: renamed
    std::string message; // why not
    std::optional<UnlinkResponse> replaced;
    JOBFS_FIELDS(code, message, replaced)
};
struct RenameInDirResponse {
    std::vector<RenameOutcome> outcomes; // one per entry, in order
    JOBFS_FIELDS(outcomes)
};

struct ReaddirRequest {
    Cred cred;
    uint64_t ino = 0;
    std::string after; // entries strictly after this name ("" = from the start)
    uint32_t max_entries = 0;
    JOBFS_FIELDS(cred, ino, after, max_entries)
};
struct DirEntry {
    std::string name;
    uint64_t ino = 0;
    uint8_t type = 0;
    JOBFS_FIELDS(name, ino, type)
};
struct ReaddirResponse {
    std::vector<DirEntry> entries;
    bool more = false;
    JOBFS_FIELDS(entries, more)
};

struct SetattrRequest {
    Cred cred;
    uint64_t ino = 0;
    std::optional<uint32_t> mode;
    std::optional<uint32_t> uid;
    std::optional<uint32_t> gid;
    std::optional<uint64_t> size;
    std::optional<int64_t> atime_ns;
    std::optional<int64_t> mtime_ns;
    bool atime_now = false;
    bool mtime_now = false;
    JOBFS_FIELDS(cred, ino, mode, uid, gid, size, atime_ns, mtime_ns, atime_now, mtime_now)
};

struct ExtendSizeRequest {
    uint64_t ino = 0;
    uint64_t size = 0;
    JOBFS_FIELDS(ino, size)
};

// The place of an O_APPEND write: the file's end, at least `at_least` (what the writer's node
// wrote and has not settled yet), which the size then covers `length` further at once, so
// that appends of every node and process get places of their own (jobfs-fuse). Answered with
// the attributes after: the write goes at size - length. Drops setuid/setgid and file
// capabilities, which the kernel leaves to the file system for these writes.
struct AppendRequest {
    uint64_t ino = 0;
    uint64_t at_least = 0;
    uint64_t length = 0;
    uint64_t token = 0; // the requester's id of this reservation: the same place when asked again
    JOBFS_FIELDS(ino, at_least, length, token)
};

struct LayoutRequest {
    Cred cred;
    uint64_t ino = 0;
    uint32_t chunk_size = 0;
    uint32_t stripe_count = 0;
    uint32_t replicas = 0;
    JOBFS_FIELDS(cred, ino, chunk_size, stripe_count, replicas)
};

struct XattrRequest {
    Cred cred;
    uint64_t ino = 0;
    std::string name;
    std::string value;
    int32_t flags = 0; // XATTR_CREATE 1, XATTR_REPLACE 2
    JOBFS_FIELDS(cred, ino, name, value, flags)
};
struct XattrValue {
    std::string value;
    JOBFS_FIELDS(value)
};
struct XattrList {
    std::vector<std::string> names;
    JOBFS_FIELDS(names)
};

struct CountsResponse {
    uint64_t inodes = 0;
    uint64_t dentries = 0;
    JOBFS_FIELDS(inodes, dentries)
};

// Between daemons: the steps of operations that span two shards (docs/design.md). intent is
// the coordinator's intent id; a step is applied at most once per intent. done_below: every
// intent of the coordinator's shard below this id is finished (0: not said), so the step
// records of those may go (MetaShard::note_intents_done).
struct CreateInodeRequest {
    Attr tmpl;           // type, mode, uid, gid, nlink, target and layout of the new inode
    uint64_t parent = 0; // a directory's parent directory
    uint64_t intent = 0; // 0: not part of an intent
    uint32_t shard = 0;  // the shard to create it on
    uint64_t done_below = 0;
    JOBFS_FIELDS(tmpl, parent, intent, shard, done_below)
};
struct RenameInsertRequest {
    uint64_t intent = 0;
    uint64_t parent = 0;
    std::string name;
    uint64_t ino = 0;
    uint8_t type = 0;
    uint64_t expect_ino = 0; // the inode the entry named when the coordinator looked (0: none)
    uint64_t done_below = 0;
    JOBFS_FIELDS(intent, parent, name, ino, type, expect_ino, done_below)
};
struct RenameInsertResponse {
    uint64_t replaced_ino = 0; // the replaced inode, when it lives elsewhere and is still linked
    uint8_t replaced_type = 0;
    std::optional<UnlinkResponse> replaced_here;
    JOBFS_FIELDS(replaced_ino, replaced_type, replaced_here)
};
struct NlinkRequest {
    uint64_t intent = 0;
    uint32_t step = 0;
    uint64_t ino = 0;
    int32_t delta = 0;
    uint64_t done_below = 0;
    JOBFS_FIELDS(intent, step, ino, delta, done_below)
};
struct StepRequest {
    uint64_t intent = 0;
    uint32_t step = 0;
    uint32_t shard = 0; // the shard the step is on
    uint64_t done_below = 0;
    JOBFS_FIELDS(intent, step, shard, done_below)
};
struct StepResult {
    bool ran = false;   // the step had run before it was aborted
    int64_t result = 0; // what it recorded (create_inode: the inode)
    JOBFS_FIELDS(ran, result)
};
struct SetParentRequest {
    uint64_t ino = 0;
    uint64_t parent = 0;
    JOBFS_FIELDS(ino, parent)
};
struct ParentResponse {
    uint64_t parent = 0;
    JOBFS_FIELDS(parent)
};

// Metadata shard replication (docs/replication.md, "Metadata shards"): a primary ships each
// transaction's changeset to the other members of the shard's meta chain before it commits.
struct MetaApplyRequest {
    uint32_t shard = 0;
    uint64_t table_version = 0; // the primary's: a replica with another table refuses (again)
    uint64_t prev_term = 0, prev_seq = 0;
    uint64_t term = 0, seq = 0;
    std::vector<uint8_t> changeset;
    JOBFS_FIELDS(shard, table_version, prev_term, prev_seq, term, seq, changeset)
};
// A whole shard for a replica that is not in step; the database image is the request's bulk.
struct MetaInstallRequest {
    uint32_t shard = 0;
    uint64_t term = 0, seq = 0;
    JOBFS_FIELDS(shard, term, seq)
};
struct MetaShardRequest {
    uint32_t shard = 0;
    uint32_t member = 0; // MetaCatchUp: the daemon whose copy is to be brought in step
    JOBFS_FIELDS(shard, member)
};
struct MetaPositionResponse {
    uint64_t term = 0, seq = 0;
    JOBFS_FIELDS(term, seq)
};

// The file system's rename lock, held by daemon 0 (server/rename_lock.h).
struct RenameLockRequest {
    uint64_t token = 0; // the holder's: daemon rank << 48 | a counter
    JOBFS_FIELDS(token)
};

// Directory delegations (server/dir_delegations.h, client/dir_delegation.h). A client making
// or removing many files in one directory asks for it (DelegateDir) and gets its every entry:
// while it holds the delegation, nothing else reads or changes the directory's entries, or
// removes or chmods the directory, before the daemon recalled it (DirRecall, daemon to client
// on the connection it was granted on). So the client answers creates and unlinks there
// itself (exists, not_found) and sends them in batches (DirOps), as CephFS's asynchronous
// directory operations do; new files take inode numbers reserved for it.
constexpr uint32_t kMaxDelegatedEntries = 65536; // a larger directory is not delegated (too_large)
constexpr uint32_t kMaxDirOps = 4096;            // operations per DirOps
constexpr uint32_t kDelegatedInos = 4096;        // inode numbers reserved per grant or refill

struct DelegateRequest {
    Cred cred;      // needs write and search permission on dir (sticky: its owner or root)
    uint64_t dir = 0;
    uint64_t token = 0; // the holder's name for this delegation (random, not 0)
    JOBFS_FIELDS(cred, dir, token)
};
struct DelegateResponse {
    Attr dir;
    std::vector<DirEntry> entries; // every entry of dir
    uint64_t ino_first = 0;        // inode numbers [ino_first, ino_first + ino_count) are the holder's
    uint32_t ino_count = 0;
    uint32_t chunk_size = 0;       // the layout of files made in dir
    uint32_t stripe_count = 0;
    uint32_t replicas = 0;
    uint32_t lease_ms = 0;         // the delegation ends this long after the last DirOps (or grant)
    JOBFS_FIELDS(dir, entries, ino_first, ino_count, chunk_size, stripe_count, replicas, lease_ms)
};
struct DirOp {
    uint8_t kind = 0;    // 1 create (exclusive), 2 unlink, 3 rename of a regular file within the directory
    std::string name;
    uint64_t ino = 0;    // create: the new file's number (from the holder's range); unlink, rename: the entry's
    uint32_t mode = 0;   // create
    int64_t time_ns = 0; // create: its times; rename: the file's ctime and the directory's times (as the holder told its caller)
    uint64_t size = 0;   // create: the size it is made with (CreateRequest::size)
    std::vector<XattrPair> xattrs; // create: the attributes it is made with
    std::string new_name; // rename: the new name (a regular file there is replaced)
    JOBFS_FIELDS(kind, name, ino, mode, time_ns, size, xattrs, new_name)
};
struct DirOpsRequest {
    Cred cred;
    uint64_t dir = 0;
    uint64_t token = 0;
    std::vector<DirOp> ops;  // applied in order, in one transaction
    bool release = false;    // the delegation ends with them
    bool more_inos = false;  // reserve another range of inode numbers
    JOBFS_FIELDS(cred, dir, token, ops, release, more_inos)
};
struct DirOpOutcome {
    int32_t code = 0;     // a Code; 0: done
    std::string message;
    Attr attr;            // the file made; for an unlink of a file's last link, the file (else only ino)
    bool last_link = false; // unlink: the inode went with it
    JOBFS_FIELDS(code, message, attr, last_link)
};
struct DirOpsResponse {
    std::vector<DirOpOutcome> outcomes; // one per op, in order
    uint64_t ino_first = 0;             // more_inos: the new range
    uint32_t ino_count = 0;
    JOBFS_FIELDS(outcomes, ino_first, ino_count)
};
struct DirRecallRequest {
    uint64_t dir = 0;
    uint64_t token = 0;
    JOBFS_FIELDS(dir, token)
};

// An flock(2) or fcntl(2) lock of file ino, to the daemon serving its shard (server/file_locks.h).
// `client` names the asking client (random, its own for as long as it runs), `owner` the
// lock's owner there (fcntl: a process; flock: an open file). Bytes [start, end], end
// UINT64_MAX: to the end of the file however long. type: kLockRead, kLockWrite, kLockUnlock.
constexpr uint8_t kLockRead = 0, kLockWrite = 1, kLockUnlock = 2;
struct FileLockRequest {
    uint64_t ino = 0;
    uint64_t client = 0;
    uint64_t owner = 0;
    uint32_t pid = 0;
    uint8_t flock = 0;
    uint8_t type = 0;
    uint8_t test = 0; // 1: change nothing, only tell what stands in the way (F_GETLK)
    uint64_t start = 0, end = 0;
    JOBFS_FIELDS(ino, client, owner, pid, flock, type, test, start, end)
};
// granted: taken (test: nothing in the way); else the lock in the way.
struct FileLockResponse {
    uint8_t granted = 0;
    uint8_t type = 0;
    uint32_t pid = 0;
    uint64_t start = 0, end = 0;
    JOBFS_FIELDS(granted, type, pid, start, end)
};

JOBFS_RPC(Getattr, 48, InoRequest, Attr);
JOBFS_RPC(Lookup, 49, NameRequest, Attr);
JOBFS_RPC(Create, 50, CreateRequest, Attr);
JOBFS_RPC(Mkdir, 51, MkdirRequest, Attr);
JOBFS_RPC(Symlink, 52, SymlinkRequest, Attr);
JOBFS_RPC(Readlink, 53, InoRequest, LinkTarget);
JOBFS_RPC(Link, 54, LinkRequest, Attr);
JOBFS_RPC(Unlink, 55, NameRequest, UnlinkResponse);
JOBFS_RPC(Rmdir, 56, NameRequest, Empty);
JOBFS_RPC(Rename, 57, RenameRequest, RenameResponse);
JOBFS_RPC(Readdir, 58, ReaddirRequest, ReaddirResponse);
JOBFS_RPC(Setattr, 59, SetattrRequest, Attr);
JOBFS_RPC(ExtendSize, 60, ExtendSizeRequest, Attr);
JOBFS_RPC(SetLayout, 61, LayoutRequest, Attr);
JOBFS_RPC(Setxattr, 62, XattrRequest, Empty);
JOBFS_RPC(Getxattr, 63, XattrRequest, XattrValue);
JOBFS_RPC(Listxattr, 64, XattrRequest, XattrList);
JOBFS_RPC(Removexattr, 65, XattrRequest, Empty);
JOBFS_RPC(MetaCounts, 66, Empty, CountsResponse);
JOBFS_RPC(RenameInDir, 67, RenameInDirRequest, RenameInDirResponse);
JOBFS_RPC(ReserveAppend, 68, AppendRequest, Attr);
// Lookup and Create with a lease on the answer for the caller (server/attr_leases.h): the
// caller may answer stat from it for lease_ms, counted from before it sent the request
// (0: no lease). The daemon recalls it (LeaseRecall, daemon to client, on the connection the
// lease was asked on) before anything about the inode changes.
JOBFS_RPC(LookupLeased, 69, NameRequest, LeasedAttr);
JOBFS_RPC(CreateLeased, 70, CreateRequest, LeasedAttr);
JOBFS_RPC(LeaseRecall, 71, LeaseRecallRequest, Empty);
// Client to daemon, as it disconnects: it holds no leases on this connection any more (a
// holder that just went would otherwise hold the next change of its files up until its
// leases end: its connection's failure may be a partition, which the daemon cannot tell).
JOBFS_RPC(LeaseRelease, 72, Empty, Empty);
JOBFS_RPC(DelegateDir, 73, DelegateRequest, DelegateResponse);
// Fails as a whole with `busy` when the delegation has ended (recalled and waited out): then
// none of the operations was made.
JOBFS_RPC(DirOps, 74, DirOpsRequest, DirOpsResponse);
// Daemon to client: send what you hold back for dir (DirOps with release), then answer.
JOBFS_RPC(DirRecall, 75, DirRecallRequest, Empty);
JOBFS_RPC(FileLockOp, 76, FileLockRequest, FileLockResponse);
JOBFS_RPC(PeerCreateInode, 80, CreateInodeRequest, Attr);
JOBFS_RPC(PeerDeleteInode, 81, InoRequest, Empty);
JOBFS_RPC(PeerLookupDentry, 82, NameRequest, DirEntry);
JOBFS_RPC(PeerRenameInsert, 83, RenameInsertRequest, RenameInsertResponse);
JOBFS_RPC(PeerAdjustNlink, 84, NlinkRequest, UnlinkResponse);
JOBFS_RPC(PeerAbortStep, 85, StepRequest, StepResult);
JOBFS_RPC(PeerSetParent, 86, SetParentRequest, Empty);
JOBFS_RPC(PeerParent, 87, InoRequest, ParentResponse);
JOBFS_RPC(RenameLockAcquire, 88, RenameLockRequest, Empty);
JOBFS_RPC(RenameLockRelease, 89, RenameLockRequest, Empty);
JOBFS_RPC(MetaApply, 90, MetaApplyRequest, Empty);
JOBFS_RPC(MetaInstall, 91, MetaInstallRequest, Empty);
JOBFS_RPC(MetaPosition, 92, MetaShardRequest, MetaPositionResponse);
// Asks a daemon keeping a shard to bring `member`'s copy in step with its own (it sends a
// snapshot if their positions differ); answered once it is.
JOBFS_RPC(MetaCatchUp, 93, MetaShardRequest, Empty);

inline uint32_t shard_of(uint64_t ino) { return static_cast<uint32_t>(ino >> 48); }

} // namespace jobfs::proto
