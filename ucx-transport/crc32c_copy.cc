// crc32c_copy.cc: see crc32c_copy.h.
//
// The one-pass loop folds, as ISA-L's crc32_iscsi_by16_10 and Intel's paper "Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ" do: the bytes go through four 512-bit
// accumulators, 16 lanes of 128 bits. CRC32C is bit-reflected (the first byte's low bit is the
// highest power of x), so in a lane the low 64 bits come first. Moving a lane D bits further
// along the message multiplies it by x^D modulo P; carry-less multiplying its low half by
// refl(x^(D+31) mod P) and its high half by refl(x^(D-33) mod P) gives a 128-bit value with
// the same remainder, which is XORed into the lane D bits on. At the end every lane is moved
// onto the last one, and the CRC of that one 128-bit value (two SSE4.2 crc32 instructions,
// from 0) is the CRC of everything: the CRC is linear and each step kept the remainder.
#include "crc32c_copy.h"

#include <cstring>

#include "block_crc.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define JOBFS_CRC32C_COPY_X86 1
#endif

namespace jobfs::transport {

uint32_t crc32c_copy_portable(std::span<uint8_t> out, std::span<const uint8_t> in, uint32_t before) {
    if (!in.empty()) std::memcpy(out.data(), in.data(), in.size());
    return crc32c(in, before);
}

#ifdef JOBFS_CRC32C_COPY_X86
namespace {

// refl(x^n mod P) for CRC32C's P = 0x1EDC6F41 (with x^32), bit-reflected in 32 bits.
constexpr uint64_t x_pow_reflected(unsigned n) {
    uint64_t r = 1;
    for (unsigned i = 0; i < n; ++i) {
        r <<= 1;
        if (r >> 32 & 1) r ^= 0x11EDC6F41ull;
    }
    uint64_t out = 0;
    for (unsigned b = 0; b < 32; ++b)
        if (r >> b & 1) out |= 1ull << (31 - b);
    return out;
}

// The pair that moves a lane `bytes` on: {for its low half, for its high half}.
struct Fold {
    uint64_t low, high;
};
constexpr Fold fold_by(unsigned bytes) { return {x_pow_reflected(bytes * 8 + 31), x_pow_reflected(bytes * 8 - 33)}; }
constexpr Fold kBy256 = fold_by(256), kBy192 = fold_by(192), kBy128 = fold_by(128), kBy64 = fold_by(64),
               kBy48 = fold_by(48), kBy32 = fold_by(32), kBy16 = fold_by(16);
// The derivation checked against the pairs ISA-L's CRC32C folds 256 and 64 bytes with.
static_assert(kBy256.low == 0xdcb17aa4 && kBy256.high == 0xb9e02b86);
static_assert(kBy64.low == 0x740eef02 && kBy64.high == 0x9e4addf8);

#define JOBFS_ONE_PASS_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,vpclmulqdq,pclmul,sse4.2")))

JOBFS_ONE_PASS_TARGET inline __m512i broadcast(Fold f) {
    return _mm512_set_epi64(static_cast<long long>(f.high), static_cast<long long>(f.low), static_cast<long long>(f.high),
                            static_cast<long long>(f.low), static_cast<long long>(f.high), static_cast<long long>(f.low),
                            static_cast<long long>(f.high), static_cast<long long>(f.low));
}

// Each lane of a, moved on by the fold's distance (k: broadcast(fold)).
JOBFS_ONE_PASS_TARGET inline __m512i moved(__m512i a, __m512i k) {
    return _mm512_xor_si512(_mm512_clmulepi64_epi128(a, k, 0x00), _mm512_clmulepi64_epi128(a, k, 0x11));
}

// n: a multiple of 256, at least 256.
JOBFS_ONE_PASS_TARGET uint32_t one_pass(uint8_t* out, const uint8_t* in, size_t n, uint32_t before) {
    __m512i a0 = _mm512_loadu_si512(in), a1 = _mm512_loadu_si512(in + 64), a2 = _mm512_loadu_si512(in + 128),
            a3 = _mm512_loadu_si512(in + 192);
    _mm512_storeu_si512(out, a0);
    _mm512_storeu_si512(out + 64, a1);
    _mm512_storeu_si512(out + 128, a2);
    _mm512_storeu_si512(out + 192, a3);
    // The CRC so far goes into the first 32 bits of the message (as ISA-L takes its init).
    a0 = _mm512_xor_si512(a0, _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(before))));
    const __m512i k256 = broadcast(kBy256);
    for (size_t i = 256; i < n; i += 256) {
        const __m512i x0 = _mm512_loadu_si512(in + i), x1 = _mm512_loadu_si512(in + i + 64),
                      x2 = _mm512_loadu_si512(in + i + 128), x3 = _mm512_loadu_si512(in + i + 192);
        _mm512_storeu_si512(out + i, x0);
        _mm512_storeu_si512(out + i + 64, x1);
        _mm512_storeu_si512(out + i + 128, x2);
        _mm512_storeu_si512(out + i + 192, x3);
        a0 = _mm512_xor_si512(moved(a0, k256), x0);
        a1 = _mm512_xor_si512(moved(a1, k256), x1);
        a2 = _mm512_xor_si512(moved(a2, k256), x2);
        a3 = _mm512_xor_si512(moved(a3, k256), x3);
    }
    // The four accumulators onto the last (a0 is 192 bytes before it, a1 128, a2 64)...
    const __m512i z = _mm512_ternarylogic_epi64(moved(a0, broadcast(kBy192)), moved(a1, broadcast(kBy128)),
                                                _mm512_xor_si512(moved(a2, broadcast(kBy64)), a3), 0x96);
    // ...its four lanes onto its last (48, 32 and 16 bytes before it), which stays as it is.
    const __m512i k = _mm512_set_epi64(0, 0, static_cast<long long>(kBy16.high), static_cast<long long>(kBy16.low),
                                       static_cast<long long>(kBy32.high), static_cast<long long>(kBy32.low),
                                       static_cast<long long>(kBy48.high), static_cast<long long>(kBy48.low));
    const __m512i f = _mm512_mask_mov_epi64(moved(z, k), 0xC0, z);
    alignas(64) uint64_t q[8];
    _mm512_store_si512(q, f);
    uint64_t crc = _mm_crc32_u64(0, q[0] ^ q[2] ^ q[4] ^ q[6]);
    crc = _mm_crc32_u64(crc, q[1] ^ q[3] ^ q[5] ^ q[7]);
    return static_cast<uint32_t>(crc);
}

