// wire_test: the message codec and the frame header refuse every malformed input cleanly.
#include <gtest/gtest.h>

#include <random>

#include "frame.h"
#include "test_messages.h"
#include "wire.h"

namespace jobfs {
namespace {

using transport::Bytes;

struct Inner {
    uint16_t a = 0;
    std::string s;
    JOBFS_FIELDS(a, s)
    bool operator==(const Inner&) const = default;
};

enum class Color : uint8_t { red = 1, green = 2 };

struct Complex {
    uint8_t u8 = 0;
    int32_t i32 = 0;
    uint64_t u64 = 0;
    bool flag = false;
    Color color = Color::red;
    std::string name;
    Bytes blob;
    std::vector<Inner> items;
    std::optional<Inner> maybe;
    std::vector<uint32_t> nums;
    std::array<uint8_t, 4> tag{};
    JOBFS_FIELDS(u8, i32, u64, flag, color, name, blob, items, maybe, nums, tag)
    bool operator==(const Complex&) const = default;
};

Complex sample() {
    Complex c;
    c.u8 = 7;
    c.i32 = -123456;
    c.u64 = 0x0102030405060708ull;
    c.flag = true;
    c.color = Color::green;
    c.name = "checkpoint/step100";
    c.blob = {0, 1, 2, 255};
    c.items = {{1, "a"}, {2, std::string(300, 'x')}};
    c.maybe = Inner{9, "nine"};
    c.nums = {1, 2, 3, 0xffffffffu};
    c.tag = {'J', 'B', 'F', 'S'};
    return c;
}

TEST(Wire, RoundTripsEveryFieldKind) {
    Complex in = sample();
    Bytes b = wire::encode(in);
    auto out = wire::decode<Complex>(b);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_EQ(*out, in);
}

struct TwoInts {
    uint16_t a = 0x0102;
    int32_t b = -2;
    JOBFS_FIELDS(a, b)
};
struct U64Vector {
    std::vector<uint64_t> v;
    JOBFS_FIELDS(v)
};
struct OneBool {
    bool b = false;
    JOBFS_FIELDS(b)
};

TEST(Wire, IntegersAreLittleEndianAtTheirWidth) {
    Bytes b = wire::encode(TwoInts{});
    EXPECT_EQ(b, (Bytes{0x02, 0x01, 0xfe, 0xff, 0xff, 0xff}));
}

TEST(Wire, EveryTruncationFailsWithProtocolError) {
    Bytes b = wire::encode(sample());
    for (size_t n = 0; n < b.size(); ++n) {
        auto r = wire::decode<Complex>(std::span<const uint8_t>(b.data(), n));
        ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes decoded";
        EXPECT_EQ(r.status().code(), Code::protocol);
    }
}

TEST(Wire, TrailingBytesAreRejected) {
    Bytes b = wire::encode(sample());
    b.push_back(0);
    auto r = wire::decode<Complex>(b);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("trailing"), std::string::npos);
}

TEST(Wire, LengthsPastTheBufferAreRejected) {
    test::EchoRequest req{"hello", 1};
    Bytes b = wire::encode(req);
    b[0] = 0xff; b[1] = 0xff; b[2] = 0xff; b[3] = 0x7f; // string length 2 GiB
    auto r = wire::decode<test::EchoRequest>(b);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::protocol);

    Bytes huge = {0xff, 0xff, 0xff, 0xff, 1, 2, 3};
    EXPECT_FALSE(wire::decode<U64Vector>(huge).ok());
}

TEST(Wire, BoolMustBeZeroOrOne) {
    EXPECT_TRUE(wire::decode<OneBool>(Bytes{1}).ok());
    EXPECT_FALSE(wire::decode<OneBool>(Bytes{2}).ok());
}

