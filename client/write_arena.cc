// write_arena.cc: see write_arena.h.
#include "client/write_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace jobfs::client {

Result<std::unique_ptr<WriteArena>> WriteArena::create(uint64_t bytes) {
    const uint64_t size = std::max<uint64_t>(1, (bytes + kUnit - 1) / kUnit) * kUnit;
    const int fd = ::memfd_create("jobfs-write-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return Status::from_errno(errno, "write arena: memfd_create");
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0 ||
        ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        const int e = errno;
        ::close(fd);
        return Status::from_errno(e, "write arena");
    }
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        const int e = errno;
        ::close(fd);
        return Status::from_errno(e, "write arena: mmap");
    }
    return std::unique_ptr<WriteArena>(new WriteArena(fd, static_cast<uint8_t*>(p), size));
}

WriteArena::WriteArena(int fd, uint8_t* base, uint64_t size)
    : fd_(fd), base_(base), size_(size), units_(static_cast<size_t>(size / kUnit), 0) {}

WriteArena::~WriteArena() {
    ::munmap(base_, size_);
    ::close(fd_);
}

std::optional<WriteArena::Region> WriteArena::allocate(uint64_t length) {
    const size_t need = static_cast<size_t>(std::max<uint64_t>(1, (length + kUnit - 1) / kUnit));
    std::lock_guard l(mu_);
    const size_t n = units_.size();
    if (need > n) return std::nullopt;
    // First fit from the hint, once around.
    for (size_t tried = 0, start = hint_ % n; tried < n;) {
        if (start + need > n) {
            tried += n - start;
            start = 0;
            continue;
        }
        size_t run = 0;
        while (run < need && units_[start + run] == 0) ++run;
        if (run == need) {
            std::fill_n(units_.begin() + static_cast<std::ptrdiff_t>(start), need, 1);
            hint_ = start + need;
            return Region{start * kUnit, need * kUnit, base_ + start * kUnit};
        }
        tried += run + 1;
        start += run + 1;
    }
    return std::nullopt;
}

void WriteArena::release(const Region& r) {
    std::lock_guard l(mu_);
    std::fill_n(units_.begin() + static_cast<std::ptrdiff_t>(r.offset / kUnit), r.length / kUnit, 0);
}

void WriteArena::retire(const Region& r) {
    std::lock_guard l(mu_);
    std::fill_n(units_.begin() + static_cast<std::ptrdiff_t>(r.offset / kUnit), r.length / kUnit, 2);
}

uint64_t WriteArena::retired() const {
    std::lock_guard l(mu_);
    return static_cast<uint64_t>(std::count(units_.begin(), units_.end(), 2)) * kUnit;
}

} // namespace jobfs::client
