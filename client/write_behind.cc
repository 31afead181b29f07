#include "client/write_behind.h"

#include <vector>

namespace jobfs::client {

WriteBehind::WriteBehind(const FileIO& io, uint64_t ino, const Layout& layout, size_t limit_bytes)
    : io_(io), ino_(ino), layout_(layout), limit_(limit_bytes ? limit_bytes : 1), state_(std::make_shared<State>()) {}

WriteBehind::~WriteBehind() { quiesce(); }

Status WriteBehind::write(uint64_t offset, std::span<const uint8_t> data) {
    if (data.empty()) return Status::OK();
    {
        // A write larger than the limit waits for an empty pipe and then goes alone.
        std::unique_lock lock(state_->mu);
        state_->cv.wait(lock, [&] {
            return !state_->error.ok() || state_->bytes_in_flight == 0 ||
                   state_->bytes_in_flight + data.size() <= limit_;
        });
        if (!state_->error.ok()) return state_->error;
        state_->bytes_in_flight += data.size();
    }
    auto copy = std::make_shared<std::vector<uint8_t>>(data.begin(), data.end());
    const size_t n = data.size();
    io_.pwrite_async(ino_, layout_, offset, copy, [state = state_, n](Status s) {
        std::lock_guard lock(state->mu);
        if (!s.ok() && state->error.ok()) state->error = std::move(s);
        state->bytes_in_flight -= n;
        state->cv.notify_all();
    });
    return Status::OK();
}

Status WriteBehind::flush() {
    std::unique_lock lock(state_->mu);
    state_->cv.wait(lock, [&] { return state_->bytes_in_flight == 0; });
    return state_->error;
}

void WriteBehind::quiesce() { (void)flush(); }

} // namespace jobfs::client
