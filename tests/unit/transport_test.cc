// transport_test: real UCX endpoints, in this process and in child processes.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <random>

#include "frame.h"
#include "peer_process.h"
#include "test_messages.h"
#include "transport_protocol.h"

namespace jobfs {
namespace {

using namespace std::chrono_literals;
using transport::CallOptions;
using transport::Endpoint;
using transport::Worker;
using transport::WorkerOptions;
namespace rpc = transport::rpc;
using namespace test;
using Clock = std::chrono::steady_clock;

// Calls wait as long as the product's default (30 s): on this 2-core machine under load, 4 MiB
// rendezvous replies have taken over 10 s. Tests of deadlines pass their own.
std::unique_ptr<Worker> make_worker(const std::string& name, const std::string& secret = "",
                                    std::chrono::milliseconds timeout = 30s, WorkerOptions o = {}) {
    o.name = name;
    o.secret = secret;
    o.call_timeout = timeout;
    o.connect_timeout = 5s;
    auto w = Worker::create(o);
    EXPECT_TRUE(w.ok()) << w.status().to_string();
    return w.ok() ? std::move(*w) : nullptr;
}

// Every fixture test runs over each transport mode: UCX's default choice, tcp only (what crosses
// machines), and shared memory allowed (tcp then only carries connection set-up).
class TransportTest : public ::testing::TestWithParam<const char*> {
protected:
    void SetUp() override {
        const std::string tls = GetParam();
        if (tls == "default")
            unsetenv("UCX_TLS");
        else
            setenv("UCX_TLS", tls.c_str(), 1);
        server = make_worker("server", secret);
        ASSERT_TRUE(server);
        state = std::make_shared<TestServer>();
        serve_test_protocol(*server, state);
        auto p = server->listen("127.0.0.1", 0);
        ASSERT_TRUE(p.ok()) << p.status().to_string();
        port = *p;
        client = make_worker("client", secret);
        ASSERT_TRUE(client);
        auto ep = client->connect("127.0.0.1", port);
        ASSERT_TRUE(ep.ok()) << ep.status().to_string();
        conn = *ep;
    }
    void TearDown() override {
        conn = {};
        client.reset();
        server.reset();
        unsetenv("UCX_TLS");
    }

    std::string secret = "job-42-secret";
    std::unique_ptr<Worker> server, client;
    std::shared_ptr<TestServer> state;
    uint16_t port = 0;
    Endpoint conn;
};

TEST_P(TransportTest, EchoRoundTrip) {
    auto r = rpc::call<Echo>(conn, EchoRequest{"hello", 7});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->text, "hello");
    EXPECT_EQ(r->seq, 7u);
    EXPECT_EQ(r->server, "server");
    EXPECT_EQ(conn.peer_name(), "server");
}

TEST_P(TransportTest, TenThousandRequestsWith64InFlight) {
    constexpr int kTotal = 10000, kWindow = 64;
    std::mutex mu;
    std::condition_variable cv;
    int in_flight = 0, done = 0, wrong = 0, max_in_flight = 0;
    for (int i = 0; i < kTotal; ++i) {
        {
            std::unique_lock lock(mu);
            cv.wait(lock, [&] { return in_flight < kWindow; });
            max_in_flight = std::max(max_in_flight, ++in_flight);
        }
        std::string text = "m" + std::to_string(i);
        rpc::call_async<Echo>(conn, EchoRequest{text, static_cast<uint64_t>(i)}, {},
                              [&, i, text](Result<EchoResponse> r, size_t) {
                                  std::lock_guard lock(mu);
                                  if (!r.ok() || r->seq != static_cast<uint64_t>(i) || r->text != text) ++wrong;
                                  --in_flight;
                                  ++done;
                                  cv.notify_all();
                              });
    }
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 60s, [&] { return done == kTotal; })) << done << " of " << kTotal << " completed";
    EXPECT_EQ(wrong, 0);
    EXPECT_EQ(max_in_flight, kWindow);
    EXPECT_GE(server->stats().requests_served, static_cast<uint64_t>(kTotal));
}

TEST_P(TransportTest, Bulk256MiBIn4MiBPiecesBothWays) {
    constexpr size_t kPiece = 4 << 20, kPieces = 64;
    std::vector<uint8_t> buf(kPiece);
    uint32_t sent_crc = 0, acked_crc = 0, recv_crc = 0, announced_crc = 0;
    for (size_t i = 0; i < kPieces; ++i) {
        fill_pattern(buf.data(), buf.size(), 1000 + i);
        sent_crc = crc32c(buf.data(), buf.size(), sent_crc);
        CallOptions o;
        o.bulk_out = buf;
        auto r = rpc::call<PutBlob>(conn, PutRequest{kPiece}, o);
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        ASSERT_EQ(r->length, kPiece);
        // The server's checksum of what it received must be the checksum of what we sent.
        ASSERT_EQ(r->crc, crc32c(buf.data(), buf.size()));
        acked_crc = crc32c(buf.data(), buf.size(), acked_crc);
    }
    EXPECT_EQ(sent_crc, acked_crc);
    for (size_t i = 0; i < kPieces; ++i) {
        std::fill(buf.begin(), buf.end(), 0);
        CallOptions o;
        o.bulk_in = buf;
        auto c = std::make_shared<std::promise<std::pair<Result<Checksum>, size_t>>>();
        rpc::call_async<GetBlob>(conn, GetRequest{kPiece, 2000 + i}, o,
                                 [c](Result<Checksum> r, size_t n) { c->set_value({std::move(r), n}); });
        auto [r, n] = c->get_future().get();
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        ASSERT_EQ(n, kPiece);
        std::vector<uint8_t> expect(kPiece);
        fill_pattern(expect.data(), expect.size(), 2000 + i);
        ASSERT_EQ(crc32c(buf.data(), buf.size()), r->crc);
        ASSERT_TRUE(buf == expect) << "piece " << i << " differs";
        recv_crc = crc32c(buf.data(), buf.size(), recv_crc);
        announced_crc = crc32c(expect.data(), expect.size(), announced_crc);
    }
    EXPECT_EQ(recv_crc, announced_crc);
}

