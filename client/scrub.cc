// scrub.cc: see scrub.h.
#include "client/scrub.h"

#include <algorithm>
#include <future>
#include <vector>

#include "daemon_protocol.h"
#include "log.h"
#include "rpc.h"

namespace jobfs::client {
namespace {

namespace rpc = transport::rpc;

constexpr size_t kParallel = 8;

struct CopyResult {
    uint32_t rank = 0;
    Result<proto::ChunkScrubResponse> r = Status(Code::internal, "not asked");
};

// Scrubs every serving copy of one chunk and fixes copies that differ from the tail's.
void scrub_chunk(Client& c, uint64_t ino, uint64_t index, const Chain& chain, ScrubReport& rep) {
    std::vector<uint32_t> ranks(chain.ranks.begin(), chain.ranks.begin() + chain.length);
    std::vector<CopyResult> copies;
    for (uint32_t rank : ranks) {
        CopyResult cr;
        cr.rank = rank;
        cr.r = rpc::call<proto::ChunkScrub>(c.daemons()[rank], proto::ChunkScrubRequest{{ino, index}, ranks, proto::kNoRank});
        copies.push_back(std::move(cr));
    }
    const CopyResult* tail = nullptr;
    for (auto& cr : copies) {
        rep.copies++;
        if (!cr.r.ok()) {
            if (cr.r.status().code() == Code::io) {
                rep.corrupt++;
                rep.unrepaired++;
            } else {
                rep.unreachable++;
            }
            JOBFS_ERROR("scrub: inode %llu chunk %llu on daemon %u: %s", static_cast<unsigned long long>(ino),
                        static_cast<unsigned long long>(index), cr.rank, cr.r.status().message().c_str());
            continue;
        }
        rep.bytes += cr.r->length;
        if (cr.r->corrupt) rep.corrupt++;
        if (cr.r->repaired) rep.repaired++;
        if (cr.rank == chain.tail()) tail = &cr;
    }
    if (!tail) return;
    for (auto& cr : copies) {
        if (&cr == tail || !cr.r.ok()) continue;
        if (cr.r->length == tail->r->length && cr.r->crc == tail->r->crc) continue;
        rep.mismatched++;
        JOBFS_WARN("scrub: inode %llu chunk %llu on daemon %u differs from the tail's (daemon %u): replacing it",
                   static_cast<unsigned long long>(ino), static_cast<unsigned long long>(index), cr.rank, tail->rank);
        auto fix = rpc::call<proto::ChunkScrub>(c.daemons()[cr.rank],
                                                proto::ChunkScrubRequest{{ino, index}, ranks, tail->rank});
        if (fix.ok() && fix->length == tail->r->length && fix->crc == tail->r->crc) rep.repaired++;
        else rep.unrepaired++;
    }
}

Status scrub_file(Client& c, const proto::Attr& a, const proto::ChainTable& t, ScrubReport& rep) {
    const Layout l{a.chunk_size ? a.chunk_size : 4ull << 20, a.stripe_count, a.replicas};
    const uint64_t chunks = (a.size + l.chunk_size - 1) / l.chunk_size;
    rep.files++;
    // Per chunk a report of its own, summed at the end (chunks run in parallel).
    for (uint64_t first = 0; first < chunks; first += kParallel) {
        const uint64_t last = std::min<uint64_t>(chunks, first + kParallel);
        std::vector<ScrubReport> parts(last - first);
        std::vector<std::future<void>> running;
        for (uint64_t i = first; i < last; ++i)
            running.push_back(std::async(std::launch::async, [&, i] {
                scrub_chunk(c, a.ino, i, c.io().read_chain(a.ino, i, l, t), parts[i - first]);
            }));
        for (auto& f : running) f.get();
        for (auto& p : parts) {
            rep.chunks++;
            rep.copies += p.copies;
            rep.bytes += p.bytes;
            rep.corrupt += p.corrupt;
            rep.mismatched += p.mismatched;
            rep.repaired += p.repaired;
            rep.unrepaired += p.unrepaired;
            rep.unreachable += p.unreachable;
        }
    }
    return Status::OK();
}

Status walk(Client& c, const std::string& path, const proto::ChainTable& t, ScrubReport& rep,
            const std::function<void(const std::string&, const ScrubReport&)>& progress) {
    auto a = c.lstat(path);
    if (!a.ok()) return a.status();
    if (a->type == 1) {
        JOBFS_RETURN_IF_ERROR(scrub_file(c, *a, t, rep));
        if (progress) progress(path, rep);
        return Status::OK();
    }
    if (a->type != 2) return Status::OK(); // symlinks have no chunks
    auto entries = c.list(path);
    if (!entries.ok()) return entries.status();
    for (const auto& e : *entries) {
        if (e.name == "." || e.name == "..") continue;
        JOBFS_RETURN_IF_ERROR(walk(c, path == "/" ? "/" + e.name : path + "/" + e.name, t, rep, progress));
    }
    return Status::OK();
}

} // namespace

Result<ScrubReport> scrub(Client& client, const std::string& path,
                          const std::function<void(const std::string&, const ScrubReport&)>& progress) {
    auto t = client.chain_table();
    if (!t.ok()) return t.status();
    ScrubReport rep;
    JOBFS_RETURN_IF_ERROR(walk(client, path, *t, rep, progress));
    return rep;
}

} // namespace jobfs::client
