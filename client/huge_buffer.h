// huge_buffer.h: a buffer for direct reads, in transparent huge pages where the kernel has them.
//
// Why: a direct read (O_DIRECT) into ordinary memory gives the disk one segment per 4 KiB page:
// a 1 MiB read is 256 segments, each pinned on its own, and a virtual disk takes each as a
// descriptor of its own. Into a 2 MiB huge page the same read is one segment. jobfs-fuse reads
// cold chunk ranges straight into the buffer of its READ reply (LocalReads::ColdReads::direct):
// fio, 4 jobs, 1 GiB written and read back cold through the mount: 1842-2015 MB/s with the
// kernel's transparent huge pages in "madvise" mode, 1346-1763 with "never" (4 alternating
// rounds, session 34).
//
// The memory is its own anonymous mapping, 2 MiB aligned, with MADV_HUGEPAGE (which the
// kernel's default "madvise" mode of transparent huge pages needs); where the kernel has none
// to give, it is ordinary memory and everything works the same, slower.
//
// Not thread-safe: one per thread (jobfs-fuse keeps one per worker).
#pragma once

#include <cstddef>
#include <cstdint>

namespace jobfs::client {

class HugeBuffer {
public:
    static constexpr size_t kHugePage = size_t{2} << 20;

    HugeBuffer() = default;
    ~HugeBuffer();
    HugeBuffer(const HugeBuffer&) = delete;
    HugeBuffer& operator=(const HugeBuffer&) = delete;

    // Makes the buffer hold at least n bytes (whole huge pages; what it held is not kept when
    // it grows). False: no memory (the buffer is then empty).
    bool reserve(size_t n);
    uint8_t* data() const { return data_; }
    size_t capacity() const { return capacity_; }

private:
    void release();
    uint8_t* data_ = nullptr;
    size_t capacity_ = 0;
};

} // namespace jobfs::client
