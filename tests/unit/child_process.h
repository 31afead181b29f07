// child_process.h: a program the test starts, reads lines from, signals and reaps.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace jobfs::test {

class ChildProcess {
public:
    // Starts argv[0] with argv; its stdout is read through read_line(), stderr is left alone.
    explicit ChildProcess(const std::vector<std::string>& argv);
    ~ChildProcess(); // SIGKILL and reap if still running

    ChildProcess(const ChildProcess&) = delete;
    ChildProcess& operator=(const ChildProcess&) = delete;

    bool running() const { return pid_ > 0; }
    pid_t pid() const { return pid_; }
    // Next line printed, or nothing if none came within the timeout (or the child closed stdout).
    std::optional<std::string> read_line(std::chrono::milliseconds timeout);
    void signal(int sig);
    // Waits for the child to end; its exit code, 128+signal, or nothing after the timeout.
    std::optional<int> wait(std::chrono::milliseconds timeout);
    void kill_hard(); // SIGKILL and reap

    // Path of a program built next to the running test binary ("../helpers/x", "../../server/y").
    static std::string beside_test(const std::string& relative);

private:
    pid_t pid_ = -1;
    int out_fd_ = -1;
    std::string buffer_;
};

} // namespace jobfs::test
