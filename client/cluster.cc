#include "client/cluster.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace jobfs::client {
namespace {

std::string trim(const std::string& s) {
    size_t b = s.find_first_not_of(" \t\r");
    size_t e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

} // namespace

Result<ClusterInfo> read_cluster(const std::string& path) {
    std::ifstream in(path);
    if (!in) return Status::from_errno(errno, "cannot read cluster descriptor " + path);
    ClusterInfo info;
    bool versioned = false;
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
        const std::string where = path + ":" + std::to_string(n);
        line = trim(line.substr(0, line.find('#')));
        if (line.empty()) continue;
        size_t eq = line.find('=');
        if (eq == std::string::npos) return Status(Code::invalid, where + ": expected key = value");
        std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
        if (key == "version") {
            if (value != "1") return Status(Code::unsupported, where + ": descriptor version " + value + ", this client reads 1");
            versioned = true;
        } else if (key == "daemons") {
            std::stringstream ss(value);
            for (std::string d; std::getline(ss, d, ',');) {
                d = trim(d);
                if (d.rfind(':') == std::string::npos) return Status(Code::invalid, where + ": '" + d + "' is not host:port");
                info.daemons.push_back(d);
            }
        } else if (key == "secret") {
            info.secret = value;
        } else {
            return Status(Code::invalid, where + ": unknown key '" + key + "'");
        }
    }
    if (!versioned) return Status(Code::invalid, path + ": no 'version = 1' line: not a jobfs cluster descriptor");
    if (info.daemons.empty()) return Status(Code::invalid, path + ": no daemons listed");
    return info;
}

Result<ClusterInfo> read_cluster_from_env() {
    const char* p = std::getenv("JOBFS_CLUSTER");
    if (!p || !*p)
        return Status(Code::not_found, "JOBFS_CLUSTER is not set: start a file system with 'jobfs local up' "
                                       "(or a Slurm job with --jobfs) and export what it prints");
    return read_cluster(p);
}

Status write_cluster(const std::string& path, const ClusterInfo& info) {
    std::string tmp = path + ".tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return Status::from_errno(errno, "create " + tmp);
    std::string text = "# jobfs cluster descriptor\nversion = 1\ndaemons = ";
    for (size_t i = 0; i < info.daemons.size(); ++i) text += (i ? "," : "") + info.daemons[i];
    text += "\nsecret = " + info.secret + "\n";
    bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
    int err = errno;
    ::close(fd);
    if (!ok) return Status::from_errno(err, "write " + tmp);
    if (::rename(tmp.c_str(), path.c_str()) != 0) return Status::from_errno(errno, "rename to " + path);
    return Status::OK();
}

} // namespace jobfs::client
