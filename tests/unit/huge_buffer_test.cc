// huge_buffer_test: HugeBuffer (client/huge_buffer.h) gives 2 MiB-aligned buffers of whole huge
// pages that hold what is written to them, grows when asked for more, and is backed by
// transparent huge pages where the kernel has them (its mode "always" or "madvise").
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "client/huge_buffer.h"

namespace jobfs {
namespace {

using client::HugeBuffer;

constexpr size_t kMiB = size_t{1} << 20;

// The AnonHugePages (kB) of the mapping that starts at p, from /proc/self/smaps (-1: none starts there).
long huge_kb_at(const void* p) {
    std::ifstream smaps("/proc/self/smaps");
    char start[32];
    std::snprintf(start, sizeof start, "%lx-", static_cast<unsigned long>(reinterpret_cast<uintptr_t>(p)));
    std::string line;
    bool in = false;
    while (std::getline(smaps, line)) {
        // A mapping's first line is "START-END perms ...", the lines after it "Name: value".
        const std::string first = line.substr(0, line.find(' '));
        if (first.find('-') != std::string::npos && first.find(':') == std::string::npos)
            in = line.rfind(start, 0) == 0;
        else if (in && line.rfind("AnonHugePages:", 0) == 0)
            return std::stol(line.substr(14));
    }
    return -1;
}

bool thp_offered() {
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string mode;
    std::getline(f, mode);
    return mode.find("[always]") != std::string::npos || mode.find("[madvise]") != std::string::npos;
}

TEST(HugeBuffer, WholeAlignedHugePagesThatHoldWhatIsWrittenAndGrowWhenAsked) {
    HugeBuffer b;
    EXPECT_EQ(b.data(), nullptr);
    EXPECT_EQ(b.capacity(), 0u);
    ASSERT_TRUE(b.reserve(1));
    EXPECT_EQ(b.capacity(), HugeBuffer::kHugePage);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % HugeBuffer::kHugePage, 0u);
    ASSERT_TRUE(b.reserve(kMiB)); // fits: the same buffer
    EXPECT_EQ(b.capacity(), HugeBuffer::kHugePage);
    ASSERT_TRUE(b.reserve(3 * kMiB));
    // What was mapped past the aligned stretch (never nothing) went back: the first page after
    // the buffer is mapped by no one (nothing else was mapped since; mincore says ENOMEM).
    unsigned char vec = 0;
    errno = 0;
    EXPECT_NE(::mincore(b.data() + b.capacity(), 4096, &vec), 0);
    EXPECT_EQ(errno, ENOMEM) << "the page after the buffer is still mapped";
    EXPECT_EQ(b.capacity(), 4 * kMiB);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % HugeBuffer::kHugePage, 0u);
    for (size_t i = 0; i < b.capacity(); ++i) b.data()[i] = static_cast<uint8_t>(i * 7 + (i >> 12));
    for (size_t i = 0; i < b.capacity(); ++i)
        ASSERT_EQ(b.data()[i], static_cast<uint8_t>(i * 7 + (i >> 12))) << i;
    EXPECT_GE(huge_kb_at(b.data()), 0) << "no mapping starts at the buffer";
}

TEST(HugeBuffer, IsBackedByHugePagesWhereTheKernelHasThem) {
    if (!thp_offered()) GTEST_SKIP() << "transparent huge pages are off on this kernel";
    HugeBuffer b;
    ASSERT_TRUE(b.reserve(4 * kMiB));
    for (size_t i = 0; i < b.capacity(); i += 4096) b.data()[i] = 1; // fault every page in
    EXPECT_GE(huge_kb_at(b.data()), 2048) << "the buffer is in 4 KiB pages";
}

} // namespace
} // namespace jobfs