TEST_P(TransportTest, SmallBulkTravelsEagerly) {
    std::vector<uint8_t> buf(1000);
    fill_pattern(buf.data(), buf.size(), 5);
    CallOptions o;
    o.bulk_out = buf;
    auto r = rpc::call<PutBlob>(conn, PutRequest{buf.size()}, o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->crc, crc32c(buf.data(), buf.size()));

    std::vector<uint8_t> in(1000);
    CallOptions oi;
    oi.bulk_in = in;
    auto g = conn.call(GetBlob::opcode, wire::encode(GetRequest{1000, 5}), oi);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_EQ(g->bulk_length, 1000u);
    EXPECT_TRUE(in == buf);
}

TEST_P(TransportTest, LargeMessagesTravelOutOfLine) {
    for (size_t size : {size_t{100}, server->max_inline_message() + 1, size_t{300 << 10}}) {
        BigMessage m;
        m.blob.resize(size);
        fill_pattern(m.blob.data(), size, size);
        auto r = rpc::call<Mirror>(conn, m);
        ASSERT_TRUE(r.ok()) << size << ": " << r.status().to_string();
        EXPECT_EQ(r->blob, m.blob);
        EXPECT_EQ(r->crc, crc32c(m.blob.data(), size));
    }
}

TEST_P(TransportTest, ErrorRepliesCarryCodeAndMessage) {
    auto r = rpc::call<Fail>(conn, FailRequest{static_cast<int32_t>(Code::not_found), "no such file /ckpt/a"});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::not_found);
    EXPECT_EQ(r.status().message(), "no such file /ckpt/a");
    EXPECT_EQ(r.status().to_errno(), ENOENT);
}

TEST_P(TransportTest, UnknownOpcodeIsUnsupported) {
    auto r = conn.call(999, {});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::unsupported);
}

TEST_P(TransportTest, MalformedRequestBodyGetsProtocolError) {
    auto r = conn.call(Echo::opcode, Bytes{1, 2, 3}); // not an EchoRequest
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::protocol);
    EXPECT_TRUE(rpc::call<Echo>(conn, EchoRequest{"still fine", 1}).ok());
}

TEST_P(TransportTest, DroppedCallIsAnsweredWithInternalError) {
    auto r = rpc::call<Drop>(conn, Empty{});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::internal);
}

TEST_P(TransportTest, UnansweredCallTimesOutOnTime) {
    CallOptions o;
    o.timeout = 300ms;
    auto t0 = Clock::now();
    auto r = rpc::call<Hang>(conn, Empty{}, o);
    auto took = Clock::now() - t0;
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::timeout);
    EXPECT_GE(took, 300ms);
    EXPECT_LT(took, 3s);
    // The connection survives a timed-out call.
    EXPECT_TRUE(rpc::call<Echo>(conn, EchoRequest{"after", 2}).ok());
}

TEST_P(TransportTest, ReplyBulkLargerThanBufferIsTooLarge) {
    std::vector<uint8_t> small(1000);
    CallOptions o;
    o.bulk_in = small;
    auto r = rpc::call<GetBlob>(conn, GetRequest{1 << 20, 1}, o);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::too_large);
    EXPECT_TRUE(rpc::call<Echo>(conn, EchoRequest{"after", 3}).ok());
}

TEST_P(TransportTest, RmaGetAndPutOnRegisteredMemory) {
    auto info = rpc::call<ShareRegion>(conn, Empty{});
    ASSERT_TRUE(info.ok()) << info.status().to_string();
    std::vector<uint8_t> local(info->length);
    ASSERT_TRUE(conn.get(local, info->address, info->rkey).ok());
    EXPECT_EQ(crc32c(local.data(), local.size()), info->crc);

    fill_pattern(local.data(), local.size(), 99);
    Status s = conn.put(local, info->address, info->rkey);
    ASSERT_TRUE(s.ok()) << s.to_string();
    auto check = rpc::call<CheckRegion>(conn, Empty{});
    ASSERT_TRUE(check.ok());
    EXPECT_EQ(check->crc, crc32c(local.data(), local.size()));
}

TEST_P(TransportTest, ConnectByWorkerAddress) {
    auto other = make_worker("peer-by-address", secret);
    auto ep = other->connect_address(server->address(), "server-by-address");
    ASSERT_TRUE(ep.ok()) << ep.status().to_string();
    auto r = rpc::call<Echo>(*ep, EchoRequest{"via address", 9});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->text, "via address");
    std::vector<uint8_t> buf(4 << 20);
    CallOptions o;
    o.bulk_in = buf;
    auto g = rpc::call<GetBlob>(*ep, GetRequest{buf.size(), 3}, o);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_EQ(g->crc, crc32c(buf.data(), buf.size()));
}

