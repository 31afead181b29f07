// peer_process.h: runs tests/helpers/transport_peer as a child process that a test can kill.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "child_process.h"

namespace jobfs::test {

class PeerProcess {
public:
    // Starts the peer on `port` (0: any) and waits until it listens.
    explicit PeerProcess(uint16_t port, const std::string& secret = "");

    bool running() const { return child_.running() && port_ != 0; }
    uint16_t port() const { return port_; }
    std::optional<std::string> read_line(std::chrono::milliseconds timeout) { return child_.read_line(timeout); }
    void kill_hard() { child_.kill_hard(); }

private:
    static std::vector<std::string> argv(uint16_t port, const std::string& secret);
    ChildProcess child_;
    uint16_t port_ = 0;
};

} // namespace jobfs::test
