// chunk_service.cc: the chunk RPCs; chain forwarding, CRAQ versions, end-to-end checksums and
// repair on read (chunk_service.h, docs/replication.md).
#include "server/chunk_service.h"

#include <boost/asio/post.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "block_crc.h"
#include "daemon_protocol.h"
#include "log.h"
#include "server/same_node_peers.h"

namespace jobfs::server {

using transport::OutBulk;
using transport::ServerCall;
namespace rpc = transport::rpc;

namespace {

// Pieces in which a repair copies a chunk: the largest read a chunk request may carry in one go
// is the chunk size, but a repair does not know the file's chunk size, only that a short answer
// means the chunk's end.
constexpr uint64_t kRepairPiece = 4ull << 20;

// This daemon's place in a request's chain, or -1.
int position(std::span<const uint32_t> chain, uint32_t rank) {
    auto it = std::find(chain.begin(), chain.end(), rank);
    return it == chain.end() ? -1 : static_cast<int>(it - chain.begin());
}

// Joins this daemon's own store with the successor's answer: replies once both are in, with the
// first error.
struct WriteJoin {
    explicit WriteJoin(int parts) : left(parts) {}
    std::mutex mu;
    int left;
    Status first;
    // True for the caller that completed the last part.
    bool done(Status s) {
        std::lock_guard l(mu);
        if (!s.ok() && first.ok()) first = std::move(s);
        return --left == 0;
    }
};

} // namespace

uint64_t ChunkService::begin_write(ChunkId id, uint64_t version) {
    std::lock_guard l(versions_mu_);
    Versions& v = versions_[id];
    if (version == 0) version = v.pending + 1;
    v.pending = std::max(v.pending, version);
    v.in_flight.insert(version);
    return version;
}

void ChunkService::end_write(ChunkId id, uint64_t version, bool failed_at_head) {
    std::lock_guard l(versions_mu_);
    auto it = versions_.find(id);
    if (it == versions_.end()) return;
    auto f = it->second.in_flight.find(version);
    if (f != it->second.in_flight.end()) it->second.in_flight.erase(f);
    // A version this head gave a write that the chain did not take was never committed: it must
    // not count as seen. (A head that was stopped, or cut off, and left out of the table meanwhile
    // may still run writes its clients gave up on; a resync of this daemon would otherwise wait
    // for a source to commit versions that exist here only.)
    if (failed_at_head && it->second.pending == version) it->second.pending = version - 1;
}

void ChunkService::forget_versions_after(ChunkId id, uint64_t version) {
    std::lock_guard l(versions_mu_);
    auto it = versions_.find(id);
    if (it != versions_.end() && it->second.in_flight.empty() && it->second.pending > version) it->second.pending = version;
}

bool ChunkService::dirty(ChunkId id, uint64_t* pending) {
    std::lock_guard l(versions_mu_);
    auto it = versions_.find(id);
    if (it == versions_.end() || it->second.in_flight.empty()) return false;
    *pending = it->second.pending;
    return true;
}

uint64_t ChunkService::committed(ChunkId id) {
    std::lock_guard l(versions_mu_);
    auto it = versions_.find(id);
    return it == versions_.end() ? 0 : it->second.committed();
}

uint64_t ChunkService::pending(ChunkId id) {
    std::lock_guard l(versions_mu_);
    auto it = versions_.find(id);
    return it == versions_.end() ? 0 : it->second.pending;
}

Status ChunkService::stale(uint64_t sender_version) const {
    // Unreplicated requests (R=1) carry no table: no lock of the membership for them.
    if (sender_version == 0) return Status::OK();
    const uint64_t mine = table_version_ ? table_version_() : 0;
    if (mine != 0 && sender_version < mine)
        return Status(Code::again, "chain table " + std::to_string(sender_version) + " is stale (daemon " +
                                       std::to_string(rank_) + " has " + std::to_string(mine) + ")");
    return Status::OK();
}

bool ChunkService::clean_here(ChunkId id, std::span<const uint32_t> chain, uint64_t* pending) {
    return chain.size() <= 1 || chain.back() == rank_ || !dirty(id, pending);
}

Status ChunkService::read_gate(ChunkId id, std::span<const uint32_t> chain, uint64_t table_version) {
    JOBFS_RETURN_IF_ERROR(stale(table_version));
    if (chain.size() > 1 && position(chain, rank_) < 0)
        return Status(Code::again, "daemon " + std::to_string(rank_) + " is not in the chain");
    uint64_t pending = 0;
    if (!clean_here(id, chain, &pending))
        return Status(Code::again, "a write of the chunk is in flight here: ask over the transport");
    return Status::OK();
}

Result<std::vector<uint8_t>> ChunkService::fetch(ChunkId id, uint32_t source_rank) {
    if (!peer_) return Status(Code::unsupported, "no peers to copy from");
    auto ep = peer_(source_rank);
    if (!ep.ok()) return ep.status();
    std::vector<uint8_t> data;
    for (uint64_t off = 0;; off += kRepairPiece) {
        data.resize(off + kRepairPiece);
        transport::CallOptions o;
        o.bulk_in = std::span<uint8_t>(data.data() + off, kRepairPiece);
        auto r = rpc::call<proto::ChunkRead>(*ep, proto::ChunkReadRequest{{id.ino, id.index}, off, kRepairPiece, {}, 0}, o);
        if (!r.ok()) return r.status().with_context("copy from daemon " + std::to_string(source_rank));
        const auto got = std::span<const uint8_t>(data.data() + off, r->length);
        if (transport::first_bad_block(off, got, r->crcs) >= 0)
            return Status(Code::io, "daemon " + std::to_string(source_rank) + " sent a corrupt copy");
        data.resize(off + r->length);
        if (r->length < kRepairPiece || data.size() >= store_.chunk_size()) break;
    }
    return data;
}

Status ChunkService::install(ChunkId id, const std::vector<uint8_t>& data) {
    // The local copy cannot be trusted anywhere: start from nothing.
    JOBFS_RETURN_IF_ERROR(store_.truncate(id, 0));
    if (!data.empty()) JOBFS_RETURN_IF_ERROR(store_.write(id, 0, data));
    return store_.sync(id);
}

Status ChunkService::repair_from(ChunkId id, uint32_t source_rank) {
    auto data = fetch(id, source_rank);
    if (!data.ok()) return data.status().with_context("repair");
    {
        std::unique_lock g(guard(id));
        JOBFS_RETURN_IF_ERROR(install(id, *data));
    }
    JOBFS_WARN("repaired chunk %llu.%llu (%zu bytes) from daemon %u", static_cast<unsigned long long>(id.ino),
               static_cast<unsigned long long>(id.index), data->size(), source_rank);
    return Status::OK();
}

Status ChunkService::repair_from_any(ChunkId id, const std::vector<uint32_t>& chain) {
    Status s(Code::io, "no other copy to repair from");
    for (uint32_t other : chain) {
        if (other == rank_) continue;
        s = repair_from(id, other);
        if (s.ok()) return s;
        JOBFS_WARN("repair of chunk %llu.%llu from daemon %u failed: %s", static_cast<unsigned long long>(id.ino),
                   static_cast<unsigned long long>(id.index), other, s.message().c_str());
    }
    return s;
}

Result<uint64_t> ChunkService::resync_chunk(ChunkId id, uint32_t source) {
    auto ep = peer_ ? peer_(source) : Result<transport::Endpoint>(Status(Code::peer_gone, "no peers"));
    if (!ep.ok()) return ep.status();
    for (int attempt = 0; attempt < 100; ++attempt) {
        const uint64_t seen = pending(id);
        // The source must hold every write of this chunk that reached us: it stores a write
        // at the same time as it forwards it here, so wait for its commit.
        auto v = rpc::call<proto::ChunkVersion>(*ep, proto::ChunkRef{id.ino, id.index});
        if (!v.ok()) return v.status();
        // Versions past all the source ever began, with nothing in flight there, were given up
        // by their head: a forward it abandoned when this daemon stopped answering, delivered
        // when it went on (shared memory keeps what was queued). Nothing will commit them.
        const bool given_up = v->pending < seen && v->committed == v->pending;
        if (v->committed < seen && !given_up) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            continue;
        }
        auto data = fetch(id, source);
        if (!data.ok()) return data.status();
        std::unique_lock g(guard(id));
        uint64_t dummy;
        if (pending(id) != seen || dirty(id, &dummy)) continue; // a write came meanwhile: again
        JOBFS_RETURN_IF_ERROR(install(id, *data));
        if (given_up) forget_versions_after(id, v->pending);
        return static_cast<uint64_t>(data->size());
    }
    return Status(Code::busy, "chunk " + std::to_string(id.ino) + "." + std::to_string(id.index) +
                                  " kept changing during its resync");
}

