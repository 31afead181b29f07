// local_read_server.h: describes ranges of this daemon's chunks to readers on its node and
// hands them read-only descriptors of the chunk files, over the Unix socket of
// ucx-transport/local_read_socket.h (local reads: docs/design.md, "Local reads"). With them a
// reader reads the bytes from the page cache or the disk straight into its buffer and checks
// them against the CRC32Cs the daemon sent, instead of the daemon reading them and both sides
// copying them through a socket.
//
// kThreads threads serve the connections, each polling its own share of them (one more accepts
// new connections and deals them out in turn), so that a describe that waits for the disk (the
// checksums of a chunk not read lately) holds up only the connections of its thread. A client keeps several connections to each daemon of its node for the same
// reason (client/local_reads.h). Each request is answered in the order its connection sent
// it. A connection that sends a wrong hello or a malformed request is closed.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
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
    // Threads that answer requests.
    static constexpr unsigned kThreads = 4;
    // Whether a replicated chunk may be read here now by a reader whose chain of it is `chain`,
    // from chain table `table_version` (ChunkService::read_gate). Called on the server's
    // threads, concurrently, for every read of a replicated chunk described.
    using ReadGate = std::function<Status(ChunkId id, std::span<const uint32_t> chain, uint64_t table_version)>;

    // Listens on local_read_socket_name(secret, rank). `store` must outlive the server. Without
    // a gate, replicated chunks are never described (their readers go over the transport).
    // With `arenas`, clients may also hand over their write arenas (LocalOp::map_arena,
    // server/write_arenas.h), unmapped when their connection closes.
    static Result<std::unique_ptr<LocalReadServer>> start(ChunkStore& store, const std::string& secret, uint32_t rank,
                                                          ReadGate gate = {}, WriteArenas* arenas = nullptr);
    ~LocalReadServer(); // stops the threads and closes every connection

    LocalReadServer(const LocalReadServer&) = delete;
    LocalReadServer& operator=(const LocalReadServer&) = delete;

    // Reads described to clients so far (they read those chunk ranges themselves): DaemonStats.
    uint64_t reads() const { return reads_.load(std::memory_order_relaxed); }
    // Connections open now (accepted and not yet closed): tests.
    size_t connections() const { return connections_.load(); }

private:
    struct Conn {
        int fd;
        bool hello = false;           // said hello with the right secret
        std::vector<uint64_t> arenas; // write arenas it mapped
    };
    // One thread's share of the connections. `incoming`: connections the first thread accepted
    // for it, taken over at its next wake-up (eventfd `wake`).
    struct Poller {
        int wake = -1;
        std::mutex mu; // guards incoming
        std::vector<int> incoming;
        std::thread thread;
    };
    LocalReadServer(ChunkStore& store, std::string secret, ReadGate gate, WriteArenas* arenas, int listener, int stop);
    // Thread i's loop: its connections, until stop_.
    void run(unsigned i);
    // The acceptor's loop: new connections, each handed to the next thread in turn, until stop_.
    void accept_connections();
    // The reply to req (and its descriptor, to close); `passed` came with the request (-1: none).
    transport::LocalReply answer(const transport::LocalRequest& req, int passed, Conn& c);
    void close_connection(Conn& c);

    ChunkStore& store_;
    const std::string secret_;
    const ReadGate gate_;
    WriteArenas* const arenas_;
    int listener_;
    int stop_; // eventfd: the destructor's stop signal, seen by every thread (never read)
    std::atomic<uint64_t> reads_{0};
    std::atomic<size_t> connections_{0}; // open, over all threads
    Poller pollers_[kThreads];
    std::thread acceptor_;
};

} // namespace jobfs::server
