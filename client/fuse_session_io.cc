// fuse_session_io.cc: see fuse_session_io.h. Kept apart from jobfs_fuse.cc: it needs the
// kernel's protocol structs (<linux/fuse.h>), which libfuse's headers do not export.
#include "client/fuse_session_io.h"

#include <linux/fuse.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

namespace jobfs::fuse {

namespace {

// FUSE 7.39 (Linux 6.6); Debian 12's <linux/fuse.h> (7.38) predates it.
constexpr uint64_t kDirectIoAllowMmap = 1ULL << 36;

std::atomic<bool> offered{false};
std::atomic<uint64_t> init_unique{0}; // the INIT request's, until its reply went out
thread_local bool write_kills_setid = false;

template <typename T>
T read_struct(const void* at) {
    T t{};
    std::memcpy(&t, at, sizeof t);
    return t;
}

void note_init(const fuse_in_header& h, const char* arg, size_t len) {
    fuse_init_in in{};
    std::memcpy(&in, arg, std::min(sizeof in, len));
    const uint64_t flags = in.flags | ((in.flags & FUSE_INIT_EXT) ? uint64_t{in.flags2} << 32 : 0);
    offered = (flags & kDirectIoAllowMmap) != 0;
    init_unique = h.unique;
}

} // namespace

ssize_t session_io_read(int fd, void* buf, size_t len, void* /*userdata*/) {
    const ssize_t n = ::read(fd, buf, len);
    write_kills_setid = false;
    if (n < static_cast<ssize_t>(sizeof(fuse_in_header))) return n;
    const auto h = read_struct<fuse_in_header>(buf);
    const char* arg = static_cast<const char*>(buf) + sizeof h;
    const size_t arg_len = static_cast<size_t>(n) - sizeof h;
    if (h.opcode == FUSE_WRITE && arg_len >= sizeof(fuse_write_in)) {
        write_kills_setid = (read_struct<fuse_write_in>(arg).write_flags & FUSE_WRITE_KILL_SUIDGID) != 0;
    } else if (h.opcode == FUSE_INIT && arg_len >= offsetof(fuse_init_in, flags2) + sizeof(uint32_t)) {
        note_init(h, arg, arg_len);
    }
    return n;
}

ssize_t session_io_writev(int fd, struct iovec* iov, int count, void* /*userdata*/) {
    const uint64_t unique = init_unique.load(std::memory_order_acquire);
    if (unique == 0 || count != 2 || iov[0].iov_len < sizeof(fuse_out_header) ||
        iov[1].iov_len < offsetof(fuse_init_out, flags2) + sizeof(uint32_t) || iov[1].iov_len > sizeof(fuse_init_out))
        return ::writev(fd, iov, count);
    const auto h = read_struct<fuse_out_header>(iov[0].iov_base);
    if (h.unique != unique) return ::writev(fd, iov, count);
    init_unique = 0;
    fuse_init_out out{};
    std::memcpy(&out, iov[1].iov_base, iov[1].iov_len);
    if (h.error != 0 || !offered || !(out.flags & FUSE_INIT_EXT)) return ::writev(fd, iov, count);
    out.flags2 |= static_cast<uint32_t>(kDirectIoAllowMmap >> 32);
    struct iovec granted[2] = {iov[0], {&out, iov[1].iov_len}};
    return ::writev(fd, granted, 2);
}

bool session_direct_mmap_offered() { return offered.load(std::memory_order_acquire); }

bool session_write_kills_setid() { return write_kills_setid; }

} // namespace jobfs::fuse
