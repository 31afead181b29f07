// test_messages.h: a small protocol for testing the transport, and the handlers that serve it
// (used in-process by the tests and in a child process by tests/helpers/transport_peer).
#pragma once

#include <isa-l/crc.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rpc.h"
#include "log.h"
#include "wire.h"

namespace jobfs::test {

using transport::Bytes;

struct Empty {
    JOBFS_NO_FIELDS
};

struct EchoRequest {
    std::string text;
    uint64_t seq = 0;
    JOBFS_FIELDS(text, seq)
};
struct EchoResponse {
    std::string text;
    uint64_t seq = 0;
    std::string server;
    JOBFS_FIELDS(text, seq, server)
};

struct PutRequest {
    uint64_t length = 0;
    JOBFS_FIELDS(length)
};
struct Checksum {
    uint32_t crc = 0;
    uint64_t length = 0;
    JOBFS_FIELDS(crc, length)
};

struct GetRequest {
    uint64_t length = 0;
    uint64_t seed = 0;
    JOBFS_FIELDS(length, seed)
};

struct FailRequest {
    int32_t code = 0;
    std::string message;
    JOBFS_FIELDS(code, message)
};

struct BigMessage {
    Bytes blob;
    uint32_t crc = 0;
    JOBFS_FIELDS(blob, crc)
};

struct RegionInfo {
    uint64_t address = 0;
    uint64_t length = 0;
    Bytes rkey;
    uint32_t crc = 0;
    JOBFS_FIELDS(address, length, rkey, crc)
};

JOBFS_RPC(Echo, 16, EchoRequest, EchoResponse);
JOBFS_RPC(PutBlob, 17, PutRequest, Checksum);      // request bulk -> its checksum
JOBFS_RPC(GetBlob, 18, GetRequest, Checksum);      // reply bulk of a seeded pattern
JOBFS_RPC(Hang, 19, Empty, Empty);                 // never answered
JOBFS_RPC(Fail, 20, FailRequest, Empty);           // answered with the given error
JOBFS_RPC(Drop, 21, Empty, Empty);                 // dropped by its handler
JOBFS_RPC(Mirror, 22, BigMessage, BigMessage);     // a large message echoed with its checksum
JOBFS_RPC(ShareRegion, 23, Empty, RegionInfo);     // a registered region for RMA
JOBFS_RPC(CheckRegion, 24, Empty, Checksum);       // checksum of that region now

inline uint32_t crc32c(const void* p, size_t n, uint32_t seed = 0) {
    return crc32_iscsi(static_cast<unsigned char*>(const_cast<void*>(p)), static_cast<int>(n), seed);
}

// Deterministic bytes from a seed (splitmix64), so both ends can produce and check a pattern.
inline void fill_pattern(uint8_t* p, size_t n, uint64_t seed) {
    uint64_t x = seed;
    for (size_t i = 0; i < n; i += 8) {
        x += 0x9e3779b97f4a7c15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        for (size_t j = 0; j < 8 && i + j < n; ++j) p[i + j] = static_cast<uint8_t>(z >> (8 * j));
    }
}

// State the test handlers keep: calls held unanswered, and the RMA region.
struct TestServer {
    std::mutex mu;
    std::vector<transport::ServerCall> held;
    std::vector<uint8_t> region = std::vector<uint8_t>(4 << 20);
    transport::MemoryRegion mr;
    std::function<void(uint16_t)> on_request; // called for every request (e.g. to report it)
};

inline void serve_test_protocol(transport::Worker& w, std::shared_ptr<TestServer> st) {
    using namespace transport;
    auto note = [st](uint16_t op) {
        if (st->on_request) st->on_request(op);
    };
    rpc::serve<Echo>(w, [&w, note](ServerCall c, EchoRequest&& r) {
        note(Echo::opcode);
        rpc::reply<Echo>(c, EchoResponse{r.text, r.seq, w.options().name});
    });
    rpc::serve<PutBlob>(w, [note](ServerCall c, PutRequest&& r) {
        note(PutBlob::opcode);
        if (r.length != c.bulk_length()) return c.reply(Status(Code::invalid, "length does not match the bulk"));
        auto buf = std::make_shared<std::vector<uint8_t>>(r.length);
        c.receive_bulk(*buf, [c, buf](Status s) {
            if (!s.ok()) return c.reply(s);
            rpc::reply<PutBlob>(c, Checksum{crc32c(buf->data(), buf->size()), buf->size()});
        });
    });
    rpc::serve<GetBlob>(w, [note](ServerCall c, GetRequest&& r) {
        note(GetBlob::opcode);
        auto buf = std::make_shared<std::vector<uint8_t>>(r.length);
        fill_pattern(buf->data(), buf->size(), r.seed);
        Checksum sum{crc32c(buf->data(), buf->size()), buf->size()};
        rpc::reply<GetBlob>(c, sum, OutBulk{*buf, buf});
    });
    rpc::serve<Hang>(w, [st, note](ServerCall c, Empty&&) {
        std::lock_guard lock(st->mu);
        st->held.push_back(std::move(c));
        note(Hang::opcode);
    });
    rpc::serve<Fail>(w, [note](ServerCall c, FailRequest&& r) {
        note(Fail::opcode);
        c.reply(Status(static_cast<Code>(r.code), r.message));
    });
    rpc::serve<Drop>(w, [note](ServerCall, Empty&&) { note(Drop::opcode); });
    rpc::serve<Mirror>(w, [note](ServerCall c, BigMessage&& m) {
        note(Mirror::opcode);
        m.crc = crc32c(m.blob.data(), m.blob.size());
        rpc::reply<Mirror>(c, m);
    });
    auto mr = w.map_memory(st->region.data(), st->region.size());
    if (mr.ok()) st->mr = *mr;
    rpc::serve<ShareRegion>(w, [st, note](ServerCall c, Empty&&) {
        note(ShareRegion::opcode);
        fill_pattern(st->region.data(), st->region.size(), 42);
        rpc::reply<ShareRegion>(c, RegionInfo{st->mr.address(), st->mr.length(), st->mr.rkey(),
                                              crc32c(st->region.data(), st->region.size())});
    });
    rpc::serve<CheckRegion>(w, [st, note](ServerCall c, Empty&&) {
        note(CheckRegion::opcode);
        rpc::reply<CheckRegion>(c, Checksum{crc32c(st->region.data(), st->region.size()), st->region.size()});
    });
}

} // namespace jobfs::test
