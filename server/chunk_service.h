// chunk_service.h: serves the chunk RPCs of daemon_protocol.h from a ChunkStore (and registers
// DaemonStats, server/daemon_stats.h, beside DiskSpace).
//
// Handlers run on the transport's progress thread and must not block, so every disk access is
// handed to an I/O pool; the reply is sent from there. A write's payload is received by
// rendezvous straight into the buffer that the pool then writes to the chunk file; a read's
// buffer goes back by rendezvous from the pool.
#pragma once

#include <boost/asio/thread_pool.hpp>

#include "server/chunk_store.h"
#include "worker.h"

namespace jobfs::server {

class ChunkService {
public:
    // Registers the handlers on `worker`. `store` and `pool` must outlive the worker's use.
    ChunkService(transport::Worker& worker, ChunkStore& store, boost::asio::thread_pool& pool);

private:
    ChunkStore& store_;
    boost::asio::thread_pool& pool_;
};

} // namespace jobfs::server
