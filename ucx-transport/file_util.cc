#include "file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace jobfs::transport {

Status write_file_atomically(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return Status::from_errno(errno, "create " + tmp);
    bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
    int err = errno;
    ::close(fd);
    if (!ok) {
        ::unlink(tmp.c_str());
        return Status::from_errno(err, "write " + tmp);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        err = errno;
        ::unlink(tmp.c_str());
        return Status::from_errno(err, "rename to " + path);
    }
    return Status::OK();
}

} // namespace jobfs::transport
