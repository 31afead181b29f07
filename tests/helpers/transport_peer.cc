// transport_peer: a transport server in its own process, for tests that kill or restart a peer.
// Usage: transport_peer PORT [SECRET]. Prints "port N" once listening, then "request OPCODE" for
// every request it receives, and serves until killed.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "../unit/test_messages.h"

int main(int argc, char** argv) {
    using namespace jobfs;
    if (argc < 2) {
        std::fprintf(stderr, "usage: transport_peer PORT [SECRET]\n");
        return 2;
    }
    log::set_name("transport_peer");
    transport::WorkerOptions o;
    o.name = "peer";
    if (argc > 2) o.secret = argv[2];
    auto w = transport::Worker::create(o);
    if (!w.ok()) {
        std::fprintf(stderr, "transport_peer: %s\n", w.status().to_string().c_str());
        return 1;
    }
    auto st = std::make_shared<test::TestServer>();
    st->on_request = [](uint16_t op) {
        std::printf("request %u\n", op);
        std::fflush(stdout);
    };
    test::serve_test_protocol(**w, st);
    auto port = (*w)->listen("127.0.0.1", static_cast<uint16_t>(std::atoi(argv[1])));
    if (!port.ok()) {
        std::fprintf(stderr, "transport_peer: %s\n", port.status().to_string().c_str());
        return 1;
    }
    std::printf("port %u\n", *port);
    std::fflush(stdout);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}