TEST(Wire, RandomBytesNeverCrashTheDecoder) {
    std::mt19937_64 rng(12345);
    Bytes good = wire::encode(sample());
    int decoded = 0;
    for (int i = 0; i < 20000; ++i) {
        Bytes b;
        if (i % 2 == 0) {
            b.resize(rng() % 200);
            for (auto& x : b) x = static_cast<uint8_t>(rng());
        } else {
            b = good; // mutate a valid message: flip a few bytes
            for (int k = 0; k < 3; ++k) b[rng() % b.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
        }
        auto r = wire::decode<Complex>(b);
        if (r.ok()) {
            ++decoded;
            EXPECT_EQ(wire::encode(*r), b) << "a decoded message must re-encode to the same bytes";
        } else {
            EXPECT_EQ(r.status().code(), Code::protocol);
        }
    }
    EXPECT_GT(decoded, 0); // some mutations stay valid (e.g. in the name): the check above ran
}

TEST(Frame, PackParseRoundTrip) {
    transport::FrameHeader h;
    h.kind = transport::FrameKind::reply;
    h.flags = transport::kInlineMessage;
    h.opcode = 77;
    h.status = static_cast<int32_t>(Code::not_found);
    h.request_id = 0xdeadbeefcafeull;
    h.message_length = 5;
    h.bulk_length = 4096;
    uint8_t buf[transport::kFrameHeaderSize + 5] = {};
    transport::frame_header_pack(h, buf);
    auto r = transport::frame_header_parse(buf, sizeof buf, 4096);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->opcode, 77);
    EXPECT_EQ(r->request_id, h.request_id);
    EXPECT_EQ(r->status, h.status);
    EXPECT_EQ(r->bulk_length, 4096u);
}

TEST(Frame, RejectsEveryInconsistency) {
    transport::FrameHeader h;
    h.flags = transport::kInlineMessage;
    h.opcode = 16;
    h.message_length = 3;
    uint8_t good[transport::kFrameHeaderSize + 3] = {};
    transport::frame_header_pack(h, good);
    ASSERT_TRUE(transport::frame_header_parse(good, sizeof good, 0).ok());

    auto bad = [&](auto mutate, size_t hlen, size_t dlen, const char* what) {
        uint8_t b[sizeof good];
        std::memcpy(b, good, sizeof good);
        mutate(b);
        auto r = transport::frame_header_parse(b, hlen, dlen);
        EXPECT_FALSE(r.ok()) << what;
        if (!r.ok()) {
            EXPECT_EQ(r.status().code(), Code::protocol) << what;
        }
    };
    auto none = [](uint8_t*) {};
    bad(none, 10, 0, "truncated header");
    bad(none, sizeof good - 1, 0, "inline message shorter than announced");
    bad(none, sizeof good, 1, "data without announced bulk");
    bad([](uint8_t* b) { b[0] ^= 1; }, sizeof good, 0, "magic");
    bad([](uint8_t* b) { b[4] = 2; }, sizeof good, 0, "version");
    bad([](uint8_t* b) { b[5] = 9; }, sizeof good, 0, "kind");
    bad([](uint8_t* b) { b[6] = 0x80; }, sizeof good, 0, "unknown flag");
    bad([](uint8_t* b) { b[10] = 1; }, sizeof good, 0, "reserved");
    bad([](uint8_t* b) { b[12] = 1; }, sizeof good, 0, "request with status");
    bad([](uint8_t* b) { b[27] = 0xff; }, sizeof good, 0, "message length past the limit");
    bad([](uint8_t* b) { b[39] = 0xff; }, sizeof good, 0, "bulk length past the limit");
    EXPECT_FALSE(transport::frame_header_parse(nullptr, 0, 0).ok());
}

TEST(Frame, RandomHeadersNeverCrashTheParser) {
    std::mt19937_64 rng(777);
    for (int i = 0; i < 50000; ++i) {
        uint8_t b[64];
        for (auto& x : b) x = static_cast<uint8_t>(rng());
        if (i % 2) { // valid magic and version, so the deeper checks run too
            b[0] = 'J'; b[1] = 'B'; b[2] = 'F'; b[3] = 'S'; b[4] = 1;
        }
        size_t hlen = rng() % sizeof b;
        (void)transport::frame_header_parse(b, hlen, rng() % 100000);
    }
    SUCCEED();
}

TEST(Status, MapsToErrnoAndBack) {
    EXPECT_EQ(Status(Code::not_found, "x").to_errno(), ENOENT);
    EXPECT_EQ(Status(Code::no_space, "x").to_errno(), ENOSPC);
    EXPECT_EQ(Status(Code::peer_gone, "x").to_errno(), ENOTCONN);
    EXPECT_EQ(Status::from_errno(EACCES, "open /a").code(), Code::permission);
    EXPECT_EQ(Status::from_errno(ENOSPC, "").code(), Code::no_space);
    EXPECT_EQ(Status(Code::io, "disk").with_context("write /a").to_string(), "io: write /a: disk");
    EXPECT_TRUE(code_is_known(static_cast<int32_t>(Code::refused)));
    EXPECT_FALSE(code_is_known(9999));
}

} // namespace
} // namespace jobfs
