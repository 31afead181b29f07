// jobfs-bench-transport: round-trip latency and bulk bandwidth over the jobfs transport.
//
//   jobfs-bench-transport serve --port P          prints "listening PORT WORKER-ADDRESS-HEX"
//   jobfs-bench-transport run --host H --port P [--address HEX] --test lat|put|get
//                         [--size N] [--iters N] [--window W] [--busy-poll-us N]
//   jobfs-bench-transport socket-serve --port P   plain blocking TCP echo (a baseline)
//   jobfs-bench-transport socket-run --port P --iters N
//
// `run` prints one machine-readable line:
//   result test=lat size=0 iters=20000 rtt_us=… oneway_us=…
//   result test=put size=4194304 iters=… window=… mib_s=…
// bench/transport drives it next to ucx_perftest and prints the ratios. The socket modes give
// the floor of any event-driven transport on this machine: a blocking TCP ping-pong pays the
// same two thread wake-ups per round trip as an idle-sleeping RPC server and client.
#include <boost/program_options.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "log.h"
#include "rpc.h"

namespace po = boost::program_options;
using namespace jobfs;
using namespace jobfs::transport;
using Clock = std::chrono::steady_clock;

namespace {

struct Empty {
    JOBFS_NO_FIELDS
};
struct Size {
    uint64_t length = 0;
    JOBFS_FIELDS(length)
};

JOBFS_RPC(Ping, 16, Empty, Empty);
JOBFS_RPC(Put, 17, Size, Empty); // request bulk, received into a server buffer
JOBFS_RPC(Get, 18, Size, Empty); // reply bulk, sent from a server buffer

WorkerOptions options_from(const po::variables_map& vm, const char* name) {
    WorkerOptions o;
    o.name = name;
    o.call_timeout = std::chrono::seconds(60);
    o.busy_poll = std::chrono::microseconds(vm["busy-poll-us"].as<long>());
    o.detect_peer_failure = !vm.count("no-peer-detect");
    return o;
}

int serve(const po::variables_map& vm) {
    auto w = Worker::create(options_from(vm, "bench-server"));
    if (!w.ok()) {
        std::fprintf(stderr, "jobfs-bench-transport: %s\n", w.status().to_string().c_str());
        return 1;
    }
    Worker& worker = **w;
    // A ring of chunk buffers, as a daemon would have; concurrent requests use different ones.
    const size_t ring_size = vm["buffers"].as<size_t>();
    const size_t max_size = vm["max-size"].as<size_t>();
    auto ring = std::make_shared<std::vector<std::vector<uint8_t>>>(ring_size, std::vector<uint8_t>(max_size, 0x5a));
    auto next = std::make_shared<std::atomic<size_t>>(0);
    rpc::serve<Ping>(worker, [](ServerCall c, Empty&&) { rpc::reply<Ping>(c, Empty{}); });
    rpc::serve<Put>(worker, [ring, next, max_size](ServerCall c, Size&& s) {
        if (s.length > max_size || s.length != c.bulk_length()) return c.reply(Status(Code::invalid, "bad size"));
        auto& buf = (*ring)[(*next)++ % ring->size()];
        c.receive_bulk(std::span<uint8_t>(buf.data(), s.length), [c](Status st) {
            if (!st.ok()) return c.reply(st);
            rpc::reply<Put>(c, Empty{});
        });
    });
    rpc::serve<Get>(worker, [ring, next, max_size](ServerCall c, Size&& s) {
        if (s.length > max_size) return c.reply(Status(Code::invalid, "bad size"));
        auto& buf = (*ring)[(*next)++ % ring->size()];
        rpc::reply<Get>(c, Empty{}, OutBulk{std::span<const uint8_t>(buf.data(), s.length), ring});
    });
    auto port = worker.listen(vm["host"].as<std::string>(), vm["port"].as<uint16_t>());
    if (!port.ok()) {
        std::fprintf(stderr, "jobfs-bench-transport: %s\n", port.status().to_string().c_str());
        return 1;
    }
    std::string hex;
    for (uint8_t b : worker.address()) {
        char x[3];
        std::snprintf(x, sizeof x, "%02x", b);
        hex += x;
    }
    std::printf("listening %u %s\n", *port, hex.c_str());
    std::fflush(stdout);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

int run(const po::variables_map& vm) {
    auto w = Worker::create(options_from(vm, "bench-client"));
    if (!w.ok()) {
        std::fprintf(stderr, "jobfs-bench-transport: %s\n", w.status().to_string().c_str());
        return 1;
    }
    Result<Endpoint> ep = Status(Code::invalid, "no peer");
    if (vm.count("address")) {
        const std::string& hex = vm["address"].as<std::string>();
        Bytes addr;
        for (size_t i = 0; i + 1 < hex.size(); i += 2) addr.push_back(static_cast<uint8_t>(std::stoul(hex.substr(i, 2), nullptr, 16)));
        ep = (*w)->connect_address(addr, "bench-server");
    } else {
        ep = (*w)->connect(vm["host"].as<std::string>(), vm["port"].as<uint16_t>());
    }
    if (!ep.ok()) {
        std::fprintf(stderr, "jobfs-bench-transport: %s\n", ep.status().to_string().c_str());
        return 1;
    }
    const std::string test = vm["test"].as<std::string>();
    const size_t iters = vm["iters"].as<size_t>();
    const size_t warmup = std::max<size_t>(iters / 10, 1);

    if (test == "lat") {
        for (size_t i = 0; i < warmup; ++i)
            if (!rpc::call<Ping>(*ep, Empty{}).ok()) return 1;
        auto t0 = Clock::now();
        for (size_t i = 0; i < iters; ++i) {
            auto r = rpc::call<Ping>(*ep, Empty{});
            if (!r.ok()) {
                std::fprintf(stderr, "jobfs-bench-transport: %s\n", r.status().to_string().c_str());
                return 1;
            }
        }
        double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
        std::printf("result test=lat size=0 iters=%zu rtt_us=%.3f oneway_us=%.3f\n", iters, us, us / 2);
        return 0;
    }

    const size_t size = vm["size"].as<size_t>();
    const size_t window = vm["window"].as<size_t>();
    const bool put = test == "put";
    if (!put && test != "get") {
        std::fprintf(stderr, "jobfs-bench-transport: unknown test '%s' (lat, put, get)\n", test.c_str());
        return 2;
    }
    const size_t nbufs = std::min(window, vm["buffers"].as<size_t>());
    std::vector<std::vector<uint8_t>> bufs(nbufs, std::vector<uint8_t>(size, 0xa5));
    std::mutex mu;
    std::condition_variable cv;
    size_t in_flight = 0, done = 0, failed = 0;
    auto issue = [&](size_t i) {
        CallOptions o;
        if (put)
            o.bulk_out = bufs[i % nbufs];
        else
            o.bulk_in = bufs[i % nbufs];
        auto cb = [&](Result<Empty> r, size_t) {
            std::lock_guard lock(mu);
            if (!r.ok()) {
                if (failed++ == 0) std::fprintf(stderr, "jobfs-bench-transport: %s\n", r.status().to_string().c_str());
            }
            --in_flight;
            ++done;
            cv.notify_all();
        };
        if (put)
            rpc::call_async<Put>(*ep, Size{size}, o, cb);
        else
            rpc::call_async<Get>(*ep, Size{size}, o, cb);
    };
    auto pass = [&](size_t count) {
        // With fewer buffers than calls in flight, concurrent calls share a buffer: harmless
        // for a bandwidth figure, which ignores the bytes.
        for (size_t i = 0; i < count; ++i) {
            std::unique_lock lock(mu);
            cv.wait(lock, [&] { return in_flight < window; });
            ++in_flight;
            lock.unlock();
            issue(i);
        }
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return in_flight == 0; });
    };
    pass(warmup);
    done = 0;
    auto t0 = Clock::now();
    pass(iters);
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    if (failed) return 1;
    double mib_s = static_cast<double>(size) * iters / secs / (1024.0 * 1024.0);
    std::printf("result test=%s size=%zu iters=%zu window=%zu mib_s=%.1f\n", test.c_str(), size, iters, window, mib_s);
    return 0;
}

