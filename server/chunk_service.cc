#include "server/chunk_service.h"

#include <boost/asio/post.hpp>

#include <memory>
#include <vector>

#include "daemon_protocol.h"
#include "server/daemon_stats.h"

namespace jobfs::server {

using transport::OutBulk;
using transport::ServerCall;
namespace rpc = transport::rpc;

ChunkService::ChunkService(transport::Worker& worker, ChunkStore& store, boost::asio::thread_pool& pool)
    : store_(store), pool_(pool) {
    auto* self = this;
    rpc::serve<proto::ChunkWrite>(worker, [self](ServerCall call, proto::ChunkWriteRequest&& req) {
        if (req.length != call.bulk_length())
            return call.reply(Status(Code::protocol, "chunk write announces " + std::to_string(req.length) +
                                                         " bytes but carries " + std::to_string(call.bulk_length())));
        if (req.offset > self->store_.chunk_size() || req.length > self->store_.chunk_size() - req.offset)
            return call.reply(Status(Code::invalid, "chunk write past the chunk size"));
        auto buf = std::make_shared<std::vector<uint8_t>>(req.length);
        call.receive_bulk(*buf, [self, call, buf, req](Status s) {
            if (!s.ok()) return call.reply(s);
            boost::asio::post(self->pool_, [self, call, buf, req] {
                call.reply(self->store_.write(ChunkId{req.chunk.ino, req.chunk.index}, req.offset, *buf));
            });
        });
    });
    rpc::serve<proto::ChunkRead>(worker, [self](ServerCall call, proto::ChunkReadRequest&& req) {
        if (req.length > self->store_.chunk_size())
            return call.reply(Status(Code::invalid, "chunk read larger than the chunk size"));
        boost::asio::post(self->pool_, [self, call, req] {
            auto buf = std::make_shared<std::vector<uint8_t>>(req.length);
            auto n = self->store_.read(ChunkId{req.chunk.ino, req.chunk.index}, req.offset, *buf);
            if (!n.ok()) return call.reply(n.status());
            rpc::reply<proto::ChunkRead>(call, proto::ChunkReadResponse{*n},
                                         OutBulk{std::span<const uint8_t>(buf->data(), *n), buf});
        });
    });
    rpc::serve<proto::ChunkTruncate>(worker, [self](ServerCall call, proto::ChunkTruncateRequest&& req) {
        boost::asio::post(self->pool_, [self, call, req] {
            call.reply(self->store_.truncate(ChunkId{req.chunk.ino, req.chunk.index}, req.length));
        });
    });
    rpc::serve<proto::ChunkSync>(worker, [self](ServerCall call, proto::ChunkRef&& req) {
        boost::asio::post(self->pool_, [self, call, req] { call.reply(self->store_.sync(ChunkId{req.ino, req.index})); });
    });
    rpc::serve<proto::FileRemoveChunks>(worker, [self](ServerCall call, proto::FileChunksRequest&& req) {
        boost::asio::post(self->pool_, [self, call, req] { call.reply(self->store_.remove_file(req.ino)); });
    });
    rpc::serve<proto::DiskSpace>(worker, [self](ServerCall call, proto::Empty&&) {
        boost::asio::post(self->pool_, [self, call] {
            auto s = self->store_.space();
            if (!s.ok()) return call.reply(s.status());
            rpc::reply<proto::DiskSpace>(call, proto::SpaceResponse{s->total_bytes, s->free_bytes, s->chunk_files});
        });
    });
    serve_daemon_stats(worker);
}

} // namespace jobfs::server
