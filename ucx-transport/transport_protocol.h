// transport_protocol.h: the messages the transport itself speaks (opcodes below 16).
#pragma once

#include <cstdint>
#include <string>

#include "wire.h"

namespace jobfs::transport {

inline constexpr uint16_t kOpHello = 1;
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
