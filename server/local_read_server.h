// local_read_server.h: hands readers on this daemon's node read-only descriptors of its chunk
// files, over the Unix socket of ucx-transport/local_read_socket.h (local reads:
// docs/design.md, "Local reads"). With one, a reader that asked for a large range over the
// transport and was told "read it yourself" (ChunkReadRequest::local) reads the bytes from the
// page cache or the disk straight into its buffer, and checks them against the CRC32Cs the
// daemon sent, instead of the daemon reading them and both sides copying them through a socket.
//
// One thread polls the listening socket and every connection; each request is an open() and a
// sendmsg(). A connection that sends a wrong hello or a malformed request is closed.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "local_read_socket.h"
#include "result.h"
#include "server/chunk_store.h"

namespace jobfs::server {

class LocalReadServer {
public:
    // Listens on local_read_socket_name(secret, rank). `store` must outlive the server.
    static Result<std::unique_ptr<LocalReadServer>> start(ChunkStore& store, const std::string& secret, uint32_t rank);
    ~LocalReadServer(); // stops the thread and closes every connection

    LocalReadServer(const LocalReadServer&) = delete;
    LocalReadServer& operator=(const LocalReadServer&) = delete;

private:
    LocalReadServer(ChunkStore& store, std::string secret, int listener, int wake);
    void run();
    transport::LocalReply answer(const transport::LocalRequest& req); // and its descriptor, to close

    ChunkStore& store_;
    const std::string secret_;
    int listener_;
    int wake_; // eventfd: the destructor's stop signal
    std::thread thread_;
};

} // namespace jobfs::server
