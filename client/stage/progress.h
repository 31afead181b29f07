// progress.h: progress of a staging run on stderr: a bar redrawn in place on a terminal,
// a line every few seconds otherwise (batch job output), from a thread of its own; either
// ends with the final state when stopped.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace jobfs::stage {

struct Counters {
    std::atomic<uint64_t> objects_done{0}, bytes_done{0};
    // Grow while a listing still comes in (listing set): the bar then shows "N+" totals.
    std::atomic<uint64_t> objects_total{0}, bytes_total{0};
    std::atomic<bool> listing{false};
};

class Progress {
public:
    // mode: 0 off, 1 bar, 2 lines; -1 picks 1 when stderr is a terminal, else 2.
    Progress(std::string label, const Counters& c, int mode, double interval_s);
    ~Progress();  // stops the thread and ends the bar's line
    void stop();

private:
    void run();
    void print(bool final);

    std::string label_;
    const Counters& c_;
    int mode_;
    std::chrono::milliseconds interval_;
    std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread thread_;
};

} // namespace jobfs::stage
