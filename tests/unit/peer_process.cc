#include "peer_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <string>

namespace jobfs::test {
namespace {

std::string helper_path() {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return "transport_peer";
    self[n] = 0;
    std::string dir(self);
    dir = dir.substr(0, dir.rfind('/'));
    return dir + "/../helpers/transport_peer";
}

} // namespace

PeerProcess::PeerProcess(uint16_t port, const std::string& secret) {
    int fds[2];
    if (pipe(fds) != 0) return;
    std::string path = helper_path();
    std::string port_arg = std::to_string(port);
    pid_ = fork();
    if (pid_ == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        const char* argv[] = {path.c_str(), port_arg.c_str(), secret.empty() ? nullptr : secret.c_str(), nullptr};
        execv(path.c_str(), const_cast<char* const*>(argv));
        _exit(127);
    }
    close(fds[1]);
    out_fd_ = fds[0];
    if (pid_ < 0) return;
    auto line = read_line(std::chrono::seconds(20));
    if (line && line->rfind("port ", 0) == 0) {
        port_ = static_cast<uint16_t>(std::stoul(line->substr(5)));
    } else {
        kill_hard();
    }
}

PeerProcess::~PeerProcess() {
    kill_hard();
    if (out_fd_ >= 0) close(out_fd_);
}

std::optional<std::string> PeerProcess::read_line(std::chrono::milliseconds timeout) {
    auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        auto nl = buffer_.find('\n');
        if (nl != std::string::npos) {
            std::string line = buffer_.substr(0, nl);
            buffer_.erase(0, nl + 1);
            return line;
        }
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
        if (left.count() <= 0 || out_fd_ < 0) return std::nullopt;
        pollfd p{out_fd_, POLLIN, 0};
        if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
        char buf[256];
        ssize_t n = read(out_fd_, buf, sizeof buf);
        if (n <= 0) return std::nullopt;
        buffer_.append(buf, static_cast<size_t>(n));
    }
}

void PeerProcess::kill_hard() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
    pid_ = -1;
}

} // namespace jobfs::test