bool cpu_has_one_pass() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.2");
}

} // namespace

bool crc32c_copy_one_pass() {
    static const bool has = cpu_has_one_pass();
    return has;
}

uint32_t crc32c_copy(std::span<uint8_t> out, std::span<const uint8_t> in, uint32_t before) {
    const size_t bulk = in.size() / 256 * 256;
    if (bulk == 0 || !crc32c_copy_one_pass()) return crc32c_copy_portable(out, in, before);
    const uint32_t crc = one_pass(out.data(), in.data(), bulk, before);
    return crc32c_copy_portable(out.subspan(bulk), in.subspan(bulk), crc);
}

#else

bool crc32c_copy_one_pass() { return false; }

uint32_t crc32c_copy(std::span<uint8_t> out, std::span<const uint8_t> in, uint32_t before) {
    return crc32c_copy_portable(out, in, before);
}

#endif

std::vector<uint32_t> block_crcs_copy(uint64_t chunk_offset, std::span<uint8_t> out, std::span<const uint8_t> in) {
    std::vector<uint32_t> crcs;
    crcs.reserve(in.size() / kCrcBlock + 2);
    for_each_block_piece(chunk_offset, in.size(), [&](uint64_t done, uint64_t n) {
        crcs.push_back(crc32c_copy(out.subspan(done, n), in.subspan(done, n)));
    });
    return crcs;
}

} // namespace jobfs::transport
