// file_io.cc: chunk RPCs fanned out over the daemons. See file_io.h for the guarantees.
#include "client/file_io.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <optional>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "block_crc.h"
#include "crc32c_copy.h"
#include "client/cluster.h"
#include "log.h"
#include "daemon_protocol.h"
#include "rpc.h"

namespace jobfs::client {
namespace {

namespace rpc = transport::rpc;
using transport::CallOptions;
using transport::Endpoint;

constexpr uint64_t kNoChunk = std::numeric_limits<uint64_t>::max();

// Which piece of which operation a call is, for the context of its error.
struct PieceRef {
    const char* op;
    uint64_t ino;
    uint64_t chunk; // kNoChunk for per-file operations
    uint32_t rank;
};

std::string describe(const PieceRef& ref, const Endpoint& ep) {
    std::string s = std::string(ref.op) + " of inode " + std::to_string(ref.ino);
    if (ref.chunk != kNoChunk) s += " chunk " + std::to_string(ref.chunk);
    s += " on daemon " + std::to_string(ref.rank);
    s += " (" + (ep.valid() ? ep.peer() : std::string("not connected")) + ")";
    return s;
}

// The calls of one FileIO operation: at most `limit` in flight, the first error kept.
//
// The caller's thread issues the calls and sleeps on a condition variable; completion
// callbacks run on the transport's thread, where nothing may block, so they only record the
// outcome and wake the caller. The state is shared with the callbacks so that a callback
// still unwinding after it woke the caller never touches freed memory. Callbacks may also run
// inline inside call_async (a worker already shut down): the caller holds no lock then.
class FanOut {
public:
    explicit FanOut(size_t limit) : state_(std::make_shared<State>()), limit_(limit) {}
    // Whatever happens, the caller's buffers stay in use until every call has completed.
    ~FanOut() { (void)wait(); }

    FanOut(const FanOut&) = delete;
    FanOut& operator=(const FanOut&) = delete;

    // Waits for a free slot and takes it; false once a call has failed (issue no more).
    bool acquire() {
        std::unique_lock lock(state_->mu);
        state_->cv.wait(lock, [&] { return state_->in_flight < limit_ || !state_->first_error.ok(); });
        if (!state_->first_error.ok()) return false;
        ++state_->in_flight;
        return true;
    }

    // The completion of a call that took a slot: to be run exactly once, from any thread.
    std::function<void(Status)> completion() {
        return [state = state_](Status s) {
            std::lock_guard lock(state->mu);
            if (!s.ok() && state->first_error.ok()) state->first_error = std::move(s);
            --state->in_flight;
            state->cv.notify_all();
        };
    }

