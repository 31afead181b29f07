// page_cache_filler.cc: see page_cache_filler.h.
#include "client/page_cache_filler.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

namespace jobfs::client {

bool PageCacheFiller::host_takes_back_huge_pages(const std::string& sys) {
    const std::string driver = sys + "/bus/virtio/drivers/virtio_balloon";
    bool reporting = false;
    if (DIR* d = ::opendir(driver.c_str())) {
        while (const dirent* e = ::readdir(d)) {
            if (std::strncmp(e->d_name, "virtio", 6) != 0) continue;
            std::ifstream f(driver + "/" + e->d_name + "/features");
            std::string bits;
            // One character per feature bit, bit 0 first.
            if (std::getline(f, bits) && bits.size() > 5 && bits[5] == '1') reporting = true;
        }
        ::closedir(d);
    }
    if (!reporting) return false;
    unsigned order = 9; // the kernel's default: pageblock_order, a 2 MiB block
    std::ifstream(sys + "/module/page_reporting/parameters/page_reporting_order") >> order;
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    return (page << order) <= (2u << 20);
}

bool PageCacheFiller::huge_pages() {
    static const bool huge = !host_takes_back_huge_pages();
    return huge;
}

bool PageCacheFiller::populate(void* mapping, size_t length) {
    // Asked for, not required: without it the kernel reads in whatever pages it uses.
    (void)::madvise(mapping, length, MADV_HUGEPAGE);
    return ::madvise(mapping, length, MADV_POPULATE_READ) == 0;
}

bool PageCacheFiller::fill(int fd, uint64_t offset, uint64_t length) {
    if (length == 0) return true;
    if (huge_pages()) return fill_huge(fd, offset, length);
    (void)::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(length), POSIX_FADV_WILLNEED);
    return false;
}

bool PageCacheFiller::fill_huge(int fd, uint64_t offset, uint64_t length) {
    if (length == 0) return true;
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t from = offset / page * page, len = offset + length - from;
    void* m = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(from));
    if (m == MAP_FAILED) return false;
    const bool ok = populate(m, len);
    const int err = errno;
    ::munmap(m, len);
    // A kernel before 5.14: the disk is asked all the same (in 4 KiB pages), and the caller's
    // read waits for it.
    if (!ok && err == EINVAL)
        (void)::posix_fadvise(fd, static_cast<off_t>(from), static_cast<off_t>(len), POSIX_FADV_WILLNEED);
    return ok;
}

bool PageCacheFiller::fill_later(transport::UniqueFd fd, uint64_t offset, uint64_t length) {
    if (!huge_pages()) { // asking the disk does not wait: no thread for that
        (void)fill(fd.get(), offset, length);
        std::lock_guard l(mu_);
        ++filled_;
        return true;
    }
    std::lock_guard l(mu_);
    if (stop_ || jobs_.size() >= kMaxQueued) return false;
    jobs_.push_back(Job{std::move(fd), offset, length});
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    wake_.notify_one();
    return true;
}

uint64_t PageCacheFiller::filled() const {
    std::lock_guard l(mu_);
    return filled_;
}

PageCacheFiller::~PageCacheFiller() {
    {
        std::lock_guard l(mu_);
        stop_ = true;
        jobs_.clear();
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
}

void PageCacheFiller::run() {
    std::unique_lock l(mu_);
    for (;;) {
        wake_.wait(l, [&] { return stop_ || !jobs_.empty(); });
        if (stop_) return;
        Job j = std::move(jobs_.front());
        jobs_.pop_front();
        l.unlock();
        (void)fill(j.fd.get(), j.offset, j.length); // a hint: the reader's own read reports failures
        j.fd.reset();
        l.lock();
        ++filled_;
    }
}

} // namespace jobfs::client
