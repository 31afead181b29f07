// s3_client.cc: requests, signing, retries and the S3 operations the staging code uses.
#include "client/stage/s3_client.h"

#include <curl/curl.h>
#include <openssl/evp.h>

#include <cctype>
#include <chrono>
#include <cstring>
#include <ctime>
#include <mutex>
#include <random>
#include <thread>

#include "client/stage/s3_xml.h"

namespace jobfs::stage {
namespace {

std::once_flag g_curl_init;

// The calling thread's curl handle: kept between requests so its connections are reused.
struct ThreadCurl {
    CURL* h = nullptr;
    ~ThreadCurl() {
        if (h) curl_easy_cleanup(h);
    }
};
thread_local ThreadCurl t_curl;

// A request's body: bytes in memory, or a source read into curl's own buffer as it sends.
struct Upload {
    std::span<const uint8_t> body;
    const S3Client::Source* source = nullptr;
    uint64_t size = 0;  // of the source's body
    uint64_t pos = 0;
    Status source_status;  // why the source stopped the upload
};

size_t read_cb(char* buf, size_t size, size_t n, void* arg) {
    auto* u = static_cast<Upload*>(arg);
    if (!u->source) {
        const size_t len = std::min<size_t>(size * n, u->body.size() - u->pos);
        std::memcpy(buf, u->body.data() + u->pos, len);
        u->pos += len;
        return len;
    }
    const size_t want = static_cast<size_t>(std::min<uint64_t>(size * n, u->size - u->pos));
    if (want == 0) return 0;
    auto got = (*u->source)(u->pos, std::span<uint8_t>(reinterpret_cast<uint8_t*>(buf), want));
    if (got.ok() && *got == 0) got = Status(Code::io, "the file ended before its size (it shrank while staging)");
    if (!got.ok()) {
        u->source_status = got.status();
        return CURL_READFUNC_ABORT;
    }
    u->pos += *got;
    return *got;
}

// A response's body: a successful GET's goes to the call's sink when it has one; any other
// (an error's XML, a listing) is kept whole for its reader.
struct Download {
    CURL* h;
    const S3Client::Sink* sink;
    std::string* body;
    uint64_t pos = 0;
    int to_sink = -1;  // not known before the first piece (the status line is in by then)
    Status sink_status;  // why the sink stopped the download
};

size_t write_cb(char* data, size_t size, size_t n, void* arg) {
    auto* d = static_cast<Download*>(arg);
    const size_t len = size * n;
    if (d->sink && d->to_sink < 0) {
        long code = 0;
        curl_easy_getinfo(d->h, CURLINFO_RESPONSE_CODE, &code);
        d->to_sink = code >= 200 && code < 300;
    }
    if (d->to_sink != 1) {
        d->body->append(data, len);
        return len;
    }
    d->sink_status = (*d->sink)(d->pos, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data), len));
    if (!d->sink_status.ok()) return 0;  // curl ends the transfer: CURLE_WRITE_ERROR
    d->pos += len;
    return len;
}

size_t header_cb(char* data, size_t size, size_t n, void* arg) {
    auto* h = static_cast<std::map<std::string, std::string>*>(arg);
    std::string line(data, size * n);
    const auto colon = line.find(':');
    if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        std::string value = line.substr(colon + 1);
        const auto b = value.find_first_not_of(" \t");
        const auto e = value.find_last_not_of(" \t\r\n");
        (*h)[name] = b == std::string::npos ? "" : value.substr(b, e - b + 1);
    } else if (line.rfind("HTTP/", 0) == 0) {
        h->clear();  // a new response (after 100 Continue or a redirect)
    }
    return size * n;
}

std::string unquote(std::string s) {
    if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
    return s;
}

bool retryable_code(const std::string& code) {
    return code == "SlowDown" || code == "Throttling" || code == "ThrottlingException" || code == "RequestTimeout" ||
           code == "InternalError" || code == "ServiceUnavailable" || code == "RequestLimitExceeded" ||
           code == "RequestTimeTooSkewed";
}

Code code_for_http(long status) {
    switch (status) {
    case 400: return Code::invalid;
    case 401:
    case 403: return Code::permission;
    case 404: return Code::not_found;
    case 409:
    case 412: return Code::busy;
    case 416: return Code::range;
    default: return status >= 500 ? Code::io : Code::protocol;
    }
}

