// dir_holder: a libjobfs client that makes files in a directory delegated to it and sends
// nothing of them until asked (a flush delay of a minute), for dir_delegation_test.
//
//   dir_holder CLUSTER_FILE DIR N
//
// Creates DIR/h0 … DIR/h<N-1> (each closed, but the last one, kept open) and prints
// "made N delegated K sent B" (K: the creates it answered itself; B: the DirOps it sent, as
// it does once half its lease has passed, whatever the flush delay). The test stops it
// (SIGSTOP) to play a holder that cannot answer a recall, and continues it. At SIGUSR1 it prints
// "sync CODE" (Client::sync_namespace) and "fsync CODE" (of the open file), CODE being "ok" or
// the error's name.
#include <fcntl.h>
#include <signal.h>

#include <cstdio>
#include <string>

#include "client/client.h"
#include "helper_client.h"

using namespace jobfs;

namespace {
std::string said(const Status& s) { return s.ok() ? "ok" : std::string(code_name(s.code())); }
} // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: dir_holder CLUSTER_FILE DIR N\n");
        return 2;
    }
    client::ClientOptions o;
    o.dir_delegation_flush_delay = std::chrono::minutes(1);
    auto c = test::helper_connect("dir_holder", argv[1], o);
    if (!c) return 1;
    client::Client& cl = *c;
    const int n = std::stoi(argv[3]);
    std::unique_ptr<client::File> last;
    for (int i = 0; i < n; ++i) {
        auto f = cl.open(std::string(argv[2]) + "/h" + std::to_string(i), O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (!f.ok()) {
            std::fprintf(stderr, "dir_holder: %s\n", f.status().to_string().c_str());
            return 1;
        }
        if (i + 1 == n) {
            last = std::move(*f);
        } else if (Status s = cl.close(**f); !s.ok()) {
            std::fprintf(stderr, "dir_holder: %s\n", s.to_string().c_str());
            return 1;
        }
    }
    const auto st = cl.delegation_stats();
    std::printf("made %d delegated %llu sent %llu\n", n, static_cast<unsigned long long>(st.ops),
                static_cast<unsigned long long>(st.batches));
    std::fflush(stdout);
    if (!test::wait_usr1()) return 1;
    std::printf("sync %s\n", said(cl.sync_namespace()).c_str());
    std::printf("fsync %s\n", said(cl.fsync(*last)).c_str());
    std::fflush(stdout);
    (void)cl.close(*last);
    return 0;
}