Result<proto::ChunkExtentsResponse> ChunkService::extents() {
    auto e = store_.extents();
    if (!e.ok()) return e.status();
    proto::ChunkExtentsResponse out;
    for (auto [ino, n] : *e) {
        out.inos.push_back(ino);
        out.chunks.push_back(n);
    }
    return out;
}

Status ChunkService::remove_file(uint64_t ino) {
    {
        std::lock_guard l(versions_mu_);
        std::erase_if(versions_, [&](const auto& kv) { return kv.first.ino == ino; });
    }
    return store_.remove_file(ino);
}

Result<std::vector<uint8_t>> ChunkService::read_whole(ChunkId id) {
    std::vector<uint8_t> data;
    for (uint64_t off = 0;; off += kRepairPiece) {
        data.resize(off + kRepairPiece);
        auto n = store_.read(id, off, std::span<uint8_t>(data.data() + off, kRepairPiece));
        if (!n.ok()) return n.status();
        data.resize(off + *n);
        if (*n < kRepairPiece || data.size() >= store_.chunk_size()) break;
    }
    return data;
}

void ChunkService::store_and_forward(ServerCall call, std::shared_ptr<proto::ChunkWriteRequest> r, int pos,
                                     std::span<const uint8_t> data, std::shared_ptr<const void> keep) {
    boost::asio::post(pool_, [this, call, r, pos, data, keep] {
        const ChunkId id{r->chunk.ino, r->chunk.index};
        if (!r->crcs.empty() && transport::first_bad_block(r->offset, data, r->crcs) >= 0) {
            JOBFS_ERROR("chunk write of %llu.%llu arrived with bad checksums: refused", static_cast<unsigned long long>(id.ino),
                        static_cast<unsigned long long>(id.index));
            return call.reply(Status(Code::io, "chunk write arrived corrupt at daemon " + std::to_string(rank_)));
        }
        // r->crcs now checked: the store keeps them for the blocks written whole.
        if (r->chain.size() <= 1) return call.reply(store_.write(id, r->offset, data, r->crcs)); // R=1: no hop
        const bool numbered_here = r->version == 0; // this daemon is the head
        r->version = begin_write(id, r->version);
        const bool forward = static_cast<size_t>(pos) + 1 < r->chain.size();
        auto join = std::make_shared<WriteJoin>(forward ? 2 : 1);
        auto finish = [this, call, id, r, join, numbered_here](Status st) {
            if (!join->done(std::move(st))) return;
            end_write(id, r->version, numbered_here && !join->first.ok());
            call.reply(join->first);
        };
        if (forward) {
            const uint32_t next = r->chain[pos + 1];
            SameNodePeers* same_node = same_node_.load();
            auto ep = same_node ? same_node->data(next, data.size())
                      : peer_   ? peer_(next)
                                : Result<transport::Endpoint>(Status(Code::peer_gone, "no peers"));
            if (!ep.ok()) {
                finish(ep.status().with_context("forward to daemon " + std::to_string(next)));
            } else {
                transport::CallOptions o;
                o.bulk_out = data;
                o.keep = keep; // a stopped successor must not hold up the reply (same_node_peers.h)
                rpc::call_async<proto::ChunkWrite>(*ep, *r, o, [finish, keep, next](Result<proto::Empty> res, size_t) {
                    finish(res.ok() ? Status::OK() : res.status().with_context("chain successor daemon " + std::to_string(next)));
                });
            }
        }
        Status stored;
        {
            std::shared_lock g(guard(id));
            stored = store_.write(id, r->offset, data, r->crcs);
        }
        finish(std::move(stored));
    });
}

