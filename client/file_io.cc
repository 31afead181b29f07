// file_io.cc: chunk RPCs fanned out over the daemons. See file_io.h for the guarantees.
#include "client/file_io.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

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

    // Waits until every call issued has completed; the first error, or ok.
    Status wait() {
        std::unique_lock lock(state_->mu);
        state_->cv.wait(lock, [&] { return state_->in_flight == 0; });
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

} // namespace

FileIO::FileIO(std::vector<transport::Endpoint> daemons, std::chrono::milliseconds timeout)
    : daemons_(std::move(daemons)), timeout_(timeout) {}

Status FileIO::check(const Layout& layout) const {
    if (daemons_.empty()) return Status(Code::invalid, "no data daemons to store chunks on");
    if (layout.chunk_size == 0) return Status(Code::invalid, "layout with a chunk size of 0");
    return Status::OK();
}

Status FileIO::pwrite(uint64_t ino, const Layout& layout, uint64_t offset, std::span<const uint8_t> data) const {
    JOBFS_RETURN_IF_ERROR(check(layout));
    if (data.size() > std::numeric_limits<uint64_t>::max() - offset)
        return Status(Code::too_large, "write past the largest file offset");
    FanOut fan(kMaxInFlight);
    for (const ChunkPiece& p : split_range(offset, data.size(), layout.chunk_size)) {
        const uint32_t rank = chunk_daemon(ino, p.chunk_index, layout, daemon_count());
        CallOptions o;
        o.timeout = timeout_;
        o.bulk_out = data.subspan(p.offset_in_buffer, p.length);
        proto::ChunkWriteRequest req{{ino, p.chunk_index}, p.offset_in_chunk, p.length};
        if (!issue<proto::ChunkWrite>(fan, daemons_[rank], req, o, {"chunk write", ino, p.chunk_index, rank}))
            break;
    }
    return fan.wait();
}

Result<size_t> FileIO::pread(uint64_t ino, const Layout& layout, uint64_t file_size, uint64_t offset,
                             std::span<uint8_t> out) const {
    JOBFS_RETURN_IF_ERROR(check(layout));
    if (offset >= file_size || out.empty()) return size_t{0};
    const uint64_t length = std::min<uint64_t>(out.size(), file_size - offset);
    const std::vector<ChunkPiece> pieces = split_range(offset, length, layout.chunk_size);
    // Bytes each piece's chunk actually held; written by the callbacks, one slot each, and read
    // only after wait() has seen every callback finish.
    std::vector<uint64_t> held(pieces.size(), 0);
    FanOut fan(kMaxInFlight);
    for (size_t i = 0; i < pieces.size(); ++i) {
        const ChunkPiece& p = pieces[i];
        const uint32_t rank = chunk_daemon(ino, p.chunk_index, layout, daemon_count());
        CallOptions o;
        o.timeout = timeout_;
        o.bulk_in = out.subspan(p.offset_in_buffer, p.length);
        proto::ChunkReadRequest req{{ino, p.chunk_index}, p.offset_in_chunk, p.length};
        auto on_reply = [slot = &held[i], want = p.length](const proto::ChunkReadResponse& r, size_t bulk) {
            if (r.length > want || bulk != r.length)
                return Status(Code::protocol, "chunk read of " + std::to_string(want) + " bytes answered with " +
                                                  std::to_string(r.length) + " bytes and " + std::to_string(bulk) +
                                                  " bytes of data");
            *slot = r.length;
            return Status::OK();
        };
        if (!issue<proto::ChunkRead>(fan, daemons_[rank], req, o, {"chunk read", ino, p.chunk_index, rank}, on_reply))
            break;
    }
    JOBFS_RETURN_IF_ERROR(fan.wait());
    // A short piece ran into a hole at the chunk's end or an absent chunk: the file size says
    // those bytes exist, so they are zeros (done here, not in the callbacks, to keep the
    // transport's thread free of large memsets).
    for (size_t i = 0; i < pieces.size(); ++i) {
        const ChunkPiece& p = pieces[i];
        std::memset(out.data() + p.offset_in_buffer + held[i], 0, p.length - held[i]);
    }
    return static_cast<size_t>(length);
}

Status FileIO::truncate_chunks(uint64_t ino, const Layout& layout, uint64_t old_size, uint64_t new_size) const {
    JOBFS_RETURN_IF_ERROR(check(layout));
    if (new_size >= old_size) return Status::OK();
    // Nothing survives: one request per daemon instead of one per chunk.
    if (new_size == 0) return remove_file(ino);
    const uint64_t cs = layout.chunk_size;
    const uint64_t last = (old_size - 1) / cs;
    uint64_t chunk = new_size / cs;
    FanOut fan(kMaxInFlight);
    auto cut = [&](uint64_t index, uint64_t length) {
        const uint32_t rank = chunk_daemon(ino, index, layout, daemon_count());
        CallOptions o;
        o.timeout = timeout_;
        return issue<proto::ChunkTruncate>(fan, daemons_[rank], proto::ChunkTruncateRequest{{ino, index}, length}, o,
                                           {"chunk truncate", ino, index, rank});
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
    FanOut fan(kMaxInFlight);
    for (uint32_t rank = 0; rank < daemon_count(); ++rank) {
        CallOptions o;
        o.timeout = timeout_;
        if (!issue<proto::FileRemoveChunks>(fan, daemons_[rank], proto::FileChunksRequest{ino}, o,
                                            {"remove chunks", ino, kNoChunk, rank}))
            break;
    }
    return fan.wait();
}

Status FileIO::sync(uint64_t ino, const Layout& layout, uint64_t size) const {
    JOBFS_RETURN_IF_ERROR(check(layout));
    if (size == 0) return Status::OK();
    const uint64_t last = (size - 1) / layout.chunk_size;
    FanOut fan(kMaxInFlight);
    for (uint64_t index = 0; index <= last; ++index) {
        const uint32_t rank = chunk_daemon(ino, index, layout, daemon_count());
        CallOptions o;
        o.timeout = timeout_;
        if (!issue<proto::ChunkSync>(fan, daemons_[rank], proto::ChunkRef{ino, index}, o,
                                     {"chunk sync", ino, index, rank}))
            break;
    }
    return fan.wait();
}

} // namespace jobfs::client