TEST_P(TransportTest, WrongSecretIsRefused) {
    auto intruder = make_worker("intruder", "not-the-secret");
    auto ep = intruder->connect("127.0.0.1", port);
    ASSERT_FALSE(ep.ok());
    EXPECT_EQ(ep.status().code(), Code::permission);
    EXPECT_NE(ep.status().message().find("secret"), std::string::npos) << ep.status().to_string();
    EXPECT_TRUE(rpc::call<Echo>(conn, EchoRequest{"still served", 4}).ok());
}

TEST_P(TransportTest, ClosedEndpointFailsCalls) {
    conn.close();
    auto r = rpc::call<Echo>(conn, EchoRequest{"x", 1});
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.status().code() == Code::cancelled || r.status().code() == Code::peer_gone)
        << r.status().to_string();
}

TEST_P(TransportTest, IdleWorkersUseNoCpu) {
    ASSERT_TRUE(rpc::call<Echo>(conn, EchoRequest{"warm", 1}).ok());
    std::this_thread::sleep_for(200ms); // let connection setup settle
    auto wake0 = server->stats().wakeups + client->stats().wakeups;
    rusage a{}, b{};
    getrusage(RUSAGE_SELF, &a);
    std::this_thread::sleep_for(1500ms);
    getrusage(RUSAGE_SELF, &b);
    auto usec = [](const rusage& r) {
        return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000000L + r.ru_utime.tv_usec + r.ru_stime.tv_usec;
    };
    long cpu_us = usec(b) - usec(a);
    auto wakeups = server->stats().wakeups + client->stats().wakeups - wake0;
    // Two workers polling would burn ~3 s of CPU here; sleeping in epoll burns next to nothing.
    EXPECT_LT(cpu_us, 100000) << "CPU used while idle: " << cpu_us << " us";
    EXPECT_LT(wakeups, 50u) << "idle wakeups";
}