Code code_for_curl(CURLcode rc) {
    switch (rc) {
    case CURLE_COULDNT_CONNECT: return Code::refused;
    case CURLE_OPERATION_TIMEDOUT: return Code::timeout;
    case CURLE_COULDNT_RESOLVE_HOST: return Code::not_found;
    default: return Code::peer_gone;
    }
}

} // namespace

namespace {
std::string md5_raw(std::span<const uint8_t> data) {
    uint8_t md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_Digest(data.data(), data.size(), md, &len, EVP_md5(), nullptr);
    return std::string(reinterpret_cast<char*>(md), len);
}

std::string hex_of(const std::string& raw) {
    return hex(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(raw.data()), raw.size()));
}

std::string base64_of(const std::string& raw) {
    unsigned char out[64];
    const int n = EVP_EncodeBlock(out, reinterpret_cast<const unsigned char*>(raw.data()), static_cast<int>(raw.size()));
    return std::string(reinterpret_cast<char*>(out), static_cast<size_t>(n));
}
} // namespace

std::string md5_hex(std::span<const uint8_t> data) { return hex_of(md5_raw(data)); }

// A one-PUT object's ETag, and a part's, is the MD5 of its bytes on AWS, radosgw, MinIO and
// s3rver: one that is an MD5 and differs means the server stored other bytes than the
// digests declared (s3rver does not check Content-MD5 itself; a file can change between
// its digest and its upload).
Status check_etag(const std::string& etag, const std::string& md5) {
    if (is_md5_etag(etag) && etag != hex_of(md5))
        return Status(Code::io, "the server's ETag " + etag + " is not the MD5 of the bytes sent (" + hex_of(md5) +
                                "; did the file change while staging?)");
    return Status::OK();
}

bool is_md5_etag(const std::string& etag) {
    if (etag.size() != 32) return false;
    for (char c : etag)
        if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    return true;
}

