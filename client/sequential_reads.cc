// sequential_reads.cc: see sequential_reads.h.
#include "client/sequential_reads.h"

#include <algorithm>

namespace jobfs::client {

SequentialReads::Range SequentialReads::after_read(uint64_t ino, uint64_t offset, uint64_t length, uint64_t file_size,
                                                   bool cold) {
    if (length < kMinRead) return {};
    const uint64_t end = offset + length;
    std::lock_guard lock(mu_);
    if (files_.size() >= kMaxFiles && !files_.contains(ino)) files_.clear();
    File& f = files_[ino];
    if (cold) f.cached = false;
    // Reads that overtook one another land behind or a little ahead of the furthest one.
    const uint64_t behind = std::max(kMaxAhead, 4 * length), beyond = std::max(kWindow, 4 * length);
    const bool continues = f.reached > 0 && offset + behind >= f.reached && offset <= f.reached + beyond;
    if (!continues) { // a run starts here
        f.start = offset;
        f.reached = end;
        f.ahead = end;
        f.reads = 1;
        f.bytes = length;
        return {};
    }
    f.start = std::min(f.start, offset);
    f.reached = std::max(f.reached, end);
    f.bytes += length;
    if (++f.reads < kRunReads || f.cached) return {};
    // A strided reader that reads less than half of what it passes over would be given mostly
    // bytes it never reads.
    if (2 * f.bytes < f.reached - f.start) return {};
    const uint64_t from = std::max(f.ahead, f.reached);
    const uint64_t to = std::min(file_size, f.reached + std::clamp(2 * length, kWindow, kMaxAhead));
    // A piece smaller than a batch waits for more, unless it ends the file.
    if (from >= to || (to - from < kBatch && to < file_size)) return {};
    f.ahead = to;
    return {from, to};
}

void SequentialReads::found_cached(uint64_t ino) {
    std::lock_guard lock(mu_);
    auto it = files_.find(ino);
    if (it != files_.end()) it->second.cached = true;
}

} // namespace jobfs::client
