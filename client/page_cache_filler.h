// page_cache_filler.h: reads ranges of files into the page cache in 2 MiB pages, now or on a
// thread of its own, for a reader that reads them from there afterwards (LocalReads, cold
// ranges of chunk files).
//
// Why: posix_fadvise(WILLNEED), and the kernel's first readahead of a file, fill the page
// cache in 4 KiB pages: half a million page allocations, page cache insertions and LRU
// additions per GiB, on the CPUs the job needs, and disk requests of about 1 MiB (a bio holds
// 256 pages). A fault in a mapping that asked for huge pages (MADV_HUGEPAGE) makes the kernel
// read ahead in 2 MiB folios where the file system keeps them (ext4 from Linux 6.16, XFS):
// 4 processes reading 256 chunk files cold ran at 2090-2097 MB/s with 0.04-0.10 s of system
// time, against 1477-1606 MB/s and 0.34-0.36 s with posix_fadvise (session 36), in requests of
// 2 MiB. MADV_POPULATE_READ (Linux 5.14) does the faults in the kernel, and fails rather than
// raising SIGBUS where the file ends or the disk fails. Elsewhere the same call still reads the
// range, in whatever pages the kernel uses.
//
// Such a fill waits for the disk, so a reader hands the ranges it reads later to the filler's
// thread (fill_later), which keeps the disk busy with them while the reader reads the first.
//
// Not on a VM whose balloon hands free 2 MiB blocks back to its host (virtio-balloon free
// page reporting): 2 MiB pages come from exactly that memory there, and every first touch of
// one waits for the host. On this machine with reporting on, cold reads through ad_jobfs ran
// at 971-1928 MB/s in 2 MiB pages and 1527-1926 with posix_fadvise, alternating (session 36).
// There fill only asks the disk with posix_fadvise and says the range is not read yet.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "local_read_socket.h"

namespace jobfs::client {

class PageCacheFiller {
public:
    // Ranges waiting for the thread at most; past it, fill_later refuses.
    static constexpr size_t kMaxQueued = 16;

    PageCacheFiller() = default;
    ~PageCacheFiller(); // stops the thread; what is still queued is dropped
    PageCacheFiller(const PageCacheFiller&) = delete;
    PageCacheFiller& operator=(const PageCacheFiller&) = delete;

    // Whether ranges are read into 2 MiB pages here: not where the host takes them back
    // (host_takes_back_huge_pages, looked at once).
    static bool huge_pages();
    // Reads bytes [offset, offset + length) of fd's file into the page cache, in the calling
    // thread (fill_huge). Where huge_pages() is false it only asks the disk (posix_fadvise,
    // which does not wait) and returns false: the caller's own read waits for the bytes.
    static bool fill(int fd, uint64_t offset, uint64_t length);
    // fill in 2 MiB pages wherever this runs. False if the kernel could not (a range past the
    // file's end, an I/O error), or has no MADV_POPULATE_READ (it is then asked with
    // posix_fadvise): the caller's own read then waits, or finds out why.
    static bool fill_huge(int fd, uint64_t offset, uint64_t length);
    // What fill_huge does to a mapping of the file the caller made (and reads from next):
    // whether all of it is now in the page cache, and mapped.
    static bool populate(void* mapping, size_t length);
    // Whether a VM balloon under `sys` (sysfs) reports free blocks of 2 MiB to its host: one
    // bound to the virtio_balloon driver with feature bit 5 (VIRTIO_BALLOON_F_REPORTING), and
    // page_reporting_order at most that of a 2 MiB block.
    static bool host_takes_back_huge_pages(const std::string& sys = "/sys");
    // fill on the filler's thread (started at the first call), which owns fd from now on;
    // where huge_pages() is false, fill at once (it does not wait). False, and fd closed, if
    // kMaxQueued ranges are waiting already.
    bool fill_later(transport::UniqueFd fd, uint64_t offset, uint64_t length);
    // Ranges fill_later has filled so far, on the thread or at once (tests).
    uint64_t filled() const;

private:
    struct Job {
        transport::UniqueFd fd;
        uint64_t offset = 0, length = 0;
    };
    void run();

    mutable std::mutex mu_; // guards all below
    std::condition_variable wake_;
    std::deque<Job> jobs_;
    bool stop_ = false;
    uint64_t filled_ = 0;
    std::thread thread_;
};

} // namespace jobfs::client
