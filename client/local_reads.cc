// local_reads.cc: see local_reads.h.
#include "client/local_reads.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>

#include "block_crc.h"
#include "local_read_socket.h"
#include "log.h"

namespace jobfs::client {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kNoDaemon = ~0u; // ask: a request not to send
constexpr auto kRetryAfter = std::chrono::seconds(5);
constexpr auto kConnectTimeout = std::chrono::milliseconds(1000);
constexpr uint64_t kBlock = transport::kCrcBlock;
// Whole blocks are read in runs of this many and checked right after, while they are still
// in the CPU's cache.
constexpr uint64_t kRunBlocks = 8;
// A mapped block is checked and copied in pieces of this size, each read from the page cache
// once: checked while it is in the CPU's first-level cache, then copied from there.
constexpr uint64_t kMappedPiece = 4096;

bool pread_all(int fd, uint8_t* p, size_t n, uint64_t off) {
    size_t done = 0;
    while (done < n) {
        const ssize_t r = ::pread(fd, p + done, n - done, static_cast<off_t>(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        done += static_cast<size_t>(r);
    }
    return true;
}

// Reads what it can of [at, at + n) of fd into p with direct I/O (O_DIRECT set on fd for the
// read alone: the descriptor is this reader's, the daemon opens one per request): the bytes
// from at up to the last whole unit of the file system's alignment, if p and at are aligned
// as it asks (statx STATX_DIOALIGN). Returns how many bytes it read (0: none; the caller reads
// the rest with pread).
uint64_t pread_direct(int fd, uint8_t* p, uint64_t n, uint64_t at) {
    struct statx sx {};
    if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) != 0 || !(sx.stx_mask & STATX_DIOALIGN)) return 0;
    const uint64_t mem = sx.stx_dio_mem_align, unit = sx.stx_dio_offset_align;
    if (mem == 0 || unit == 0 || reinterpret_cast<uintptr_t>(p) % mem != 0 || at % unit != 0) return 0;
    const uint64_t len = n / unit * unit;
    const int flags = ::fcntl(fd, F_GETFL);
    if (len == 0 || flags < 0 || ::fcntl(fd, F_SETFL, flags | O_DIRECT) != 0) return 0;
    // A short count can only be the file's end (a shortened chunk file): stop there, the
    // caller's pread of the rest tells.
    uint64_t done = 0;
    while (done < len) {
        const ssize_t r = ::pread(fd, p + done, len - done, static_cast<off_t>(at + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        done += static_cast<size_t>(r);
        if (done % unit != 0) break; // at the file's end: what was read stands, the rest is not aligned
    }
    (void)::fcntl(fd, F_SETFL, flags);
    return done;
}

} // namespace

// One connection to a daemon's socket: a request and its reply go under mu.
struct LocalReads::Conn {
    std::mutex mu; // guards the rest
    int sock = -1;
    Clock::time_point next_try{};
    uint64_t token = 0; // the write arena's, on this connection (0: not handed over); conns[0] only
    bool refused = false; // the daemon refused the arena: not asked again
};

struct LocalReads::Daemon {
    std::array<Conn, kConnections> conns; // conns[0] carries the write arena and says whether the daemon is here
    std::atomic<uint32_t> turn{0};        // which connection the next caller that finds all busy waits for
    std::mutex stamps_mu;                 // guards the two below
    std::shared_ptr<const ChunkStampsView> stamps;
    Clock::time_point stamps_next_try{};
};

LocalReads::LocalReads(std::string secret, uint32_t daemons, uint64_t arena_bytes, CachedReads cached_reads,
                       ColdReads cold_reads, KeepChunks keep_chunks)
    : secret_(std::move(secret)), cached_reads_(cached_reads), cold_reads_(cold_reads), keep_chunks_(keep_chunks),
      kept_(keep_chunks != KeepChunks::off ? std::make_unique<KeptChunks>() : nullptr) {
    for (uint32_t r = 0; r < daemons; ++r) daemons_.push_back(std::make_unique<Daemon>());
    if (arena_bytes) {
        auto a = WriteArena::create(arena_bytes);
        if (a.ok()) arena_ = std::move(*a);
        else JOBFS_INFO("local writes are off: %s", a.status().message().c_str());
    }
}

LocalReads::~LocalReads() {
    for (auto& d : daemons_)
        for (Conn& c : d->conns)
            if (c.sock >= 0) ::close(c.sock);
}

uint64_t LocalReads::reads() const { return reads_.load(std::memory_order_relaxed); }

bool LocalReads::connect(uint32_t rank, Conn& c) {
    if (c.sock >= 0) return true;
    if (Clock::now() < c.next_try) return false;
    auto s = transport::local_read_connect(transport::local_read_socket_name(secret_, rank), secret_, kConnectTimeout);
    if (!s.ok()) {
        // Not on this node (the usual case for most daemons of a job), or refused.
        if (s.status().code() != Code::not_found && &c == &daemons_[rank]->conns[0])
            JOBFS_INFO("local reads from daemon %u: %s", rank, s.status().message().c_str());
        c.next_try = Clock::now() + kRetryAfter;
        return false;
    }
    c.sock = *s;
    return true;
}

bool LocalReads::available(uint32_t rank) {
    if (rank >= daemons_.size()) return false;
    Conn& c = daemons_[rank]->conns[0];
    // In use by another reader: connected, and not to be waited for.
    std::unique_lock lock(c.mu, std::try_to_lock);
    if (!lock.owns_lock()) return true;
    return connect(rank, c);
}

std::unique_lock<std::mutex> LocalReads::take(uint32_t rank, Conn** out) {
    Daemon& d = *daemons_[rank];
    // The first free one: a process that reads with one thread at a time (an MPI rank) keeps
    // one connection, and others are made only while that one is busy.
    for (Conn& c : d.conns) {
        std::unique_lock lock(c.mu, std::try_to_lock);
        if (lock.owns_lock()) {
            *out = &c;
            return lock;
        }
    }
    // All busy: wait for one, the waiters spread over them.
    Conn& c = d.conns[d.turn.fetch_add(1, std::memory_order_relaxed) % kConnections];
    *out = &c;
    return std::unique_lock(c.mu);
}

namespace {

// A call on the connection failed with `why`. The daemon went away (it may be back already,
// restarted) or the connection is out of step: the next call connects afresh. It did not answer
// in time (stopped, or swamped): not asked again for a while, so readers do not wait on it.
void drop(int& sock, Clock::time_point& next_try, uint64_t& token, const Status& why) {
    ::close(sock);
    sock = -1;
    token = 0;
    next_try = Clock::now() + (why.code() == Code::again ? kRetryAfter : Clock::duration::zero());
}

} // namespace

Result<transport::LocalReply> LocalReads::call(uint32_t rank, const transport::LocalRequest& req) {
    if (rank >= daemons_.size()) return Status(Code::invalid, "no daemon " + std::to_string(rank));
    Conn* c = nullptr;
    const auto lock = take(rank, &c);
    if (!connect(rank, *c)) return Status(Code::peer_gone, "no local-read connection to daemon " + std::to_string(rank));
    auto r = transport::local_read_call(c->sock, req);
    if (!r.ok()) drop(c->sock, c->next_try, c->token, r.status());
    return r;
}

uint64_t LocalReads::arena_token(uint32_t rank) {
    if (!arena_) return 0;
    // Twice: a connection broken since its last use (the daemon restarted) is made afresh.
    for (int attempt = 0; attempt < 2; ++attempt) {
        if (!available(rank)) return 0;
        Conn& d = daemons_[rank]->conns[0];
        std::lock_guard lock(d.mu);
        if (d.token || d.refused) return d.token;
        if (d.sock < 0) continue;
        transport::LocalRequest req;
        req.op = static_cast<uint32_t>(transport::LocalOp::map_arena);
        auto r = transport::local_read_call(d.sock, req, arena_->fd());
        if (!r.ok()) {
            drop(d.sock, d.next_try, d.token, r.status());
            continue;
        }
        if (r->header.error != 0 || r->header.token == 0) {
            JOBFS_INFO("local writes to daemon %u: %s", rank,
                       Status::from_errno(r->header.error ? r->header.error : EPROTO, "the daemon refused the write arena")
                           .message()
                           .c_str());
            d.refused = true;
            return 0;
        }
        d.token = r->header.token;
        return d.token;
    }
    return 0;
}

void LocalReads::forget_arena(uint32_t rank, uint64_t token) {
    if (rank >= daemons_.size()) return;
    Conn& d = daemons_[rank]->conns[0];
    std::lock_guard lock(d.mu);
    if (d.token == token) d.token = 0;
}

namespace {

Status daemon_error(int32_t error) {
    if (error == ENOENT) return Status(Code::not_found, "the daemon holds no such chunk");
    if (error == EAGAIN)
        return Status(Code::again, "the daemon serves the chunk over the transport now (a write in flight, or a newer chain table)");
    return Status::from_errno(error, "the daemon could not open the chunk");
}

} // namespace

Result<LocalReads::ChunkFile> LocalReads::open_chunk(uint32_t rank, uint64_t ino, uint64_t index) {
    transport::LocalRequest req;
    req.op = static_cast<uint32_t>(transport::LocalOp::open);
    req.ino = ino;
    req.index = index;
    auto r = call(rank, req);
    if (!r.ok()) return r.status();
    if (r->header.error != 0) return daemon_error(r->header.error);
    if (!r->fd) return Status(Code::protocol, "local-read reply without a descriptor");
    return ChunkFile{std::move(r->fd), r->header.data_offset};
}

namespace {

std::string describe(const LocalReads::Range& r) {
    return "local read of inode " + std::to_string(r.ino) + " chunk " + std::to_string(r.index) + " from daemon " +
           std::to_string(r.rank);
}

// Whether every page of [off, off + len) is in the page cache: cachestat(2) (Linux 6.5); on an
// older kernel, no way to tell cheaply (a RWF_NOWAIT read also fails on a cached page that
// marks a readahead point): nullopt.
std::optional<bool> in_page_cache(int fd, uint64_t off, uint64_t len) {
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
    struct {
        uint64_t off, len;
    } range{off, len};
    struct {
        uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
    } cs{};
    static std::atomic<bool> missing{false};
    if (missing.load(std::memory_order_relaxed)) return std::nullopt;
    if (::syscall(__NR_cachestat, fd, &range, &cs, 0) != 0) {
        if (errno == ENOSYS) missing = true;
        return std::nullopt;
    }
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    return cs.nr_cache >= (len + page - 1) / page;
}

// As in_page_cache; where the kernel cannot tell, no.
bool cached(int fd, uint64_t off, uint64_t len) { return in_page_cache(fd, off, len).value_or(false); }

// Whether every page of [off, off + len) of fd, mapped at `mapped`, is in the page cache:
// cachestat, which looks at each folio of the page cache once, where mincore looks up every
// 4 KiB page not mapped yet (8 % of a process's CPU reading 1 MiB of every other chunk once,
// cachestat 0.7 %, session 39); mincore where the kernel has no cachestat.
bool in_memory(int fd, uint64_t off, uint64_t len, const uint8_t* mapped) {
    if (const std::optional<bool> in = in_page_cache(fd, off, len)) return *in;
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const auto* aligned = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(mapped) / page * page);
    const size_t pages = static_cast<size_t>(mapped + len - aligned + page - 1) / page;
    unsigned char small[512];
    std::vector<unsigned char> large;
    unsigned char* vec = small;
    if (pages > sizeof small) {
        large.resize(pages);
        vec = large.data();
    }
    if (::mincore(const_cast<uint8_t*>(aligned), pages * page, vec) != 0) return false;
    for (size_t i = 0; i < pages; ++i)
        if (!(vec[i] & 1)) return false;
    return true;
}

transport::LocalRequest describe_request(const LocalReads::Range& range) {
    transport::LocalRequest req;
    req.op = static_cast<uint32_t>(transport::LocalOp::describe);
    req.ino = range.ino;
    req.index = range.index;
    req.offset = range.offset;
    req.length = range.length;
    req.table_version = range.table_version;
    // A chain too long to send is not sent (open refuses the range).
    req.chain_length = static_cast<uint32_t>(std::min<size_t>(range.chain.size(), transport::kLocalMaxChain));
    std::copy_n(range.chain.begin(), req.chain_length, req.chain);
    return req;
}

// Copies bytes [offset, offset + out.size()) of a chunk of `held` bytes, mapped at chunk
// (chunk[i]: byte i), into out, checking every block it touches, whole: crcs[i] is block
// first_block + i's, holes (ascending indexes into crcs) blocks never written, which must read
// zeros. Each block is checked and copied in 4 KiB pieces, copied while still in the CPU's
// first-level cache: the bytes leave memory once. Returns the first block that does not match
// (-1: none).
int64_t copy_checked(const uint8_t* chunk, uint64_t held, uint64_t offset, std::span<uint8_t> out,
                     std::span<const uint32_t> crcs, std::span<const uint32_t> holes, uint64_t first_block) {
    const uint64_t end = offset + out.size();
    const uint64_t b0 = offset / kBlock, b1 = (end - 1) / kBlock;
    const uint32_t* next_hole = std::lower_bound(holes.data(), holes.data() + holes.size(), static_cast<uint32_t>(b0 - first_block));
    const uint32_t* holes_end = holes.data() + holes.size();
    for (uint64_t b = b0; b <= b1; ++b) {
        const uint32_t i = static_cast<uint32_t>(b - first_block);
        while (next_hole < holes_end && *next_hole < i) ++next_hole;
        const bool hole = next_hole < holes_end && *next_hole == i;
        const uint64_t bs = b * kBlock, be = std::min<uint64_t>(bs + kBlock, held);
        uint32_t crc = 0;
        bool zeros = true;
        for (uint64_t q = bs; q < be; q += kMappedPiece) {
            const std::span<const uint8_t> piece(chunk + q, std::min<uint64_t>(kMappedPiece, be - q));
            if (hole) zeros = zeros && std::all_of(piece.begin(), piece.end(), [](uint8_t c) { return c == 0; });
            else crc = transport::crc32c(piece, crc);
            const uint64_t cs = std::max(q, offset), ce = std::min<uint64_t>(q + piece.size(), end);
            if (ce > cs) std::memcpy(out.data() + (cs - offset), chunk + cs, ce - cs);
        }
        if (hole ? !zeros : crc != crcs[i]) return static_cast<int64_t>(b);
    }
    return -1;
}

// Whether this process may keep a chunk whose file is st: cachestat and mincore tell whether
// a file's pages are in the page cache only to its owner (and root): cachestat refuses others,
// mincore says which pages this process maps, and a kept chunk would never be read.
bool ours(const struct stat& st) {
    const uid_t me = ::geteuid();
    return me == 0 || st.st_uid == me;
}

// A chunk to keep: r's, with its stamp, length, checksums and holes, and its file fd, of
// `size` bytes, mapped whole, the chunk's bytes from `data_offset` on, never touched past the
// chunk's end (the daemon does not shorten a chunk file in place: chunk_store.h). Only pages
// in the page cache are read through it (read_from asks cachestat or mincore first). Null:
// it could not be mapped.
std::shared_ptr<const KeptChunk> make_kept(const LocalReads::Range& r, uint64_t stamp, uint64_t held,
                                           std::vector<uint32_t> crcs, std::vector<uint32_t> holes,
                                           std::shared_ptr<const ChunkStampsView> stamps, transport::UniqueFd fd, uint64_t size,
                                           uint64_t data_offset) {
    void* m = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, fd.get(), 0);
    if (m == MAP_FAILED) return nullptr;
    // A page that went from the page cache meanwhile is read alone, not the disk around it.
    (void)::madvise(m, static_cast<size_t>(size), MADV_RANDOM);
    auto c = std::make_shared<KeptChunk>();
    c->map = m;
    c->map_len = static_cast<size_t>(size);
    c->bytes = static_cast<const uint8_t*>(m) + data_offset;
    c->file = std::move(fd);
    c->data_offset = data_offset;
    c->rank = r.rank;
    c->ino = r.ino;
    c->index = r.index;
    c->stamp = stamp;
    c->held = held;
    c->crcs = std::move(crcs);
    c->holes = std::move(holes);
    c->stamps = std::move(stamps);
    return c;
}

} // namespace

