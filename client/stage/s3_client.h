// s3_client.h: an S3 client over libcurl, signing with SigV4 (sigv4.h).
//
// One request per call, on a curl handle owned by the calling thread (connections are kept
// per thread), so every method may be called from many threads at once. Requests that fail
// in a way a retry can cure (dropped or refused connections, 5xx, SlowDown and other
// throttling) are retried with exponential backoff and jitter; the rest fail at once.
// Errors are Status values whose message starts with the HTTP status and S3 error code:
// "403 SignatureDoesNotMatch: The request signature we calculated does not match…".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "result.h"
#include "client/stage/s3_config.h"

namespace jobfs::stage {

struct ObjectInfo {
    std::string key;
    uint64_t size = 0;
    std::string etag;  // without quotes
};

struct UploadInfo {  // an open multipart upload (ListMultipartUploads)
    std::string key;
    std::string upload_id;
};

struct HeadInfo {
    uint64_t size = 0;
    std::string etag;
    std::map<std::string, std::string> meta;  // x-amz-meta-NAME → value, NAME in lower case
};

struct BodyDigest {
    std::string md5;         // the 16 bytes (Content-MD5 is their base64, an ETag their hex)
    std::string sha256_hex;  // the signed payload hash
};

struct RetryPolicy {
    int attempts = 6;           // tries in all, the first included
    int base_delay_ms = 100;    // doubled per retry, with full jitter
    int max_delay_ms = 5000;
    long connect_timeout_s = 10;
    long low_speed_time_s = 60; // a transfer under 1 KiB/s for this long is dropped (and retried)
};

class S3Client {
public:
    S3Client(S3Config config, RetryPolicy retry = {});

    // ListObjectsV2 over every page (continuation tokens); keys in the server's order.
    Result<std::vector<ObjectInfo>> list(const std::string& bucket, const std::string& prefix, int page_size = 1000);
    // The same, each page handed to `page` as it arrives, so the caller can start on it while
    // the next is listed (a bucket of a million keys is a thousand pages, one after the
    // other). An error from `page` ends the listing with that error.
    using Page = std::function<Status(std::vector<ObjectInfo>&&)>;
    Status list_pages(const std::string& bucket, const std::string& prefix, int page_size, const Page& page);
    Result<HeadInfo> head(const std::string& bucket, const std::string& key);
    // GET of [offset, offset+length) (length 0: the whole object). With if_match set, a
    // changed object fails (412 PreconditionFailed) instead of mixing two versions.
    Result<std::string> get(const std::string& bucket, const std::string& key, uint64_t offset = 0,
                            uint64_t length = 0, const std::string& if_match = "");
    // The same GET handed to `sink` piece by piece as the bytes arrive (pos: where the piece
    // starts within the range), so a large part never sits whole in memory. A retry starts
    // again at pos 0. An error from the sink ends the GET with that error (not retried).
    using Sink = std::function<Status(uint64_t pos, std::span<const uint8_t> piece)>;
    Status get_stream(const std::string& bucket, const std::string& key, uint64_t offset, uint64_t length,
                      const std::string& if_match, const Sink& sink);
    // PUT with Content-MD5 and a signed SHA-256 of the body; returns the ETag, checked against
    // the MD5 when it is one (is_md5_etag).
    Result<std::string> put(const std::string& bucket, const std::string& key, std::span<const uint8_t> body,
                            const std::map<std::string, std::string>& meta = {});
    Result<std::string> multipart_create(const std::string& bucket, const std::string& key,
                                         const std::map<std::string, std::string>& meta = {});
    // Part `part` (from 1): `size` bytes that `source` reads while they are sent (and again on
    // a retry): source(pos, out) fills out with the bytes at pos, or fails. The digest is of
    // those bytes, taken before (BodyDigests); a source that then gives other bytes fails the
    // part, on the server (400 BadDigest) or at the ETag check (check_etag); returns the ETag.
    using Source = std::function<Result<size_t>(uint64_t pos, std::span<uint8_t> out)>;
    Result<std::string> multipart_upload_part(const std::string& bucket, const std::string& key,
                                              const std::string& upload_id, int part, uint64_t size,
                                              const BodyDigest& digest, const Source& source);
    // put() with the body read from `source` as it is sent, as multipart_upload_part above.
    Result<std::string> put(const std::string& bucket, const std::string& key, uint64_t size,
                            const BodyDigest& digest, const Source& source,
                            const std::map<std::string, std::string>& meta = {});
    Result<std::string> multipart_complete(const std::string& bucket, const std::string& key,
                                           const std::string& upload_id, const std::vector<std::string>& etags);
    // ListMultipartUploads of a prefix over every page: uploads created and neither completed
    // nor aborted. Servers without it (s3rver) answer 501 NotImplemented, not retried.
    Result<std::vector<UploadInfo>> multipart_list(const std::string& bucket, const std::string& prefix);
    Status multipart_abort(const std::string& bucket, const std::string& key, const std::string& upload_id);
    Status remove(const std::string& bucket, const std::string& key);
    Status create_bucket(const std::string& bucket);

    const S3Config& config() const { return config_; }

    struct Response {
        long status = 0;
        std::map<std::string, std::string> headers;  // lower-case names
        std::string body;
    };

private:
    struct Call {
        Call(std::string m, std::string b, std::string k = "", std::span<const uint8_t> data = {})
            : method(std::move(m)), bucket(std::move(b)), key(std::move(k)), body(data) {}
        std::string method;
        std::string bucket, key;
        std::vector<std::pair<std::string, std::string>> query;
        std::vector<std::pair<std::string, std::string>> headers;
        std::span<const uint8_t> body;
        std::string payload_hash;  // empty: computed from body
        uint64_t expect_bytes = 0; // size of the answer's body, when known (reserved up front)
        const Sink* sink = nullptr;     // a successful answer's body goes there, not to Response::body
        const Source* source = nullptr; // the body, read while sent (source_size bytes), not `body`
        uint64_t source_size = 0;
    };
    Result<std::string> put_call(Call& c, const std::string& md5, const std::map<std::string, std::string>& meta);
    Result<Response> perform(const Call& call);
    Result<Response> perform_once(const Call& call, bool* retry);

    S3Config config_;
    RetryPolicy retry_;
};


// The MD5 (for Content-MD5) and SHA-256 (the signed payload hash) of a body fed in pieces.
class BodyDigests {
public:
    BodyDigests();
    ~BodyDigests();
    BodyDigests(const BodyDigests&) = delete;
    BodyDigests& operator=(const BodyDigests&) = delete;
    void update(std::span<const uint8_t> piece);
    BodyDigest end();  // once, after the last update

private:
    void* md5_;  // EVP_MD_CTX*, kept out of this header
    void* sha_;
};
std::string md5_hex(std::span<const uint8_t> data);
// Whether an ETag is an MD5 in hex (a one-PUT object's), not a multipart "…-N" one.
bool is_md5_etag(const std::string& etag);
// An error when etag is an MD5 (is_md5_etag) other than md5 (16 bytes).
Status check_etag(const std::string& etag, const std::string& md5);

} // namespace jobfs::stage
