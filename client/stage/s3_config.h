// s3_config.h: where an S3 client finds its endpoint, region and credentials, the way the AWS
// tools do: options first, then the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN, AWS_REGION / AWS_DEFAULT_REGION, AWS_ENDPOINT_URL, AWS_PROFILE), then the
// profile's entries in ~/.aws/credentials and ~/.aws/config (AWS_SHARED_CREDENTIALS_FILE and
// AWS_CONFIG_FILE move them).
#pragma once

#include <string>

#include "result.h"
#include "client/stage/sigv4.h"

namespace jobfs::stage {

struct S3Options {  // what the command line gave; empty: not given
    std::string profile;
    std::string endpoint_url;
    std::string region;
    std::string addressing;  // "path", "virtual" or empty (path with an endpoint override, else virtual)
};

struct S3Config {
    Credentials creds;
    std::string region = "us-east-1";
    std::string scheme = "https";
    std::string endpoint_host;  // host[:port] of the service; buckets go in front when virtual
    bool path_style = false;
    std::string ca_bundle;      // AWS_CA_BUNDLE, if set
};

// Resolves the configuration; a missing access key or secret is an error that says where it
// was looked for.
Result<S3Config> s3_config_resolve(const S3Options& opts);

} // namespace jobfs::stage