    // Waits until every call issued has completed; the first error, or ok. While calls are
    // still out after each `stall` period, on_stall runs (without the lock): it may make them
    // complete sooner (FileIO::leave_out_offline).
    Status wait(const std::function<void()>& on_stall = {},
                std::chrono::milliseconds stall = std::chrono::milliseconds(2000)) {
        std::unique_lock lock(state_->mu);
        auto done = [&] { return state_->in_flight == 0; };
        if (!on_stall) {
            state_->cv.wait(lock, done);
            return state_->first_error;
        }
        while (!state_->cv.wait_for(lock, stall, done)) {
            lock.unlock();
            on_stall();
            lock.lock();
        }
        return state_->first_error;
    }

private:
    struct State {
        std::mutex mu;
        std::condition_variable cv;
        size_t in_flight = 0;
        Status first_error;
    };
    std::shared_ptr<State> state_;
    size_t limit_;
};

// Starts one call of `fan` once a slot is free. `on_reply` turns a successful response (and
// the bulk bytes received) into the piece's outcome; it runs on the transport's thread, so it
// must be quick. Returns false, without calling, once the operation has failed.
template <class Rpc, class OnReply>
bool issue(FanOut& fan, const Endpoint& ep, const typename Rpc::Request& req, const CallOptions& options,
           PieceRef ref, OnReply on_reply) {
    if (!fan.acquire()) return false;
    rpc::call_async<Rpc>(ep, req, options,
                         [finish = fan.completion(), ep, ref, on_reply](Result<typename Rpc::Response> r, size_t bulk) {
                             Status s = r.ok() ? on_reply(*r, bulk) : r.status();
                             finish(s.ok() ? s : s.with_context(describe(ref, ep)));
                         });
    return true;
}

template <class Rpc>
bool issue(FanOut& fan, const Endpoint& ep, const typename Rpc::Request& req, const CallOptions& options,
           PieceRef ref) {
    return issue<Rpc>(fan, ep, req, options, ref,
                      [](const typename Rpc::Response&, size_t) { return Status::OK(); });
}

// The chain as the wire carries it; a chain of one is sent empty (no replication, no hop).
std::vector<uint32_t> chain_ranks(const Chain& c) {
    if (c.length <= 1) return {};
    return std::vector<uint32_t>(c.ranks.begin(), c.ranks.begin() + c.length);
}

} // namespace

FileIO::FileIO(std::vector<transport::Endpoint> daemons, std::chrono::milliseconds timeout, ReconnectFn reconnect,
               std::shared_ptr<LocalReads> local)
    : daemons_(std::move(daemons)), timeout_(timeout), reconnect_(std::move(reconnect)), local_(std::move(local)),
      stalls_(std::make_unique<StallWatch>([this] { leave_out_offline(); }, kStallAfter, kStallAfter)) {}

transport::Endpoint FileIO::endpoint(uint32_t rank) const {
    {
        std::lock_guard l(eps_mu_);
        const Endpoint& ep = daemons_[rank];
        if (!ep.valid() || ep.health().ok()) return ep;
    }
    // A connection known to be broken (the daemon died, maybe restarted since): connect afresh
    // before a call fails on it. (Local reads, for one, may have spared the transport every
    // call since the restart.)
    heal(rank);
    std::lock_guard l(eps_mu_);
    return daemons_[rank];
}

uint32_t FileIO::local_daemon_count() const {
    uint32_t n = 0;
    for (uint32_t rank = 0; local_ && rank < daemon_count(); ++rank) n += local_->available(rank) ? 1 : 0;
    return n;
}

int FileIO::local_replica(uint64_t ino, uint64_t index, const Chain& chain) const {
    // Which copy depends on the chunk, so that the copies' daemons share the work.
    for (uint32_t k = 0; k < chain.length; ++k) {
        const uint32_t rank = chain.ranks[(ino + index + k) % chain.length];
        if (local_->available(rank)) return static_cast<int>(rank);
    }
    return -1;
}

void FileIO::heal(uint32_t rank) const {
    if (!reconnect_ || rank >= daemons_.size()) return;
    // An offline daemon is left alone: it may be unreachable (a connect to a node cut off by a
    // partition would wait), and no chain uses it until a newer table brings it back.
    {
        std::lock_guard l(table_mu_);
        if (rank < table_.states.size() && table_.states[rank] == proto::kDaemonOffline) return;
    }
    {
        std::lock_guard l(eps_mu_);
        if (daemons_[rank].valid() && daemons_[rank].health().ok()) return;
    }
    auto ep = reconnect_(rank);
    if (!ep.ok()) return;
    std::lock_guard l(eps_mu_);
    daemons_[rank] = *ep;
}

Status FileIO::check(const Layout& layout) const {
    if (daemons_.empty()) return Status(Code::invalid, "no data daemons to store chunks on");
    if (layout.chunk_size == 0) return Status(Code::invalid, "layout with a chunk size of 0");
    return Status::OK();
}

proto::ChainTable FileIO::table() const {
    std::lock_guard l(table_mu_);
    return table_;
}

proto::ChainTable FileIO::current_table() const {
    {
        std::lock_guard l(table_mu_);
        if (table_fetched_) return table_;
    }
    (void)refresh_table(); // without any table every daemon counts as serving
    return table();
}

Status FileIO::refresh_table() const {
    std::vector<Endpoint> eps(daemons_.size());
    for (size_t r = 0; r < eps.size(); ++r) eps[r] = endpoint(static_cast<uint32_t>(r));
    proto::ChainTable t = newest_chain_table(eps, std::min(timeout_, std::chrono::milliseconds(2000)));
    std::lock_guard l(table_mu_);
    table_fetched_ = true;
    if (t.states.size() == daemons_.size() && proto::newer_table(t, table_)) table_ = std::move(t);
    return Status::OK();
}

void FileIO::leave_out_offline() const {
    (void)refresh_table();
    const proto::ChainTable t = table();
    for (uint32_t r = 0; r < t.states.size() && r < daemons_.size(); ++r) {
        if (t.states[r] != proto::kDaemonOffline) continue;
        const Endpoint ep = endpoint(r);
        if (ep.valid() && ep.health().ok()) {
            JOBFS_INFO("daemon %u is offline in chain table %llu: giving up on the calls waiting for it", r,
                       static_cast<unsigned long long>(t.version));
            ep.abort(Status(Code::peer_gone, "daemon " + std::to_string(r) + " is offline (chain table " +
                                                 std::to_string(t.version) + ")"));
        }
    }
}

Chain FileIO::write_chain(uint64_t ino, uint64_t index, const Layout& layout, const proto::ChainTable& t) const {
    const Chain placed = chunk_chain(ino, index, layout, daemon_count());
    if (t.states.size() != daemon_count()) return placed;
    Chain c;
    for (uint8_t want : {proto::kDaemonServing, proto::kDaemonSyncing})
        for (uint32_t k = 0; k < placed.length; ++k)
            if (t.states[placed.ranks[k]] == want) c.ranks[c.length++] = placed.ranks[k];
    return c;
}

Chain FileIO::read_chain(uint64_t ino, uint64_t index, const Layout& layout, const proto::ChainTable& t) const {
    const Chain placed = chunk_chain(ino, index, layout, daemon_count());
    if (t.states.size() != daemon_count()) return placed;
    Chain c;
    for (uint32_t k = 0; k < placed.length; ++k)
        if (t.states[placed.ranks[k]] == proto::kDaemonServing) c.ranks[c.length++] = placed.ranks[k];
    return c;
}

Status FileIO::pwrite(uint64_t ino, const Layout& layout, uint64_t offset, std::span<const uint8_t> data) const {
    JOBFS_RETURN_IF_ERROR(check(layout));
    if (data.size() > std::numeric_limits<uint64_t>::max() - offset)
        return Status(Code::too_large, "write past the largest file offset");
    const std::vector<ChunkPiece> split = split_range(offset, data.size(), layout.chunk_size);
    std::vector<HeldWrite::Piece> pieces(split.size());
    for (size_t i = 0; i < split.size(); ++i) {
        pieces[i].where = split[i];
        pieces[i].bytes = data.subspan(split[i].offset_in_buffer, split[i].length);
    }
    // The writer's checksums, each taken once as its piece is first sent (as it is copied into
    // the write arena, where it goes there): every replica checks them before storing.
    std::vector<std::vector<uint32_t>> crcs(split.size());
    return write_pieces(ino, layout, pieces, crcs);
}

FileIO::HeldWrite::~HeldWrite() {
    for (const Piece& p : pieces_) {
        if (!p.region) continue;
        if (p.unanswered) local_->arena()->retire(*p.region); // the daemon may still read it
        else local_->arena()->release(*p.region);
    }
}

Result<std::unique_ptr<FileIO::HeldWrite>> FileIO::hold(uint64_t ino, const Layout& layout, uint64_t offset,
                                                        std::span<const uint8_t> data) const {
    JOBFS_RETURN_IF_ERROR(check(layout));
    if (data.size() > std::numeric_limits<uint64_t>::max() - offset)
        return Status(Code::too_large, "write past the largest file offset");
    std::unique_ptr<HeldWrite> h(new HeldWrite);
    h->ino_ = ino;
    h->offset_ = offset;
    h->size_ = data.size();
    h->layout_ = layout;
    h->local_ = local_;
    const std::vector<ChunkPiece> split = split_range(offset, data.size(), layout.chunk_size);
    h->pieces_.resize(split.size());
    h->crcs_.resize(split.size());
    WriteArena* arena = local_ ? local_->arena() : nullptr;
    const proto::ChainTable t = chain_length(layout, daemon_count()) > 1 ? current_table() : proto::ChainTable{};
    size_t copied = 0; // bytes of the pieces not held in the arena
    for (size_t i = 0; i < split.size(); ++i) {
        HeldWrite::Piece& piece = h->pieces_[i];
        piece.where = split[i];
        const auto src = data.subspan(split[i].offset_in_buffer, split[i].length);
        if (arena && src.size() >= kMinArenaWrite) {
            const Chain chain = write_chain(ino, split[i].chunk_index, layout, t);
            if (chain.length > 0 && local_->arena_token(chain.head()) != 0) piece.region = arena->allocate(src.size());
        }
        // Each piece is copied and checksummed in one pass over the caller's bytes.
        if (piece.region) {
            h->crcs_[i] = transport::block_crcs_copy(split[i].offset_in_chunk, {piece.region->data, src.size()}, src);
            piece.bytes = {piece.region->data, src.size()};
        } else {
            copied += src.size();
        }
    }
    // The rest in one buffer (not zeroed first: on this kind of VM touching fresh pages costs
    // more than the copy).
    if (copied > 0) h->copy_ = std::make_unique_for_overwrite<uint8_t[]>(copied);
    size_t at = 0;
    for (size_t i = 0; i < split.size(); ++i) {
        HeldWrite::Piece& piece = h->pieces_[i];
        if (piece.region) continue;
        const auto src = data.subspan(split[i].offset_in_buffer, split[i].length);
        const std::span<uint8_t> to(h->copy_.get() + at, src.size());
        h->crcs_[i] = transport::block_crcs_copy(split[i].offset_in_chunk, to, src);
        piece.bytes = to;
        at += src.size();
    }
    return h;
}

Status FileIO::pwrite(HeldWrite& held) const { return write_pieces(held.ino_, held.layout_, held.pieces_, held.crcs_); }

Status FileIO::write_pieces(uint64_t ino, const Layout& layout, std::vector<HeldWrite::Piece>& pieces,
                            std::vector<std::vector<uint32_t>>& crcs) const {
    std::vector<Status> status(pieces.size(), Status(Code::internal, "not written"));
    // Pieces whose head runs on this node go through the write arena (write_arena.h) unless it
    // is full or the daemon lost track of it; arena_gone: it did, send the bytes instead.
    WriteArena* arena = local_ ? local_->arena() : nullptr;
    std::vector<char> arena_gone(pieces.size(), 0), no_arena(pieces.size(), 0);
    const bool replicated = chain_length(layout, daemon_count()) > 1;
    const auto deadline = std::chrono::steady_clock::now() + kFailoverTimeout;
    proto::ChainTable t = replicated ? current_table() : proto::ChainTable{};
    // Rounds: every piece not acknowledged yet goes to the head of its chain under the current
    // table. A write is acknowledged once the chain's tail stored it; a chain member that died
    // makes the head fail the piece, and the piece is written again (the same bytes at the same
    // place: harmless on the members that had it) once the table leaves the dead one out.
    for (;;) {
        FanOut fan(kMaxInFlight);
        for (size_t i = 0; i < pieces.size(); ++i) {
            if (status[i].ok()) continue;
            const ChunkPiece& p = pieces[i].where;
            const Chain chain = write_chain(ino, p.chunk_index, layout, t);
            if (chain.length == 0) {
                status[i] = Status(Code::io, "chunk write of inode " + std::to_string(ino) + " chunk " +
                                                 std::to_string(p.chunk_index) + ": no daemon of its chain is serving");
                continue;
            }
            const uint32_t rank = chain.head();
            CallOptions o;
            o.timeout = timeout_;
            const auto bytes = pieces[i].bytes;
            if (!fan.acquire()) break;
            // A held piece names its own region (kept until the write is done: a later round
            // may need its bytes); any other takes a region for this call only.
            HeldWrite::Piece* held = pieces[i].region ? &pieces[i] : nullptr;
            std::optional<WriteArena::Region> region;
            const uint64_t token = arena && !no_arena[i] && p.length >= kMinArenaWrite ? local_->arena_token(rank) : 0;
            if (token != 0) {
                if (held) {
                    region = held->region;
                } else if ((region = arena->allocate(p.length))) {
                    // Copied and, the first time, checksummed in one pass over the caller's bytes.
                    const std::span<uint8_t> to(region->data, bytes.size());
                    if (crcs[i].empty()) crcs[i] = transport::block_crcs_copy(p.offset_in_chunk, to, bytes);
                    else std::memcpy(to.data(), bytes.data(), bytes.size());
                }
            }
            if (crcs[i].empty()) crcs[i] = transport::block_crcs(p.offset_in_chunk, bytes);
            proto::ChunkWriteRequest req{{ino, p.chunk_index}, p.offset_in_chunk, p.length, chain_ranks(chain), crcs[i],
                                         0, t.version};
            if (region) {
                req.arena = token;
                req.arena_offset = region->offset;
            }
            else o.bulk_out = bytes;
            const Endpoint ep = endpoint(rank);
            rpc::call_async<proto::ChunkWrite>(ep, req, o, [this, finish = fan.completion(), slot = &status[i], gone = &arena_gone[i], arena, region, held, token = req.arena, ep, ref = PieceRef{"chunk write", ino, p.chunk_index, rank}](Result<proto::Empty> r, size_t) {
                if (region) {
                    const Code c = r.ok() ? Code::ok : r.status().code();
                    // No answer: the daemon may still read the region.
                    const bool unanswered = c == Code::timeout || c == Code::peer_gone || c == Code::cancelled;
                    if (held) held->unanswered = held->unanswered || unanswered;
                    else if (unanswered) arena->retire(*region);
                    else arena->release(*region);
                    if (c == Code::not_found) { // the daemon does not know the arena (any more)
                        local_->forget_arena(ref.rank, token);
                        *gone = 1;
                    }
                    if (c == Code::ok) local_writes_.fetch_add(1, std::memory_order_relaxed);
                }
                *slot = r.ok() ? Status::OK() : r.status().with_context(describe(ref, ep));
                finish(Status::OK());
            });
        }
        JOBFS_RETURN_IF_ERROR(fan.wait(replicated ? std::function<void()>([this] { leave_out_offline(); }) : nullptr));
        bool resend = false; // pieces whose arena the daemon did not know: again at once, with their bytes
        const Status* failed = nullptr;
        for (size_t i = 0; i < pieces.size(); ++i) {
            if (status[i].ok()) continue;
            if (arena_gone[i]) {
                arena_gone[i] = 0;
                no_arena[i] = 1;
                resend = true;
                continue;
            }
            if (!replicated || !cured_by_newer_table(status[i].code())) return status[i]; // R=1: nothing to fail over to
            if (!failed) failed = &status[i];
        }
        if (!failed) {
            if (resend) continue;
            return Status::OK();
        }
        if (std::chrono::steady_clock::now() >= deadline) return *failed;
        // A daemon whose connection broke may be back (restarted, serving again): connect
        // afresh to the failed pieces' heads, each once (many pieces share a head).
        std::set<uint32_t> broken;
        for (size_t i = 0; i < pieces.size(); ++i)
            if (!status[i].ok() && status[i].code() != Code::timeout && status[i].code() != Code::again)
                broken.insert(write_chain(ino, pieces[i].where.chunk_index, layout, t).head());
        for (uint32_t rank : broken) heal(rank);
        // Wait for the daemons' manager to publish a table without the lost member.
        const uint64_t before = t.version;
        (void)refresh_table();
        t = table();
        if (t.version == before) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        else JOBFS_INFO("inode %llu: chain table %llu, writing %s again", static_cast<unsigned long long>(ino),
                        static_cast<unsigned long long>(t.version), failed->message().c_str());
    }
}

Result<size_t> FileIO::pread(uint64_t ino, const Layout& layout, uint64_t file_size, uint64_t offset,
                             std::span<uint8_t> out) const {
    JOBFS_RETURN_IF_ERROR(check(layout));
    if (offset >= file_size || out.empty()) return size_t{0};
    const uint64_t length = std::min<uint64_t>(out.size(), file_size - offset);
    const std::vector<ChunkPiece> pieces = split_range(offset, length, layout.chunk_size);
    // What became of each piece. Written by the callbacks, one slot each, and read only after
    // wait() has seen every callback of the round finish.
    struct Slot {
        Chain chain;
        uint32_t tries = 0;   // replicas asked so far
        bool to_tail = false; // a dirty replica sent us to the tail
        bool done = false;
        Status status;        // of the last try
        proto::ChunkReadResponse reply;
        size_t bulk = 0;
        uint32_t rank = 0;
        // The copy on this node whose local read did not add up (-1: none). The transport asks
        // it first: if its copy is corrupt, it finds out and repairs it from another before
        // answering, where another copy would answer and leave it corrupt.
        int local_failed = -1;
    };
    std::vector<Slot> slots(pieces.size());
    // Successive reads of one chunk start at successive replicas, so a hot chunk's readers
    // spread too.
    const uint64_t turn = read_turn_.fetch_add(1, std::memory_order_relaxed);
    const bool replicated = chain_length(layout, daemon_count()) > 1;
    proto::ChainTable t = replicated ? current_table() : proto::ChainTable{};
    for (size_t i = 0; i < pieces.size(); ++i) {
        slots[i].chain = read_chain(ino, pieces[i].chunk_index, layout, t);
        if (slots[i].chain.length == 0)
            return Status(Code::io, "chunk read of inode " + std::to_string(ino) + " chunk " +
                                        std::to_string(pieces[i].chunk_index) + ": no daemon of its chain is serving");
    }
    // Large pieces held by a daemon of this node are read from its chunk files, with one
    // question to its socket and no transport round trip (local_reads.h): every piece's file is
    // opened (and a cold range asked of the disk) before the first is read. What that does not
    // settle goes over the transport below.
    bool cold = false; // some bytes read locally were not in the page cache (read-ahead)
    if (local_) {
        std::vector<LocalReads::Range> ranges;
        std::vector<size_t> ranged; // the piece of each range
        for (size_t i = 0; i < pieces.size(); ++i) {
            const ChunkPiece& p = pieces[i];
            Slot& sl = slots[i];
            const int rank = local_replica(ino, p.chunk_index, sl.chain);
            if (rank < 0) continue;
            const auto chain = replicated ? std::span<const uint32_t>(sl.chain.ranks.data(), sl.chain.length)
                                          : std::span<const uint32_t>();
            ranges.push_back({static_cast<uint32_t>(rank), ino, p.chunk_index, p.offset_in_chunk, p.length, chain,
                              t.version, layout.chunk_size});
            ranged.push_back(i);
            sl.local_failed = rank; // until it succeeds
        }
        // Chunks of an unreplicated file read before and unchanged since: no question to the
        // daemon (kept_chunks.h). The ranges they settle leave the list.
        if (!replicated && !ranges.empty()) {
            std::vector<LocalReads::KeptRead> kept;
            kept.reserve(ranges.size());
            for (size_t k = 0; k < ranges.size(); ++k)
                kept.push_back({ranges[k], out.subspan(pieces[ranged[k]].offset_in_buffer, ranges[k].length)});
            local_->read_kept(kept);
            size_t left = 0;
            for (size_t k = 0; k < kept.size(); ++k) {
                Slot& sl = slots[ranged[k]];
                if (kept[k].done) {
                    sl.reply.length = kept[k].length;
                    sl.local_failed = -1;
                    sl.done = true;
                    continue;
                }
                ranges[left] = ranges[k];
                ranged[left++] = ranged[k];
            }
            ranges.resize(left);
            ranged.resize(left);
        }
        std::vector<Result<LocalReads::Opened>> opened;
        if (!ranges.empty()) opened = local_->open(ranges);
        for (size_t k = 0; k < ranged.size(); ++k) {
            Slot& sl = slots[ranged[k]];
            if (!opened[k].ok()) {
                // Dirty or stale (EAGAIN) is CRAQ's business, over the transport; anything else is worth a line.
                if (opened[k].status().code() != Code::again)
                    JOBFS_INFO("%s; reading it over the transport", opened[k].status().message().c_str());
                continue;
            }
            const LocalReads::Opened o = std::move(*opened[k]); // its file closes after this piece, not at the end
            const uint64_t held = o.length();
            cold = cold || o.cold();
            const Status ls = held ? local_->read(o, out.subspan(pieces[ranged[k]].offset_in_buffer, held)) : Status::OK();
            if (!ls.ok()) {
                JOBFS_INFO("%s; reading it over the transport", ls.message().c_str());
                continue;
            }
            sl.reply.length = held;
            sl.local_failed = -1;
            sl.done = true;
        }
    }
    // As for writes: while the daemons' manager has not yet taken a dead member out of the
    // table, every replica of a chain may fail (the dead one, and the others sending a dirty
    // read to it as tail); refresh the table and ask again until kFailoverTimeout.
    const auto deadline = std::chrono::steady_clock::now() + kFailoverTimeout;
    // Rounds: every piece not done yet goes to its next replica. Reads spread over the replicas
    // (the first one asked depends on the chunk), a failed or corrupt answer moves on to the
    // next replica, a dirty one to the tail. A piece fails once every replica was asked.
    for (uint32_t round = 0;; ++round) {
        FanOut fan(kMaxInFlight);
        std::vector<size_t> asked;
        for (size_t i = 0; i < pieces.size(); ++i) {
            Slot& sl = slots[i];
            if (sl.done) continue;
            if (sl.tries >= sl.chain.length + 1 || (!sl.to_tail && sl.tries >= sl.chain.length)) {
                // Every replica failed: the table may have moved on (a daemon said ours is
                // stale, or one died and the chain has changed), or will soon.
                if (!replicated || !cured_by_newer_table(sl.status.code()) || std::chrono::steady_clock::now() >= deadline)
                    return sl.status;
                for (uint32_t k = 0; k < sl.chain.length; ++k) heal(sl.chain.ranks[k]);
                const uint64_t before = t.version;
                (void)refresh_table();
                t = table();
                if (t.version == before) std::this_thread::sleep_for(std::chrono::milliseconds(100));
                for (size_t j = 0; j < pieces.size(); ++j) {
                    if (slots[j].done) continue;
                    slots[j].chain = read_chain(ino, pieces[j].chunk_index, layout, t);
                    slots[j].tries = 0;
                    slots[j].to_tail = false;
                    if (slots[j].chain.length == 0) return slots[j].status;
                }
            }
            const ChunkPiece& p = pieces[i];
            uint64_t first = ino + p.chunk_index + turn;
            for (uint32_t k = 0; k < sl.chain.length; ++k)
                if (static_cast<int>(sl.chain.ranks[k]) == sl.local_failed) first = k;
            sl.rank = sl.to_tail ? sl.chain.tail() : sl.chain.ranks[(first + sl.tries) % sl.chain.length];
            sl.tries++;
            CallOptions o;
            o.timeout = timeout_;
            o.bulk_in = out.subspan(p.offset_in_buffer, p.length);
            proto::ChunkReadRequest req{{ino, p.chunk_index}, p.offset_in_chunk, p.length, chain_ranks(sl.chain), t.version};
            if (!fan.acquire()) break;
            asked.push_back(i);
            const Endpoint ep = endpoint(sl.rank);
            rpc::call_async<proto::ChunkRead>(ep, req, o, [finish = fan.completion(), slot = &sl, ep, ref = PieceRef{"chunk read", ino, p.chunk_index, sl.rank}](Result<proto::ChunkReadResponse> r, size_t bulk) {
                if (r.ok()) {
                    slot->reply = std::move(*r);
                    slot->bulk = bulk;
                    slot->status = Status::OK();
                } else {
                    slot->status = r.status().with_context(describe(ref, ep));
                }
                finish(Status::OK()); // the slot says how it went; the round goes on
            });
        }
        JOBFS_RETURN_IF_ERROR(fan.wait(replicated ? std::function<void()>([this] { leave_out_offline(); }) : nullptr));
        std::set<uint32_t> broken; // reconnected once each after the round
        for (size_t i : asked) {
            Slot& sl = slots[i];
            const ChunkPiece& p = pieces[i];
            if (!sl.status.ok()) {
                // A broken connection: the daemon may be back; the next read may use it again.
                if (sl.status.code() == Code::peer_gone || sl.status.code() == Code::cancelled) broken.insert(sl.rank);
                continue;
            }
            const proto::ChunkReadResponse& r = sl.reply;
            if (r.dirty) {
                sl.to_tail = true;
                sl.status = Status(Code::again, "chunk read of inode " + std::to_string(ino) + " chunk " +
                                                     std::to_string(p.chunk_index) + ": the tail did not answer");
                continue;
            }
            if (r.length > p.length || sl.bulk != r.length) {
                sl.status = Status(Code::protocol, "chunk read of " + std::to_string(p.length) + " bytes answered with " +
                                                       std::to_string(r.length) + " bytes and " + std::to_string(sl.bulk) +
                                                       " bytes of data");
                continue;
            }
            // End-to-end check: what arrived is what the daemon read and verified.
            const auto got = std::span<const uint8_t>(out.data() + p.offset_in_buffer, r.length);
            if (transport::first_bad_block(p.offset_in_chunk, got, r.crcs) >= 0) {
                sl.status = Status(Code::io, "chunk read of inode " + std::to_string(ino) + " chunk " +
                                                 std::to_string(p.chunk_index) + " from daemon " +
                                                 std::to_string(sl.rank) + ": checksum mismatch after transfer");
                JOBFS_WARN("%s", sl.status.message().c_str());
                continue;
            }
            sl.done = true;
        }
        for (uint32_t rank : broken) heal(rank);
        if (std::all_of(slots.begin(), slots.end(), [](const Slot& sl) { return sl.done; })) break;
    }
    // A short piece ran into a hole at the chunk's end or an absent chunk: the file size says
    // those bytes exist, so they are zeros.
    for (size_t i = 0; i < pieces.size(); ++i) {
        const ChunkPiece& p = pieces[i];
        std::memset(out.data() + p.offset_in_buffer + slots[i].reply.length, 0, p.length - slots[i].reply.length);
    }
    // A direct reader reads cold ranges past the page cache: a read-ahead into it is not for it.
    if (local_ && local_->cold_reads() == LocalReads::ColdReads::buffered) read_ahead(ino, layout, file_size, offset, length, t, cold);
    return static_cast<size_t>(length);
}

void FileIO::read_ahead(uint64_t ino, const Layout& layout, uint64_t file_size, uint64_t offset, uint64_t length,
                        const proto::ChainTable& t, bool cold) const {
    const SequentialReads::Range ahead = sequential_.after_read(ino, offset, length, file_size, cold);
    if (ahead.empty()) return;
    bool asked = false, local = false;
    for (const ChunkPiece& p : split_range(ahead.from, ahead.to - ahead.from, layout.chunk_size)) {
        const int rank = local_replica(ino, p.chunk_index, read_chain(ino, p.chunk_index, layout, t));
        if (rank < 0) continue;
        asked = local_->prefetch(static_cast<uint32_t>(rank), ino, p.chunk_index, p.offset_in_chunk, p.length) || asked;
        local = true;
    }
    // All of it in the page cache already: a hot file, read ahead again once a read finds
    // something that is not.
    if (local && !asked) sequential_.found_cached(ino);
}

Status FileIO::truncate_chunks(uint64_t ino, const Layout& layout, uint64_t old_size, uint64_t new_size) const {
    JOBFS_RETURN_IF_ERROR(check(layout));
    if (new_size >= old_size) return Status::OK();
    // Nothing survives: one request per daemon instead of one per chunk.
    if (new_size == 0) return remove_file(ino);
    const uint64_t cs = layout.chunk_size;
    const uint64_t last = (old_size - 1) / cs;
    uint64_t chunk = new_size / cs;
    const proto::ChainTable t = chain_length(layout, daemon_count()) > 1 ? current_table() : proto::ChainTable{};
    FanOut fan(kMaxInFlight);
    auto cut = [&](uint64_t index, uint64_t length) {
        const Chain chain = write_chain(ino, index, layout, t);
        for (uint32_t k = 0; k < chain.length; ++k) {
            const uint32_t rank = chain.ranks[k];
            CallOptions o;
            o.timeout = timeout_;
            if (!issue<proto::ChunkTruncate>(fan, endpoint(rank), proto::ChunkTruncateRequest{{ino, index}, length}, o,
                                             {"chunk truncate", ino, index, rank}))
                return false;
        }
        return true;
    };
    // The chunk holding the new end keeps its head; every later one is emptied (a truncate to
    // 0 of a chunk the daemon never had creates nothing).
    bool go = true;
    if (new_size % cs != 0) go = cut(chunk++, new_size % cs);
    for (; go && chunk <= last; ++chunk) go = cut(chunk, 0);
    return fan.wait();
}

Status FileIO::remove_file(uint64_t ino) const {
    if (daemons_.empty()) return Status(Code::invalid, "no data daemons to remove chunks from");
    // Daemons the table has taken offline are left alone (a restarted one drops what it missed
    // when it resyncs).
    const proto::ChainTable t = current_table();
    FanOut fan(kMaxInFlight);
    for (uint32_t rank = 0; rank < daemon_count(); ++rank) {
        if (t.states.size() == daemon_count() && t.states[rank] == proto::kDaemonOffline) continue;
        CallOptions o;
        o.timeout = timeout_;
        if (!issue<proto::FileRemoveChunks>(fan, endpoint(rank), proto::FileChunksRequest{ino}, o,
                                            {"remove chunks", ino, kNoChunk, rank}))
            break;
    }
    return fan.wait();
}

Status FileIO::sync(uint64_t ino, const Layout& layout, uint64_t size) const {
    JOBFS_RETURN_IF_ERROR(check(layout));
    if (size == 0) return Status::OK();
    // One call per daemon that holds a chunk of the file, which syncs all the file's chunks it
    // has at once (ChunkStore::sync_file): a call per chunk made the disk commit its journal
    // once per chunk, and every rank of an MPI_File_sync asks for all of them.
    const uint64_t last = (size - 1) / layout.chunk_size;
    const bool replicated = chain_length(layout, daemon_count()) > 1;
    const proto::ChainTable t = replicated ? current_table() : proto::ChainTable{};
    std::vector<bool> holds(daemon_count(), false);
    uint32_t holders = 0;
    for (uint64_t index = 0; index <= last && holders < daemon_count(); ++index) {
        const Chain chain = write_chain(ino, index, layout, t);
        for (uint32_t k = 0; k < chain.length; ++k)
            if (!holds[chain.ranks[k]]) {
                holds[chain.ranks[k]] = true;
                holders++;
            }
    }
    FanOut fan(kMaxInFlight);
    for (uint32_t rank = 0; rank < daemon_count(); ++rank) {
        if (!holds[rank]) continue;
        CallOptions o;
        // A daemon may have a few GiB of the file still to write out: longer than a call's
        // deadline. A dead or hung member of a replicated file is still left out at once.
        o.timeout = 4 * timeout_;
        if (!issue<proto::FileSync>(fan, endpoint(rank), proto::FileChunksRequest{ino}, o, {"sync", ino, kNoChunk, rank}))
            break;
    }
    return fan.wait(replicated ? std::function<void()>([this] { leave_out_offline(); }) : nullptr);
}

} // namespace jobfs::client
