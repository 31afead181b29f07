// stall_watch.cc: see stall_watch.h.
#include "client/stall_watch.h"

namespace jobfs::client {

StallWatch::StallWatch(std::function<void()> action, std::chrono::milliseconds after, std::chrono::milliseconds every)
    : action_(std::move(action)), after_(after), every_(every) {}

StallWatch::~StallWatch() {
    {
        std::lock_guard l(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

StallWatch::Watched StallWatch::watch() {
    std::lock_guard l(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    const bool first = calls_.empty();
    auto at = calls_.insert(Clock::now());
    if (first) cv_.notify_all(); // the watcher sleeps without a deadline while nothing is registered
    return Watched(this, at);
}

StallWatch::Watched::~Watched() {
    if (!owner_) return;
    std::lock_guard l(owner_->mu_);
    owner_->calls_.erase(at_);
}

void StallWatch::run() {
    std::unique_lock l(mu_);
    while (!stop_) {
        if (calls_.empty()) {
            cv_.wait(l);
            continue;
        }
        const auto due = *calls_.begin() + after_;
        if (Clock::now() < due) {
            cv_.wait_until(l, due);
            continue;
        }
        l.unlock();
        action_();
        l.lock();
        if (!stop_) cv_.wait_for(l, every_);
    }
}

} // namespace jobfs::client
