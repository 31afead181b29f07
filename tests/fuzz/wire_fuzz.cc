// wire_fuzz: libFuzzer target for the frame parser and the message decoder.
// Built by `make fuzz` with clang (-fsanitize=fuzzer,address,undefined); `make run-fuzz` runs it.
// Whatever the input, parsing must return a value or a protocol error: no crash, no
// out-of-bounds read, and a decoded message re-encodes to the very same bytes.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "frame.h"
#include "wire.h"

namespace {

struct Item {
    uint16_t a = 0;
    std::string s;
    JOBFS_FIELDS(a, s)
};

struct Sample {
    uint8_t u8 = 0;
    int64_t i64 = 0;
    bool flag = false;
    std::string name;
    jobfs::wire::Bytes blob;
    std::vector<Item> items;
    std::optional<Item> maybe;
    std::vector<uint32_t> nums;
    JOBFS_FIELDS(u8, i64, flag, name, blob, items, maybe, nums)
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    // First byte picks how the rest is split between AM header and AM data.
    size_t hlen = data[0] % (size);
    (void)jobfs::transport::frame_header_parse(data + 1, hlen > size - 1 ? size - 1 : hlen, size - 1 - std::min(hlen, size - 1));

    std::span<const uint8_t> body(data + 1, size - 1);
    auto r = jobfs::wire::decode<Sample>(body);
    if (r.ok()) {
        auto again = jobfs::wire::encode(*r);
        if (again.size() != body.size() || !std::equal(again.begin(), again.end(), body.begin())) std::abort();
    } else if (r.status().code() != jobfs::Code::protocol) {
        std::abort();
    }
    return 0;
}
