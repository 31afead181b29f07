// local_read_socket.cc: see local_read_socket.h.
#include "local_read_socket.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "placement.h"

namespace jobfs::transport {

static_assert(kLocalMaxChain == placement::kMaxReplicas, "a chain must fit a LocalRequest");

namespace {

// The address of an abstract socket: sun_path starts with a NUL, and the length given to
// bind/connect says where the name ends.
socklen_t abstract_address(const std::string& name, sockaddr_un* a) {
    std::memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    const size_t n = std::min(name.size(), sizeof a->sun_path - 1);
    std::memcpy(a->sun_path + 1, name.data(), n);
    return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

} // namespace

std::string local_read_socket_name(const std::string& secret, uint32_t rank) {
    // FNV-1a: the name must not show the secret, and two jobs on one node must not collide;
    // readers check every descriptor's file against what the daemon said over the transport,
    // so a collision could only cost speed, never give wrong bytes.
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : secret) h = (h ^ c) * 1099511628211ull;
    char b[64];
    std::snprintf(b, sizeof b, "jobfs-%016llx-%u", static_cast<unsigned long long>(h), rank);
    return b;
}

Result<int> local_read_listen(const std::string& name) {
    int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0) return Status::from_errno(errno, "local-read socket");
    sockaddr_un a;
    const socklen_t len = abstract_address(name, &a);
    if (::bind(s, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(s, 64) != 0) {
        const int e = errno;
        ::close(s);
        return Status::from_errno(e, "local-read socket @" + name);
    }
    return s;
}

namespace {

// sendmsg of iov, with fd attached when it is not -1; whether all of it went.
bool send_with_fd(int sock, iovec* iov, size_t n, int fd) {
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = n;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    if (fd >= 0) {
        std::memset(control, 0, sizeof control);
        m.msg_control = control;
        m.msg_controllen = sizeof control;
        cmsghdr* c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    size_t total = 0;
    for (size_t i = 0; i < n; ++i) total += iov[i].iov_len;
    return ::sendmsg(sock, &m, MSG_NOSIGNAL) == static_cast<ssize_t>(total);
}

// recvmsg into iov; the descriptor attached, if any, into *fd (else -1).
ssize_t receive_with_fd(int sock, iovec* iov, size_t n, int flags, int* fd, int* msg_flags) {
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = n;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    *fd = -1;
    const ssize_t got = ::recvmsg(sock, &m, flags | MSG_CMSG_CLOEXEC);
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); got > 0 && c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(fd, CMSG_DATA(c), sizeof *fd);
    *msg_flags = m.msg_flags;
    return got;
}

} // namespace

Status local_read_send_reply(int sock, const LocalReply& reply) {
    LocalReplyHeader h = reply.header;
    h.crcs = static_cast<uint32_t>(reply.crcs.size());
    h.holes = static_cast<uint32_t>(reply.holes.size());
    iovec iov[3] = {{&h, sizeof h},
                    {const_cast<uint32_t*>(reply.crcs.data()), reply.crcs.size() * sizeof(uint32_t)},
                    {const_cast<uint32_t*>(reply.holes.data()), reply.holes.size() * sizeof(uint32_t)}};
    if (!send_with_fd(sock, iov, 3, reply.fd.get())) return Status::from_errno(errno, "local-read reply");
    return Status::OK();
}

ssize_t local_read_receive(int sock, std::span<char> buf, UniqueFd* fd) {
    iovec iov{buf.data(), buf.size()};
    int flags = 0;
    int received = -1;
    const ssize_t n = receive_with_fd(sock, &iov, 1, MSG_DONTWAIT, &received, &flags);
    fd->reset(received);
    if (n >= 0 && (flags & MSG_TRUNC)) return static_cast<ssize_t>(buf.size()) + 1; // too long: malformed
    return n;
}

Result<int> local_read_connect(const std::string& name, const std::string& secret, std::chrono::milliseconds timeout) {
    int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0) return Status::from_errno(errno, "local-read socket");
    const auto ms = timeout.count();
    timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000 * 1000)};
    (void)::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)::setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_un a;
    const socklen_t len = abstract_address(name, &a);
    if (::connect(s, reinterpret_cast<sockaddr*>(&a), len) != 0) {
        const int e = errno;
        ::close(s);
        if (e == ECONNREFUSED || e == ENOENT) return Status(Code::not_found, "no daemon at local-read socket @" + name);
        return Status::from_errno(e, "connect to local-read socket @" + name);
    }
    const std::string hello = kLocalReadHello + secret;
    char ack = 0;
    if (::send(s, hello.data(), hello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hello.size()) ||
        ::recv(s, &ack, 1, 0) != 1 || ack != 'k') {
        const int e = errno;
        ::close(s);
        return Status(Code::refused, "local-read socket @" + name + " refused the hello" +
                                         (e ? std::string(": ") + std::strerror(e) : std::string()));
    }
    return s;
}

Result<LocalReply> local_read_call(int sock, const LocalRequest& req, int fd) {
    JOBFS_RETURN_IF_ERROR(local_read_send_request(sock, req, fd));
    return local_read_receive_reply(sock);
}

Status local_read_send_request(int sock, const LocalRequest& req, int fd) {
    iovec out{const_cast<LocalRequest*>(&req), sizeof req};
    if (!send_with_fd(sock, &out, 1, fd)) return Status::from_errno(errno, "local-read request");
    return Status::OK();
}

Result<LocalReply> local_read_receive_reply(int sock) {
    LocalReply reply;
    thread_local std::vector<uint32_t> body(2 * kLocalMaxBlocks); // a reply's largest tail
    iovec iov[2] = {{&reply.header, sizeof reply.header}, {body.data(), body.size() * sizeof(uint32_t)}};
    int flags = 0;
    int received = -1;
    const ssize_t n = receive_with_fd(sock, iov, 2, 0, &received, &flags);
    reply.fd.reset(received);
    const LocalReplyHeader& h = reply.header;
    if (n < 0) return Status::from_errno(errno, "local-read reply");
    if (static_cast<size_t>(n) < sizeof h || (flags & MSG_TRUNC) || h.crcs > kLocalMaxBlocks ||
        h.holes > kLocalMaxBlocks || static_cast<size_t>(n) != sizeof h + (size_t{h.crcs} + h.holes) * sizeof(uint32_t)) {
        return Status(Code::protocol, "malformed local-read reply of " + std::to_string(n) + " bytes");
    }
    reply.crcs.assign(body.begin(), body.begin() + h.crcs);
    reply.holes.assign(body.begin() + h.crcs, body.begin() + h.crcs + h.holes);
    return reply;
}

std::string chunk_file_name(uint64_t ino, uint64_t index) {
    char b[48];
    std::snprintf(b, sizeof b, "%02" PRIx64 "/%016" PRIx64 ".%08" PRIx64, ino % 256, ino, index);
    return b;
}

} // namespace jobfs::transport
