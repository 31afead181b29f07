#include "peer_process.h"

namespace jobfs::test {

std::vector<std::string> PeerProcess::argv(uint16_t port, const std::string& secret) {
    std::vector<std::string> a{ChildProcess::beside_test("../helpers/transport_peer"), std::to_string(port)};
    if (!secret.empty()) a.push_back(secret);
    return a;
}

PeerProcess::PeerProcess(uint16_t port, const std::string& secret) : child_(argv(port, secret)) {
    auto line = child_.read_line(std::chrono::seconds(20));
    if (line && line->rfind("port ", 0) == 0)
        port_ = static_cast<uint16_t>(std::stoul(line->substr(5)));
    else
        child_.kill_hard();
}

} // namespace jobfs::test
