#include "frame.h"

#include <cstring>
#include <string>

#include "status.h"

namespace jobfs::transport {
namespace {

template <class U>
void put(uint8_t* p, U v) {
    for (size_t i = 0; i < sizeof(U); ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
template <class U>
U get(const uint8_t* p) {
    U v = 0;
    for (size_t i = 0; i < sizeof(U); ++i) v |= static_cast<U>(p[i]) << (8 * i);
    return v;
}

Status bad(const std::string& what) { return Status(Code::protocol, "bad frame: " + what); }

} // namespace

void frame_header_pack(const FrameHeader& h, uint8_t* out) {
    std::memset(out, 0, kFrameHeaderSize);
    put<uint32_t>(out + 0, kFrameMagic);
    out[4] = kFrameVersion;
    out[5] = static_cast<uint8_t>(h.kind);
    put<uint16_t>(out + 6, h.flags);
    put<uint16_t>(out + 8, h.opcode);
    put<uint32_t>(out + 12, static_cast<uint32_t>(h.status));
    put<uint64_t>(out + 16, h.request_id);
    put<uint32_t>(out + 24, h.message_length);
    put<uint64_t>(out + 32, h.bulk_length);
}

Result<FrameHeader> frame_header_parse(const void* header, size_t header_length, size_t data_length) {
    if (header == nullptr || header_length < kFrameHeaderSize)
        return bad("header of " + std::to_string(header_length) + " bytes, need " +
                   std::to_string(kFrameHeaderSize));
    const auto* p = static_cast<const uint8_t*>(header);
    if (get<uint32_t>(p) != kFrameMagic) return bad("wrong magic");
    if (p[4] != kFrameVersion)
        return bad("protocol version " + std::to_string(p[4]) + ", this side speaks " +
                   std::to_string(kFrameVersion));
    FrameHeader h;
    if (p[5] != static_cast<uint8_t>(FrameKind::request) && p[5] != static_cast<uint8_t>(FrameKind::reply))
        return bad("unknown kind " + std::to_string(p[5]));
    h.kind = static_cast<FrameKind>(p[5]);
    h.flags = get<uint16_t>(p + 6);
    if (h.flags & ~kAllFlags) return bad("unknown flags");
    h.opcode = get<uint16_t>(p + 8);
    if (get<uint16_t>(p + 10) != 0 || get<uint32_t>(p + 28) != 0) return bad("reserved bits set");
    h.status = static_cast<int32_t>(get<uint32_t>(p + 12));
    if (h.kind == FrameKind::request && h.status != 0) return bad("request with a status");
    if (!code_is_known(h.status)) return bad("unknown status code " + std::to_string(h.status));
    h.request_id = get<uint64_t>(p + 16);
    h.message_length = get<uint32_t>(p + 24);
    h.bulk_length = get<uint64_t>(p + 32);
    if (h.message_length > kMaxMessageBytes) return bad("message of " + std::to_string(h.message_length) + " bytes");
    if (h.bulk_length > kMaxBulkBytes) return bad("bulk of " + std::to_string(h.bulk_length) + " bytes");

    const size_t extra = header_length - kFrameHeaderSize;
    if (h.inline_message()) {
        if (extra != h.message_length) return bad("inline message length does not match the header");
        if (data_length != h.bulk_length) return bad("bulk length does not match the data");
    } else {
        if (extra != 0) return bad("bytes after the frame header");
        if (h.bulk_length != 0) return bad("bulk with an out-of-line message");
        if (data_length != h.message_length) return bad("message length does not match the data");
    }
    return h;
}

} // namespace jobfs::transport
