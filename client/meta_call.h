// meta_call.h: a namespace RPC sent to the daemon that serves the metadata shard it names.
//
// Shard s is served by the first serving daemon of its meta chain under the chain table
// (proto::meta_primary; docs/replication.md, "Metadata shards"). With replicated metadata the
// primary changes when a daemon is lost or comes back: a daemon that does not serve the shard
// (any more) answers `again`, a lost one does not answer; the call then refreshes the table
// and asks the new primary, for up to FileIO::kFailoverTimeout; past that only a primary the
// table names anew is asked (after a call that waited out its deadline). A primary that hangs
// does not answer either, but its connection stays up: a call that waits for it longer than
// FileIO::kStallAfter is watched (FileIO::watch_meta_call), and fails (peer_gone) once the
// table has the daemon offline, within the failure timeout, not at its 30 s deadline.
// Without replication the shard's own daemon is asked once, as always.
//
// A retried operation may have been applied by the primary that was lost (its answer was what
// got lost): a create with O_EXCL or a mkdir may then report `exists`, an unlink or a rename
// `not_found`, as an NFS client may after a server restart. An O_APPEND reservation is asked
// again with its token and gets the same place (meta_reserve_append).
#pragma once

#include <chrono>
#include <random>
#include <thread>

#include "client/file_io.h"
#include "daemon_protocol.h"

namespace jobfs::client {

// `key`: an inode the request is about (an entry's directory, an inode), which names its shard.
// `via` (optional): set to the connection that gave the answer (a lease is tied to it).
template <class Rpc>
Result<typename Rpc::Response> meta_call(const FileIO& io, uint64_t key, const typename Rpc::Request& req,
                                         transport::Endpoint* via = nullptr) {
    const uint32_t n = io.daemon_count();
    const uint32_t shard = static_cast<uint32_t>(proto::shard_of(key) % n);
    proto::ChainTable t = io.table_once();
    const auto deadline = std::chrono::steady_clock::now() + FileIO::kFailoverTimeout;
    for (;;) {
        const int64_t p = proto::meta_primary(shard, t);
        if (via && p >= 0) *via = io.endpoint(static_cast<uint32_t>(p));
        Result<typename Rpc::Response> r = [&]() -> Result<typename Rpc::Response> {
            if (p < 0) return Status(Code::peer_gone, "no daemon serves metadata shard " + std::to_string(shard));
            const auto watched = t.meta_replicas > 1 ? io.watch_meta_call() : StallWatch::Watched{};
            return transport::rpc::call<Rpc>(io.endpoint(static_cast<uint32_t>(p)), req);
        }();
        if (r.ok() || t.meta_replicas <= 1 || !cured_by_newer_table(r.status().code())) return r;
        // Past the deadline only a new primary is asked: a call may have waited longer than
        // kFailoverTimeout (a primary that was slow, not offline).
        const bool past = std::chrono::steady_clock::now() >= deadline;
        const Code c = r.status().code();
        if (p >= 0 && (c == Code::peer_gone || c == Code::cancelled || c == Code::refused)) io.heal(static_cast<uint32_t>(p));
        const uint64_t before = t.version;
        (void)io.refresh_table();
        t = io.table();
        if (past && proto::meta_primary(shard, t) == p) return r;
        if (t.version == before) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}

// The place of an O_APPEND write of `length` bytes to file ino: the file's shard extends its
// size past max(size, at_least) by length at once (ReserveAppend) and the write goes where
// that returns. Client::append and InodeClient::append (jobfs-fuse) both place appends so.
// The request carries a random token, the same in every retry: a reservation the lost primary
// made (its answer lost) is found by the new one, not made twice (a hole of zeros).
inline Result<uint64_t> meta_reserve_append(const FileIO& io, uint64_t ino, uint64_t at_least, uint64_t length) {
    thread_local std::mt19937_64 tokens{std::random_device{}()};
    uint64_t token = 0;
    while (token == 0) token = tokens();
    auto r = meta_call<proto::ReserveAppend>(io, ino, proto::AppendRequest{ino, at_least, length, token});
    if (!r.ok()) return r.status();
    return r->size - length;
}

} // namespace jobfs::client
