// sigv4.cc: the canonical request, string to sign and signing key of SigV4, over OpenSSL.
#include "client/stage/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>
#include <map>

namespace jobfs::stage {

const char kEmptySha256[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

std::string hex(std::span<const uint8_t> bytes) {
    static const char d[] = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (uint8_t b : bytes) {
        out += d[b >> 4];
        out += d[b & 15];
    }
    return out;
}

std::string sha256_hex(std::span<const uint8_t> data) {
    uint8_t md[SHA256_DIGEST_LENGTH];
    SHA256(data.data(), data.size(), md);
    return hex(md);
}

namespace {

std::string hmac(std::string_view key, std::string_view msg) {
    uint8_t md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const uint8_t*>(msg.data()),
         msg.size(), md, &len);
    return std::string(reinterpret_cast<char*>(md), len);
}

// Header values: leading/trailing blanks removed, inner runs of blanks collapsed to one.
std::string trim_value(std::string_view v) {
    std::string out;
    bool blank = false;
    for (char c : v) {
        if (c == ' ' || c == '\t') {
            blank = true;
            continue;
        }
        if (blank && !out.empty()) out += ' ';
        blank = false;
        out += c;
    }
    return out;
}

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

} // namespace

std::string uri_encode(std::string_view s, bool keep_slash) {
    static const char d[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(s.size() * 3);
    for (unsigned char c : s) {
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
            c == '_' || c == '~' || (c == '/' && keep_slash)) {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += d[c >> 4];
            out += d[c & 15];
        }
    }
    return out;
}

std::string canonical_path(std::string_view path) { return uri_encode(path.empty() ? "/" : path, true); }

std::string canonical_query(std::vector<std::pair<std::string, std::string>> query) {
    for (auto& [k, v] : query) {
        k = uri_encode(k, false);
        v = uri_encode(v, false);
    }
    std::sort(query.begin(), query.end());  // by encoded name, then value
    std::string out;
    for (const auto& [k, v] : query) {
        if (!out.empty()) out += '&';
        out += k + "=" + v;
    }
    return out;
}

Signature sign(const SignRequest& req, const Credentials& creds, const std::string& region,
               const std::string& service, std::time_t now) {
    Signature sig;
    std::tm tm{};
    gmtime_r(&now, &tm);
    char amz[17], day[9];
    std::strftime(amz, sizeof amz, "%Y%m%dT%H%M%SZ", &tm);
    std::strftime(day, sizeof day, "%Y%m%d", &tm);
    sig.amz_date = amz;

    // Headers by lower-case name; repeated names joined with ',' in the order given.
    std::map<std::string, std::string> headers;
    auto add = [&](const std::string& name, const std::string& value) {
        std::string& v = headers[lower(name)];
        v += (v.empty() ? "" : ",") + trim_value(value);
    };
    add("host", req.host);
    add("x-amz-date", sig.amz_date);
    if (!creds.session_token.empty()) add("x-amz-security-token", creds.session_token);
    for (const auto& [k, v] : req.headers) add(k, v);

    std::string canon_headers, signed_headers;
    for (const auto& [k, v] : headers) {
        canon_headers += k + ":" + v + "\n";
        signed_headers += (signed_headers.empty() ? "" : ";") + k;
    }
    sig.canonical_request = req.method + "\n" + canonical_path(req.path) + "\n" + canonical_query(req.query) +
                            "\n" + canon_headers + "\n" + signed_headers + "\n" + req.payload_hash;
    const std::string scope = std::string(day) + "/" + region + "/" + service + "/aws4_request";
    sig.string_to_sign = "AWS4-HMAC-SHA256\n" + sig.amz_date + "\n" + scope + "\n" + sha256_hex(sig.canonical_request);
    std::string key = hmac("AWS4" + creds.secret_key, day);
    key = hmac(key, region);
    key = hmac(key, service);
    key = hmac(key, "aws4_request");
    const std::string raw = hmac(key, sig.string_to_sign);
    sig.signature = hex(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(raw.data()), raw.size()));
    sig.authorization = "AWS4-HMAC-SHA256 Credential=" + creds.access_key + "/" + scope +
                        ", SignedHeaders=" + signed_headers + ", Signature=" + sig.signature;
    return sig;
}

} // namespace jobfs::stage
