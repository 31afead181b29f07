// transport_protocol.h: the messages the transport itself speaks (opcodes below 16).
#pragma once

#include <cstdint>
#include <string>

#include "wire.h"

namespace jobfs::transport {

inline constexpr uint16_t kOpHello = 1;
// Answered by the transport itself, empty. A client sends one on a connection where a request
// has gone unanswered for a while (Worker::Impl::poke_stalled): with UCX 1.13 over tcp, a
// rendezvous transfer was seen to wait until more bytes arrived on its connection.
inline constexpr uint16_t kOpPing = 2;
inline constexpr uint32_t kProtocolVersion = 1;

// First request on every connection: a peer that skips it, speaks another protocol version or
// presents the wrong job secret gets an error reply and is disconnected.
struct HelloRequest {
    uint32_t protocol_version = kProtocolVersion;
    std::string secret;
    std::string name;
    JOBFS_FIELDS(protocol_version, secret, name)
};

struct HelloResponse {
    uint32_t protocol_version = kProtocolVersion;
    std::string name;
    JOBFS_FIELDS(protocol_version, name)
};

// UCP active-message ids.
inline constexpr unsigned kAmRequest = 1;
inline constexpr unsigned kAmReply = 2;

} // namespace jobfs::transport
