// local_read_server.cc: see local_read_server.h.
#include "server/local_read_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "local_read_socket.h"
#include "server/chunk_stamps.h"
#include "log.h"

namespace jobfs::server {

namespace {

// Readers of the node: processes times their clients times their connections to each daemon
// (one, up to four while several of a client's threads read at once). Each is a descriptor of
// the daemon's, which needs its others for chunk files.
constexpr size_t kMaxConnections = 1024;

// Compares without stopping at the first difference, so that timing tells nothing of the secret.
// (Its length is no secret.)
bool same_secret(const char* got, size_t n, const std::string& want) {
    if (n != want.size()) return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(got[i] ^ want[i]);
    return diff == 0;
}

} // namespace

Result<std::unique_ptr<LocalReadServer>> LocalReadServer::start(ChunkStore& store, const std::string& secret, uint32_t rank,
                                                                ReadGate gate, WriteArenas* arenas) {
    auto l = transport::local_read_listen(transport::local_read_socket_name(secret, rank));
    if (!l.ok()) return l.status();
    // The eventfds: stop, then each thread's wake-up. On a failure, those made so far are closed.
    std::vector<int> fds;
    for (unsigned i = 0; i <= kThreads; ++i) {
        const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (fd < 0) {
            const int e = errno;
            for (int f : fds) ::close(f);
            ::close(*l);
            return Status::from_errno(e, "local-read server eventfd");
        }
        fds.push_back(fd);
    }
    std::unique_ptr<LocalReadServer> s(new LocalReadServer(store, secret, std::move(gate), arenas, *l, fds[0]));
    for (unsigned i = 0; i < kThreads; ++i) s->pollers_[i].wake = fds[i + 1];
    for (unsigned i = 0; i < kThreads; ++i) s->pollers_[i].thread = std::thread([p = s.get(), i] { p->run(i); });
    s->acceptor_ = std::thread([p = s.get()] { p->accept_connections(); });
    return s;
}

LocalReadServer::LocalReadServer(ChunkStore& store, std::string secret, ReadGate gate, WriteArenas* arenas, int listener,
                                 int stop)
    : store_(store), secret_(std::move(secret)), gate_(std::move(gate)), arenas_(arenas), listener_(listener), stop_(stop) {}

LocalReadServer::~LocalReadServer() {
    uint64_t one = 1;
    (void)!::write(stop_, &one, sizeof one);
    if (acceptor_.joinable()) acceptor_.join();
    for (Poller& p : pollers_)
        if (p.thread.joinable()) p.thread.join();
    for (Poller& p : pollers_) {
        for (int fd : p.incoming) ::close(fd);
        if (p.wake >= 0) ::close(p.wake);
    }
    ::close(listener_);
    ::close(stop_);
}

transport::LocalReply LocalReadServer::answer(const transport::LocalRequest& req, int passed, Conn& c) {
    transport::LocalReply r;
    const ChunkId id{req.ino, req.index};
    const auto errno_of = [](const Status& s) { return s.code() == Code::not_found ? ENOENT : s.to_errno(); };
    if (req.op == static_cast<uint32_t>(transport::LocalOp::map_arena)) {
        if (!arenas_ || passed < 0) {
            r.header.error = arenas_ ? EINVAL : EOPNOTSUPP;
            return r;
        }
        auto token = arenas_->map(passed);
        if (!token.ok()) {
            JOBFS_WARN("local writes: a client's write arena was refused: %s", token.status().message().c_str());
            r.header.error = token.status().to_errno();
            return r;
        }
        c.arenas.push_back(*token);
        r.header.token = *token;
        return r;
    }
    if (req.op == static_cast<uint32_t>(transport::LocalOp::chunk_dir)) {
        auto fd = store_.open_dir_for_reader();
        if (!fd.ok()) {
            r.header.error = fd.status().to_errno();
            return r;
        }
        r.fd.reset(*fd);
        r.header.data_offset = static_cast<uint32_t>(ChunkStore::kDataOffset);
        return r;
    }
    if (req.op == static_cast<uint32_t>(transport::LocalOp::stamps)) {
        ChunkStamps* stamps = store_.stamps();
        auto fd = stamps ? stamps->reader_fd() : Result<int>(Status(Code::unsupported, "no chunk stamps"));
        if (!fd.ok()) {
            r.header.error = fd.status().to_errno();
            return r;
        }
        r.fd.reset(*fd);
        return r;
    }
    if (req.op == static_cast<uint32_t>(transport::LocalOp::describe)) {
        if (req.length / ChunkStore::kBlockSize + 2 > transport::kLocalMaxBlocks || req.chain_length > transport::kLocalMaxChain) {
            r.header.error = EINVAL;
            return r;
        }
        // CRAQ: only what a read over the transport would serve here (an unreplicated chunk
        // always may be read).
        const Status s = req.chain_length <= 1 ? Status::OK()
                         : gate_ ? gate_(id, std::span<const uint32_t>(req.chain, req.chain_length), req.table_version)
                                 : Status(Code::again, "replicated chunks are read over the transport");
        if (!s.ok()) {
            r.header.error = EAGAIN;
            return r;
        }
        auto v = store_.describe(id, req.offset, req.length);
        if (!v.ok()) {
            r.header.error = errno_of(v.status());
            return r;
        }
        r.header.held = v->length;
        r.header.file_dev = v->file_dev;
        r.header.file_ino = v->file_ino;
        r.header.stamp = v->stamp;
        r.crcs = std::move(v->crcs);
        r.holes = std::move(v->holes);
        if (v->length <= req.offset) return r; // nothing held there: zeros, no file needed (and no read)
        reads_.fetch_add(1, std::memory_order_relaxed);
    } else if (req.op != static_cast<uint32_t>(transport::LocalOp::open)) {
        r.header.error = EINVAL;
        return r;
    }
    auto fd = store_.open_for_reader(id);
    if (!fd.ok()) {
        r.header.error = errno_of(fd.status());
        return r;
    }
    r.fd.reset(*fd);
    r.header.data_offset = static_cast<uint32_t>(ChunkStore::kDataOffset);
    return r;
}

void LocalReadServer::close_connection(Conn& c) {
    for (uint64_t token : c.arenas) arenas_->unmap(token);
    c.arenas.clear();
    ::close(c.fd);
    connections_.fetch_sub(1);
}

void LocalReadServer::accept_connections() {
    unsigned next = 0; // the thread the next connection goes to
    for (;;) {
        pollfd fds[2] = {{stop_, POLLIN, 0}, {listener_, static_cast<short>(connections_.load() < kMaxConnections ? POLLIN : 0), 0}};
        // At the limit, looks again now and then for connections that went away.
        if (::poll(fds, 2, fds[1].events ? -1 : 100) < 0) {
            if (errno == EINTR) continue;
            JOBFS_ERROR("local reads: poll: %s; no new readers", std::strerror(errno));
            break;
        }
        if (fds[0].revents) break;
        if (!(fds[1].revents & POLLIN)) continue;
        const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) continue;
        connections_.fetch_add(1);
        Poller& p = pollers_[next++ % kThreads];
        {
            std::lock_guard lock(p.mu);
            p.incoming.push_back(fd);
        }
        uint64_t one = 1;
        (void)!::write(p.wake, &one, sizeof one);
    }
}