S3Client::S3Client(S3Config config, RetryPolicy retry) : config_(std::move(config)), retry_(retry) {
    std::call_once(g_curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

Result<S3Client::Response> S3Client::perform(const Call& call) {
    thread_local std::mt19937_64 rng(std::random_device{}());
    for (int attempt = 1;; ++attempt) {
        bool retry = false;
        auto r = perform_once(call, &retry);
        if (r.ok() || !retry || attempt >= retry_.attempts) {
            if (!r.ok() && retry && attempt > 1)
                return r.status().with_context("after " + std::to_string(attempt) + " attempts");
            return r;
        }
        const long cap = std::min<long>(retry_.max_delay_ms, static_cast<long>(retry_.base_delay_ms) << (attempt - 1));
        std::uniform_int_distribution<long> jitter(cap / 2, cap);
        std::this_thread::sleep_for(std::chrono::milliseconds(jitter(rng)));
    }
}

Result<S3Client::Response> S3Client::perform_once(const Call& call, bool* retry) {
    if (!t_curl.h) t_curl.h = curl_easy_init();
    CURL* h = t_curl.h;
    if (!h) return Status(Code::no_memory, "curl_easy_init failed");
    curl_easy_reset(h);

    SignRequest req;
    req.method = call.method;
    std::string host = config_.endpoint_host;
    std::string path = "/";
    if (!call.bucket.empty()) {
        if (config_.path_style) {
            path = "/" + call.bucket + (call.key.empty() ? "" : "/" + call.key);
        } else {
            host = call.bucket + "." + host;
            path = "/" + call.key;
        }
    }
    req.host = host;
    req.path = path;
    req.query = call.query;
    req.headers = call.headers;
    req.payload_hash = !call.payload_hash.empty() ? call.payload_hash : sha256_hex(call.body);
    req.headers.emplace_back("x-amz-content-sha256", req.payload_hash);
    const Signature sig = sign(req, config_.creds, config_.region, "s3", std::time(nullptr));

    std::string url = config_.scheme + "://" + host + canonical_path(path);
    const std::string q = canonical_query(call.query);
    if (!q.empty()) url += "?" + q;

    curl_slist* hl = nullptr;
    for (const auto& [k, v] : req.headers) hl = curl_slist_append(hl, (k + ": " + v).c_str());
    hl = curl_slist_append(hl, ("x-amz-date: " + sig.amz_date).c_str());
    hl = curl_slist_append(hl, ("Authorization: " + sig.authorization).c_str());
    if (!config_.creds.session_token.empty())
        hl = curl_slist_append(hl, ("x-amz-security-token: " + config_.creds.session_token).c_str());
    hl = curl_slist_append(hl, "Expect:");  // no 100-continue round trip on loopback

    Response resp;
    Upload up;
    up.body = call.body;
    up.source = call.source;
    up.size = call.source_size;
    Download down{h, call.sink, &resp.body, 0, -1, Status::OK()};
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);  // send the path exactly as it was signed
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, retry_.connect_timeout_s);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, retry_.low_speed_time_s);
    // Large buffers: fewer callbacks and system calls per 16 MiB part on a busy 2-core node.
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L * 1024);
    curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 1024L * 1024);
    if (call.expect_bytes) resp.body.reserve(call.expect_bytes);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &down);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &resp.headers);
    if (!config_.ca_bundle.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, config_.ca_bundle.c_str());
    if (call.method == "HEAD") {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (call.method == "PUT") {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, read_cb);
        curl_easy_setopt(h, CURLOPT_READDATA, &up);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
                         static_cast<curl_off_t>(call.source ? call.source_size : call.body.size()));
    } else if (call.method == "POST") {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, reinterpret_cast<const char*>(call.body.data()));
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(call.body.size()));
    } else if (call.method != "GET") {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, call.method.c_str());
    }
    const CURLcode rc = curl_easy_perform(h);
    curl_slist_free_all(hl);
    const std::string what = call.method + " " + url;
    if (rc != CURLE_OK && !down.sink_status.ok()) return down.sink_status;  // not retried
    if (rc != CURLE_OK && !up.source_status.ok()) return up.source_status;
    if (rc != CURLE_OK) {
        *retry = true;  // refused, reset, timed out, cut short: the server may come back
        return Status(code_for_curl(rc), std::string(curl_easy_strerror(rc)) + " (" + what + ")");
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.status);
    if (resp.status >= 200 && resp.status < 300) {
        // CompleteMultipartUpload may fail with 200 and an <Error> body.
        if (call.method == "POST" && resp.body.find("<Error>") != std::string::npos) {
            const std::string code = xml_first(resp.body, "Code");
            *retry = retryable_code(code);
            return Status(Code::io, "200 " + code + ": " + xml_first(resp.body, "Message"));
        }
        return resp;
    }
    std::string code = xml_first(resp.body, "Code"), message = xml_first(resp.body, "Message");
    if (code.empty()) code = resp.status == 404 ? "NotFound" : "HTTP" + std::to_string(resp.status);
    *retry = (resp.status >= 500 || resp.status == 429 || retryable_code(code)) && code != "NotImplemented";
    return Status(code_for_http(resp.status),
                  std::to_string(resp.status) + " " + code + (message.empty() ? "" : ": " + message));
}

Status S3Client::list_pages(const std::string& bucket, const std::string& prefix, int page_size, const Page& page) {
    std::string token;
    for (;;) {
        Call c("GET", bucket);
        c.query = {{"list-type", "2"}, {"max-keys", std::to_string(page_size)}};
        if (!prefix.empty()) c.query.emplace_back("prefix", prefix);
        if (!token.empty()) c.query.emplace_back("continuation-token", token);
        auto r = perform(c);
        if (!r.ok()) return r.status();
        std::vector<ObjectInfo> objects;
        for (auto block : xml_blocks(r->body, "Contents")) {
            ObjectInfo o;
            o.key = xml_first(block, "Key");
            o.size = std::strtoull(xml_first(block, "Size").c_str(), nullptr, 10);
            o.etag = unquote(xml_first(block, "ETag"));
            objects.push_back(std::move(o));
        }
        token = xml_first(r->body, "NextContinuationToken");
        const bool truncated = xml_first(r->body, "IsTruncated") == "true";
        if (truncated && token.empty())
            return Status(Code::protocol, "ListObjectsV2 of " + bucket + " is truncated but has no continuation token");
        JOBFS_RETURN_IF_ERROR(page(std::move(objects)));
        if (!truncated) return Status::OK();
    }
}

Result<std::vector<ObjectInfo>> S3Client::list(const std::string& bucket, const std::string& prefix, int page_size) {
    std::vector<ObjectInfo> out;
    Status s = list_pages(bucket, prefix, page_size, [&out](std::vector<ObjectInfo>&& objects) {
        out.insert(out.end(), std::make_move_iterator(objects.begin()), std::make_move_iterator(objects.end()));
        return Status::OK();
    });
    if (!s.ok()) return s;
    return out;
}

