// same_node_peers.h: shared-memory connections to the other daemons of this node, for the
// bytes of chain forwards (docs/transport.md, "UCX 1.13 specifics").
//
// Why: the daemons' own connections (made by host:port, with UCX peer-failure detection) use
// tcp even between daemons of one host, so a chain forward to a daemon of this node crosses
// loopback tcp: two copies in the kernel and a socket's system calls per piece. A connection
// made by worker address without peer-failure detection gets shared memory (one copy, by CMA
// for large pieces). It watches the peer's ordinary connection and fails with it
// (Worker::connect_address_watched), so a dead peer still shows at once, not at a deadline.
//
// Which peers are on this node: those whose local-read socket answers (an abstract-namespace
// socket, one per network namespace like a node: ucx-transport/local_read_socket.h). A peer
// without local reads (jobfsd --no-local-reads) is reached the ordinary way.
//
// Thread safety: all methods may be called concurrently; data() blocks the first time for
// each connection of a peer (not from a transport callback).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "result.h"
#include "worker.h"

namespace jobfs::server {

class SameNodePeers {
public:
    using PeerFn = std::function<Result<transport::Endpoint>(uint32_t rank)>;

    // `peer`: the ordinary connection to a daemon (what every other RPC uses). Serves
    // WorkerAddress on `worker`, for the daemons of this node that connect here.
    SameNodePeers(transport::Worker& worker, std::string secret, uint32_t rank, uint32_t daemons, PeerFn peer);

    // The connection to send daemon `r` `bytes` of bulk data over: a shared-memory one when it
    // is on this node (made at the first call for each ordinary connection of it), else, or
    // while that cannot be made, the ordinary one.
    Result<transport::Endpoint> data(uint32_t r, uint64_t bytes);

    // Shared-memory connections made so far (a peer's restart makes a new one), and the bytes
    // data() let go through them (DaemonStats).
    uint64_t connections_made() const { return made_.load(std::memory_order_relaxed); }
    uint64_t bytes_sent() const { return bytes_.load(std::memory_order_relaxed); }

private:
    using Clock = std::chrono::steady_clock;
    // A shared-memory connection that failed while the ordinary one stayed up (its own call
    // deadline: the peer is stalled) is made again no sooner than this after.
    static constexpr std::chrono::seconds kRetryAfter{5};
    struct Entry {
        transport::Endpoint control; // the ordinary connection the rest was found for
        transport::Endpoint shm;     // valid: the peer is on this node
        bool probing = false;        // a thread is finding out / connecting
        Clock::time_point retry_at{}; // shm failed: the ordinary connection until then
    };
    Result<transport::Endpoint> connect(uint32_t r, const transport::Endpoint& control);

    transport::Worker& worker_;
    const std::string secret_;
    const uint32_t rank_;
    PeerFn peer_;
    std::mutex mu_; // guards entries_
    std::vector<Entry> entries_;
    std::atomic<uint64_t> made_{0}, bytes_{0};
};

} // namespace jobfs::server