void LocalReadServer::run(unsigned self) {
    Poller& me = pollers_[self];
    std::vector<Conn> conns;
    std::vector<pollfd> fds;
    const size_t prefix = std::strlen(transport::kLocalReadHello);
    std::vector<char> buf(prefix + secret_.size() + sizeof(transport::LocalRequest) + 64);
    // fds: stop, wake, connections.
    constexpr size_t kFirstConn = 2;
    for (;;) {
        fds.clear();
        fds.push_back({stop_, POLLIN, 0});
        fds.push_back({me.wake, POLLIN, 0});
        for (const Conn& c : conns) fds.push_back({c.fd, POLLIN, 0});
        if (::poll(fds.data(), fds.size(), -1) < 0) {
            if (errno == EINTR) continue;
            JOBFS_ERROR("local reads: poll: %s; local reads end", std::strerror(errno));
            break;
        }
        if (fds[0].revents) break;
        std::vector<size_t> gone;
        for (size_t i = 0; i < conns.size(); ++i) {
            const short ev = fds[i + kFirstConn].revents;
            if (!ev) continue;
            Conn& c = conns[i];
            transport::UniqueFd passed; // a descriptor that came with the packet: closed here whatever it was for
            const ssize_t n = transport::local_read_receive(c.fd, buf, &passed);
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (n <= 0) { // the reader went away
                gone.push_back(i);
                continue;
            }
            if (!c.hello) {
                const size_t len = static_cast<size_t>(n);
                if (len < prefix || len > buf.size() || std::memcmp(buf.data(), transport::kLocalReadHello, prefix) != 0 ||
                    !same_secret(buf.data() + prefix, len - prefix, secret_) ||
                    ::send(c.fd, "k", 1, MSG_NOSIGNAL) != 1) {
                    JOBFS_WARN("local reads: a reader's hello was refused (wrong secret or protocol)");
                    gone.push_back(i);
                    continue;
                }
                c.hello = true;
                continue;
            }
            transport::LocalRequest req;
            if (static_cast<size_t>(n) != sizeof req) {
                JOBFS_WARN("local reads: a malformed request of %zd bytes; connection closed", n);
                gone.push_back(i);
                continue;
            }
            std::memcpy(&req, buf.data(), sizeof req);
            const transport::LocalReply reply = answer(req, passed.get(), c);
            if (!transport::local_read_send_reply(c.fd, reply).ok()) gone.push_back(i);
        }
        for (auto it = gone.rbegin(); it != gone.rend(); ++it) {
            close_connection(conns[*it]);
            conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(*it));
        }
        if (fds[1].revents & POLLIN) {
            uint64_t count;
            (void)!::read(me.wake, &count, sizeof count);
            std::lock_guard lock(me.mu);
            for (int fd : me.incoming) conns.push_back(Conn{fd, false, {}});
            me.incoming.clear();
        }
    }
    for (Conn& c : conns) close_connection(c);
}

} // namespace jobfs::server
