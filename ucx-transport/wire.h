// wire.h: the bounds-checked encoding of protocol messages.
//
// A message is a plain struct that lists its fields once with JOBFS_FIELDS; encode and decode
// are derived from that list, so no handler packs bytes by hand:
//
//     struct ReadRequest {
//         uint64_t inode = 0;
//         uint64_t offset = 0;
//         uint32_t length = 0;
//         JOBFS_FIELDS(inode, offset, length)
//     };
//
// Encoding: integers and enums little-endian at their own width; bool one byte (0 or 1);
// strings and byte vectors a u32 length then the bytes; vectors a u32 count then the
// elements; optionals a presence byte then the value; nested structs their fields in order.
// Decoding checks every length against the bytes that remain and fails with Code::protocol,
// never reading out of bounds. A message must be consumed exactly: trailing bytes are an error.
// Compatibility is handled by the frame version (frame.h), not by tolerating extra fields.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "result.h"
#include "status.h"

namespace jobfs::wire {

using Bytes = std::vector<uint8_t>;

// Caps that keep a hostile length from making the decoder allocate gigabytes.
inline constexpr uint32_t kMaxStringBytes = 64u << 20;
inline constexpr uint32_t kMaxElements = 16u << 20;

class Encoder {
public:
    explicit Encoder(Bytes& out) : out_(out) {}

    template <class U>
    void put_int(U v) {
        static_assert(std::is_unsigned_v<U>);
        const size_t at = out_.size();
        out_.resize(at + sizeof(U));
        for (size_t i = 0; i < sizeof(U); ++i) out_[at + i] = static_cast<uint8_t>(v >> (8 * i));
    }
    void put_raw(const void* p, size_t n) {
        if (n == 0) return;
        const size_t at = out_.size();
        out_.resize(at + n);
        std::memcpy(out_.data() + at, p, n);
    }

private:
    Bytes& out_;
};

class Decoder {
public:
    explicit Decoder(std::span<const uint8_t> in) : p_(in.data()), end_(in.data() + in.size()) {}

    size_t remaining() const { return static_cast<size_t>(end_ - p_); }
    bool failed() const { return !error_.empty(); }
    const std::string& error() const { return error_; }

    // Records the first failure; later reads fail too, so one check at the end suffices.
    bool fail(const char* what) {
        if (error_.empty()) error_ = what;
        p_ = end_;
        return false;
    }

