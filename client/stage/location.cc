// location.cc: parsing of s3:// URLs, jobfs: paths and plain paths.
#include "client/stage/location.h"

#include <cctype>

namespace jobfs::stage {

std::string s3_url(const std::string& bucket, const std::string& key) { return "s3://" + bucket + "/" + key; }

Result<Location> location_parse(const std::string& text) {
    Location l;
    l.text = text;
    if (text.empty()) return Status(Code::invalid, "empty location");
    l.trailing_slash = text.back() == '/';
    if (text.rfind("s3://", 0) == 0) {
        l.kind = Location::s3;
        const std::string rest = text.substr(5);
        const auto slash = rest.find('/');
        l.bucket = rest.substr(0, slash);
        l.key = slash == std::string::npos ? "" : rest.substr(slash + 1);
        // Bucket names: 3 to 63 of [a-z0-9.-] (DNS-compatible, as S3 requires today); a few
        // servers allow more, so only what cannot be a bucket in a URL path is refused.
        if (l.bucket.empty()) return Status(Code::invalid, "bad S3 URL '" + text + "': no bucket (write s3://bucket/prefix)");
        for (char c : l.bucket)
            if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_'))
                return Status(Code::invalid, "bad S3 URL '" + text + "': '" + l.bucket + "' is not a bucket name");
        return l;
    }
    if (text.rfind("s3:", 0) == 0 || text.find("://") != std::string::npos)
        return Status(Code::invalid, "bad location '" + text + "': S3 URLs are written s3://bucket/prefix");
    std::string p = text;
    if (p.rfind("jobfs:", 0) == 0) {
        l.kind = Location::jobfs;
        p = p.substr(6);
        if (p.empty() || p[0] != '/') return Status(Code::invalid, "bad jobfs path '" + text + "': write jobfs:/path");
    }
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    l.path = p;
    return l;
}

} // namespace jobfs::stage
