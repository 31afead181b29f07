// chunk_stamps.cc: see chunk_stamps.h.
#include "server/chunk_stamps.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "local_read_socket.h"

namespace jobfs::server {

namespace {
constexpr size_t kBytes = transport::kStampSlots * sizeof(transport::StampSlot);
static_assert(std::atomic<uint64_t>::is_always_lock_free, "readers in other processes read the counters");
static_assert(sizeof(transport::StampSlot) == 2 * sizeof(std::atomic<uint64_t>));
} // namespace

Result<std::unique_ptr<ChunkStamps>> ChunkStamps::create() {
    const int fd = ::memfd_create("jobfs-chunk-stamps", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return Status::from_errno(errno, "chunk stamps: memfd_create");
    // Sealed at its size: a reader that maps it never finds a page gone.
    if (::ftruncate(fd, static_cast<off_t>(kBytes)) != 0 || ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
        const Status s = Status::from_errno(errno, "chunk stamps: size the table");
        ::close(fd);
        return s;
    }
    void* m = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        const Status s = Status::from_errno(errno, "chunk stamps: map the table");
        ::close(fd);
        return s;
    }
    return std::unique_ptr<ChunkStamps>(new ChunkStamps(fd, static_cast<std::atomic<uint64_t>*>(m)));
}

ChunkStamps::~ChunkStamps() {
    ::munmap(slots_, kBytes);
    ::close(fd_);
}

uint64_t ChunkStamps::stamp(uint64_t ino) const {
    return slots_[2 * transport::stamp_slot(ino)].load(std::memory_order_acquire);
}

void ChunkStamps::begin(uint64_t ino) {
    // seq_cst: the moves are seen before any byte of the change, by readers that look after theirs.
    slots_[2 * transport::stamp_slot(ino) + 1].fetch_add(1, std::memory_order_seq_cst);
    slots_[2 * transport::stamp_slot(ino)].fetch_add(1, std::memory_order_seq_cst);
}

void ChunkStamps::end(uint64_t ino) {
    // The stamp first: a reader that finds the slot quiet afterwards finds it moved too.
    slots_[2 * transport::stamp_slot(ino)].fetch_add(1, std::memory_order_seq_cst);
    slots_[2 * transport::stamp_slot(ino) + 1].fetch_sub(1, std::memory_order_seq_cst);
}

Result<int> ChunkStamps::reader_fd() const {
    const std::string self = "/proc/self/fd/" + std::to_string(fd_);
    const int fd = ::open(self.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::from_errno(errno, "chunk stamps: reopen the table read-only");
    return fd;
}

ChunkStamps::Change::Change(ChunkStamps* stamps, uint64_t ino) : stamps_(stamps), ino_(ino) {
    if (stamps_) stamps_->begin(ino_);
}

ChunkStamps::Change::~Change() {
    if (stamps_) stamps_->end(ino_);
}

} // namespace jobfs::server