    template <class U>
    bool get_int(U& v) {
        static_assert(std::is_unsigned_v<U>);
        if (remaining() < sizeof(U)) return fail("truncated integer");
        U x = 0;
        for (size_t i = 0; i < sizeof(U); ++i) x |= static_cast<U>(p_[i]) << (8 * i);
        p_ += sizeof(U);
        v = x;
        return true;
    }
    bool get_raw(void* dst, size_t n) {
        if (remaining() < n) return fail("truncated byte string");
        if (n == 0) return true; // dst may be the null data() of an empty container
        std::memcpy(dst, p_, n);
        p_ += n;
        return true;
    }

private:
    const uint8_t* p_;
    const uint8_t* end_;
    std::string error_;
};

// ---- field codecs ----------------------------------------------------------------------

template <class T>
concept Message = requires(T& t) { t.jobfs_fields([](auto&...) { return true; }); };

template <class T>
concept WireInt = (std::is_integral_v<T> && !std::is_same_v<T, bool>) || std::is_enum_v<T>;

template <class T, bool = std::is_enum_v<T>>
struct wire_unsigned { using type = std::make_unsigned_t<T>; };
template <class T>
struct wire_unsigned<T, true> { using type = std::make_unsigned_t<std::underlying_type_t<T>>; };

template <WireInt T>
void encode_field(Encoder& e, const T& v) {
    using U = typename wire_unsigned<T>::type;
    e.put_int(static_cast<U>(v));
}
template <WireInt T>
bool decode_field(Decoder& d, T& v) {
    using U = typename wire_unsigned<T>::type;
    U u{};
    if (!d.get_int(u)) return false;
    v = static_cast<T>(u);
    return true;
}

inline void encode_field(Encoder& e, const bool& v) { e.put_int(static_cast<uint8_t>(v ? 1 : 0)); }
inline bool decode_field(Decoder& d, bool& v) {
    uint8_t b = 0;
    if (!d.get_int(b)) return false;
    if (b > 1) return d.fail("bool that is neither 0 nor 1");
    v = b == 1;
    return true;
}

inline void encode_field(Encoder& e, const std::string& s) {
    e.put_int(static_cast<uint32_t>(s.size()));
    e.put_raw(s.data(), s.size());
}
inline bool decode_field(Decoder& d, std::string& s) {
    uint32_t n = 0;
    if (!d.get_int(n)) return false;
    if (n > kMaxStringBytes || n > d.remaining()) return d.fail("string length past the end of the message");
    s.resize(n);
    return d.get_raw(s.data(), n);
}

inline void encode_field(Encoder& e, const Bytes& b) {
    e.put_int(static_cast<uint32_t>(b.size()));
    e.put_raw(b.data(), b.size());
}
inline bool decode_field(Decoder& d, Bytes& b) {
    uint32_t n = 0;
    if (!d.get_int(n)) return false;
    if (n > kMaxStringBytes || n > d.remaining()) return d.fail("byte string length past the end of the message");
    b.resize(n);
    return d.get_raw(b.data(), n);
}

template <size_t N>
void encode_field(Encoder& e, const std::array<uint8_t, N>& a) { e.put_raw(a.data(), N); }
template <size_t N>
bool decode_field(Decoder& d, std::array<uint8_t, N>& a) { return d.get_raw(a.data(), N); }

template <Message T>
void encode_field(Encoder& e, const T& m);
template <Message T>
bool decode_field(Decoder& d, T& m);

template <class T>
void encode_field(Encoder& e, const std::optional<T>& o) {
    encode_field(e, o.has_value());
    if (o) encode_field(e, *o);
}
template <class T>
bool decode_field(Decoder& d, std::optional<T>& o) {
    bool present = false;
    if (!decode_field(d, present)) return false;
    if (!present) {
        o.reset();
        return true;
    }
    o.emplace();
    return decode_field(d, *o);
}

template <class T>
    requires(!std::is_same_v<T, uint8_t>)
void encode_field(Encoder& e, const std::vector<T>& v) {
    e.put_int(static_cast<uint32_t>(v.size()));
    for (const auto& x : v) encode_field(e, x);
}
template <class T>
    requires(!std::is_same_v<T, uint8_t>)
bool decode_field(Decoder& d, std::vector<T>& v) {
    uint32_t n = 0;
    if (!d.get_int(n)) return false;
    // Every element takes at least one byte unless it is an empty struct; the cap bounds those.
    if (n > kMaxElements || (n > d.remaining() && !std::is_empty_v<T>)) return d.fail("element count past the end of the message");
    v.clear();
    v.reserve(std::min<size_t>(n, d.remaining() + 1));
    for (uint32_t i = 0; i < n; ++i) {
        v.emplace_back();
        if (!decode_field(d, v.back())) return false;
    }
    return true;
}

template <Message T>
void encode_field(Encoder& e, const T& m) {
    const_cast<T&>(m).jobfs_fields([&](const auto&... f) {
        (encode_field(e, f), ...);
        return true;
    });
}
template <Message T>
bool decode_field(Decoder& d, T& m) {
    return m.jobfs_fields([&](auto&... f) { return (decode_field(d, f) && ...); });
}

// ---- whole messages ------------------------------------------------------------------------

template <Message T>
Bytes encode(const T& m) {
    Bytes out;
    Encoder e(out);
    encode_field(e, m);
    return out;
}

template <Message T>
void encode_append(const T& m, Bytes& out) {
    Encoder e(out);
    encode_field(e, m);
}

template <Message T>
Status decode(std::span<const uint8_t> in, T& m) {
    Decoder d(in);
    if (!decode_field(d, m) || d.failed())
        return Status(Code::protocol, "malformed message: " + d.error());
    if (d.remaining() != 0)
        return Status(Code::protocol, "malformed message: " + std::to_string(d.remaining()) + " trailing bytes");
    return Status::OK();
}

template <Message T>
Result<T> decode(std::span<const uint8_t> in) {
    T m{};
    Status s = decode(in, m);
    if (!s.ok()) return s;
    return m;
}

} // namespace jobfs::wire

// Declares the wire fields of a message struct, in order. The generated member takes a
// callable and hands it references to every field at once.
#define JOBFS_FIELDS(...)                                                     \
    template <class F>                                                        \
    bool jobfs_fields(F&& f) { return f(__VA_ARGS__); }

// A message without fields.
#define JOBFS_NO_FIELDS                                                       \
    template <class F>                                                        \
    bool jobfs_fields(F&& f) { return f(); }