// The 100 ms ticks of a worker with connections (for UCX's unsignalled set-up traffic) last
// set_up_ticks after the last connection was made; then the worker wakes every 2 s. Ten
// wake-ups a second were most of an idle daemon's CPU time.
TEST(TransportIdle, TicksSlowDownOnceConnectionsAreSetUp) {
    WorkerOptions o;
    o.set_up_ticks = 300ms;
    auto server = make_worker("server", "", 30s, o);
    ASSERT_TRUE(server);
    serve_test_protocol(*server, std::make_shared<TestServer>());
    auto port = server->listen("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status().to_string();
    auto client = make_worker("client", "", 30s, o);
    ASSERT_TRUE(client);
    auto conn = client->connect("127.0.0.1", *port);
    ASSERT_TRUE(conn.ok()) << conn.status().to_string();
    ASSERT_TRUE(rpc::call<Echo>(*conn, EchoRequest{"warm", 1}).ok());
    std::this_thread::sleep_for(1s); // past set_up_ticks, and the wake-up already asleep then
    const uint64_t wake0 = server->stats().wakeups + client->stats().wakeups;
    std::this_thread::sleep_for(3s);
    const uint64_t wakeups = server->stats().wakeups + client->stats().wakeups - wake0;
    EXPECT_LE(wakeups, 6u) << "two workers at rest for 3 s; ticks every 100 ms would be 60";
    EXPECT_TRUE(rpc::call<Echo>(*conn, EchoRequest{"still served", 2}).ok());
}

TEST_P(TransportTest, GarbageFramesDropTheConnectionNotTheServer) {
    std::mt19937_64 rng(4242);
    const uint64_t malformed0 = server->stats().malformed_frames;
    int sent = 0;
    for (int i = 0; i < 40; ++i) {
        auto ep = client->connect("127.0.0.1", port);
        ASSERT_TRUE(ep.ok()) << ep.status().to_string();
        Bytes header, data;
        switch (i % 4) {
        case 0: header = {1, 2, 3}; break; // truncated frame
        case 1: {                           // wrong version
            transport::FrameHeader h;
            h.opcode = Echo::opcode;
            header.resize(transport::kFrameHeaderSize);
            transport::frame_header_pack(h, header.data());
            header[4] = 99;
            break;
        }
        case 2: { // message length past the buffer
            transport::FrameHeader h;
            h.opcode = Echo::opcode;
            h.flags = transport::kInlineMessage;
            h.message_length = 5000;
            header.resize(transport::kFrameHeaderSize + 10);
            transport::frame_header_pack(h, header.data());
            break;
        }
        default: // random bytes
            header.resize(rng() % 100);
            for (auto& x : header) x = static_cast<uint8_t>(rng());
            data.resize(rng() % 100);
            for (auto& x : data) x = static_cast<uint8_t>(rng());
        }
        ASSERT_TRUE(ep->debug_send_raw(header, data).ok());
        ++sent;
        // The connection that sent garbage is dropped by the server: a call on it fails fast.
        CallOptions o;
        o.timeout = 5s;
        auto r = rpc::call<Echo>(*ep, EchoRequest{"after garbage", 1}, o);
        EXPECT_FALSE(r.ok()) << "iteration " << i;
        if (!r.ok()) {
            EXPECT_NE(r.status().code(), Code::timeout) << r.status().to_string();
        }
    }
    EXPECT_EQ(server->stats().malformed_frames - malformed0, static_cast<uint64_t>(sent));
    // Everybody else is still served.
    auto r = rpc::call<Echo>(conn, EchoRequest{"survivor", 5});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
}

TEST_P(TransportTest, ValidFrameWithGarbageBodyGetsErrorReply) {
    std::mt19937_64 rng(99);
    for (int i = 0; i < 200; ++i) {
        Bytes body(rng() % 64);
        for (auto& x : body) x = static_cast<uint8_t>(rng());
        auto r = conn.call(Echo::opcode, body);
        if (r.ok()) { // the random bytes happened to be a valid EchoRequest
            EXPECT_TRUE(wire::decode<EchoResponse>(r->message).ok());
            continue;
        }
        EXPECT_EQ(r.status().code(), Code::protocol) << r.status().to_string();
    }
    EXPECT_TRUE(rpc::call<Echo>(conn, EchoRequest{"after fuzz", 6}).ok());
}

// A server may call a client back on the connection the client made (a daemon recalling a
// client's cached attributes). The client serves the call once its hello was answered; before
// ServerCall::connection() and that rule, such a call was refused as "request before hello".
TEST_P(TransportTest, ServerCallsTheClientBackOnItsConnection) {
    constexpr uint16_t kCallMeBack = 40;
    serve_test_protocol(*client, std::make_shared<TestServer>()); // the client answers Echo
    server->set_handler(kCallMeBack, [](transport::ServerCall c) {
        rpc::call_async<Echo>(c.connection(), EchoRequest{"back", 3}, {}, [c](Result<EchoResponse> r, size_t) {
            if (!r.ok()) return c.reply(r.status());
            c.reply(wire::encode(EchoResponse{r->text, r->seq, r->server}));
        });
    });
    for (int round = 0; round < 3; ++round) {
        auto r = conn.call(kCallMeBack, wire::encode(EchoRequest{"x", 0}));
        ASSERT_TRUE(r.ok()) << "round " << round << ": " << r.status().to_string();
        auto back = wire::decode<EchoResponse>(r->message);
        ASSERT_TRUE(back.ok()) << back.status().to_string();
        EXPECT_EQ(back->text, "back");
        EXPECT_EQ(back->seq, 3u);
        EXPECT_EQ(back->server, "client"); // answered by the client's worker
    }
}

INSTANTIATE_TEST_SUITE_P(Tls, TransportTest, ::testing::Values("default", "tcp", "sm,self,tcp"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                             std::string n = i.param;
                             return n == "default" ? std::string("default") : n == "tcp" ? std::string("tcp") : std::string("shm");
                         });

// UCX 1.13 uses shared memory only for endpoints without peer-failure detection; the daemons
// on one host can connect so (by worker address) and rely on deadlines instead.
TEST(TransportSharedMemory, WorkerAddressWithoutPeerDetection) {
    setenv("UCX_TLS", "sm,self,tcp", 1);
    WorkerOptions o;
    o.detect_peer_failure = false;
    o.call_timeout = 10s;
    o.name = "shm-server";
    auto server = Worker::create(o);
    o.name = "shm-client";
    auto client = Worker::create(o);
    unsetenv("UCX_TLS");
    ASSERT_TRUE(server.ok() && client.ok());
    serve_test_protocol(**server, std::make_shared<TestServer>());
    auto ep = (*client)->connect_address((*server)->address(), "shm-server");
    ASSERT_TRUE(ep.ok()) << ep.status().to_string();
    auto r = rpc::call<Echo>(*ep, EchoRequest{"over shm", 1});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->server, "shm-server");
    std::vector<uint8_t> buf(4 << 20);
    fill_pattern(buf.data(), buf.size(), 77);
    CallOptions put;
    put.bulk_out = buf;
    auto p = rpc::call<PutBlob>(*ep, PutRequest{buf.size()}, put);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->crc, crc32c(buf.data(), buf.size()));
    CallOptions get;
    get.bulk_in = buf;
    auto g = rpc::call<GetBlob>(*ep, GetRequest{buf.size(), 78}, get);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_EQ(crc32c(buf.data(), buf.size()), g->crc);
}

// Two workers that serve the test protocol and listen on loopback, with shared memory allowed
// (UCX_TLS=sm,self,tcp) and peer-failure detection on, as the daemons have it.
struct ServingPair {
    std::unique_ptr<Worker> a, b;
    uint16_t port_a = 0, port_b = 0;
};
ServingPair serving_pair_with_shm() {
    setenv("UCX_TLS", "sm,self,tcp", 1);
    WorkerOptions o;
    o.call_timeout = 20s;
    ServingPair p;
    o.name = "a";
    auto a = Worker::create(o);
    o.name = "b";
    auto b = Worker::create(o);
    unsetenv("UCX_TLS");
    EXPECT_TRUE(a.ok() && b.ok());
    if (!a.ok() || !b.ok()) return p;
    p.a = std::move(*a);
    p.b = std::move(*b);
    serve_test_protocol(*p.a, std::make_shared<TestServer>());
    serve_test_protocol(*p.b, std::make_shared<TestServer>());
    auto pa = p.a->listen("127.0.0.1", 0), pb = p.b->listen("127.0.0.1", 0);
    EXPECT_TRUE(pa.ok() && pb.ok());
    p.port_a = pa.ok() ? *pa : 0;
    p.port_b = pb.ok() ? *pb : 0;
    return p;
}

