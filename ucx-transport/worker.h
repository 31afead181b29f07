// worker.h: the jobfs transport over UCP active messages.
//
// A Worker owns one UCP context and worker and one progress thread. It listens on host:port
// (UCX sockaddr listener), connects to peers by host:port or by worker-address blob, serves
// requests through handlers registered per opcode, and sends requests with per-call deadlines.
//
// Threads and lock rules (the whole concurrency story of this layer; docs/transport.md):
//   * One mutex per worker guards every UCX object (the UCP worker runs SERIALIZED) and all
//     bookkeeping (endpoints, calls in flight, deadlines, handlers). Whoever holds it may issue
//     operations and drive progress; nobody sleeps while holding it.
//   * The progress thread takes it when UCX events, a nudge (eventfd) or a deadline wake it.
//     A thread that makes a blocking call (Endpoint::call, get, put) takes it and drives
//     progress itself until its call completes, sleeping in poll() on the UCP event fd and its
//     own eventfd: no hand-off to the progress thread and back.
//   * Handlers and completion callbacks run under the lock, on whichever thread drove progress:
//     they must not block. A blocking call made from one fails at once with Code::internal
//     instead of deadlocking. ServerCall::reply / receive_bulk may be called from any thread.
//   * Idle, the progress thread sleeps in epoll on the armed UCP event fd, so an idle worker
//     uses no CPU. WorkerOptions::busy_poll trades CPU for latency if wanted.
//
// Errors: a call always completes, exactly once, within its deadline: with the reply, with the
// handler's error Status, or with timeout / peer_gone / refused / cancelled.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "result.h"
#include "wire.h"

namespace jobfs::transport {

using Bytes = wire::Bytes;

struct WorkerOptions {
    std::string name = "jobfs";                       // in logs and in the hello to peers
    std::string secret;                               // per-job secret: presented when connecting,
                                                      // demanded from every incoming connection
    std::chrono::milliseconds call_timeout{30000};    // default deadline of a call
    std::chrono::milliseconds connect_timeout{10000}; // deadline of connect (handshake included)
    std::chrono::microseconds busy_poll{0};           // keep polling this long after activity
    // For this long after a connection is made here, the progress thread looks every 100 ms
    // even when no event came (UCX 1.13 does not always signal connection set-up traffic);
    // after that every 2 s (worker.cc, next_timeout_ms).
    std::chrono::milliseconds set_up_ticks{10000};
    // UCX reports a dead peer on an endpoint (UCP_ERR_HANDLING_MODE_PEER), so calls fail with
    // peer_gone at once. UCX 1.13 then uses only transports that detect peer failure, which
    // excludes shared memory; without it, shared memory is used between processes on one host
    // and a dead peer shows as a timeout instead.
    bool detect_peer_failure = true;
    // Set up UCX's shared-memory transports (when UCX_TLS is not set). Connections made by
    // host:port never use them (docs/transport.md), so a worker that makes no other kind (a
    // client) leaves them out: their set-up was about 15 ms of the 21 ms a client's worker
    // took to start on this machine, paid by every process that opens jobfs.
    bool shared_memory = true;
};

// Outgoing bulk of a reply: memory the transport reads until the send completes. `keep` is
// held until then (a buffer's owner), so the handler may return before the transfer ends.
struct OutBulk {
    std::span<const uint8_t> data;
    std::shared_ptr<const void> keep;
};

struct CallOptions {
    std::chrono::milliseconds timeout{0};  // 0: WorkerOptions::call_timeout
    std::span<const uint8_t> bulk_out;     // sent with the request; valid until the call completes
    std::span<uint8_t> bulk_in;            // the reply's bulk is received here, without a copy
                                           // when it travels by rendezvous
    // The owner of bulk_out's and bulk_in's memory, if the transport may hold it. A call on a
    // connection without peer-failure detection (connect_address_watched) that fails then ends
    // at once, even while UCX still holds a request on its buffers (a stopped or dead peer may
    // never let go); the transport keeps this until UCX does. Without it such a call ends only
    // when UCX lets go.
    std::shared_ptr<const void> keep;
};

struct Reply {
    Bytes message;
    size_t bulk_length = 0; // bytes written to CallOptions::bulk_in
};

using CallCallback = std::function<void(Result<Reply>)>;

struct EndpointState;
class Worker;

// A connection to one peer. Cheap to copy (a shared handle); thread-safe.
class Endpoint {
public:
    Endpoint() = default;

    // Sends a request and waits for its reply. Not from the progress thread.
    Result<Reply> call(uint16_t opcode, Bytes message, const CallOptions& options = {}) const;
    // Sends a request; `done` runs on the progress thread exactly once.
    void call_async(uint16_t opcode, Bytes message, const CallOptions& options, CallCallback done) const;

    // One-sided RMA on memory the peer registered (Worker::map_memory) and described to us.
    Status get(std::span<uint8_t> local, uint64_t remote_address, std::span<const uint8_t> rkey,
               std::chrono::milliseconds timeout = std::chrono::milliseconds{0}) const;
    Status put(std::span<const uint8_t> local, uint64_t remote_address, std::span<const uint8_t> rkey,
               std::chrono::milliseconds timeout = std::chrono::milliseconds{0}) const;

    // Sends an arbitrary frame as a request, bypassing encoding: for protocol tests only.
    Status debug_send_raw(std::span<const uint8_t> header, std::span<const uint8_t> data) const;

