// meta_service.h: serves the namespace RPCs of daemon_protocol.h from this daemon's MetaShard.
//
// Every request is handed to the I/O pool (SQLite must not run on the transport's threads).
// Operations that involve a second shard are coordinated here, on the pool thread, with
// blocking calls to the peer that owns it:
//   - lookup of a name whose inode lives elsewhere (a directory placed on another shard)
//     returns that inode's attributes from its shard;
//   - mkdir places the new directory on the shard hash(parent, name) picks, so directories
//     and the files in them spread over all daemons: the inode is created there first, then
//     the entry here (undone if the entry cannot be added);
//   - rmdir of such a directory checks it is empty there, removes the entry here, then the
//     inode there.
// Not yet coordinated (they fail with EXDEV, which tools such as mv handle by copying):
// rename where the moved inode or the new parent is on another shard, link and unlink of
// hard links that cross shards. docs/design.md describes the intent log that will make all of
// these atomic and crash-safe; until then a crash between the two steps of mkdir or rmdir can
// leave an orphan inode (never a dangling entry).
#pragma once

#include <boost/asio/thread_pool.hpp>

#include <functional>

#include "server/meta_shard.h"
#include "worker.h"

namespace jobfs::server {

class MetaService {
public:
    // peer(rank) gives the endpoint to daemon `rank` (never called for this daemon's rank).
    using PeerFn = std::function<Result<transport::Endpoint>(uint32_t rank)>;

    MetaService(transport::Worker& worker, MetaShard& shard, uint32_t rank, uint32_t daemons, PeerFn peer,
                boost::asio::thread_pool& pool);

    // The shard a new directory named `name` in `parent` is placed on.
    static uint32_t place_directory(uint64_t parent, const std::string& name, uint32_t daemons);

    struct Ops;

private:
    MetaShard& shard_;
    uint32_t rank_;
    uint32_t daemons_;
    PeerFn peer_;
};

} // namespace jobfs::server