// A connection by worker address without peer-failure detection (shared memory on one host)
// that watches a connection with it: calls work over it, and when the watched connection fails
// (here: aborted, as a daemon does to a peer taken offline) a call waiting on it fails at once
// with the same status instead of at its deadline, and so does the next one.
TEST(TransportSharedMemory, WatchedConnectionFailsWithTheOneItWatches) {
    auto pair = serving_pair_with_shm();
    ASSERT_TRUE(pair.a && pair.port_b);
    Worker* client = pair.a.get();
    Worker* server = pair.b.get();
    auto control = client->connect("127.0.0.1", pair.port_b);
    ASSERT_TRUE(control.ok()) << control.status().to_string();
    auto data = client->connect_address_watched(server->address(), "watched-server", *control);
    ASSERT_TRUE(data.ok()) << data.status().to_string();
    EXPECT_FALSE(*data == *control);
    std::vector<uint8_t> buf(4 << 20);
    fill_pattern(buf.data(), buf.size(), 91);
    CallOptions put;
    put.bulk_out = buf;
    auto p = rpc::call<PutBlob>(*data, PutRequest{buf.size()}, put);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->crc, crc32c(buf.data(), buf.size()));

    auto hung = std::make_shared<std::promise<Status>>();
    auto hung_result = hung->get_future();
    data->call_async(Hang::opcode, wire::encode(Empty{}), {}, [hung](Result<transport::Reply> r) { hung->set_value(r.status()); });
    std::this_thread::sleep_for(100ms); // the request is out
    const auto t0 = std::chrono::steady_clock::now();
    control->abort(Status(Code::peer_gone, "peer taken offline"));
    ASSERT_EQ(hung_result.wait_for(5s), std::future_status::ready) << "the watching connection's call waited on";
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
    const Status s = hung_result.get();
    EXPECT_EQ(s.code(), Code::peer_gone) << s.to_string();
    EXPECT_NE(s.message().find("peer taken offline"), std::string::npos) << s.message();
    EXPECT_EQ(data->health().code(), Code::peer_gone);
    EXPECT_EQ(rpc::call<Echo>(*data, EchoRequest{"after", 1}).status().code(), Code::peer_gone);
    // A broken watched connection cannot be watched.
    auto again = client->connect_address_watched(server->address(), "watched-server", *control);
    EXPECT_EQ(again.status().code(), Code::peer_gone) << again.status().to_string();
}

// Two daemons of one host forward to each other: each connects to the other by address, one
// after the other, as daemons do when each first forwards to the other. UCX pairs such
// endpoints of two workers, so a worker's requests may arrive on the endpoint its peer made:
// they must be served there too (they were refused as "request before hello" and the endpoint
// closed, so the peer's calls failed with "Request canceled").
TEST(TransportSharedMemory, WatchedConnectionsBothWays) {
    auto pair = serving_pair_with_shm();
    ASSERT_TRUE(pair.a && pair.port_a && pair.port_b);
    auto a_to_b = pair.a->connect("127.0.0.1", pair.port_b);
    auto b_to_a = pair.b->connect("127.0.0.1", pair.port_a);
    ASSERT_TRUE(a_to_b.ok() && b_to_a.ok());
    std::vector<uint8_t> buf(4 << 20);
    fill_pattern(buf.data(), buf.size(), 5);
    const uint32_t want = crc32c(buf.data(), buf.size());
    auto put = [&](const Endpoint& ep, const char* what, int round) {
        CallOptions o;
        o.bulk_out = buf;
        auto p = rpc::call<PutBlob>(ep, PutRequest{buf.size()}, o);
        ASSERT_TRUE(p.ok()) << what << " round " << round << ": " << p.status().to_string();
        EXPECT_EQ(p->crc, want);
    };
    auto a_data = pair.a->connect_address_watched(pair.b->address(), "b", *a_to_b);
    ASSERT_TRUE(a_data.ok()) << a_data.status().to_string();
    put(*a_data, "a to b", 0);
    auto b_data = pair.b->connect_address_watched(pair.a->address(), "a", *b_to_a);
    ASSERT_TRUE(b_data.ok()) << b_data.status().to_string();
    for (int round = 1; round <= 10; ++round) {
        put(*b_data, "b to a", round);
        put(*a_data, "a to b", round);
    }
    EXPECT_TRUE(a_data->health().ok()) << a_data->health().to_string();
    EXPECT_TRUE(b_data->health().ok()) << b_data->health().to_string();
}

