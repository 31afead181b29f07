// s3_config.cc: options, environment and the two INI files of the AWS tools.
#include "client/stage/s3_config.h"

#include <cstdlib>
#include <fstream>
#include <map>

namespace jobfs::stage {
namespace {

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
}

std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r");
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// The key = value entries of one [section] of an INI file (empty if file or section is missing).
std::map<std::string, std::string> ini_section(const std::string& file, const std::string& section) {
    std::map<std::string, std::string> out;
    std::ifstream in(file);
    std::string line;
    bool inside = false;
    while (std::getline(in, line)) {
        line = trim(line);
        if (line.empty() || line[0] == '#' || line[0] == ';') continue;
        if (line.front() == '[' && line.back() == ']') {
            inside = trim(line.substr(1, line.size() - 2)) == section;
            continue;
        }
        const auto eq = line.find('=');
        if (inside && eq != std::string::npos) out[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
    }
    return out;
}

std::string first(std::initializer_list<std::string> vs) {
    for (const auto& v : vs)
        if (!v.empty()) return v;
    return "";
}

} // namespace

Result<S3Config> s3_config_resolve(const S3Options& opts) {
    const std::string home = env("HOME");
    const std::string profile = first({opts.profile, env("AWS_PROFILE"), "default"});
    const std::string cred_file = first({env("AWS_SHARED_CREDENTIALS_FILE"), home + "/.aws/credentials"});
    const std::string conf_file = first({env("AWS_CONFIG_FILE"), home + "/.aws/config"});
    auto creds = ini_section(cred_file, profile);
    auto conf = ini_section(conf_file, profile == "default" ? "default" : "profile " + profile);
    auto get = [&](const char* key) { return first({creds[key], conf[key]}); };

    S3Config c;
    // An explicit profile wins over the environment's keys, as with the AWS CLI's --profile.
    const bool profile_first = !opts.profile.empty();
    auto pick = [&](const char* env_name, const char* key) {
        return profile_first ? first({get(key), env(env_name)}) : first({env(env_name), get(key)});
    };
    c.creds.access_key = pick("AWS_ACCESS_KEY_ID", "aws_access_key_id");
    c.creds.secret_key = pick("AWS_SECRET_ACCESS_KEY", "aws_secret_access_key");
    c.creds.session_token = pick("AWS_SESSION_TOKEN", "aws_session_token");
    if (c.creds.access_key.empty() || c.creds.secret_key.empty())
        return Status(Code::permission, "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
                                        "aws_access_key_id/aws_secret_access_key of profile '" + profile + "' in " +
                                        cred_file);
    c.region = first({opts.region, env("AWS_REGION"), env("AWS_DEFAULT_REGION"), conf["region"], "us-east-1"});
    std::string url = first({opts.endpoint_url, env("AWS_ENDPOINT_URL_S3"), env("AWS_ENDPOINT_URL"),
                             conf["endpoint_url"]});
    if (url.empty()) {
        c.endpoint_host = c.region == "us-east-1" ? "s3.amazonaws.com" : "s3." + c.region + ".amazonaws.com";
    } else {
        const auto sep = url.find("://");
        if (sep == std::string::npos) return Status(Code::invalid, "endpoint URL '" + url + "' has no scheme (http:// or https://)");
        c.scheme = url.substr(0, sep);
        if (c.scheme != "http" && c.scheme != "https") return Status(Code::invalid, "endpoint URL '" + url + "': scheme must be http or https");
        c.endpoint_host = url.substr(sep + 3);
        while (!c.endpoint_host.empty() && c.endpoint_host.back() == '/') c.endpoint_host.pop_back();
        if (c.endpoint_host.empty() || c.endpoint_host.find('/') != std::string::npos)
            return Status(Code::invalid, "endpoint URL '" + url + "' must be scheme://host[:port]");
    }
    // Default: path-style with an endpoint override (RGW, MinIO, s3rver rarely have wildcard
    // DNS), virtual-hosted against AWS itself.
    const std::string style = first({opts.addressing, env("JOBFS_S3_ADDRESSING")});
    if (style.empty()) c.path_style = !url.empty();
    else if (style == "path") c.path_style = true;
    else if (style == "virtual") c.path_style = false;
    else return Status(Code::invalid, "addressing style '" + style + "': use path or virtual");
    c.ca_bundle = env("AWS_CA_BUNDLE");
    return c;
}

} // namespace jobfs::stage
