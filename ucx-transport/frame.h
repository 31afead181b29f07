// frame.h: the fixed header in front of every jobfs transport message.
//
// One UCP active message carries one frame. Its AM header holds this 40-byte frame header,
// followed by the encoded message when it fits there (flag kInlineMessage). The AM data holds
// the bulk payload (a chunk being written or read, moved by rendezvous without copies), or the
// encoded message itself when it is too large for the AM header and there is no bulk.
//
//   offset size field
//        0    4 magic "JBFS"
//        4    1 version (kVersion; a peer that speaks another version is refused)
//        5    1 kind (request, reply)
//        6    2 flags
//        8    2 opcode
//       10    2 reserved, zero
//       12    4 status (replies: jobfs::Code; requests: zero)
//       16    8 request id (chosen by the caller, echoed in the reply)
//       24    4 message length
//       28    4 reserved, zero
//       32    8 bulk length
#pragma once

#include <cstddef>
#include <cstdint>

#include "result.h"

namespace jobfs::transport {

inline constexpr uint32_t kFrameMagic = 0x5346424a; // "JBFS" little-endian
inline constexpr uint8_t kFrameVersion = 1;
inline constexpr size_t kFrameHeaderSize = 40;
inline constexpr uint32_t kMaxMessageBytes = 64u << 20;  // an encoded message
inline constexpr uint64_t kMaxBulkBytes = 1ull << 32;    // one bulk payload

enum class FrameKind : uint8_t { request = 1, reply = 2 };

enum FrameFlags : uint16_t {
    kInlineMessage = 1u << 0, // the message follows the frame header in the AM header
    kAllFlags = kInlineMessage,
};

struct FrameHeader {
    FrameKind kind = FrameKind::request;
    uint16_t flags = 0;
    uint16_t opcode = 0;
    int32_t status = 0;
    uint64_t request_id = 0;
    uint32_t message_length = 0;
    uint64_t bulk_length = 0;

    bool inline_message() const { return flags & kInlineMessage; }
};

// Writes the 40 header bytes to out.
void frame_header_pack(const FrameHeader& h, uint8_t* out);

// Parses and validates a received frame: the AM header (header_length bytes) and the length
// of the AM data. Every inconsistency is a Code::protocol error naming what was wrong.
Result<FrameHeader> frame_header_parse(const void* header, size_t header_length, size_t data_length);

} // namespace jobfs::transport