std::shared_ptr<const ChunkStampsView> LocalReads::stamps_of(uint32_t rank) {
    Daemon& d = *daemons_[rank];
    std::lock_guard lock(d.stamps_mu);
    if (d.stamps && d.stamps->alive()) return d.stamps;
    d.stamps.reset(); // the daemon went away: its chunks kept are no longer current, and go
    if (Clock::now() < d.stamps_next_try) return nullptr;
    d.stamps_next_try = Clock::now() + kRetryAfter;
    auto sock = transport::local_read_connect(transport::local_read_socket_name(secret_, rank), secret_, kConnectTimeout);
    if (!sock.ok()) return nullptr;
    transport::UniqueFd conn(*sock);
    transport::LocalRequest req;
    req.op = static_cast<uint32_t>(transport::LocalOp::stamps);
    auto r = transport::local_read_call(conn.get(), req);
    if (!r.ok() || r->header.error != 0 || !r->fd) return nullptr; // an older daemon, say: every read asks
    // The chunk directory, where this process may open the files itself (none: it asks for each).
    req.op = static_cast<uint32_t>(transport::LocalOp::chunk_dir);
    auto dir = transport::local_read_call(conn.get(), req);
    if (!dir.ok()) return nullptr; // the connection broke
    const uint64_t data_offset = dir->header.error == 0 && dir->fd ? dir->header.data_offset : 0;
    auto v = ChunkStampsView::map(std::move(r->fd), std::move(conn), data_offset ? std::move(dir->fd) : transport::UniqueFd(),
                                  data_offset);
    if (!v.ok()) {
        JOBFS_INFO("local reads from daemon %u: %s; every read asks the daemon", rank, v.status().message().c_str());
        return nullptr;
    }
    d.stamps = std::move(*v);
    return d.stamps;
}

