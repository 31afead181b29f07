#include "cluster_descriptor.h"

#include "file_util.h"

namespace jobfs::transport {

std::string format_cluster_descriptor(const std::vector<std::string>& daemons, const std::string& secret) {
    std::string text = "# jobfs cluster descriptor\nversion = 1\ndaemons = ";
    for (size_t i = 0; i < daemons.size(); ++i) text += (i ? "," : "") + daemons[i];
    text += "\nsecret = " + secret + "\n";
    return text;
}

Status write_cluster_descriptor(const std::string& path, const std::vector<std::string>& daemons,
                                const std::string& secret) {
    return write_file_atomically(path, format_cluster_descriptor(daemons, secret));
}

} // namespace jobfs::transport