    bool valid() const { return state_ != nullptr; }
    bool operator==(const Endpoint& o) const { return state_ == o.state_; } // the same connection
    Status health() const;             // ok, or why the connection is unusable
    const std::string& peer() const;   // "127.0.0.1:7000", or the name given to connect()
    const std::string& peer_name() const; // the name the peer announced in its hello
    void close();                      // flushes and disconnects; later calls fail
    // Gives up on the peer (it was taken out of service, e.g. cut off by a network partition,
    // which the connection itself may not notice for minutes): every call in flight on this
    // connection fails now with `why`, the connection is force-closed, later calls fail.
    // Any thread, transport callbacks included.
    void abort(const Status& why) const;

private:
    friend class Worker;
    friend class ServerCall;
    explicit Endpoint(std::shared_ptr<EndpointState> s) : state_(std::move(s)) {}
    std::shared_ptr<EndpointState> state_;
};

struct Incoming;

// One received request, handed to the handler of its opcode. Copies share the request.
// Exactly one reply is sent: the first reply() wins; if every copy is dropped without a reply,
// the caller gets Code::internal ("dropped by its handler"). Methods may be called from any
// thread.
class ServerCall {
public:
    uint16_t opcode() const;
    std::span<const uint8_t> message() const;
    uint64_t bulk_length() const;
    const std::string& peer() const;
    // The connection the request came on. The server may call the peer back through it (a
    // daemon recalling a client's lease): the peer serves requests that arrive on a connection
    // it made once the hello is answered (Worker::set_handler on its side).
    Endpoint connection() const;

    // Receives the request's bulk into dst (bulk_length() bytes) by rendezvous when the sender
    // used it, else by a copy of the small eager payload. `done` runs on the progress thread.
    void receive_bulk(std::span<uint8_t> dst, std::function<void(Status)> done) const;

    void reply(const Status& error) const;                 // error reply (ok: empty reply)
    void reply(Bytes message, OutBulk bulk = {}) const;    // success reply

private:
    friend class Worker;
    explicit ServerCall(std::shared_ptr<Incoming> in) : in_(std::move(in)) {}
    std::shared_ptr<Incoming> in_;
};

using Handler = std::function<void(ServerCall)>;

// Memory registered with UCX for RMA by peers. Unregistered when the last copy goes.
class MemoryRegion {
public:
    MemoryRegion() = default;
    uint64_t address() const;
    size_t length() const;
    const Bytes& rkey() const; // packed remote key to send to a peer

private:
    friend class Worker;
    struct State;
    explicit MemoryRegion(std::shared_ptr<State> s) : state_(std::move(s)) {}
    std::shared_ptr<State> state_;
};

struct WorkerStats {
    uint64_t calls_started = 0;
    uint64_t requests_served = 0;
    uint64_t wakeups = 0;          // times the progress thread returned from epoll_wait
    uint64_t caller_wakeups = 0;   // times a thread waiting for its own call returned from poll
    uint64_t unpolled_sleeps = 0;  // sleeps (of either) that ran out while callers held UCX's
                                   // event fd and none had polled it for 50 ms (a hand-over
                                   // from a leaving poller passes through "none" briefly)
    uint64_t malformed_frames = 0; // frames dropped because they failed validation
    uint64_t connections_accepted = 0;
};

class Worker {
public:
    static Result<std::unique_ptr<Worker>> create(const WorkerOptions& options);
    ~Worker(); // closes connections (bounded), fails what is still in flight with cancelled

    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;

    // Listens on host:port (port 0 picks a free one); returns the bound port.
    Result<uint16_t> listen(const std::string& host, uint16_t port);
    void stop_listening();
    // True on a thread that runs this worker's handler or completion callback (it holds the
    // worker's lock): such code must not wait for anything.
    bool in_callback() const;

    // Connects and completes the jobfs hello (version and secret check) before returning.
    // `timeout` (0: WorkerOptions::connect_timeout) bounds the whole connect, handshake included.
    Result<Endpoint> connect(const std::string& host, uint16_t port,
                             std::chrono::milliseconds timeout = std::chrono::milliseconds{0});
    Result<Endpoint> connect_address(std::span<const uint8_t> worker_address, const std::string& peer);
    // Connects by worker address without UCX peer-failure detection, whatever the worker's
    // options say, so that UCX 1.13 may use shared memory to a peer on this host (see
    // WorkerOptions::detect_peer_failure). `watched`, a connection of this worker to the same
    // peer that has it, stands in: when it fails (the peer died, or it was aborted), the new
    // connection fails with the same status, and so do its calls in flight.
    Result<Endpoint> connect_address_watched(std::span<const uint8_t> worker_address, const std::string& peer,
                                             const Endpoint& watched);

    // This worker's UCP address, for peers that connect by address (bootstrap over PMIx).
    const Bytes& address() const;

    // Registers the handler of an opcode (opcodes below kFirstUserOpcode are the transport's).
    void set_handler(uint16_t opcode, Handler handler);

    Result<MemoryRegion> map_memory(void* address, size_t length);

    const WorkerOptions& options() const;
    WorkerStats stats() const;

    // Largest message that travels inside the AM header next to a bulk payload.
    size_t max_inline_message() const;

    struct Impl;

private:
    explicit Worker(std::shared_ptr<Impl> impl);
    std::shared_ptr<Impl> impl_;
};

inline constexpr uint16_t kFirstUserOpcode = 16;

} // namespace jobfs::transport
