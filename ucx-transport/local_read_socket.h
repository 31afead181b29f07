// local_read_socket.h: the Unix socket through which a daemon hands readers on its node
// read-only descriptors of its chunk files (local reads: docs/design.md, "Local reads").
// Both ends live here, beside each other, because they are one protocol:
// server/local_read_server.h serves it, client/local_reads.h uses it.
//
// The socket is a SOCK_SEQPACKET socket in the abstract namespace: no file to clean up after a
// daemon killed with -9, and, like a node, one per network namespace, so a reader only ever
// finds the daemons of its own node. Its name comes from the job's secret and the daemon's rank.
//
// Protocol (every message one packet):
//   reader -> daemon: kLocalReadHello followed by the job's secret
//   daemon -> reader: one byte 'k' (a wrong secret: the daemon closes the connection)
//   then any number of
//   reader -> daemon: LocalFdRequest
//   daemon -> reader: LocalFdReply, with the chunk file's descriptor attached (SCM_RIGHTS) when
//                     error is 0
// Whoever holds the secret may read every chunk anyway (over the transport): the socket gives
// no more than that, and only read-only descriptors.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "result.h"

namespace jobfs::transport {

inline constexpr char kLocalReadHello[] = "jobfs-local-reads-1:";

struct LocalFdRequest {
    uint64_t ino = 0;
    uint64_t index = 0;
};
struct LocalFdReply {
    int32_t error = 0; // 0, or the errno of opening the chunk file (ENOENT: no such chunk)
};

// "jobfs-<hash of the secret>-<rank>" (the abstract namespace; no leading NUL).
std::string local_read_socket_name(const std::string& secret, uint32_t rank);

// Daemon side: a listening socket of that name (Code::exists: another process has it).
Result<int> local_read_listen(const std::string& name);
// Sends a reply, with `fd` attached when error is 0.
Status local_read_send_reply(int sock, int32_t error, int fd);

// Reader side: connects and says hello. Code::not_found: no daemon of that name on this node.
Result<int> local_read_connect(const std::string& name, const std::string& secret,
                               std::chrono::milliseconds timeout);
// Asks for a chunk file's descriptor (Code::not_found: the daemon holds no such chunk). Any
// other failure leaves the connection unusable.
Result<int> local_read_request_fd(int sock, uint64_t ino, uint64_t index);

} // namespace jobfs::transport
