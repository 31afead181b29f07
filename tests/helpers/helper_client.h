// helper_client.h: the start of a test helper process that plays a libjobfs client
// (lease_holder, dir_holder): SIGUSR1 blocked in every thread (the helper waits for it with
// sigwait), then a Client connected to the cluster file. Null after saying why on stderr.
#pragma once

#include <signal.h>

#include <cstdio>
#include <memory>

#include "client/client.h"

namespace jobfs::test {

inline std::unique_ptr<client::Client> helper_connect(const char* name, const char* cluster_file,
                                                      const client::ClientOptions& options = {}) {
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, nullptr); // before any thread starts: all inherit it
    auto info = client::read_cluster(cluster_file);
    if (!info.ok()) {
        std::fprintf(stderr, "%s: %s\n", name, info.status().to_string().c_str());
        return nullptr;
    }
    auto c = client::Client::connect(*info, options);
    if (!c.ok()) {
        std::fprintf(stderr, "%s: %s\n", name, c.status().to_string().c_str());
        return nullptr;
    }
    return std::move(*c);
}

// Waits for the next SIGUSR1 (blocked by helper_connect); false if sigwait fails.
inline bool wait_usr1() {
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    int sig = 0;
    return sigwait(&usr1, &sig) == 0;
}

} // namespace jobfs::test
