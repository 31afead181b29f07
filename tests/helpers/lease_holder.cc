// lease_holder: a libjobfs client that keeps what the daemons lease it, for attr_lease_test.
//
//   lease_holder CLUSTER_FILE PATH
//
// Connects, stats PATH and prints "mode OOOO size N" (or "error CODE"), then "leased yes" when a
// second stat was answered from what the first was leased ("leased no" otherwise); then, at each
// SIGUSR1, stats it again and prints the first line's kind. The test stops and continues it (SIGSTOP, SIGCONT) to play a
// client that holds a lease and does not answer its recall.
#include <signal.h>

#include <cstdio>
#include <string>

#include "client/client.h"
#include "helper_client.h"

using namespace jobfs;

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: lease_holder CLUSTER_FILE PATH\n");
        return 2;
    }
    auto c = test::helper_connect("lease_holder", argv[1]);
    if (!c) return 1;
    for (bool first = true;; first = false) {
        auto a = c->stat(argv[2]);
        if (a.ok())
            std::printf("mode %04o size %llu\n", a->mode & 07777, static_cast<unsigned long long>(a->size));
        else
            std::printf("error %s\n", std::string(code_name(a.status().code())).c_str());
        if (first) {
            const uint64_t hits = c->attr_cache_stats().hits;
            (void)c->stat(argv[2]);
            std::printf("leased %s\n", c->attr_cache_stats().hits > hits ? "yes" : "no");
        }
        std::fflush(stdout);
        if (!test::wait_usr1()) return 1;
    }
}
