// progress.cc: the bar and the progress lines.
#include "client/stage/progress.h"

#include <unistd.h>

#include <cstdio>

namespace jobfs::stage {

Progress::Progress(std::string label, const Counters& c, int mode, double interval_s)
    : label_(std::move(label)), c_(c), mode_(mode < 0 ? (isatty(2) ? 1 : 2) : mode),
      interval_(mode_ == 1 ? std::chrono::milliseconds(250)
                           : std::chrono::milliseconds(static_cast<long>(interval_s * 1000))) {
    if (mode_ != 0) thread_ = std::thread([this] { run(); });
}

Progress::~Progress() { stop(); }

void Progress::stop() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stop_) return;
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) {
        thread_.join();
        // The bar ends with its last state; lines end with one too, so that a job's log
        // always shows where the transfer ended, even one shorter than the interval.
        print(true);
    }
}

void Progress::run() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!cv_.wait_for(lk, interval_, [this] { return stop_; })) print(false);
}

void Progress::print(bool final) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const uint64_t b = c_.bytes_done.load(), o = c_.objects_done.load();
    const uint64_t bt = c_.bytes_total.load(), ot = c_.objects_total.load();
    const char* more = c_.listing.load() ? "+" : "";  // totals so far: the listing goes on
    const double pct = bt ? 100.0 * static_cast<double>(b) / static_cast<double>(bt)
                          : (ot ? 100.0 * static_cast<double>(o) / static_cast<double>(ot) : 100.0);
    const double mbs = s > 0 ? static_cast<double>(b) / 1e6 / s : 0;
    if (mode_ == 1) {
        char bar[31];
        const int fill = static_cast<int>(pct * 30 / 100);
        for (int i = 0; i < 30; ++i) bar[i] = i < fill ? '#' : '.';
        bar[30] = 0;
        std::fprintf(stderr, "\r%s [%s] %5.1f%% %llu/%llu%s objects %.1f/%.1f%s MB %.1f MB/s%s", label_.c_str(), bar, pct,
                     static_cast<unsigned long long>(o), static_cast<unsigned long long>(ot), more,
                     static_cast<double>(b) / 1e6, static_cast<double>(bt) / 1e6, more, mbs, final ? "\n" : "");
    } else {
        std::fprintf(stderr, "%s: %.0f%% %llu/%llu%s objects, %.1f/%.1f%s MB, %.1f MB/s, %.0f s\n", label_.c_str(), pct,
                     static_cast<unsigned long long>(o), static_cast<unsigned long long>(ot), more,
                     static_cast<double>(b) / 1e6, static_cast<double>(bt) / 1e6, more, mbs, s);
    }
    std::fflush(stderr);
}

} // namespace jobfs::stage