// With busy polling, callers keep UCX's event fd for a grace period after each call; requests
// must still be served, and the workers must still fall asleep when the traffic stops.
TEST(TransportBusyPoll, ServesThenFallsAsleep) {
    WorkerOptions o;
    o.busy_poll = 200us;
    o.call_timeout = 10s;
    o.name = "poll-server";
    auto server = Worker::create(o);
    o.name = "poll-client";
    auto client = Worker::create(o);
    ASSERT_TRUE(server.ok() && client.ok());
    serve_test_protocol(**server, std::make_shared<TestServer>());
    auto port = (*server)->listen("127.0.0.1", 0);
    ASSERT_TRUE(port.ok());
    auto ep = (*client)->connect("127.0.0.1", *port);
    ASSERT_TRUE(ep.ok());
    for (int i = 0; i < 2000; ++i) {
        auto r = rpc::call<Echo>(*ep, EchoRequest{"p", static_cast<uint64_t>(i)});
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        ASSERT_EQ(r->seq, static_cast<uint64_t>(i));
    }
    // Async calls right after sync ones, while the event fd may still be in its grace period.
    std::atomic<int> ok{0};
    for (int i = 0; i < 100; ++i)
        rpc::call_async<Echo>(*ep, EchoRequest{"a", 1}, {}, [&](Result<EchoResponse> r, size_t) { ok += r.ok(); });
    auto until = Clock::now() + 10s;
    while (ok < 100 && Clock::now() < until) std::this_thread::sleep_for(1ms);
    EXPECT_EQ(ok.load(), 100);

    std::this_thread::sleep_for(100ms);
    rusage a{}, b{};
    getrusage(RUSAGE_SELF, &a);
    auto wake0 = (*server)->stats().wakeups + (*client)->stats().wakeups;
    std::this_thread::sleep_for(1s);
    getrusage(RUSAGE_SELF, &b);
    auto usec = [](const rusage& r) {
        return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000000L + r.ru_utime.tv_usec + r.ru_stime.tv_usec;
    };
    EXPECT_LT(usec(b) - usec(a), 100000) << "CPU used while idle after busy polling";
    EXPECT_LT((*server)->stats().wakeups + (*client)->stats().wakeups - wake0, 50u);
    EXPECT_TRUE(rpc::call<Echo>(*ep, EchoRequest{"after sleep", 3}).ok());
}

// The client connected to the server, which listens on loopback from now on (its handlers
// registered first).
Result<transport::Endpoint> listen_and_connect(Worker& server, Worker& client) {
    auto port = server.listen("127.0.0.1", 0);
    if (!port.ok()) return port.status();
    return client.connect("127.0.0.1", *port);
}

// A server whose Echo replies come from a thread of its own (as a daemon's pool answers), after
// `delay`: what the thread switches of a busy daemon and its clients are made of.
struct ReplyingThread {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<transport::ServerCall, EchoRequest>> q;
    bool stop = false;
    std::chrono::microseconds delay{0};
    std::thread t{[this] {
        std::unique_lock lk(mu);
        for (;;) {
            cv.wait(lk, [&] { return stop || !q.empty(); });
            if (q.empty()) return;
            auto [c, r] = std::move(q.front());
            q.pop_front();
            lk.unlock();
            if (delay.count() > 0) std::this_thread::sleep_for(delay);
            rpc::reply<Echo>(c, EchoResponse{r.text, r.seq, "replier"});
            lk.lock();
        }
    }};
    explicit ReplyingThread(transport::Worker& w) {
        rpc::serve<Echo>(w, [this](transport::ServerCall c, EchoRequest&& r) {
            std::lock_guard lk(mu);
            q.emplace_back(std::move(c), std::move(r));
            cv.notify_one();
        });
    }
    ~ReplyingThread() {
        {
            std::lock_guard lk(mu);
            stop = true;
        }
        cv.notify_one();
        t.join();
    }
};

// A reply sent from another thread that UCX completed at once leaves the server's progress
// thread asleep: one wake-up per request (its arrival), not two (fails with a nudge per reply).
TEST(TransportWakeups, AReplyFromAnotherThreadDoesNotWakeTheProgressThread) {
    auto server = make_worker("server");
    auto client = make_worker("client");
    ASSERT_TRUE(server && client);
    ReplyingThread replier(*server);
    auto ep = listen_and_connect(*server, *client);
    ASSERT_TRUE(ep.ok()) << ep.status().to_string();
    ASSERT_TRUE(rpc::call<Echo>(*ep, EchoRequest{"warm", 0}).ok());
    constexpr int kCalls = 400;
    const uint64_t wake0 = server->stats().wakeups;
    for (int i = 1; i <= kCalls; ++i) {
        auto r = rpc::call<Echo>(*ep, EchoRequest{"x", static_cast<uint64_t>(i)});
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        ASSERT_EQ(r->seq, static_cast<uint64_t>(i));
    }
    const uint64_t wakeups = server->stats().wakeups - wake0;
    EXPECT_LT(wakeups, kCalls * 3 / 2) << "server progress-thread wake-ups for " << kCalls << " calls";
}

