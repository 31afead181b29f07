// sigv4.h: AWS Signature Version 4 for requests sent with headers (not presigned URLs).
//
// A pure function of the request, the credentials, the scope and the time, so it is tested
// against AWS's published test suite (tests/unit/sigv4_test.cc). S3 signs the path as it is
// sent (no normalisation, single URI encoding), which is what sign() does: callers give the
// path and query unencoded and send exactly what canonical_path()/canonical_query() return.
#pragma once

#include <cstdint>
#include <ctime>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace jobfs::stage {

struct Credentials {
    std::string access_key;
    std::string secret_key;
    std::string session_token;  // empty: none (x-amz-security-token is sent and signed if set)
};

struct SignRequest {
    std::string method;                                        // GET, PUT…
    std::string host;                                          // the Host header (with :port if not default)
    std::string path;                                          // unencoded, starts with '/'
    std::vector<std::pair<std::string, std::string>> query;    // unencoded, any order
    std::vector<std::pair<std::string, std::string>> headers;  // besides host and x-amz-date
    std::string payload_hash;                                  // hex SHA-256 of the body, or UNSIGNED-PAYLOAD
};

struct Signature {
    std::string canonical_request;
    std::string string_to_sign;
    std::string signature;      // hex
    std::string authorization;  // the Authorization header value
    std::string amz_date;       // the X-Amz-Date header value (20150830T123600Z)
};

// RFC 3986 encoding as SigV4 wants it: unreserved characters stay, every other byte becomes
// %XX (upper case); '/' stays when keep_slash (paths) and is encoded otherwise (query).
std::string uri_encode(std::string_view s, bool keep_slash);
// The path and query string to put on the wire, the same bytes that were signed.
std::string canonical_path(std::string_view path);
std::string canonical_query(std::vector<std::pair<std::string, std::string>> query);

std::string hex(std::span<const uint8_t> bytes);
std::string sha256_hex(std::span<const uint8_t> data);
inline std::string sha256_hex(std::string_view s) {
    return sha256_hex(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}
extern const char kEmptySha256[];  // SHA-256 of no bytes

Signature sign(const SignRequest& req, const Credentials& creds, const std::string& region,
               const std::string& service, std::time_t now);

} // namespace jobfs::stage
