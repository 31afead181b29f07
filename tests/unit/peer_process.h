// peer_process.h: runs tests/helpers/transport_peer as a child process that a test can kill.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

namespace jobfs::test {

class PeerProcess {
public:
    // Starts the peer on `port` (0: any) and waits until it listens.
    explicit PeerProcess(uint16_t port, const std::string& secret = "");
    ~PeerProcess();

    bool running() const { return pid_ > 0; }
    uint16_t port() const { return port_; }
    // Next line the peer printed, or nothing if none came within the timeout.
    std::optional<std::string> read_line(std::chrono::milliseconds timeout);
    void kill_hard(); // SIGKILL and reap

private:
    pid_t pid_ = -1;
    int out_fd_ = -1;
    uint16_t port_ = 0;
    std::string buffer_;
};

} // namespace jobfs::test