// A blocking TCP ping-pong of 8 bytes: no UCX, no threads, TCP_NODELAY.
int socket_pingpong(const po::variables_map& vm, bool serve) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(vm["port"].as<uint16_t>());
    inet_pton(AF_INET, vm["host"].as<std::string>().c_str(), &a.sin_addr);
    int one = 1;
    char buf[8] = {};
    if (serve) {
        int l = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(l, 4) != 0) {
            std::perror("jobfs-bench-transport: socket-serve");
            return 1;
        }
        std::printf("listening %u\n", vm["port"].as<uint16_t>());
        std::fflush(stdout);
        for (;;) {
            int s = accept(l, nullptr, nullptr);
            if (s < 0) continue;
            setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            while (read(s, buf, sizeof buf) == sizeof buf && write(s, buf, sizeof buf) == sizeof buf) {
            }
            close(s);
        }
    }
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        std::perror("jobfs-bench-transport: socket-run");
        return 1;
    }
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const size_t iters = vm["iters"].as<size_t>();
    auto once = [&] { return write(s, buf, sizeof buf) == sizeof buf && read(s, buf, sizeof buf) == sizeof buf; };
    for (size_t i = 0; i < iters / 10 + 1; ++i)
        if (!once()) return 1;
    auto t0 = Clock::now();
    for (size_t i = 0; i < iters; ++i)
        if (!once()) return 1;
    double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
    std::printf("result test=socklat size=8 iters=%zu rtt_us=%.3f oneway_us=%.3f\n", iters, us, us / 2);
    close(s);
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    po::options_description desc("jobfs-bench-transport serve|run|socket-serve|socket-run [options]");
    desc.add_options()("help", "this help")
        ("mode", po::value<std::string>(), "serve or run")
        ("host", po::value<std::string>()->default_value("127.0.0.1"), "address to listen on / connect to")
        ("port", po::value<uint16_t>()->default_value(0), "TCP port")
        ("address", po::value<std::string>(), "connect by this worker address (hex) instead of host:port")
        ("test", po::value<std::string>()->default_value("lat"), "lat, put or get")
        ("size", po::value<size_t>()->default_value(4 << 20), "bulk size in bytes")
        ("max-size", po::value<size_t>()->default_value(4 << 20), "largest bulk the server accepts")
        ("iters", po::value<size_t>()->default_value(1000), "measured iterations")
        ("window", po::value<size_t>()->default_value(8), "calls in flight")
        ("buffers", po::value<size_t>()->default_value(16),
         "distinct bulk buffers cycled through (server; client: at most the window); 1 keeps the data hot in cache, as ucx_perftest does")
        ("busy-poll-us", po::value<long>()->default_value(0), "poll this long after activity before sleeping")
        ("no-peer-detect", "no UCX peer-failure detection (lets UCX 1.13 use shared memory)");
    po::positional_options_description pos;
    pos.add("mode", 1);
    po::variables_map vm;
    try {
        po::store(po::command_line_parser(argc, argv).options(desc).positional(pos).run(), vm);
        po::notify(vm);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "jobfs-bench-transport: %s\n", e.what());
        return 2;
    }
    if (vm.count("help") || !vm.count("mode")) {
        std::printf("%s", (std::ostringstream() << desc).str().c_str());
        return vm.count("help") ? 0 : 2;
    }
    log::set_name("jobfs-bench-transport");
    const std::string mode = vm["mode"].as<std::string>();
    if (mode == "serve") return serve(vm);
    if (mode == "run") return run(vm);
    if (mode == "socket-serve") return socket_pingpong(vm, true);
    if (mode == "socket-run") return socket_pingpong(vm, false);
    std::fprintf(stderr, "jobfs-bench-transport: unknown mode '%s' (serve, run)\n", mode.c_str());
    return 2;
}
