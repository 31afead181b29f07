// resync.cc: see resync.h.
#include "server/resync.h"

#include <boost/asio/post.hpp>

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <unordered_set>
#include <thread>

#include "log.h"
#include "placement.h"
#include "rpc.h"

namespace jobfs::server {

namespace rpc = transport::rpc;
using transport::ServerCall;

Resync::Resync(transport::Worker& worker, MetaShard& shard, Membership& membership, ChunkService& chunks, uint32_t rank,
               uint32_t size, PeerFn peer)
    : shard_(shard), membership_(membership), chunks_(chunks), rank_(rank), size_(size), peer_(std::move(peer)) {
    rpc::serve<proto::ResyncShard>(worker, [this](ServerCall call, proto::ResyncShardRequest&& req) {
        boost::asio::post(pool_, [this, call, req] {
            auto r = walk(req.target);
            if (!r.ok()) return call.reply(r.status());
            rpc::reply<proto::ResyncShard>(call, *r);
        });
    });
}

Resync::~Resync() { stop(); }

void Resync::stop() {
    stopping_ = true;
    pool_.join();
}

Result<proto::ResyncResponse> Resync::walk(uint32_t target) {
    const proto::ChainTable t = membership_.table();
    proto::ResyncResponse out;
    uint64_t without_source = 0;
    auto target_ep = target == rank_ ? Result<transport::Endpoint>(transport::Endpoint()) : peer_(target);
    if (!target_ep.ok()) return target_ep.status();
    // The size in an inode is settled at close: a file still being written may have chunks
    // past it (written while the target was away). So the walk also goes as far as any
    // daemon that is not offline holds chunks of the file; the target's own count too, so
    // that its copies of chunks cut off by a truncate while it was away are emptied (a later
    // extension must read zeros there, not the old bytes).
    std::unordered_map<uint64_t, uint64_t> held;
    // For the garbage collection below: the files the target holds chunks of, and those any
    // other daemon holds chunks of (known only if none of them is offline).
    std::unordered_set<uint64_t> on_target, elsewhere;
    bool others_listed = true;
    for (uint32_t r = 0; r < size_; ++r) {
        if (r != target && t.states.size() == size_ && t.states[r] == proto::kDaemonOffline) {
            others_listed = false;
            continue;
        }
        Result<proto::ChunkExtentsResponse> e = Status(Code::internal, "unset");
        if (r == rank_) {
            e = chunks_.extents();
        } else {
            auto ep = r == target ? target_ep : peer_(r);
            e = ep.ok() ? rpc::call<proto::ChunkExtents>(*ep, proto::Empty{}) : Result<proto::ChunkExtentsResponse>(ep.status());
        }
        if (!e.ok()) return e.status().with_context("list the chunks of daemon " + std::to_string(r));
        for (size_t i = 0; i < e->inos.size() && i < e->chunks.size(); ++i) {
            uint64_t& top = held[e->inos[i]];
            top = std::max(top, e->chunks[i]);
            (r == target ? on_target : elsewhere).insert(e->inos[i]);
        }
    }
    // Listed after the chunks: a file whose chunks were listed was created before, so it is
    // here unless it was deleted since.
    auto files = shard_.regular_files();
    if (!files.ok()) return files.status();
    std::unordered_set<uint64_t> live;
    for (const Attr& a : *files) live.insert(a.ino);
    // And the replicated files whose last link went but whose chunks some other daemon still
    // holds: unlinked while open on a client, which goes on reading and writing them (and
    // whose last close removes them). Their inode is gone; the shard kept their layout.
    auto removed = shard_.removed_files();
    if (!removed.ok()) return removed.status();
    for (const Attr& a : *removed)
        if (elsewhere.count(a.ino) && !live.count(a.ino)) files->push_back(a);
    for (const Attr& a : *files) {
        const placement::Layout l{a.chunk_size ? a.chunk_size : 4ull << 20, a.stripe_count, a.replicas};
        uint64_t chunks = (a.size + l.chunk_size - 1) / l.chunk_size;
        if (auto h = held.find(a.ino); h != held.end()) chunks = std::max(chunks, h->second);
        for (uint64_t i = 0; i < chunks; ++i) {
            const placement::Chain c = placement::chunk_chain(a.ino, i, l, size_);
            if (c.length < 2 || !c.contains(target)) continue;
            uint32_t source = proto::kNoRank;
            for (uint32_t k = 0; k < c.length && source == proto::kNoRank; ++k)
                if (c.ranks[k] != target && t.states.size() == size_ && t.states[c.ranks[k]] == proto::kDaemonServing)
                    source = c.ranks[k];
            if (source == proto::kNoRank) {
                JOBFS_WARN("resync of daemon %u: no serving copy of chunk %llu.%llu", target,
                           static_cast<unsigned long long>(a.ino), static_cast<unsigned long long>(i));
                without_source++;
                continue;
            }
            uint64_t bytes = 0;
            if (target == rank_) {
                auto n = chunks_.resync_chunk(ChunkId{a.ino, i}, source);
                if (!n.ok()) return n.status();
                bytes = *n;
            } else {
                auto r = rpc::call<proto::ChunkResync>(*target_ep, proto::ChunkResyncRequest{{a.ino, i}, source});
                if (!r.ok()) return r.status();
                bytes = r->bytes;
            }
            out.chunks++;
            out.bytes += bytes;
        }
    }
    if (without_source)
        return Status(Code::again, std::to_string(without_source) + " chunks of daemon " + std::to_string(target) +
                                       " have no serving copy to copy from");
    // Garbage: chunks of this shard's files deleted while the target was away (the client's
    // removal left offline daemons out). A file counts as deleted only if no daemon but the
    // target holds any chunk of it either: a file unlinked while a client still has it open
    // has no inode any more, but its chunks stay on the serving daemons until that client
    // closes it, so those are kept here too (and were brought up to date above).
    if (others_listed) {
        for (uint64_t ino : on_target) {
            if (proto::shard_of(ino) != shard_.shard_id() || live.count(ino) || elsewhere.count(ino)) continue;
            Status s = target == rank_ ? chunks_.remove_file(ino)
                                       : rpc::call<proto::FileRemoveChunks>(*target_ep, proto::FileChunksRequest{ino}).status();
            if (!s.ok()) return s.with_context("remove the chunks of deleted inode " + std::to_string(ino) +
                                               " from daemon " + std::to_string(target));
            out.removed_files++;
        }
    }
    return out;
}

void Resync::rejoin() {
    {
        std::lock_guard l(mu_);
        again_ = true;
        if (running_) return;
        running_ = true;
    }
    boost::asio::post(pool_, [this] {
        for (;;) {
            {
                std::lock_guard l(mu_);
                if (!again_ || stopping_) {
                    running_ = false;
                    return;
                }
                again_ = false;
            }
            if (!rejoin_once()) continue; // stopped (the loop ends) or taken offline again
            std::lock_guard l(mu_);
            if (!again_) {
                running_ = false;
                return;
            }
        }
    });
}

bool Resync::peers_know(uint64_t version) {
    for (;;) {
        const proto::ChainTable t = membership_.table();
        std::vector<uint32_t> behind;
        for (uint32_t r = 0; r < size_; ++r) {
            if (r == rank_ || (t.states.size() == size_ && t.states[r] == proto::kDaemonOffline)) continue;
            auto ep = peer_(r);
            transport::CallOptions o;
            o.timeout = std::chrono::seconds(2);
            auto theirs = ep.ok() ? rpc::call<proto::ChainTableGet>(*ep, proto::Empty{}, o) : Result<proto::ChainTable>(ep.status());
            if (!theirs.ok() || theirs->version < version) behind.push_back(r);
        }
        if (behind.empty()) return true;
        if (stopping_) return false;
        {
            std::lock_guard l(mu_);
            if (again_) return false;
        }
        membership_.republish(); // (a peer that missed the push gets it again)
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
}

bool Resync::catch_up_metadata() {
    if (!before_serving_) return true;
    for (;;) {
        Status st = before_serving_();
        if (st.ok()) return true;
        JOBFS_WARN("resync: %s; trying again", st.to_string().c_str());
        if (stopping_) return false;
        std::this_thread::sleep_for(std::chrono::seconds(1));
        std::lock_guard l(mu_);
        if (again_) return false;
    }
}

bool Resync::rejoin_once() {
    const auto t0 = std::chrono::steady_clock::now();
    membership_.set_sync_progress(0, size_);
    membership_.set_own_state(proto::kDaemonSyncing);
    // Every write from here on must reach this daemon: a head still using a table that has it
    // offline would write chunks without it that the walk below may already have passed (seen
    // after a network partition healed: a peer whose connection here was broken learned of
    // the syncing table seconds late, and an acknowledged file read back stale from here).
    // So first every daemon that is not offline must have this table; then writes a head
    // accepted under an older one finish within a call's time.
    if (!peers_know(membership_.table_version())) return false;
    std::this_thread::sleep_for(std::chrono::seconds(1));
    // Metadata first: the walk of this daemon's own shard below reads its copy of the shard.
    if (!catch_up_metadata()) return false;
    proto::ResyncResponse total;
    std::vector<bool> walked(size_, false);
    uint32_t done = 0;
    // A walk that failed (a source died, a chunk has no serving copy yet) is tried again each
    // second: serving before every chunk is here would hand out holes for data. The shard of
    // a daemon that is offline is skipped: its files are unreachable while it is gone.
    for (uint32_t pass = 0; done < size_; ++pass) {
        if (stopping_) return false;
        {
            std::lock_guard l(mu_);
            if (again_) return false; // taken offline meanwhile: writes missed us; start over
        }
        if (pass > 0) std::this_thread::sleep_for(std::chrono::seconds(1));
        const proto::ChainTable t = membership_.table();
        for (uint32_t r = 0; r < size_; ++r) {
            if (walked[r]) continue;
            Result<proto::ResyncResponse> got = Status(Code::internal, "unset");
            if (r != rank_ && t.states.size() == size_ && t.states[r] == proto::kDaemonOffline) {
                got = Status(Code::peer_gone, "daemon " + std::to_string(r) + " is offline");
            } else if (r == rank_) {
                got = walk(rank_);
            } else {
                auto ep = peer_(r);
                if (ep.ok()) {
                    transport::CallOptions o;
                    o.timeout = std::chrono::hours(1); // a walk copies a shard's worth of chunks
                    got = rpc::call<proto::ResyncShard>(*ep, proto::ResyncShardRequest{rank_}, o);
                } else {
                    got = ep.status();
                }
            }
            if (got.ok()) {
                total.chunks += got->chunks;
                total.bytes += got->bytes;
                total.removed_files += got->removed_files;
            } else if (got.status().code() == Code::peer_gone && r != rank_ && t.states[r] == proto::kDaemonOffline) {
                JOBFS_WARN("resync: the files of shard %u were not walked: %s", r, got.status().message().c_str());
            } else {
                if (pass == 0) JOBFS_WARN("resync: the files of shard %u: %s; trying again", r, got.status().message().c_str());
                continue;
            }
            walked[r] = true;
            membership_.set_sync_progress(++done, size_);
        }
    }
    {
        std::lock_guard l(mu_);
        if (again_) return false; // taken offline during the last walk: it may have missed writes
    }
    if (!catch_up_metadata()) return false; // (changes made during the walk came as changesets)
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    JOBFS_WARN("resync done: %llu chunks, %llu bytes copied, chunks of %llu deleted files removed in %.1f s; "
               "serving again",
               static_cast<unsigned long long>(total.chunks), static_cast<unsigned long long>(total.bytes),
               static_cast<unsigned long long>(total.removed_files), secs);
    membership_.set_own_state(proto::kDaemonServing);
    return true;
}

} // namespace jobfs::server
