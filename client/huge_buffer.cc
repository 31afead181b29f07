#include "client/huge_buffer.h"

#include <sys/mman.h>

namespace jobfs::client {

HugeBuffer::~HugeBuffer() { release(); }

void HugeBuffer::release() {
    if (data_) ::munmap(data_, capacity_);
    data_ = nullptr;
    capacity_ = 0;
}

bool HugeBuffer::reserve(size_t n) {
    if (n <= capacity_) return true;
    release();
    const size_t size = (n + kHugePage - 1) / kHugePage * kHugePage;
    // One huge page more than asked, so that an aligned stretch fits; the rest is given back.
    void* m = ::mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return false;
    auto* base = static_cast<uint8_t*>(m);
    const uintptr_t at = reinterpret_cast<uintptr_t>(base);
    const size_t head = (kHugePage - at % kHugePage) % kHugePage; // before the aligned stretch
    uint8_t* aligned = base + head;
    if (head > 0) ::munmap(base, head);
    ::munmap(aligned + size, kHugePage - head); // after it: never empty, head < kHugePage
    (void)::madvise(aligned, size, MADV_HUGEPAGE); // a hint: EINVAL where the kernel has no THP
    data_ = aligned;
    capacity_ = size;
    return true;
}

} // namespace jobfs::client