Result<HeadInfo> S3Client::head(const std::string& bucket, const std::string& key) {
    auto r = perform(Call("HEAD", bucket, key));
    if (!r.ok()) return r.status();
    HeadInfo h;
    h.size = std::strtoull(r->headers["content-length"].c_str(), nullptr, 10);
    h.etag = unquote(r->headers["etag"]);
    for (const auto& [k, v] : r->headers)
        if (k.rfind("x-amz-meta-", 0) == 0) h.meta[k.substr(11)] = v;
    return h;
}

Result<std::string> S3Client::get(const std::string& bucket, const std::string& key, uint64_t offset,
                                  uint64_t length, const std::string& if_match) {
    Call c("GET", bucket, key);
    c.expect_bytes = length;
    if (length > 0) c.headers.emplace_back("range", "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + length - 1));
    if (!if_match.empty()) c.headers.emplace_back("if-match", "\"" + if_match + "\"");
    auto r = perform(c);
    if (!r.ok()) return r.status();
    if (length > 0 && r->body.size() != length)
        return Status(Code::io, "short read: " + std::to_string(r->body.size()) + " of " + std::to_string(length) +
                                " bytes at offset " + std::to_string(offset));
    return std::move(r->body);
}

Status S3Client::get_stream(const std::string& bucket, const std::string& key, uint64_t offset, uint64_t length,
                            const std::string& if_match, const Sink& sink) {
    Call c("GET", bucket, key);
    uint64_t got = 0;  // of the last try (a retry starts at 0 again)
    const Sink count = [&](uint64_t pos, std::span<const uint8_t> piece) {
        got = pos + piece.size();
        return sink(pos, piece);
    };
    c.sink = &count;
    if (length > 0) c.headers.emplace_back("range", "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + length - 1));
    if (!if_match.empty()) c.headers.emplace_back("if-match", "\"" + if_match + "\"");
    auto r = perform(c);
    if (!r.ok()) return r.status();
    if (length > 0 && got != length)
        return Status(Code::io, "short read: " + std::to_string(got) + " of " + std::to_string(length) +
                                " bytes at offset " + std::to_string(offset));
    return Status::OK();
}

namespace {
void add_meta(std::vector<std::pair<std::string, std::string>>& h, const std::map<std::string, std::string>& meta) {
    for (const auto& [k, v] : meta) h.emplace_back("x-amz-meta-" + k, v);
}
} // namespace

Result<std::string> S3Client::put(const std::string& bucket, const std::string& key, std::span<const uint8_t> body,
                                  const std::map<std::string, std::string>& meta) {
    Call c("PUT", bucket, key, body);
    return put_call(c, md5_raw(body), meta);
}

Result<std::string> S3Client::put(const std::string& bucket, const std::string& key, uint64_t size,
                                  const BodyDigest& digest, const Source& source,
                                  const std::map<std::string, std::string>& meta) {
    Call c("PUT", bucket, key);
    c.payload_hash = digest.sha256_hex;
    c.source = &source;
    c.source_size = size;
    return put_call(c, digest.md5, meta);
}

Result<std::string> S3Client::put_call(Call& c, const std::string& md5, const std::map<std::string, std::string>& meta) {
    c.headers.emplace_back("content-md5", base64_of(md5));
    add_meta(c.headers, meta);
    auto r = perform(c);
    if (!r.ok()) return r.status();
    std::string etag = unquote(r->headers["etag"]);
    Status s = check_etag(etag, md5);
    if (!s.ok()) {  // the object holds other bytes: it must not carry the name
        Status rm = remove(c.bucket, c.key);
        return rm.ok() ? s : s.with_context("removing the object failed too (" + rm.message() + ")");
    }
    return etag;
}

Result<std::string> S3Client::multipart_create(const std::string& bucket, const std::string& key,
                                               const std::map<std::string, std::string>& meta) {
    Call c("POST", bucket, key);
    c.query = {{"uploads", ""}};
    add_meta(c.headers, meta);
    auto r = perform(c);
    if (!r.ok()) return r.status();
    std::string id = xml_first(r->body, "UploadId");
    if (id.empty()) return Status(Code::protocol, "CreateMultipartUpload answered without an UploadId");
    return id;
}

Result<std::string> S3Client::multipart_upload_part(const std::string& bucket, const std::string& key,
                                                    const std::string& upload_id, int part, uint64_t size,
                                                    const BodyDigest& digest, const Source& source) {
    Call c("PUT", bucket, key);
    c.query = {{"partNumber", std::to_string(part)}, {"uploadId", upload_id}};
    c.headers.emplace_back("content-md5", base64_of(digest.md5));
    c.payload_hash = digest.sha256_hex;
    c.source = &source;
    c.source_size = size;
    auto r = perform(c);
    if (!r.ok()) return r.status();
    std::string etag = unquote(r->headers["etag"]);
    Status s = check_etag(etag, digest.md5);  // a source whose bytes changed since the digest
    if (!s.ok()) return s;
    return etag;
}

BodyDigests::BodyDigests() : md5_(EVP_MD_CTX_new()), sha_(EVP_MD_CTX_new()) {
    EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(md5_), EVP_md5(), nullptr);
    EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(sha_), EVP_sha256(), nullptr);
}

