// location.h: what a staging SRC or DST names. s3://bucket/key-or-prefix is an object store
// location; jobfs:/path is a path in jobfs (through libjobfs, no mount needed); anything else
// is a path of a POSIX file system (a parallel file system, the node's disk, a jobfs mount).
#pragma once

#include <string>

#include "result.h"

namespace jobfs::stage {

struct Location {
    enum Kind { s3, jobfs, local } kind = local;
    std::string bucket;  // s3
    std::string key;     // s3: key or prefix (may be empty or end in '/')
    std::string path;    // jobfs, local: without the jobfs: prefix and trailing slashes
    bool trailing_slash = false;
    std::string text;    // as given, for messages
};

Result<Location> location_parse(const std::string& text);
std::string s3_url(const std::string& bucket, const std::string& key);

} // namespace jobfs::stage