// Threads waiting for their calls at the same time share one poller of UCX's event fd; the
// others sleep until their own call is done. Each event used to wake every waiting thread
// (fails without the single poller: about as many wake-ups as threads per call), and the
// progress thread ticked every millisecond meanwhile.
TEST(TransportWakeups, ConcurrentCallersShareOnePoller) {
    auto server = make_worker("server");
    auto client = make_worker("client");
    ASSERT_TRUE(server && client);
    ReplyingThread replier(*server);
    replier.delay = 200us; // calls overlap: their callers sleep
    auto ep = listen_and_connect(*server, *client);
    ASSERT_TRUE(ep.ok()) << ep.status().to_string();
    ASSERT_TRUE(rpc::call<Echo>(*ep, EchoRequest{"warm", 0}).ok());
    constexpr int kThreads = 8, kCallsEach = 100;
    const auto before = client->stats();
    std::atomic<int> failed{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
        ts.emplace_back([&, t] {
            for (int i = 0; i < kCallsEach; ++i) {
                const uint64_t seq = uint64_t(t) << 32 | uint64_t(i);
                auto r = rpc::call<Echo>(*ep, EchoRequest{"c", seq});
                if (!r.ok() || r->seq != seq) ++failed;
            }
        });
    for (auto& t : ts) t.join();
    EXPECT_EQ(failed.load(), 0);
    const auto after = client->stats();
    const uint64_t calls = kThreads * kCallsEach;
    EXPECT_LT(after.caller_wakeups - before.caller_wakeups, calls * 3) << "callers' wake-ups for " << calls << " calls";
    EXPECT_LT(after.wakeups - before.wakeups, calls / 4) << "client progress-thread wake-ups";
}

// A server that holds Echo calls until the test answers them, in the order it chooses.
struct HeldCalls {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::pair<transport::ServerCall, EchoRequest>> held;
    explicit HeldCalls(transport::Worker& w) {
        rpc::serve<Echo>(w, [this](transport::ServerCall c, EchoRequest&& r) {
            std::lock_guard lk(mu);
            held.emplace_back(std::move(c), std::move(r));
            cv.notify_all();
        });
    }
    void wait_for(size_t n) {
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return held.size() >= n; });
    }
    void answer(size_t i) {
        std::lock_guard lk(mu);
        rpc::reply<Echo>(held[i].first, EchoResponse{held[i].second.text, held[i].second.seq, "held"});
    }
};

// A thread woken to take the poller role over may find its own call done and leave: it must
// hand the role on, or a thread still waiting sleeps out its tick (100 ms) with nobody
// polling, its reply unread (seen: a client's delegation request waited 100 ms for its answer
// to a lease recall the daemon had sent at once). Here A polls, B and C sleep; the replies of
// A and B come together, so A's last round finishes B's call too and A hands the role to B,
// which leaves; C's reply comes later. Fails without the hand-over on leaving (C sleeps out
// its tick in most rounds).
TEST(TransportWakeups, ACallerLeavingWithoutPollingHandsTheRoleOn) {
    auto server = make_worker("server");
    auto client = make_worker("client");
    ASSERT_TRUE(server && client);
    HeldCalls calls(*server);
    auto ep = listen_and_connect(*server, *client);
    ASSERT_TRUE(ep.ok()) << ep.status().to_string();
    const auto before = client->stats();
    constexpr int kRounds = 10;
    std::atomic<int> failed{0};
    for (int round = 0; round < kRounds; ++round) {
        {
            std::lock_guard lk(calls.mu);
            calls.held.clear();
        }
        std::vector<std::thread> ts;
        for (uint64_t k = 0; k < 3; ++k) { // A, B, C start their calls one after the other
            ts.emplace_back([&, k] {
                auto r = rpc::call<Echo>(*ep, EchoRequest{"c", k});
                if (!r.ok() || r->seq != k) ++failed;
            });
            calls.wait_for(k + 1);
            std::this_thread::sleep_for(2ms); // …and are asleep in their wait
        }
        calls.answer(0);
        calls.answer(1);
        std::this_thread::sleep_for(5ms);
        calls.answer(2);
        for (auto& t : ts) t.join();
    }
    EXPECT_EQ(failed.load(), 0);
    EXPECT_EQ(client->stats().unpolled_sleeps - before.unpolled_sleeps, 0u)
        << "callers slept out their tick while nobody polled";
}

TEST(TransportConnect, RefusedWhenNobodyListens) {
    auto client = make_worker("client");
    // Find a port nobody listens on: bind a listener, note its port, stop it.
    uint16_t port;
    {
        auto tmp = make_worker("tmp");
        auto p = tmp->listen("127.0.0.1", 0);
        ASSERT_TRUE(p.ok());
        port = *p;
    }
    auto t0 = Clock::now();
    auto ep = client->connect("127.0.0.1", port);
    ASSERT_FALSE(ep.ok());
    EXPECT_EQ(ep.status().code(), Code::refused) << ep.status().to_string();
    EXPECT_LT(Clock::now() - t0, 5s);
}

TEST(TransportConnect, BadHostIsInvalid) {
    auto client = make_worker("client");
    auto ep = client->connect("no-such-host.invalid", 1234);
    ASSERT_FALSE(ep.ok());
    EXPECT_EQ(ep.status().code(), Code::invalid) << ep.status().to_string();
}

TEST(TransportConnect, ListenerRestartedOnSamePortInProcess) {
    uint16_t port;
    {
        auto server = make_worker("first");
        serve_test_protocol(*server, std::make_shared<TestServer>());
        auto p = server->listen("127.0.0.1", 0);
        ASSERT_TRUE(p.ok());
        port = *p;
        auto client = make_worker("client");
        auto ep = client->connect("127.0.0.1", port);
        ASSERT_TRUE(ep.ok());
        ASSERT_TRUE(rpc::call<Echo>(*ep, EchoRequest{"one", 1}).ok());
    }
    auto server = make_worker("second");
    serve_test_protocol(*server, std::make_shared<TestServer>());
    auto p = server->listen("127.0.0.1", port);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    auto client = make_worker("client");
    auto ep = client->connect("127.0.0.1", port);
    ASSERT_TRUE(ep.ok()) << ep.status().to_string();
    auto r = rpc::call<Echo>(*ep, EchoRequest{"two", 2});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->server, "second");
}

