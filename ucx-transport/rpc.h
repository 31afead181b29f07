// rpc.h: typed calls and handlers over the transport.
//
// A protocol declares each RPC once, next to its messages (wire.h):
//
//     JOBFS_RPC(Echo, 16, EchoRequest, EchoResponse);
//
// and both sides use the declaration, never the opcode number:
//
//     auto r = rpc::call<Echo>(endpoint, EchoRequest{...});        // Result<EchoResponse>
//     rpc::serve<Echo>(worker, [](ServerCall c, EchoRequest&& req) {
//         rpc::reply<Echo>(c, EchoResponse{...});
//     });
//
// A request that does not decode is answered with Code::protocol before the handler runs.
#pragma once

#include <functional>
#include <utility>

#include "worker.h"

#define JOBFS_RPC(Name, Opcode, RequestType, ResponseType)                         \
    struct Name {                                                                  \
        static constexpr uint16_t opcode = (Opcode);                               \
        static_assert((Opcode) >= ::jobfs::transport::kFirstUserOpcode,            \
                      "opcodes below kFirstUserOpcode belong to the transport");   \
        using Request = RequestType;                                               \
        using Response = ResponseType;                                             \
        static constexpr const char* name = #Name;                                 \
    }

namespace jobfs::transport::rpc {

template <class Rpc>
Result<typename Rpc::Response> decode_reply(Result<Reply> r) {
    if (!r.ok()) return r.status();
    typename Rpc::Response resp{};
    Status s = wire::decode(r->message, resp);
    if (!s.ok()) return s.with_context(std::string(Rpc::name) + " reply");
    return resp;
}

template <class Rpc>
Result<typename Rpc::Response> call(const Endpoint& ep, const typename Rpc::Request& req,
                                    const CallOptions& options = {}) {
    return decode_reply<Rpc>(ep.call(Rpc::opcode, wire::encode(req), options));
}

// `done` receives the decoded response and the number of bulk bytes that landed in bulk_in.
template <class Rpc>
void call_async(const Endpoint& ep, const typename Rpc::Request& req, const CallOptions& options,
                std::function<void(Result<typename Rpc::Response>, size_t bulk_length)> done) {
    ep.call_async(Rpc::opcode, wire::encode(req), options, [done = std::move(done)](Result<Reply> r) {
        size_t bulk = r.ok() ? r->bulk_length : 0;
        done(decode_reply<Rpc>(std::move(r)), bulk);
    });
}

template <class Rpc>
void reply(const ServerCall& call, const typename Rpc::Response& resp, OutBulk bulk = {}) {
    call.reply(wire::encode(resp), std::move(bulk));
}

template <class Rpc, class F>
void serve(Worker& worker, F&& handler) {
    worker.set_handler(Rpc::opcode, [h = std::forward<F>(handler)](ServerCall call) mutable {
        typename Rpc::Request req{};
        Status s = wire::decode(call.message(), req);
        if (!s.ok()) return call.reply(s.with_context(std::string(Rpc::name) + " request"));
        h(std::move(call), std::move(req));
    });
}

} // namespace jobfs::transport::rpc
