// page_cache_filler_test: ranges of a real file on the local disk read into the page cache by
// PageCacheFiller (client/page_cache_filler.h), now and on its thread.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "client/page_cache_filler.h"
#include "test_util.h"

namespace jobfs::client {
namespace {

constexpr uint64_t kFile = 8 << 20;

// A file of kFile bytes, on disk and out of the page cache (skipped where the kernel keeps it:
// tmpfs).
class PageCacheFillerTest : public ::testing::Test {
protected:
    void SetUp() override {
        path_ = dir_.path() + "/data";
        const auto bytes = test::pattern(kFile, 3);
        std::ofstream(path_, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), kFile);
        fd_.reset(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
        ASSERT_TRUE(fd_);
        ASSERT_EQ(::fdatasync(fd_.get()), 0);
        ASSERT_EQ(::posix_fadvise(fd_.get(), 0, 0, POSIX_FADV_DONTNEED), 0);
        if (resident(0, kFile) > 0) GTEST_SKIP() << "the kernel keeps this file system's pages (tmpfs?)";
    }
    // How many pages of [offset, offset + length) are in the page cache (mincore of a mapping,
    // which looks without reading).
    uint64_t resident(uint64_t offset, uint64_t length) const {
        const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
        void* m = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd_.get(), static_cast<off_t>(offset));
        if (m == MAP_FAILED) return 0;
        std::vector<unsigned char> in((length + page - 1) / page);
        uint64_t n = 0;
        if (::mincore(m, length, in.data()) == 0)
            for (unsigned char c : in) n += c & 1;
        ::munmap(m, length);
        return n;
    }
    test::TempDir dir_;
    std::string path_;
    transport::UniqueFd fd_;
};

TEST_F(PageCacheFillerTest, FillHugeReadsTheRangeIntoThePageCache) {
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    ASSERT_TRUE(PageCacheFiller::fill_huge(fd_.get(), (1 << 20) + 100, 3 << 20));
    // Every page the range touches, from the one holding its first byte.
    EXPECT_EQ(resident(1 << 20, (3 << 20) + page), ((3 << 20) + page) / page);
}

TEST_F(PageCacheFillerTest, FillHugePastTheFilesEndFails) {
    EXPECT_FALSE(PageCacheFiller::fill_huge(fd_.get(), kFile + (1 << 20), 1 << 20));
}

// fill reads the range itself, or (where the host takes huge pages back) has the disk asked
// and says so: either way the range comes into the page cache.
TEST_F(PageCacheFillerTest, FillBringsTheRangeInEitherWay) {
    const uint64_t pages = (2u << 20) / static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    EXPECT_EQ(PageCacheFiller::fill(fd_.get(), 2 << 20, 2 << 20), PageCacheFiller::huge_pages());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (resident(2 << 20, 2 << 20) < pages && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(resident(2 << 20, 2 << 20), pages);
}

// A sysfs tree of a VM's balloon: bound devices with their feature bits, and the order of the
// free blocks the kernel reports.
TEST(PageCacheFiller, HugePagesAreLeftAloneWhereTheBalloonReportsTwoMiBBlocks) {
    test::TempDir sys;
    const std::string driver = sys.path() + "/bus/virtio/drivers/virtio_balloon";
    const std::string order = sys.path() + "/module/page_reporting/parameters/page_reporting_order";
    EXPECT_FALSE(PageCacheFiller::host_takes_back_huge_pages(sys.path())) << "no balloon";
    std::filesystem::create_directories(driver + "/virtio0");
    std::ofstream(driver + "/virtio0/features") << "0100010000000000000000000000000000000000000000000000000000000000\n";
    EXPECT_TRUE(PageCacheFiller::host_takes_back_huge_pages(sys.path())) << "reporting, the default order (9)";
    std::filesystem::create_directories(std::filesystem::path(order).parent_path());
    std::ofstream(order) << "11\n";
    EXPECT_FALSE(PageCacheFiller::host_takes_back_huge_pages(sys.path())) << "only blocks larger than any reported";
    std::ofstream(order) << "9\n";
    EXPECT_TRUE(PageCacheFiller::host_takes_back_huge_pages(sys.path()));
    std::ofstream(driver + "/virtio0/features") << "0100000000000000000000000000000000000000000000000000000000000000\n";
    EXPECT_FALSE(PageCacheFiller::host_takes_back_huge_pages(sys.path())) << "a balloon without reporting";
}

TEST_F(PageCacheFillerTest, FillLaterFillsTheRangeAndTakesTheDescriptor) {
    PageCacheFiller filler;
    const int dup = ::fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0);
    ASSERT_GE(dup, 0);
    ASSERT_TRUE(filler.fill_later(transport::UniqueFd(dup), 4 << 20, 2 << 20));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (filler.filled() < 1 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(filler.filled(), 1u);
    // (Where the host takes huge pages back the disk was only asked: the pages come a little later.)
    const uint64_t pages = (2u << 20) / static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    while (resident(4 << 20, 2 << 20) < pages && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(resident(4 << 20, 2 << 20), pages);
    EXPECT_EQ(::fcntl(dup, F_GETFD), -1) << "the filler kept the descriptor it was given";
}

} // namespace
} // namespace jobfs::client
