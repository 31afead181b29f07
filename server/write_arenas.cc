// write_arenas.cc: see write_arenas.h.
#include "server/write_arenas.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace jobfs::server {

WriteArenas::Arena::~Arena() {
    if (base) ::munmap(const_cast<uint8_t*>(base), size);
}

Result<uint64_t> WriteArenas::map(int memfd) {
    const int seals = ::fcntl(memfd, F_GET_SEALS);
    if (seals < 0) return Status::from_errno(errno, "write arena: not a memfd");
    if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
        return Status(Code::invalid, "write arena: its size is not sealed");
    struct stat st {};
    if (::fstat(memfd, &st) != 0) return Status::from_errno(errno, "write arena");
    const size_t size = static_cast<size_t>(st.st_size);
    if (size == 0 || size > kMaxSize) return Status(Code::invalid, "write arena of " + std::to_string(size) + " bytes");
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, memfd, 0);
    if (p == MAP_FAILED) return Status::from_errno(errno, "write arena: mmap");
    auto a = std::make_shared<const Arena>(static_cast<const uint8_t*>(p), size);
    std::lock_guard l(mu_);
    uint64_t token = 0;
    while (token == 0 || arenas_.count(token)) token = tokens_();
    arenas_.emplace(token, std::move(a));
    return token;
}

void WriteArenas::unmap(uint64_t token) {
    std::shared_ptr<const Arena> gone; // unmapped outside the lock (or by the last write using it)
    std::lock_guard l(mu_);
    auto it = arenas_.find(token);
    if (it == arenas_.end()) return;
    gone = std::move(it->second);
    arenas_.erase(it);
}

Result<std::pair<std::shared_ptr<const WriteArenas::Arena>, std::span<const uint8_t>>> WriteArenas::range(
    uint64_t token, uint64_t offset, uint64_t length) const {
    std::shared_ptr<const Arena> a;
    {
        std::lock_guard l(mu_);
        auto it = arenas_.find(token);
        if (it == arenas_.end()) return Status(Code::not_found, "no write arena " + std::to_string(token) + " here");
        a = it->second;
    }
    if (offset > a->size || length > a->size - offset)
        return Status(Code::invalid, "write arena range " + std::to_string(offset) + "+" + std::to_string(length) +
                                         " is outside its " + std::to_string(a->size) + " bytes");
    const std::span<const uint8_t> s(a->base + offset, length);
    return std::make_pair(std::move(a), s);
}

size_t WriteArenas::mapped() const {
    std::lock_guard l(mu_);
    return arenas_.size();
}

} // namespace jobfs::server
