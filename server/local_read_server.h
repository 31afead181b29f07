// local_read_server.h: describes ranges of this daemon's chunks to readers on its node and
// hands them read-only descriptors of the chunk files, over the Unix socket of
// ucx-transport/local_read_socket.h (local reads: docs/design.md, "Local reads"). With them a
// reader reads the bytes from the page cache or the disk straight into its buffer and checks
// them against the CRC32Cs the daemon sent, instead of the daemon reading them and both sides
// copying them through a socket.
//
// One thread polls the listening socket and every connection; each request is an open() and a
// sendmsg(). A connection that sends a wrong hello or a malformed request is closed.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "local_read_socket.h"
#include "result.h"
#include "server/chunk_store.h"
#include "server/write_arenas.h"

namespace jobfs::server {

class LocalReadServer {
public:
    // Whether a replicated chunk may be read here now by a reader whose chain of it is `chain`,
    // from chain table `table_version` (ChunkService::read_gate). Called on the server's thread
    // for every read of a replicated chunk described.
    using ReadGate = std::function<Status(ChunkId id, std::span<const uint32_t> chain, uint64_t table_version)>;

    // Listens on local_read_socket_name(secret, rank). `store` must outlive the server. Without
    // a gate, replicated chunks are never described (their readers go over the transport).
    // With `arenas`, clients may also hand over their write arenas (LocalOp::map_arena,
    // server/write_arenas.h), unmapped when their connection closes.
    static Result<std::unique_ptr<LocalReadServer>> start(ChunkStore& store, const std::string& secret, uint32_t rank,
                                                          ReadGate gate = {}, WriteArenas* arenas = nullptr);
    ~LocalReadServer(); // stops the thread and closes every connection

    LocalReadServer(const LocalReadServer&) = delete;
    LocalReadServer& operator=(const LocalReadServer&) = delete;

    // Reads described to clients so far (they read those chunk ranges themselves): DaemonStats.
    uint64_t reads() const { return reads_.load(std::memory_order_relaxed); }

private:
    struct Conn {
        int fd;
        bool hello = false;           // said hello with the right secret
        std::vector<uint64_t> arenas; // write arenas it mapped
    };
    LocalReadServer(ChunkStore& store, std::string secret, ReadGate gate, WriteArenas* arenas, int listener, int wake);
    void run();
    // The reply to req (and its descriptor, to close); `passed` came with the request (-1: none).
    transport::LocalReply answer(const transport::LocalRequest& req, int passed, Conn& c);
    void close_connection(Conn& c);

    ChunkStore& store_;
    const std::string secret_;
    const ReadGate gate_;
    WriteArenas* const arenas_;
    int listener_;
    int wake_; // eventfd: the destructor's stop signal
    std::atomic<uint64_t> reads_{0};
    std::thread thread_;
};

} // namespace jobfs::server
