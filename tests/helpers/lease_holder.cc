// lease_holder: a libjobfs client that keeps what the daemons lease it, for attr_lease_test.
//
//   lease_holder CLUSTER_FILE PATH
//
// Connects, stats PATH and prints "mode OOOO size N" (or "error CODE"); then, at each SIGUSR1, stats
// it again and prints the same. The test stops and continues it (SIGSTOP, SIGCONT) to play a
// client that holds a lease and does not answer its recall.
#include <signal.h>

#include <cstdio>
#include <string>

#include "client/client.h"

using namespace jobfs;

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: lease_holder CLUSTER_FILE PATH\n");
        return 2;
    }
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, nullptr); // before any thread starts: all inherit it
    auto info = client::read_cluster(argv[1]);
    if (!info.ok()) {
        std::fprintf(stderr, "lease_holder: %s\n", info.status().to_string().c_str());
        return 1;
    }
    auto c = client::Client::connect(*info);
    if (!c.ok()) {
        std::fprintf(stderr, "lease_holder: %s\n", c.status().to_string().c_str());
        return 1;
    }
    for (;;) {
        auto a = (*c)->stat(argv[2]);
        if (a.ok())
            std::printf("mode %04o size %llu\n", a->mode & 07777, static_cast<unsigned long long>(a->size));
        else
            std::printf("error %s\n", std::string(code_name(a.status().code())).c_str());
        std::fflush(stdout);
        int sig = 0;
        if (sigwait(&usr1, &sig) != 0) return 1;
    }
}