std::shared_ptr<const KeptChunk> LocalReads::kept_chunk(const Range& r, Result<transport::LocalReply> reply,
                                                         std::shared_ptr<const ChunkStampsView> stamps) const {
    if (!reply.ok() || reply->header.error != 0 || !reply->fd) return nullptr;
    const transport::LocalReplyHeader& h = reply->header;
    if (h.held == 0 || h.held > r.chunk_size || reply->crcs.size() != (h.held - 1) / kBlock + 1) return nullptr;
    struct stat st {};
    if (::fstat(reply->fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_dev) != h.file_dev ||
        static_cast<uint64_t>(st.st_ino) != h.file_ino || static_cast<uint64_t>(st.st_size) < h.data_offset + h.held)
        return nullptr;
    if (!ours(st)) return nullptr;
    return make_kept(r, h.stamp, h.held, std::move(reply->crcs), std::move(reply->holes), std::move(stamps),
                     std::move(reply->fd), h.data_offset + h.held, h.data_offset);
}

std::shared_ptr<const KeptChunk> LocalReads::kept_chunk_from_file(const Range& r,
                                                                   std::shared_ptr<const ChunkStampsView> stamps,
                                                                   std::optional<bool>* cached) const {
    if (keep_chunks_ != KeepChunks::opened || stamps->dir() < 0) return nullptr;
    // The stamp before anything is looked at, and no change under way: what is read below is
    // whole, and stands while the stamp does (server/chunk_stamps.h).
    const uint64_t stamp = stamps->stamp(r.ino);
    if (!stamps->quiet(r.ino)) return nullptr;
    const std::string name = transport::chunk_file_name(r.ino, r.index);
    transport::UniqueFd fd(::openat(stamps->dir(), name.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return nullptr; // no such chunk (the daemon says what it holds), or not ours to open
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !ours(st)) return nullptr;
    const uint64_t size = static_cast<uint64_t>(st.st_size), at = stamps->data_offset();
    if (size <= at || size - at > r.chunk_size) return nullptr;
    const uint64_t held = size - at, blocks = (held - 1) / kBlock + 1;
    if (blocks * sizeof(transport::ChunkFileEntry) > at) return nullptr;
    // A range not all in the page cache is read the way of cold reads, which ask the daemon:
    // it has the checksums in memory, where reading them here would wait for the disk first.
    if (r.offset < held) {
        const uint64_t from = r.offset / kBlock * kBlock;
        const uint64_t to = std::min<uint64_t>((std::min(r.offset + r.length, held) - 1) / kBlock * kBlock + kBlock, held);
        *cached = in_page_cache(fd.get(), at + from, to - from);
        if (*cached == false) return nullptr; // unknown (nullopt): read_from asks mincore
    }
    // The entries with pread, not through the mapping: a fault there on a page not cached
    // would read the disk around it, up to read_ahead_kb, chunk bytes too (a direct reader's
    // cold read would find them cached).
    std::vector<transport::ChunkFileEntry> entries(blocks);
    if (!pread_all(fd.get(), reinterpret_cast<uint8_t*>(entries.data()), blocks * sizeof entries[0], 0)) return nullptr;
    std::vector<uint32_t> crcs(blocks), holes;
    for (uint64_t b = 0; b < blocks; ++b) {
        crcs[b] = entries[b].crc;
        if (!entries[b].written) holes.push_back(static_cast<uint32_t>(b));
    }
    return make_kept(r, stamp, held, std::move(crcs), std::move(holes), std::move(stamps), std::move(fd), size, at);
}

bool LocalReads::read_from(const KeptChunk& c, KeptRead& k, bool resident) {
    const Range& r = k.range;
    const uint64_t held = c.held > r.offset ? std::min<uint64_t>(r.length, c.held - r.offset) : 0;
    if (held == 0) {
        k.length = 0;
        return k.done = true;
    }
    // Bytes not in the page cache go the way of cold reads (read into it ahead, in large pages).
    const uint64_t from = r.offset / kBlock * kBlock, to = std::min<uint64_t>((r.offset + held - 1) / kBlock * kBlock + kBlock, c.held);
    if (!resident && !in_memory(c.file.get(), c.data_offset + from, to - from, c.bytes + from)) return false;
    const int64_t bad = copy_checked(c.bytes, c.held, r.offset, k.out.first(held), c.crcs, c.holes, 0);
    // A change that began during the copy moved the stamp: what was copied may be part old,
    // part new (a block that fails its check, or one that passes with bytes no longer there).
    std::atomic_thread_fence(std::memory_order_acquire);
    if (bad >= 0 || !c.current()) {
        kept_->drop(c);
        return false;
    }
    k.length = held;
    kept_reads_.fetch_add(1, std::memory_order_relaxed);
    reads_.fetch_add(1, std::memory_order_relaxed);
    return k.done = true;
}

void LocalReads::read_kept(std::span<KeptRead> reads) {
    if (!kept_) return;
    // Chunks kept and current are read at once; the others are described whole, every question
    // sent before the first answer is awaited (as open does), kept, and read.
    std::vector<size_t> missing;
    for (size_t i = 0; i < reads.size(); ++i) {
        const Range& r = reads[i].range;
        if (!r.chain.empty() || r.chunk_size == 0 || r.chunk_size / kBlock > transport::kLocalMaxBlocks - 2 ||
            r.length == 0 || reads[i].out.size() != r.length || !available(r.rank))
            continue;
        if (auto c = kept_->find(r.rank, r.ino, r.index)) (void)read_from(*c, reads[i]);
        else missing.push_back(i);
    }
    if (missing.empty()) return;
    std::vector<transport::LocalRequest> reqs;
    std::vector<uint32_t> to;
    std::vector<std::shared_ptr<const ChunkStampsView>> stamps;
    std::vector<size_t> asked;
    for (size_t i : missing) {
        const Range& r = reads[i].range;
        auto st = stamps_of(r.rank);
        if (!st) continue;
        // Where this process may open the chunk's file, it describes the chunk itself.
        std::optional<bool> cached;
        if (auto c = kept_chunk_from_file(r, st, &cached)) {
            kept_->keep(c);
            (void)read_from(*c, reads[i], cached == true);
            continue;
        }
        if (cached == false) continue; // read as cold ranges are (open, read)
        Range whole = r;
        whole.offset = 0;
        whole.length = r.chunk_size;
        reqs.push_back(describe_request(whole));
        to.push_back(r.rank);
        stamps.push_back(std::move(st));
        asked.push_back(i);
    }
    std::vector<Result<transport::LocalReply>> replies = ask(reqs, to);
    for (size_t k = 0; k < asked.size(); ++k) {
        KeptRead& kr = reads[asked[k]];
        auto c = kept_chunk(kr.range, std::move(replies[k]), std::move(stamps[k]));
        if (!c) continue;
        kept_->keep(c);
        (void)read_from(*c, kr);
    }
}

bool LocalReads::prefetch(uint32_t rank, uint64_t ino, uint64_t index, uint64_t offset, uint64_t length) {
    if (length == 0 || !available(rank)) return false;
    auto f = open_chunk(rank, ino, index);
    if (!f.ok()) return false; // not written (yet), or the daemon went away: the read will tell
    const uint64_t at = f->data_offset + offset;
    if (cached(f->fd.get(), at, length)) return false;
    if (!filler_.fill_later(std::move(f->fd), at, length)) return false; // enough asked for already
    prefetches_.fetch_add(1, std::memory_order_relaxed);
    return true;
}

Result<LocalReads::Opened> LocalReads::open(const Range& range) { return std::move(open(std::span(&range, 1))[0]); }

std::vector<Result<transport::LocalReply>> LocalReads::ask(std::span<const transport::LocalRequest> reqs,
                                                           std::span<const uint32_t> to) {
    // Each request's answer, or why it got none (empty after the questions: asked, answer to come).
    std::vector<std::optional<Result<transport::LocalReply>>> replies(reqs.size());
    {
        // A connection to every daemon asked is ours from the first question to the last
        // answer. Taken in rank order, so that two readers never wait for each other.
        std::vector<uint32_t> ranks;
        for (uint32_t r : to)
            if (r < daemons_.size()) ranks.push_back(r);
        std::sort(ranks.begin(), ranks.end());
        ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
        std::vector<std::unique_lock<std::mutex>> held;
        std::vector<Conn*> taken(ranks.size()); // taken[k]: ranks[k]'s connection (null: none connected)
        held.reserve(ranks.size());
        for (size_t k = 0; k < ranks.size(); ++k) {
            held.push_back(take(ranks[k], &taken[k]));
            if (!connect(ranks[k], *taken[k])) taken[k] = nullptr;
        }
        const auto conn_of = [&](uint32_t rank) {
            return taken[static_cast<size_t>(std::lower_bound(ranks.begin(), ranks.end(), rank) - ranks.begin())];
        };
        for (size_t i = 0; i < reqs.size(); ++i) {
            if (to[i] >= daemons_.size()) {
                replies[i] = Status(Code::invalid, "no such daemon");
                continue;
            }
            Conn* c = conn_of(to[i]);
            if (!c) {
                replies[i] = Status(Code::peer_gone, "no local-read connection to the daemon");
                continue;
            }
            Conn& d = *c;
            const Status s = transport::local_read_send_request(d.sock, reqs[i]);
            if (!s.ok()) {
                drop(d.sock, d.next_try, d.token, s);
                replies[i] = s;
            }
        }
        for (size_t i = 0; i < reqs.size(); ++i) {
            if (replies[i]) continue; // not asked
            Conn& d = *conn_of(to[i]);
            if (d.sock < 0) { // a failure of another request's question or answer closed it
                replies[i] = Status(Code::peer_gone, "the local-read connection to the daemon broke");
                continue;
            }
            replies[i] = transport::local_read_receive_reply(d.sock);
            if (!replies[i]->ok()) drop(d.sock, d.next_try, d.token, replies[i]->status());
        }
    }
    std::vector<Result<transport::LocalReply>> out;
    out.reserve(reqs.size());
    for (auto& r : replies) out.push_back(std::move(*r));
    return out;
}

std::vector<Result<LocalReads::Opened>> LocalReads::open(std::span<const Range> ranges) {
    std::vector<transport::LocalRequest> reqs;
    std::vector<uint32_t> to;
    for (const Range& r : ranges) {
        reqs.push_back(describe_request(r));
        to.push_back(r.chain.size() > transport::kLocalMaxChain ? kNoDaemon : r.rank);
    }
    std::vector<Result<transport::LocalReply>> replies = ask(reqs, to);
    for (size_t i = 0; i < ranges.size(); ++i)
        if (ranges[i].chain.size() > transport::kLocalMaxChain) replies[i] = Status(Code::invalid, "chain too long");
    std::vector<Result<Opened>> out;
    out.reserve(ranges.size());
    for (size_t i = 0; i < ranges.size(); ++i) out.push_back(opened(ranges[i], std::move(replies[i])));
    // Cold ranges of a buffered reader: the first is read into the page cache by the reader
    // itself (read), the others by the filler's thread meanwhile, so that the disk has the
    // next one to work on while the reader waits for the first.
    if (cold_reads_ == ColdReads::buffered) {
        bool first = true;
        for (Result<Opened>& o : out) {
            if (!o.ok() || !o->cold_) continue;
            if (std::exchange(first, false)) continue;
            const auto [at, n] = o->blocks();
            const int dup = ::fcntl(o->fd_.get(), F_DUPFD_CLOEXEC, 0);
            if (dup >= 0) (void)filler_.fill_later(transport::UniqueFd(dup), o->data_offset_ + at, n);
        }
    }
    return out;
}

Result<LocalReads::Opened> LocalReads::opened(const Range& range, Result<transport::LocalReply> reply) const {
    if (!reply.ok()) return reply.status().with_context(describe(range));
    Opened o;
    o.range_ = range;
    o.range_.chain = {}; // the caller's
    o.fd_ = std::move(reply->fd);
    const transport::LocalReplyHeader& h = reply->header;
    if (h.error != 0) return daemon_error(h.error).with_context(describe(range));
    o.held_ = h.held;
    o.data_offset_ = h.data_offset;
    o.length_ = h.held > range.offset ? std::min<uint64_t>(range.length, h.held - range.offset) : 0;
    if (o.length_ == 0) return o; // nothing held there: zeros
    if (!o.fd_) return Status(Code::protocol, describe(range) + ": a reply without a descriptor");
    const uint64_t end = range.offset + o.length_;
    if (reply->crcs.size() != (end - 1) / kBlock - range.offset / kBlock + 1)
        return Status(Code::protocol, describe(range) + ": wrong number of checksums");
    o.crcs_ = std::move(reply->crcs);
    o.holes_ = std::move(reply->holes);
    struct stat st {};
    if (::fstat(o.fd_.get(), &st) != 0) return Status::from_errno(errno, describe(range));
    if (static_cast<uint64_t>(st.st_dev) != h.file_dev || static_cast<uint64_t>(st.st_ino) != h.file_ino)
        return Status(Code::again, describe(range) + ": the chunk file changed (a resync replaced it)");
    // Whether the disk must be asked for some of it (open then has it read into the page cache
    // ahead, read_copied past it for a direct reader).
    const auto [at, n] = o.blocks();
    o.cold_ = !cached(o.fd_.get(), o.data_offset_ + at, n);
    return o;
}

std::pair<uint64_t, uint64_t> LocalReads::Opened::blocks() const {
    if (length_ == 0) return {range_.offset, 0};
    const uint64_t first = range_.offset / kBlock * kBlock;
    const uint64_t last = std::min<uint64_t>((range_.offset + length_ - 1) / kBlock * kBlock + kBlock, held_);
    return {first, last - first};
}

Result<uint64_t> LocalReads::read_range(const Range& r, std::span<uint8_t> out, bool* cold) {
    auto o = open(r);
    if (!o.ok()) return o.status();
    *cold = o->cold();
    if (o->length() > 0) JOBFS_RETURN_IF_ERROR(read(*o, out.first(o->length())));
    return o->length();
}

Status LocalReads::read(const Opened& o, std::span<uint8_t> out) {
    const Range& p = o.range_;
    if (!o.fd_ || out.size() != o.length_ || o.length_ == 0)
        return Status(Code::invalid, describe(p) + ": nothing opened to read, or a buffer of another size");
    std::optional<Status> mapped;
    // A cold range of a buffered reader goes into the page cache first, in 2 MiB pages where
    // the kernel keeps them (the filler's thread may have it under way already): through the
    // mapping it is then read from (read_mapped), or before pread. Where that fails (the
    // disk's error, a file cut short) pread tells what went wrong.
    const bool fill = o.cold_ && cold_reads_ == ColdReads::buffered;
    if (cached_reads_ == CachedReads::mapped && (!o.cold_ || (fill && PageCacheFiller::huge_pages()))) {
        mapped = read_mapped(o, out);
    } else if (fill) {
        const auto [at, n] = o.blocks();
        (void)PageCacheFiller::fill(o.fd_.get(), o.data_offset_ + at, n);
    }
    bool direct = false;
    const Status s = mapped ? *mapped : read_copied(o, out, &direct);
    if (s.ok()) reads_.fetch_add(1, std::memory_order_relaxed);
    if (s.ok() && mapped) mapped_reads_.fetch_add(1, std::memory_order_relaxed);
    if (s.ok() && direct) direct_reads_.fetch_add(1, std::memory_order_relaxed);
    return s;
}

std::optional<Status> LocalReads::read_mapped(const Opened& o, std::span<uint8_t> out) {
    const Range& p = o.range_;
    const uint64_t offset = p.offset;
    const auto [from, span] = o.blocks();
    const uint64_t to = from + span;
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    if ((o.data_offset_ + from) % page != 0) return std::nullopt;
    // Never a page past the file's end: touching one is a SIGBUS. The daemon shortens a chunk
    // file in place only on a full disk (server/chunk_store.h); the size is looked at here, not
    // taken from open, so that such a cut must come within this copy to hurt (an fstat is a
    // fraction of a microsecond, the copy of a range hundreds).
    struct stat st {};
    if (::fstat(o.fd_.get(), &st) != 0) return std::nullopt;
    if (static_cast<uint64_t>(st.st_size) < o.data_offset_ + to)
        return Status(Code::again, describe(p) + ": the chunk file is shorter than the daemon said");
    // Not MAP_POPULATE: that fills the page table a 4 KiB page at a time (get_user_pages),
    // where the faults of the copy map a large folio of the page cache at once (fault-around;
    // a 2 MiB one with one entry where the mapping is aligned to it). 4 ranks reading a 1 GiB
    // checkpoint back through ad_jobfs, warm, alternating: 4082-4432 MB/s against 3475-4489
    // (ufs 3872-4460), 2-D subarray 2182-2621 against 1940-2616 (ufs 2399-2869), session 36.
    void* m = ::mmap(nullptr, to - from, PROT_READ, MAP_SHARED, o.fd_.get(), static_cast<off_t>(o.data_offset_ + from));
    if (m == MAP_FAILED) return std::nullopt;
    if (o.cold_ && !PageCacheFiller::populate(m, to - from)) { // the disk's error, say: pread tells
        ::munmap(m, to - from);
        return std::nullopt;
    }
    const auto* chunk = static_cast<const uint8_t*>(m) - from; // chunk[i]: byte i of the chunk
    const int64_t bad = copy_checked(chunk, o.held_, offset, out, o.crcs_, o.holes_, offset / kBlock);
    ::munmap(m, to - from);
    if (bad >= 0) return Status(Code::io, describe(p) + ": block " + std::to_string(bad) + " does not match its checksum");
    return Status::OK();
}

Status LocalReads::read_copied(const Opened& o, std::span<uint8_t> out, bool* direct) {
    const Range& p = o.range_;
    const uint64_t offset = p.offset;
    const uint64_t end = offset + o.length_;
    const uint64_t b0 = offset / kBlock, b1 = (end - 1) / kBlock;
    size_t next_hole = 0; // holes_ is ascending
    const auto check = [&](uint64_t b, const uint8_t* at, size_t n) -> Status {
        const uint32_t i = static_cast<uint32_t>(b - b0);
        while (next_hole < o.holes_.size() && o.holes_[next_hole] < i) ++next_hole;
        const bool hole = next_hole < o.holes_.size() && o.holes_[next_hole] == i;
        if (hole ? std::all_of(at, at + n, [](uint8_t c) { return c == 0; })
                 : transport::crc32c(std::span<const uint8_t>(at, n)) == o.crcs_[i])
            return Status::OK();
        // A write or truncate since the daemon answered, or a corrupt block: the ordinary read
        // tells which (and repairs a corrupt copy).
        return Status(Code::io, describe(p) + ": block " + std::to_string(b) + " does not match its checksum");
    };
    const auto block_end = [&](uint64_t b) { return std::min<uint64_t>((b + 1) * kBlock, o.held_); };
    // Direct I/O puts the bytes in memory, not in the CPU's cache: no run to keep short then,
    // and one large read keeps the disk busiest.
    const bool try_direct = o.cold_ && cold_reads_ == ColdReads::direct;
    std::vector<uint8_t> scratch;
    for (uint64_t b = b0; b <= b1;) {
        const uint64_t bs = b * kBlock;
        if (bs >= offset && block_end(b) <= end) {
            // A run of blocks the range covers whole: straight into out.
            uint64_t e = b;
            while (e + 1 <= b1 && (try_direct || e + 1 - b < kRunBlocks) && block_end(e + 1) <= end) ++e;
            uint8_t* to = out.data() + (bs - offset);
            const uint64_t n = block_end(e) - bs;
            const uint64_t got = try_direct ? pread_direct(o.fd_.get(), to, n, o.data_offset_ + bs) : 0;
            if (got > 0) *direct = true;
            if (got < n && !pread_all(o.fd_.get(), to + got, n - got, o.data_offset_ + bs + got))
                return Status(Code::again, describe(p) + ": the chunk file is shorter than the daemon said");
            for (uint64_t x = b; x <= e; ++x)
                JOBFS_RETURN_IF_ERROR(check(x, out.data() + (x * kBlock - offset), block_end(x) - x * kBlock));
            b = e + 1;
            continue;
        }
        // A block at either edge of the range: whole into scratch, checked, the part asked for copied.
        scratch.resize(kBlock);
        const size_t n = static_cast<size_t>(block_end(b) - bs);
        if (!pread_all(o.fd_.get(), scratch.data(), n, o.data_offset_ + bs))
            return Status(Code::again, describe(p) + ": the chunk file is shorter than the daemon said");
        JOBFS_RETURN_IF_ERROR(check(b, scratch.data(), n));
        const uint64_t cs = std::max(bs, offset), ce = std::min<uint64_t>(bs + n, end);
        std::copy(scratch.data() + (cs - bs), scratch.data() + (ce - bs), out.data() + (cs - offset));
        ++b;
    }
    return Status::OK();
}

} // namespace jobfs::client
