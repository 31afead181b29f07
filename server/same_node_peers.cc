// same_node_peers.cc: see same_node_peers.h.
#include "same_node_peers.h"

#include "daemon_protocol.h"
#include "local_read_socket.h"
#include "log.h"
#include "rpc.h"

namespace jobfs::server {

SameNodePeers::SameNodePeers(transport::Worker& worker, std::string secret, uint32_t rank, uint32_t daemons, PeerFn peer)
    : worker_(worker), secret_(std::move(secret)), rank_(rank), peer_(std::move(peer)), entries_(daemons) {
    // The other side of connect(): peers of this node ask for this daemon's worker address.
    transport::rpc::serve<proto::WorkerAddress>(worker, [w = &worker](transport::ServerCall call, proto::Empty&&) {
        transport::rpc::reply<proto::WorkerAddress>(call, proto::WorkerAddressResponse{w->address()});
    });
}

Result<transport::Endpoint> SameNodePeers::data(uint32_t r, uint64_t bytes) {
    auto control = peer_(r);
    // A connection already broken has nothing to find out: the call fails on it as it would.
    if (!control.ok() || r == rank_ || r >= entries_.size() || !control->health().ok()) return control;
    {
        std::lock_guard lock(mu_);
        Entry& e = entries_[r];
        if (e.control == *control) {
            // Found out for this connection already (no shm: another node), or being found
            // out: meanwhile the ordinary connection carries the bytes.
            if (!e.shm.valid() || e.probing) return control;
            if (e.shm.health().ok()) {
                bytes_.fetch_add(bytes, std::memory_order_relaxed);
                return e.shm;
            }
            // Failed with the ordinary connection still up (its own deadline): make another,
            // but not at every forward to a peer that may still be stalled.
            const auto now = Clock::now();
            if (e.retry_at == Clock::time_point{}) e.retry_at = now + kRetryAfter;
            if (now < e.retry_at) return control;
        } else if (e.probing) {
            return control;
        }
        e.control = *control;
        e.shm = {};
        e.probing = true;
        e.retry_at = {};
    }
    auto shm = connect(r, *control);
    std::lock_guard lock(mu_);
    Entry& e = entries_[r];
    e.probing = false;
    if (!(e.control == *control)) return control; // replaced meanwhile: the next call finds out again
    if (!shm.ok()) return control;
    e.shm = *shm;
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
    return *shm;
}

Result<transport::Endpoint> SameNodePeers::connect(uint32_t r, const transport::Endpoint& control) {
    // On this node? Its local-read socket answers only here.
    auto sock = transport::local_read_connect(transport::local_read_socket_name(secret_, r), secret_,
                                              std::chrono::milliseconds(1000));
    if (!sock.ok()) {
        if (sock.status().code() != Code::not_found)
            JOBFS_INFO("daemon %u: cannot tell whether it is on this node (%s): forwards to it go over its connection",
                       r, sock.status().message().c_str());
        return sock.status();
    }
    ::close(*sock);
    auto addr = transport::rpc::call<proto::WorkerAddress>(control, proto::Empty{});
    if (!addr.ok()) return addr.status();
    auto ep = worker_.connect_address_watched(addr->address, "daemon " + std::to_string(r) + " (shared memory)", control);
    if (!ep.ok()) {
        JOBFS_WARN("daemon %u is on this node, but a shared-memory connection to it failed (%s): forwards to it go over tcp",
                   r, ep.status().message().c_str());
        return ep.status();
    }
    made_.fetch_add(1, std::memory_order_relaxed);
    JOBFS_INFO("daemon %u is on this node: chain forwards to it go through shared memory", r);
    return *ep;
}

} // namespace jobfs::server