TEST(TransportPeerProcess, PeerKilledMidRequestFailsWithinTimeout) {
    PeerProcess peer(0);
    ASSERT_TRUE(peer.running());
    auto client = make_worker("client", "", 20s);
    auto ep = client->connect("127.0.0.1", peer.port());
    ASSERT_TRUE(ep.ok()) << ep.status().to_string();

    auto result = std::make_shared<std::promise<Result<transport::Reply>>>();
    auto t0 = Clock::now();
    ep->call_async(Hang::opcode, wire::encode(Empty{}), {}, [result](Result<transport::Reply> r) {
        result->set_value(std::move(r));
    });
    auto line = peer.read_line(10s); // the peer holds our request now
    ASSERT_TRUE(line.has_value());
    EXPECT_EQ(*line, "request " + std::to_string(Hang::opcode));
    peer.kill_hard();
    auto fut = result->get_future();
    ASSERT_EQ(fut.wait_for(15s), std::future_status::ready) << "call still pending 15 s after the peer died";
    auto r = fut.get();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::peer_gone) << r.status().to_string();
    EXPECT_LT(Clock::now() - t0, 20s); // before its own deadline: the death was noticed
    // Later calls on the dead endpoint fail at once.
    auto again = rpc::call<Echo>(*ep, EchoRequest{"x", 1});
    EXPECT_FALSE(again.ok());
}

TEST(TransportPeerProcess, PeerKilledDuringBulkTransferFails) {
    PeerProcess peer(0);
    ASSERT_TRUE(peer.running());
    auto client = make_worker("client", "", 20s);
    auto ep = client->connect("127.0.0.1", peer.port());
    ASSERT_TRUE(ep.ok());
    std::vector<uint8_t> buf(4 << 20, 7);
    std::atomic<int> ok{0}, failed{0};
    std::atomic<int> pending{0};
    for (int i = 0; i < 16; ++i) {
        CallOptions o;
        o.bulk_out = buf;
        ++pending;
        rpc::call_async<PutBlob>(*ep, PutRequest{buf.size()}, o, [&](Result<Checksum> r, size_t) {
            (r.ok() ? ok : failed)++;
            --pending;
        });
    }
    ASSERT_TRUE(peer.read_line(10s).has_value());
    peer.kill_hard();
    auto until = Clock::now() + 15s;
    while (pending > 0 && Clock::now() < until) std::this_thread::sleep_for(10ms);
    EXPECT_EQ(pending.load(), 0) << "calls still pending after the peer died";
    EXPECT_EQ(ok + failed, 16);
    EXPECT_GT(failed.load(), 0);
}

TEST(TransportPeerProcess, RestartedPeerOnSamePortAcceptsNewConnections) {
    uint16_t port;
    auto client = make_worker("client", "", 5s);
    {
        PeerProcess first(0);
        ASSERT_TRUE(first.running());
        port = first.port();
        auto ep = client->connect("127.0.0.1", port);
        ASSERT_TRUE(ep.ok());
        ASSERT_TRUE(rpc::call<Echo>(*ep, EchoRequest{"first", 1}).ok());
        first.kill_hard(); // leaves the port with a connection in TIME_WAIT / reset
    }
    PeerProcess second(port);
    ASSERT_TRUE(second.running()) << "could not listen again on port " << port;
    EXPECT_EQ(second.port(), port);
    auto ep = client->connect("127.0.0.1", port);
    ASSERT_TRUE(ep.ok()) << ep.status().to_string();
    auto r = rpc::call<Echo>(*ep, EchoRequest{"second", 2});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->text, "second");
}

TEST(TransportShutdown, DestroyingTheWorkerCancelsCallsInFlight) {
    auto server = make_worker("server");
    auto st = std::make_shared<TestServer>();
    serve_test_protocol(*server, st);
    auto p = server->listen("127.0.0.1", 0);
    ASSERT_TRUE(p.ok());
    auto client = make_worker("client", "", 60s);
    auto ep = client->connect("127.0.0.1", *p);
    ASSERT_TRUE(ep.ok());
    auto result = std::make_shared<std::promise<Status>>();
    ep->call_async(Hang::opcode, wire::encode(Empty{}), {},
                   [result](Result<transport::Reply> r) { result->set_value(r.status()); });
    auto until = Clock::now() + 5s;
    while (Clock::now() < until) {
        std::lock_guard lock(st->mu);
        if (!st->held.empty()) break;
    }
    auto t0 = Clock::now();
    client.reset();
    EXPECT_LT(Clock::now() - t0, 5s);
    auto fut = result->get_future();
    ASSERT_EQ(fut.wait_for(0s), std::future_status::ready);
    EXPECT_EQ(fut.get().code(), Code::cancelled);
    // The endpoint handle outlives its worker safely.
    EXPECT_FALSE(rpc::call<Echo>(*ep, EchoRequest{"late", 1}).ok());
}

} // namespace
} // namespace jobfs