ChunkService::ChunkService(transport::Worker& worker, ChunkStore& store, boost::asio::thread_pool& pool, uint32_t rank,
                           PeerFn peer, TableVersionFn table_version)
    : store_(store), pool_(pool), rank_(rank), peer_(std::move(peer)), table_version_(std::move(table_version)) {
    auto* self = this;
    auto stale = [self](uint64_t sender_version) { return self->stale(sender_version); };

    rpc::serve<proto::ChunkWrite>(worker, [self, stale](ServerCall call, proto::ChunkWriteRequest&& req) {
        // A write whose bytes are in a client's arena (write_arenas.h) carries no bulk.
        const bool in_arena = req.arena != 0;
        if ((in_arena ? 0 : req.length) != call.bulk_length())
            return call.reply(Status(Code::protocol, "chunk write announces " + std::to_string(req.length) +
                                                         (in_arena ? " bytes in a write arena" : " bytes") + " but carries " +
                                                         std::to_string(call.bulk_length())));
        if (req.offset > self->store_.chunk_size() || req.length > self->store_.chunk_size() - req.offset)
            return call.reply(Status(Code::invalid, "chunk write past the chunk size"));
        if (Status s = stale(req.table_version); !s.ok()) return call.reply(s);
        const int pos = req.chain.size() > 1 ? position(req.chain, self->rank_) : 0;
        if (pos < 0)
            return call.reply(Status(Code::again, "daemon " + std::to_string(self->rank_) + " is not in the chain"));
        auto r = std::make_shared<proto::ChunkWriteRequest>(std::move(req));
        if (in_arena) {
            const WriteArenas* arenas = self->arenas_.load();
            if (!arenas) return call.reply(Status(Code::not_found, "daemon " + std::to_string(self->rank_) + " takes no write arenas"));
            auto range = arenas->range(r->arena, r->arena_offset, r->length);
            if (!range.ok()) return call.reply(range.status());
            r->arena = r->arena_offset = 0; // what the chain's next member gets carries the bytes
            self->arena_write_bytes_.fetch_add(r->length, std::memory_order_relaxed);
            return self->store_and_forward(call, r, pos, range->second, range->first);
        }
        auto buf = self->buffers_.get(r->length);
        call.receive_bulk(*buf, [self, call, buf, r, pos](Status s) {
            if (!s.ok()) return call.reply(s);
            self->store_and_forward(call, r, pos, *buf, buf);
        });
    });

    // Serves a read from the local copy; a corrupt copy is repaired from another replica first.
    auto serve_read = [self](ServerCall call, proto::ChunkReadRequest req) {
        boost::asio::post(self->pool_, [self, call, req] {
            const ChunkId id{req.chunk.ino, req.chunk.index};
            auto buf = self->buffers_.get(req.length);
            std::vector<uint32_t> crcs; // the stored checksums of the blocks it returns whole
            auto n = self->store_.read(id, req.offset, *buf, &crcs);
            if (!n.ok() && n.status().code() == Code::io && req.chain.size() > 1) {
                // Any other replica of the chain; the reader checks what it gets in the end.
                if (self->repair_from_any(id, req.chain).ok()) n = self->store_.read(id, req.offset, *buf, &crcs);
            }
            if (!n.ok()) return call.reply(n.status());
            const auto data = std::span<const uint8_t>(buf->data(), *n);
            rpc::reply<proto::ChunkRead>(call, proto::ChunkReadResponse{*n, std::move(crcs), false}, OutBulk{data, buf});
        });
    };
    rpc::serve<proto::ChunkRead>(worker, [self, stale, serve_read](ServerCall call, proto::ChunkReadRequest&& req) {
        if (req.length > self->store_.chunk_size())
            return call.reply(Status(Code::invalid, "chunk read larger than the chunk size"));
        if (Status s = stale(req.table_version); !s.ok()) return call.reply(s);
        const ChunkId id{req.chunk.ino, req.chunk.index};
        uint64_t pending = 0;
        if (self->clean_here(id, req.chain, &pending)) return serve_read(call, std::move(req));
        // CRAQ: a dirty copy may be read only if the tail has committed what it holds.
        const uint32_t tail = req.chain.back();
        auto ep = self->peer_ ? self->peer_(tail) : Result<transport::Endpoint>(Status(Code::peer_gone, "no peers"));
        auto redirect = [call] { rpc::reply<proto::ChunkRead>(call, proto::ChunkReadResponse{0, {}, true}); };
        if (!ep.ok()) return redirect();
        rpc::call_async<proto::ChunkVersion>(*ep, req.chunk, {},
                                             [call, req, pending, serve_read, redirect](Result<proto::ChunkVersionResponse> v, size_t) {
                                                 if (v.ok() && v->committed >= pending) return serve_read(call, req);
                                                 redirect();
                                             });
    });
    rpc::serve<proto::ChunkScrub>(worker, [self](ServerCall call, proto::ChunkScrubRequest&& req) {
        boost::asio::post(self->pool_, [self, call, req] {
            const ChunkId id{req.chunk.ino, req.chunk.index};
            proto::ChunkScrubResponse out;
            auto data = self->read_whole(id);
            uint32_t source = req.repair_from;
            if (!data.ok()) {
                if (data.status().code() != Code::io) return call.reply(data.status());
                out.corrupt = true;
                JOBFS_ERROR("scrub: chunk %llu.%llu is corrupt: %s", static_cast<unsigned long long>(id.ino),
                            static_cast<unsigned long long>(id.index), data.status().message().c_str());
            }
            if (out.corrupt || source != proto::kNoRank) {
                Status s = source != proto::kNoRank && source != self->rank_ ? self->repair_from(id, source)
                                                                             : self->repair_from_any(id, req.chain);
                if (!s.ok()) return call.reply(s.with_context("scrub repair of chunk " + std::to_string(id.ino) + "." +
                                                              std::to_string(id.index)));
                out.repaired = true;
                data = self->read_whole(id);
                if (!data.ok()) return call.reply(data.status());
            }
            out.length = data->size();
            out.crc = transport::crc32c(*data);
            rpc::reply<proto::ChunkScrub>(call, out);
        });
    });
    rpc::serve<proto::ChunkResync>(worker, [self](ServerCall call, proto::ChunkResyncRequest&& req) {
        boost::asio::post(self->resync_pool_, [self, call, req] {
            auto n = self->resync_chunk(ChunkId{req.chunk.ino, req.chunk.index}, req.source);
            if (!n.ok()) return call.reply(n.status());
            rpc::reply<proto::ChunkResync>(call, proto::ResyncResponse{1, *n});
        });
    });
    rpc::serve<proto::ChunkExtents>(worker, [self](ServerCall call, proto::Empty&&) {
        boost::asio::post(self->pool_, [self, call] {
            auto e = self->extents();
            if (!e.ok()) return call.reply(e.status());
            rpc::reply<proto::ChunkExtents>(call, *e);
        });
    });
    rpc::serve<proto::ChunkVersion>(worker, [self](ServerCall call, proto::ChunkRef&& req) {
        const ChunkId id{req.ino, req.index};
        rpc::reply<proto::ChunkVersion>(call, proto::ChunkVersionResponse{self->committed(id), self->pending(id)});
    });
    rpc::serve<proto::ChunkTruncate>(worker, [self](ServerCall call, proto::ChunkTruncateRequest&& req) {
        boost::asio::post(self->pool_, [self, call, req] {
            call.reply(self->store_.truncate(ChunkId{req.chunk.ino, req.chunk.index}, req.length));
        });
    });
    rpc::serve<proto::ChunkSync>(worker, [self](ServerCall call, proto::ChunkRef&& req) {
        boost::asio::post(self->pool_, [self, call, req] { call.reply(self->store_.sync(ChunkId{req.ino, req.index})); });
    });
    rpc::serve<proto::FileSync>(worker, [self](ServerCall call, proto::FileChunksRequest&& req) {
        boost::asio::post(self->pool_, [self, call, req] { call.reply(self->store_.sync_file(req.ino)); });
    });
    rpc::serve<proto::FileRemoveChunks>(worker, [self](ServerCall call, proto::FileChunksRequest&& req) {
        boost::asio::post(self->pool_, [self, call, req] { call.reply(self->remove_file(req.ino)); });
    });
    rpc::serve<proto::DiskSpace>(worker, [self](ServerCall call, proto::Empty&&) {
        boost::asio::post(self->pool_, [self, call] {
            auto s = self->store_.space();
            if (!s.ok()) return call.reply(s.status());
            rpc::reply<proto::DiskSpace>(call, proto::SpaceResponse{s->total_bytes, s->free_bytes, s->chunk_files});
        });
    });
}

} // namespace jobfs::server
