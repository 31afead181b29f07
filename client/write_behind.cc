#include "client/write_behind.h"

#include <boost/asio/post.hpp>

#include <vector>

namespace jobfs::client {

WriteBehind::WriteBehind(const FileIO& io, boost::asio::thread_pool& pool, uint64_t ino, const Layout& layout,
                         size_t limit_bytes)
    : io_(io), pool_(pool), ino_(ino), layout_(layout), limit_(limit_bytes ? limit_bytes : 1), state_(std::make_shared<State>()) {}

WriteBehind::~WriteBehind() { quiesce(); }

Status WriteBehind::write(uint64_t offset, std::span<const uint8_t> data) {
    if (data.empty()) return Status::OK();
    {
        // A write larger than the limit waits for an empty pipe and then goes alone. A write
        // overlapping one still in flight waits for it: the two could otherwise land in either
        // order, and the older bytes win (a pwrite into what a write just wrote, read back
        // as it was before the pwrite).
        const uint64_t end = offset + data.size();
        std::unique_lock lock(state_->mu);
        state_->cv.wait(lock, [&] {
            if (!state_->error.ok()) return true;
            for (auto [b, e] : state_->ranges)
                if (b < end && offset < e) return false;
            return state_->bytes_in_flight == 0 || state_->bytes_in_flight + data.size() <= limit_;
        });
        if (!state_->error.ok()) return state_->error;
        state_->bytes_in_flight += data.size();
        state_->ranges.emplace(offset, end);
    }
    // The copy (FileIO::hold) goes straight into the write arena where it can.
    auto held = io_.hold(ino_, layout_, offset, data);
    if (!held.ok()) {
        done(*state_, offset, data.size(), held.status());
        return held.status();
    }
    std::shared_ptr<FileIO::HeldWrite> copy = std::move(*held);
    boost::asio::post(pool_, [io = &io_, copy, state = state_]() mutable {
        Status s = io->pwrite(*copy);
        const uint64_t offset = copy->offset(), size = copy->size();
        copy.reset(); // its arena regions back before the writer waiting for room wakes
        done(*state, offset, size, std::move(s));
    });
    return Status::OK();
}

void WriteBehind::done(State& state, uint64_t offset, uint64_t size, Status s) {
    std::lock_guard lock(state.mu);
    if (!s.ok() && state.error.ok()) state.error = std::move(s);
    state.bytes_in_flight -= size;
    state.ranges.erase(state.ranges.find({offset, offset + size}));
    state.cv.notify_all();
}

Status WriteBehind::flush() {
    std::unique_lock lock(state_->mu);
    state_->cv.wait(lock, [&] { return state_->bytes_in_flight == 0; });
    return state_->error;
}

void WriteBehind::quiesce() { (void)flush(); }

} // namespace jobfs::client