BodyDigests::~BodyDigests() {
    EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(md5_));
    EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(sha_));
}

void BodyDigests::update(std::span<const uint8_t> piece) {
    EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(md5_), piece.data(), piece.size());
    EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(sha_), piece.data(), piece.size());
}

namespace {
std::string digest_end(void* ctx) {
    uint8_t md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx), md, &len);
    return std::string(reinterpret_cast<char*>(md), len);
}
} // namespace

BodyDigest BodyDigests::end() { return {digest_end(md5_), hex_of(digest_end(sha_))}; }

Result<std::string> S3Client::multipart_complete(const std::string& bucket, const std::string& key,
                                                 const std::string& upload_id, const std::vector<std::string>& etags) {
    std::string xml = "<CompleteMultipartUpload>";
    for (size_t i = 0; i < etags.size(); ++i)
        xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>\"" + xml_escape(etags[i]) +
               "\"</ETag></Part>";
    xml += "</CompleteMultipartUpload>";
    Call c("POST", bucket, key, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(xml.data()), xml.size()));
    c.query = {{"uploadId", upload_id}};
    c.headers.emplace_back("content-type", "application/xml");
    auto r = perform(c);
    if (!r.ok()) return r.status();
    return unquote(xml_first(r->body, "ETag"));
}

Result<std::vector<UploadInfo>> S3Client::multipart_list(const std::string& bucket, const std::string& prefix) {
    std::vector<UploadInfo> out;
    std::string key_marker, id_marker;
    for (;;) {
        Call c("GET", bucket);
        if (!key_marker.empty()) c.query.emplace_back("key-marker", key_marker);
        if (!prefix.empty()) c.query.emplace_back("prefix", prefix);
        if (!id_marker.empty()) c.query.emplace_back("upload-id-marker", id_marker);
        c.query.emplace_back("uploads", "");
        auto r = perform(c);
        if (!r.ok()) return r.status();
        for (auto block : xml_blocks(r->body, "Upload")) {
            UploadInfo u;
            u.key = xml_first(block, "Key");
            u.upload_id = xml_first(block, "UploadId");
            if (!u.upload_id.empty()) out.push_back(std::move(u));
        }
        if (xml_first(r->body, "IsTruncated") != "true") break;
        key_marker = xml_first(r->body, "NextKeyMarker");
        id_marker = xml_first(r->body, "NextUploadIdMarker");
        if (key_marker.empty()) return Status(Code::protocol, "ListMultipartUploads of " + bucket + " is truncated but has no NextKeyMarker");
    }
    return out;
}

Status S3Client::multipart_abort(const std::string& bucket, const std::string& key, const std::string& upload_id) {
    Call c("DELETE", bucket, key);
    c.query = {{"uploadId", upload_id}};
    auto r = perform(c);
    return r.ok() ? Status::OK() : r.status();
}

Status S3Client::remove(const std::string& bucket, const std::string& key) {
    auto r = perform(Call("DELETE", bucket, key));
    return r.ok() ? Status::OK() : r.status();
}

Status S3Client::create_bucket(const std::string& bucket) {
    auto r = perform(Call("PUT", bucket));
    return r.ok() ? Status::OK() : r.status();
}

} // namespace jobfs::stage
