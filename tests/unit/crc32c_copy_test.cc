// crc32c_copy_test: the one-pass copy gives ISA-L's CRC32C bit for bit and copies every byte,
// at every length, alignment and starting CRC; block_crcs_copy cuts where block_crcs does, and
// first_bad_block names the first piece that does not match.
#include <gtest/gtest.h>
#include <isa-l/crc.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "block_crc.h"
#include "crc32c_copy.h"

namespace jobfs::transport {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(gen());
    return v;
}

// Whether /proc/cpuinfo lists every flag the one-pass loop needs.
bool cpu_lists_one_pass_flags() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("flags", 0) != 0) continue;
        std::istringstream words(line.substr(line.find(':') + 1));
        std::vector<std::string> flags;
        for (std::string w; words >> w;) flags.push_back(w);
        for (const char* need : {"avx512f", "avx512bw", "avx512dq", "avx512vl", "vpclmulqdq", "pclmulqdq", "sse4_2"})
            if (std::find(flags.begin(), flags.end(), need) == flags.end()) return false;
        return true;
    }
    return false;
}

using CopyFn = uint32_t (*)(std::span<uint8_t>, std::span<const uint8_t>, uint32_t);

// Every length up to 1 KiB and around the loop's 256-byte steps and 64 KiB blocks, src and
// dst at odd offsets, three starting CRCs: the CRC is ISA-L's, the bytes are copied, and not
// one byte past the end is touched.
void check_against_isal(CopyFn fn) {
    const std::vector<uint8_t> src = random_bytes((1 << 20) + 64, 1);
    std::vector<size_t> lengths;
    for (size_t n = 0; n <= 1024; ++n) lengths.push_back(n);
    for (size_t n : {4095, 4096, 4097, 65535, 65536, 65537, 65536 + 256, 3 * 65536 + 7, 1 << 20}) lengths.push_back(n);
    for (size_t n : lengths) {
        for (size_t in_at : {0, 1, 63}) {
            for (size_t out_at : {0, 5}) {
                for (uint32_t before : {0u, 0xFFFFFFFFu, 0x12345678u}) {
                    std::vector<uint8_t> out(n + out_at + 16, 0xA5);
                    const std::span<const uint8_t> in(src.data() + in_at, n);
                    const uint32_t want = crc32_iscsi(const_cast<uint8_t*>(in.data()), static_cast<int>(n), before);
                    const uint32_t got = fn(std::span(out.data() + out_at, n), in, before);
                    ASSERT_EQ(got, want) << "length " << n << ", in at " << in_at << ", out at " << out_at << ", before " << before;
                    ASSERT_EQ(0, std::memcmp(out.data() + out_at, in.data(), n)) << "length " << n;
                    for (size_t k = 0; k < out_at; ++k) ASSERT_EQ(out[k], 0xA5) << "a byte before the copy, length " << n;
                    for (size_t k = out_at + n; k < out.size(); ++k) ASSERT_EQ(out[k], 0xA5) << "a byte past the copy, length " << n;
                }
            }
        }
    }
}

TEST(Crc32cCopy, TheOnePassCopyGivesIsalsCrcAndEveryByte) { check_against_isal(crc32c_copy); }

TEST(Crc32cCopy, ThePortableCopyGivesIsalsCrcAndEveryByte) { check_against_isal(crc32c_copy_portable); }

// A CRC taken on in pieces, each going on from the one before, is the whole's.
TEST(Crc32cCopy, GoesOnFromTheCrcBefore) {
    const std::vector<uint8_t> src = random_bytes(200000, 2);
    std::vector<uint8_t> out(src.size());
    uint32_t crc = 0;
    size_t done = 0;
    for (size_t step : {300, 4096, 65536, 1, 70000, 60067}) {
        crc = crc32c_copy(std::span(out.data() + done, step), std::span(src.data() + done, step), crc);
        done += step;
    }
    ASSERT_EQ(done, src.size());
    EXPECT_EQ(crc, crc32c(src));
    EXPECT_EQ(out, src);
}

TEST(Crc32cCopy, BlockCrcsCopyCutsWhereBlockCrcsDoes) {
    const std::vector<uint8_t> src = random_bytes(3 * kCrcBlock + 1000, 3);
    for (uint64_t chunk_offset : {uint64_t{0}, uint64_t{1}, kCrcBlock - 1, kCrcBlock, 5 * kCrcBlock + 4096}) {
        for (size_t n : {size_t{0}, size_t{100}, size_t{kCrcBlock}, src.size()}) {
            std::vector<uint8_t> out(n);
            const std::span<const uint8_t> in(src.data(), n);
            EXPECT_EQ(block_crcs_copy(chunk_offset, out, in), block_crcs(chunk_offset, in))
                << "chunk offset " << chunk_offset << ", length " << n;
            if (n > 0) {
                EXPECT_EQ(0, std::memcmp(out.data(), in.data(), n));
            }
        }
    }
}

// first_bad_block (block_crc.h, whose cut at block boundaries block_crcs_copy shares): the
// first piece that does not match, or a count of checksums that does not match the pieces.
TEST(Crc32cCopy, FirstBadBlockNamesTheFirstPieceThatDoesNotMatch) {
    const std::vector<uint8_t> data = random_bytes(3 * kCrcBlock + 10, 4);
    const uint64_t at = kCrcBlock - 100; // four pieces: 100 bytes, two whole blocks, the rest
    const std::vector<uint32_t> good = block_crcs(at, data);
    ASSERT_EQ(good.size(), 4u);
    EXPECT_EQ(first_bad_block(at, data, good), -1);
    std::vector<uint32_t> bad = good;
    bad[2] ^= 1;
    EXPECT_EQ(first_bad_block(at, data, bad), 2);
    bad[1] ^= 1;
    EXPECT_EQ(first_bad_block(at, data, bad), 1);
    EXPECT_EQ(first_bad_block(at, data, std::vector<uint32_t>(good.begin(), good.end() - 1)), 3); // one short
    std::vector<uint32_t> more = good;
    more.push_back(0);
    EXPECT_EQ(first_bad_block(at, data, more), 4); // one too many
}

// The one-pass loop is what runs where the CPU has what it needs: the tests above then
// checked it, not the portable copy twice.
TEST(Crc32cCopy, RunsTheOnePassLoopWhereTheCpuHasIt) {
    EXPECT_EQ(crc32c_copy_one_pass(), cpu_lists_one_pass_flags());
    RecordProperty("one_pass", crc32c_copy_one_pass() ? "yes" : "no");
}

} // namespace
} // namespace jobfs::transport
