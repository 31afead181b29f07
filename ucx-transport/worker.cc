// worker.cc: the progress thread, connections, calls and replies of the jobfs transport.
// Lock rules and threading: see worker.h. Everything below marked "under mu" runs with
// Worker::Impl::mu held (the Locked guard); the public methods take it or read only
// immutable/atomic state.
#include "worker.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/epoll.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <ucp/api/ucp.h>

#include "frame.h"
#include "log.h"
#include "transport_protocol.h"

namespace jobfs::transport {

using Clock = std::chrono::steady_clock;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

namespace {

// Payloads from this size on are forced onto the rendezvous protocol: the receiver pulls them
// straight into the destination buffer instead of UCX copying them through bounce buffers.
constexpr size_t kRndvThreshold = 64 * 1024;
// Longest sleep of a worker that has connections, while one was set up lately (within
// WorkerOptions::set_up_ticks), and after that (see next_timeout_ms).
constexpr int kIdleTickMs = 100;
constexpr int kRestTickMs = 2000;
// Callers waiting this long with nobody polling UCX's event fd count as the poller role lost,
// not a hand-over in progress (WorkerStats::unpolled_sleeps).
constexpr milliseconds kUnpolledGap{kIdleTickMs / 2};
// A call or an answer that takes longer than this is logged (once, where it ends), with how
// far it got: the first thing to look at when a job stalls.
constexpr milliseconds kSlowCall{5000};
// How long shutdown waits for connections to flush before destroying the UCP worker.
constexpr milliseconds kCloseGrace{1000};

Status ucs_to_status(ucs_status_t s, const std::string& what) {
    Code code = Code::io;
    switch (s) {
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED: code = Code::refused; break;
    // An endpoint that is no longer connected lost its peer; before the hello completed the
    // callers turn this into refused (see connection_error).
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT: code = Code::peer_gone; break;
    case UCS_ERR_TIMED_OUT: code = Code::timeout; break;
    case UCS_ERR_CANCELED: code = Code::cancelled; break;
    case UCS_ERR_NO_MEMORY: code = Code::no_memory; break;
    case UCS_ERR_MESSAGE_TRUNCATED:
    case UCS_ERR_EXCEEDS_LIMIT: code = Code::too_large; break;
    case UCS_ERR_INVALID_PARAM: code = Code::invalid; break;
    case UCS_ERR_UNSUPPORTED: code = Code::unsupported; break;
    default: break;
    }
    return Status(code, what + ": " + ucs_status_string(s));
}

bool secrets_equal(const std::string& a, const std::string& b) {
    if (a.size() != b.size()) return false;
    // Constant time in the content, so the comparison does not leak the secret byte by byte.
    unsigned diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
    return diff == 0;
}

Result<sockaddr_storage> resolve(const std::string& host, uint16_t port, bool passive, socklen_t& len) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    addrinfo* res = nullptr;
    std::string service = std::to_string(port);
    int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
    if (rc != 0 || res == nullptr)
        return Status(Code::invalid, "cannot resolve '" + host + "': " + gai_strerror(rc));
    sockaddr_storage ss{};
    std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
    len = res->ai_addrlen;
    freeaddrinfo(res);
    return ss;
}

std::string sockaddr_to_string(const sockaddr_storage& ss) {
    char host[INET6_ADDRSTRLEN] = "?";
    uint16_t port = 0;
    if (ss.ss_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        port = ntohs(in->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        port = ntohs(in6->sin6_port);
    }
    return std::string(host) + ":" + std::to_string(port);
}

Bytes string_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

// Each thread that waits for its own calls sleeps on its own eventfd (besides the UCX event
// fd), so a completion made by another thread wakes exactly the waiter.
int thread_wake_fd() {
    struct WakeFd {
        int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        ~WakeFd() {
            if (fd >= 0) ::close(fd);
        }
    };
    static thread_local WakeFd w;
    return w.fd;
}

} // namespace

// ---- shared state of one connection ---------------------------------------------------------

struct EndpointState {
    std::weak_ptr<Worker::Impl> impl;
    std::string peer;       // address or given name; immutable after creation
    std::string peer_name;  // from the hello; written before connect() returns
    bool outgoing = false;

    // Guarded by Worker::Impl::mu.
    ucp_ep_h ep = nullptr;
    bool owned = true;      // created by us (connect/accept), so ours to close
    bool closing = false;
    bool established = false;   // outgoing: hello answered
    bool authenticated = false; // incoming: peer's hello accepted
    // Made by us by worker address. UCX pairs such an endpoint with one the peer makes to us
    // by address, so the peer's requests may arrive on it: they come from the worker we chose
    // to connect to, and are served without a hello of their own.
    bool by_address = false;
    bool detects_peer_failure = true; // UCP_ERR_HANDLING_MODE_PEER
    bool close_after_reply = false;
    unsigned malformed = 0;
    std::unordered_set<uint64_t> calls;
    // Connections that fail with this one (Worker::connect_address_watched): they have no
    // peer-failure detection of their own.
    std::vector<std::weak_ptr<EndpointState>> companions;

    Status health() const {
        std::lock_guard lock(mu);
        return broken;
    }
    void set_broken(const Status& s) {
        std::lock_guard lock(mu);
        if (broken.ok()) broken = s;
    }

private:
    mutable std::mutex mu;
    Status broken;
};

// A broken connection that never completed its hello was refused rather than lost.
Status connection_error(const EndpointState& ep, Status why) {
    if (why.code() == Code::peer_gone && ep.outgoing && !ep.established) return Status(Code::refused, why.message());
    return why;
}

// A call (or RMA operation) in flight. It completes when it has an outcome and UCX holds no
// more requests that reference its buffers, so the caller may free them after `done`.
struct PendingCall {
    uint64_t id = 0;
    uint16_t opcode = 0;
    std::shared_ptr<EndpointState> ep;
    Clock::time_point deadline;
    milliseconds timeout{0};
    Bytes header;       // frame header + inline message, alive until the send completes
    Bytes message;      // the encoded request
    std::span<const uint8_t> bulk_out;
    std::span<uint8_t> bulk_in;
    Reply reply;
    CallCallback done;
    std::shared_ptr<const void> keep; // owns bulk_out / bulk_in (CallOptions::keep)
    bool delivered = false;           // `done` ran before UCX let go (kept for `keep`)
    int ucx_ops = 0;                 // UCX requests still referencing our buffers
    bool complete_when_ops_done = false; // RMA: success is the end of its UCX operations
    std::optional<Status> outcome;   // first outcome wins
    ucp_rkey_h rkey = nullptr;
    std::thread::id waiter;          // thread driving progress for this call (sync calls)
    int waiter_fd = -1;              // that thread's wake-up eventfd
    // How far the call got, for the message of a call that times out: a stall is diagnosed
    // by where it stopped (request still in UCX's send queue, sent but never answered, reply
    // arriving but its rendezvous data not).
    bool request_sent = false;
    bool reply_started = false;
};

struct Incoming {
    std::weak_ptr<Worker::Impl> impl;
    std::shared_ptr<EndpointState> conn;
    uint16_t opcode = 0;
    uint64_t id = 0;
    Bytes message;
    uint64_t bulk_length = 0;
    void* bulk_desc = nullptr; // rendezvous descriptor of the bulk, not yet received (under mu)
    void* msg_desc = nullptr;  // rendezvous descriptor of an out-of-line message
    Bytes eager_bulk;          // small bulk that arrived with the message
    std::atomic<bool> replied{false};
    Clock::time_point received = Clock::now(); // for the warning about slow answers
    ~Incoming();
};

struct MemoryRegion::State {
    std::weak_ptr<Worker::Impl> impl;
    ucp_mem_h memh = nullptr;
    uint64_t address = 0;
    size_t length = 0;
    Bytes rkey;
    ~State();
};

// ---- the worker ----------------------------------------------------------------------------

struct Worker::Impl : std::enable_shared_from_this<Worker::Impl> {
    explicit Impl(WorkerOptions o) : opts(std::move(o)) {}

    WorkerOptions opts;
    ucp_context_h ctx = nullptr;
    ucp_worker_h worker = nullptr;
    ucp_listener_h listener = nullptr;
    int epfd = -1, wakefd = -1;
    Bytes address;
    size_t max_am_header = 0;
    std::thread thread;
    int ucp_efd = -1;

    // The one lock of this worker: it guards every UCX object and all bookkeeping below.
    // Whoever holds it may issue operations and drive progress: the progress thread when
    // events wake it, or a thread waiting for its own call (caller-driven progress, which
    // saves the two thread hand-offs per round trip). Nobody sleeps while holding it.
    std::mutex mu;
    std::atomic<std::thread::id> owner{}; // thread holding `mu` (re-entrancy and misuse checks)
    // True while the progress thread sleeps (or is about to) in epoll_wait; a thread that
    // leaves work for it then writes the eventfd. seq_cst on both sides: either the progress
    // thread sees the work before it sleeps, or the other thread sees `sleeping` and wakes it.
    std::atomic<bool> sleeping{false};

    // Guarded by mu.
    bool stopping = false;  // the destructor runs: new operations are refused
    bool stopped = false;   // UCX objects are gone
    int callers_active = 0; // threads driving progress while they wait for their own call
    // The wake-up fds of those callers, and the one that sleeps on the UCX event fd for them
    // all (-1: none yet). The others sleep on their own fd only: finish() wakes a caller whose
    // call another thread completed, and a poller that leaves hands the role on. (When every
    // caller polled the event fd, each event woke all of them, to fight for the lock and find
    // their calls not done: stage-in's 8 writers made 19 thread switches per small object.)
    std::vector<int> caller_fds;
    int poller_fd = -1;
    // Since when callers have waited with nobody polling (unset while someone polls or nobody
    // waits). A hand-over from a leaving poller passes through this state for a moment (longer
    // when the next thread is slow to be scheduled): only a gap of kUnpolledGap counts as the
    // role lost (WorkerStats::unpolled_sleeps).
    std::optional<Clock::time_point> unpolled_since;
    bool efd_in_epoll = true;
    // With busy polling, the last caller keeps the UCX event fd away from the progress thread
    // until this time, so that back-to-back calls do not wake it (see drive_until).
    Clock::time_point efd_grace_until{};
    std::vector<std::function<void()>> deferred; // work that may not run inside a UCX callback
    std::unordered_map<ucp_ep_h, std::shared_ptr<EndpointState>> eps;
    Clock::time_point last_set_up{}; // when a connection was last made here (next_timeout_ms)
    std::unordered_map<uint64_t, std::unique_ptr<PendingCall>> calls;
    std::set<std::pair<Clock::time_point, uint64_t>> deadlines;
    std::unordered_map<uint16_t, Handler> handlers;
    std::unordered_set<ucp_mem_h> mapped; // registrations still alive, unmapped at teardown
    uint64_t next_id = 1;
    int replies_in_flight = 0; // reply sends UCX has not completed (teardown waits for them)
    int receives_in_flight = 0; // request bulk / message receives UCX has not completed

    std::atomic<uint64_t> st_calls{0}, st_served{0}, st_wakeups{0}, st_caller_wakeups{0}, st_unpolled_sleeps{0}, st_malformed{0}, st_accepted{0};

    static thread_local Impl* current; // the Impl whose progress thread this is

    // -- taking the lock (any thread) --
    bool held_by_me() const { return owner.load() == std::this_thread::get_id(); }

    // Holds `mu` (unless this thread already does) and sets the callback context.
    class Locked {
    public:
        explicit Locked(Impl* im) : im_(im) {
            if (im->held_by_me()) return;
            lock_ = std::unique_lock(im->mu);
            im->owner = std::this_thread::get_id();
            saved_ = std::exchange(current, im);
        }
        ~Locked() {
            if (!lock_.owns_lock()) return;
            current = saved_;
            im_->owner = std::thread::id();
        }
        void unlock() { // only for a sleep; relock() follows
            current = saved_;
            im_->owner = std::thread::id();
            lock_.unlock();
        }
        void relock() {
            lock_.lock();
            im_->owner = std::this_thread::get_id();
            saved_ = std::exchange(current, im_);
        }

    private:
        Impl* im_;
        std::unique_lock<std::mutex> lock_;
        Impl* saved_ = nullptr;
    };

    // Runs fn under the lock; false (and fn not run) once the worker is shutting down.
    bool with_lock(const std::function<void()>& fn) {
        Locked l(this);
        if (stopping) return false;
        fn();
        run_deferred();
        return true;
    }

    // Wakes the progress thread if it sleeps, so it progresses work left behind by another
    // thread and recomputes its deadline.
    void nudge() {
        if (sleeping.load()) {
            uint64_t one = 1;
            ssize_t rc = ::write(wakefd, &one, sizeof one);
            (void)rc; // an eventfd counter does not overflow at this rate
        }
    }

    // Runs fn under the lock and returns its result; cancelled once the worker shuts down.
    template <class T>
    Result<T> run_sync(const std::function<Result<T>()>& fn) {
        Locked l(this);
        if (stopping) return Status(Code::cancelled, "transport worker is shut down");
        Result<T> r = fn();
        run_deferred();
        return r;
    }

    // After a reply sent from another thread (under the lock): whether the progress thread
    // must wake for it. A send UCX completed at once leaves nothing to progress; if more
    // traffic comes, the UCX event fd the progress thread sleeps on (armed) wakes it. Waking
    // it anyway cost a thread switch per request (about one in four of a daemon's switches
    // while staging in small objects). A send still in flight needs progress and a sleep of
    // at most a millisecond (next_timeout_ms); a connection closed after its reply needs the
    // progress thread too.
    bool reply_left_work(const EndpointState& conn) const {
        return replies_in_flight > 0 || conn.close_after_reply || conn.closing || !deferred.empty();
    }

    // Runs fn under the lock, then wakes the progress thread to carry on what fn started.
    bool run_and_nudge(const std::function<void()>& fn) {
        bool ran = with_lock(fn);
        nudge();
        return ran;
    }

    // Drives progress on the calling thread until `done` is set (lock held on entry and exit).
    void drive_until(const std::atomic<int>& done, Locked& l);
    // Gives the UCX event fd back to the progress thread, armed.
    void return_event_fd();
    // Callers have waited kUnpolledGap or longer with nobody polling for them.
    bool role_lost() const {
        return poller_fd < 0 && unpolled_since && Clock::now() - *unpolled_since >= kUnpolledGap;
    }

    // -- lifecycle (under mu) --
    Status init_ucx();
    void loop();
    void teardown();
    bool progress_once();
    bool run_deferred();
    int next_timeout_ms();
    void expire_deadlines();

    // -- connections (under mu) --
    Result<std::shared_ptr<EndpointState>> create_ep(ucp_ep_params_t& params, std::string peer, bool outgoing,
                                                     bool detect_peer_failure);
    std::shared_ptr<EndpointState> conn_for_reply_ep(ucp_ep_h ep);
    void close_ep(const std::shared_ptr<EndpointState>& st, bool force);
    void fail_endpoint(const std::shared_ptr<EndpointState>& st, const Status& why);
    Result<uint16_t> do_listen(const std::string& host, uint16_t port);

    // -- calls (under mu) --
    void start_call(std::unique_ptr<PendingCall> call);
    void start_rma(std::unique_ptr<PendingCall> call, bool is_put, const void* local, size_t length,
                   uint64_t remote, Bytes rkey);
    void finish(uint64_t id, Status outcome);
    void maybe_complete(uint64_t id);
    // Ends call `id` for its caller: off the deadlines and its connection, `done` run with its
    // outcome, its waiter woken.
    void deliver(uint64_t id, PendingCall& c);
    void receive_reply_part(uint64_t id, void* desc, void* dst, size_t length);

    // -- serving (under mu) --
    ucs_status_t on_request(const void* header, size_t hlen, void* data, size_t len, const ucp_am_recv_param_t* param);
    ucs_status_t on_reply(const void* header, size_t hlen, void* data, size_t len, const ucp_am_recv_param_t* param);
    void dispatch(const std::shared_ptr<Incoming>& in);
    void handle_hello(const std::shared_ptr<Incoming>& in);
    void send_reply(const std::shared_ptr<EndpointState>& conn, uint64_t id, uint16_t opcode, const Status& status,
                    Bytes message, OutBulk bulk);

    Result<Reply> call_sync(const std::shared_ptr<EndpointState>& ep, uint16_t opcode, Bytes message,
                            const CallOptions& options);
    void call_async(const std::shared_ptr<EndpointState>& ep, uint16_t opcode, Bytes message,
                    const CallOptions& options, CallCallback done);
    std::unique_ptr<PendingCall> make_call(const std::shared_ptr<EndpointState>& ep, uint16_t opcode, Bytes message,
                                           const CallOptions& options, CallCallback done);
    Result<Endpoint> handshake(std::shared_ptr<EndpointState> st, const std::string& what,
                               std::chrono::milliseconds timeout = std::chrono::milliseconds{0});
    Result<Endpoint> connect_by_address(std::span<const uint8_t> worker_address, const std::string& peer,
                                        std::shared_ptr<EndpointState> watched);
};

thread_local Worker::Impl* Worker::Impl::current = nullptr;

// ---- UCX callbacks (progress thread, inside ucp_worker_progress) ------------------------------

namespace {

void* id_to_ptr(uint64_t id) { return reinterpret_cast<void*>(static_cast<uintptr_t>(id)); }
uint64_t ptr_to_id(void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

void on_call_send_done(void* request, ucs_status_t status, void* user_data) {
    ucp_request_free(request);
    auto* impl = Worker::Impl::current;
    uint64_t id = ptr_to_id(user_data);
    auto it = impl->calls.find(id);
    if (it == impl->calls.end()) return;
    PendingCall& c = *it->second;
    --c.ucx_ops;
    c.request_sent = true;
    if (status != UCS_OK)
        impl->finish(id, connection_error(*c.ep, ucs_to_status(status, "send to " + c.ep->peer)));
    else if (c.complete_when_ops_done && c.ucx_ops == 0)
        impl->finish(id, Status::OK());
    impl->maybe_complete(id);
}

void on_reply_part_received(void* request, ucs_status_t status, size_t, void* user_data) {
    ucp_request_free(request);
    auto* impl = Worker::Impl::current;
    uint64_t id = ptr_to_id(user_data);
    auto it = impl->calls.find(id);
    if (it == impl->calls.end()) return;
    --it->second->ucx_ops;
    impl->finish(id, status == UCS_OK ? Status::OK()
                                      : ucs_to_status(status, "receive reply from " + it->second->ep->peer));
}

struct BulkReceive {
    std::function<void(Status)> done;
};

void on_bulk_received(void* request, ucs_status_t status, size_t, void* user_data) {
    ucp_request_free(request);
    Worker::Impl::current->receives_in_flight--;
    std::unique_ptr<BulkReceive> op(static_cast<BulkReceive*>(user_data));
    op->done(status == UCS_OK ? Status::OK() : ucs_to_status(status, "receive request bulk"));
}

struct ReplySend {
    std::shared_ptr<EndpointState> conn;
    Bytes header;
    Bytes message;
    std::shared_ptr<const void> keep;
};

void reply_sent(std::unique_ptr<ReplySend> op, ucs_status_t status) {
    auto* impl = Worker::Impl::current;
    impl->replies_in_flight--;
    if (status != UCS_OK && status != UCS_ERR_CANCELED)
        JOBFS_DEBUG("reply to %s not delivered: %s", op->conn->peer.c_str(), ucs_status_string(status));
    if (op->conn->close_after_reply) impl->close_ep(op->conn, false);
}

void on_reply_send_done(void* request, ucs_status_t status, void* user_data) {
    ucp_request_free(request);
    reply_sent(std::unique_ptr<ReplySend>(static_cast<ReplySend*>(user_data)), status);
}

struct RawSend {
    Bytes header, data;
};

void on_raw_sent(void* request, ucs_status_t, void* user_data) {
    ucp_request_free(request);
    delete static_cast<RawSend*>(user_data);
}

void on_ep_error(void*, ucp_ep_h ep, ucs_status_t status) {
    auto* impl = Worker::Impl::current;
    auto it = impl->eps.find(ep);
    if (it == impl->eps.end()) return;
    auto st = it->second;
    Status why = connection_error(*st, ucs_to_status(status, "connection to " + st->peer));
    JOBFS_DEBUG("%s", why.to_string().c_str());
    // Closing from inside the error callback is not allowed; do it right after progress returns.
    impl->deferred.push_back([impl, st, why] { impl->fail_endpoint(st, why); });
}

void on_ep_closed(void* request, ucs_status_t, void* user_data) {
    ucp_request_free(request);
    auto* impl = Worker::Impl::current;
    impl->eps.erase(static_cast<ucp_ep_h>(user_data));
}

ucs_status_t on_am_request(void* arg, const void* header, size_t hlen, void* data, size_t len,
                           const ucp_am_recv_param_t* param) {
    return static_cast<Worker::Impl*>(arg)->on_request(header, hlen, data, len, param);
}

ucs_status_t on_am_reply(void* arg, const void* header, size_t hlen, void* data, size_t len,
                         const ucp_am_recv_param_t* param) {
    return static_cast<Worker::Impl*>(arg)->on_reply(header, hlen, data, len, param);
}

void on_conn_request(ucp_conn_request_h request, void* arg) {
    auto* impl = static_cast<Worker::Impl*>(arg);
    std::string peer = "?";
    ucp_conn_request_attr_t attr{};
    attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
    if (ucp_conn_request_query(request, &attr) == UCS_OK) peer = sockaddr_to_string(attr.client_address);
    if (impl->stopping) {
        ucp_listener_reject(impl->listener, request);
        return;
    }
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
    params.conn_request = request;
    auto st = impl->create_ep(params, peer, false, impl->opts.detect_peer_failure);
    if (!st.ok()) {
        JOBFS_WARN("accepting a connection from %s failed: %s", peer.c_str(), st.status().to_string().c_str());
        return;
    }
    impl->st_accepted++;
    JOBFS_DEBUG("accepted a connection from %s", peer.c_str());
}

} // namespace

Incoming::~Incoming() {
    if (replied.load() && bulk_desc == nullptr && msg_desc == nullptr) return;
    auto im = impl.lock();
    if (!im) return;
    // The last copy of a ServerCall went away: free what UCX still holds and answer the caller.
    im->with_lock([&] {
        if (bulk_desc) ucp_am_data_release(im->worker, bulk_desc);
        if (msg_desc) ucp_am_data_release(im->worker, msg_desc);
        if (!replied.load())
            im->send_reply(conn, id, opcode,
                           Status(Code::internal, "request " + std::to_string(opcode) + " dropped by its handler"), {}, {});
    });
    im->nudge();
}

MemoryRegion::State::~State() {
    auto im = impl.lock();
    if (!im || !memh) return;
    im->with_lock([&] {
        if (im->mapped.erase(memh)) ucp_mem_unmap(im->ctx, memh);
    });
}

// ---- lifecycle ------------------------------------------------------------------------------

Status Worker::Impl::init_ucx() {
    ucp_config_t* config = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
    if (s != UCS_OK) return ucs_to_status(s, "read UCX configuration");
    // UCX 1.13 breaks client/server (sockaddr) connections that spread over several tcp lanes
    // when a host has more than one interface; one lane per protocol avoids it. The user's own
    // UCX_* settings win.
    if (!getenv("UCX_MAX_EAGER_LANES")) ucp_config_modify(config, "MAX_EAGER_LANES", "1");
    if (!getenv("UCX_MAX_RNDV_LANES")) ucp_config_modify(config, "MAX_RNDV_LANES", "1");
    // A peer killed with SIGKILL is not always noticed from its socket by UCX 1.13 (seen under
    // load: calls to a dead daemon waited for their whole deadline, and UCX's own keepalive,
    // every 20 s, declared the endpoint dead after two minutes). Keepalive every second bounds
    // that to a few seconds; an idle connection costs one small message a second.
    if (!getenv("UCX_KEEPALIVE_INTERVAL")) ucp_config_modify(config, "KEEPALIVE_INTERVAL", "1s");
    if (!opts.shared_memory && !getenv("UCX_TLS")) {
        s = ucp_config_modify(config, "TLS", "^sm");
        if (s != UCS_OK) JOBFS_WARN("cannot leave out UCX's shared-memory transports: %s", ucs_status_string(s));
    }
    // A daemon restarted on its port must be able to listen again while connections of its
    // previous life linger in the kernel (TIME_WAIT, FIN_WAIT2).
    if (!getenv("UCX_CM_REUSEADDR") && !getenv("UCX_TCP_CM_REUSEADDR")) {
        s = ucp_config_modify(config, "CM_REUSEADDR", "y");
        if (s != UCS_OK) JOBFS_WARN("cannot set UCX CM_REUSEADDR: %s", ucs_status_string(s));
    }

    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    params.name = opts.name.c_str();
    s = ucp_init(&params, config, &ctx);
    ucp_config_release(config);
    if (s != UCS_OK) return ucs_to_status(s, "initialise UCX");

    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED; // every use is under Impl::mu
    s = ucp_worker_create(ctx, &wp, &worker);
    if (s != UCS_OK) return ucs_to_status(s, "create UCX worker");

    ucp_worker_attr_t attr{};
    attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
    if (ucp_worker_query(worker, &attr) != UCS_OK || attr.max_am_header < kFrameHeaderSize + 64)
        return Status(Code::internal, "UCX worker allows too small active-message headers");
    max_am_header = attr.max_am_header;

    ucp_address_t* addr = nullptr;
    size_t addr_len = 0;
    s = ucp_worker_get_address(worker, &addr, &addr_len);
    if (s != UCS_OK) return ucs_to_status(s, "get UCX worker address");
    address.assign(reinterpret_cast<uint8_t*>(addr), reinterpret_cast<uint8_t*>(addr) + addr_len);
    ucp_worker_release_address(worker, addr);

    for (unsigned id : {kAmRequest, kAmReply}) {
        ucp_am_handler_param_t hp{};
        hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                        UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
        hp.id = id;
        hp.cb = id == kAmRequest ? on_am_request : on_am_reply;
        hp.arg = this;
        hp.flags = UCP_AM_FLAG_WHOLE_MSG;
        s = ucp_worker_set_am_recv_handler(worker, &hp);
        if (s != UCS_OK) return ucs_to_status(s, "register active-message handler");
    }

    int& efd = ucp_efd;
    s = ucp_worker_get_efd(worker, &efd);
    if (s != UCS_OK) return ucs_to_status(s, "get UCX event fd");
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) return Status::from_errno(errno, "epoll_create1");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = efd;
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, efd, &ev) != 0) return Status::from_errno(errno, "epoll_ctl(ucx)");
    ev.data.fd = wakefd;
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, wakefd, &ev) != 0) return Status::from_errno(errno, "epoll_ctl(eventfd)");
    return Status::OK();
}

// One round of work: UCX progress, the work callbacks deferred, and deadlines. True if
// anything happened.
bool Worker::Impl::progress_once() {
    bool busy = false;
    for (int i = 0; i < 64 && ucp_worker_progress(worker) != 0; ++i) busy = true;
    busy |= run_deferred();
    expire_deadlines();
    return busy;
}

bool Worker::Impl::run_deferred() {
    bool any = false;
    while (!deferred.empty()) {
        std::vector<std::function<void()>> batch;
        batch.swap(deferred);
        for (auto& fn : batch) fn();
        any = true;
    }
    return any;
}

int Worker::Impl::next_timeout_ms() {
    // While UCX holds operations of ours, sleep at most a millisecond: UCX 1.13 does not
    // always signal its event fd when a send it had to queue (socket full) can go out, and
    // such a transfer then waited for an unrelated event or a deadline (seen: 8 processes
    // reading one checkpoint at 100 MB/s instead of 1 GB/s). Idle workers still sleep.
    if (!calls.empty() || replies_in_flight > 0 || receives_in_flight > 0) {
        if (deadlines.empty()) return 1;
        auto wait = duration_cast<milliseconds>(deadlines.begin()->first - Clock::now()).count() + 1;
        return wait < 0 ? 0 : static_cast<int>(std::min<long long>(wait, 1));
    }
    // With connections open, look again every kIdleTickMs even when no event came: UCX 1.13
    // does not always signal its event fd for connection set-up (wire-up) traffic either. A
    // daemon that slept through it left a client's first request unsent until its deadline
    // ("no reply within 10000 ms (request not sent yet)", MPI ranks connecting under load).
    // That traffic follows the set-up of a connection here, so the ticks are that fast only
    // for opts.set_up_ticks after one; then every kRestTickMs, as a net under what the set-up
    // window missed (a peer that connects by worker address makes no connection here until
    // its first request). Ten wake-ups a second were most of an idle daemon's CPU time
    // (0.3 % of a core, with heartbeats; 0.08 % without the ticks). A worker without
    // connections sleeps.
    if (!eps.empty()) return Clock::now() - last_set_up < opts.set_up_ticks ? kIdleTickMs : kRestTickMs;
    return -1;
}

void Worker::Impl::loop() {
    Locked l(this);
    auto last_activity = Clock::now();
    epoll_event evs[4];
    for (;;) {
        if (stopping) return;
        bool busy = progress_once();
        auto now = Clock::now();
        if (busy) {
            last_activity = now;
            continue;
        }
        if (opts.busy_poll.count() > 0 && now - last_activity < opts.busy_poll) {
            // Let a caller that waits for the lock in, then poll again.
            l.unlock();
            __builtin_ia32_pause();
            l.relock();
            continue;
        }
        // While callers drive progress, the UCX event fd is theirs (see drive_until); the
        // progress thread then only wakes for nudges, deadlines, and to take it back.
        if (!efd_in_epoll && callers_active == 0 && now >= efd_grace_until) return_event_fd();
        if (efd_in_epoll) {
            ucs_status_t s = ucp_worker_arm(worker);
            if (s == UCS_ERR_BUSY) continue;
            if (s != UCS_OK) JOBFS_ERROR("ucp_worker_arm: %s", ucs_status_string(s));
        }
        int timeout = next_timeout_ms();
        // Without the event fd: while callers drive progress, their poller ticks (see
        // drive_until), and the last one hands the fd back (epoll then reports it if ready);
        // in a busy-poll grace, check back soon to take it back.
        if (!efd_in_epoll)
            timeout = callers_active > 0 ? kIdleTickMs : (timeout < 0 || timeout > 1) ? 1 : timeout;
        sleeping.store(true);
        l.unlock();
        int n = epoll_wait(epfd, evs, 4, timeout);
        sleeping.store(false);
        for (int i = 0; i < n; ++i) {
            if (evs[i].data.fd == wakefd) {
                uint64_t v;
                ssize_t rc = ::read(wakefd, &v, sizeof v);
                (void)rc;
            }
        }
        l.relock();
        st_wakeups++;
        if (n == 0 && role_lost()) st_unpolled_sleeps++; // (callers wait: the event fd is theirs)
    }
}

void Worker::Impl::drive_until(const std::atomic<int>& done, Locked& l) {
    // The first caller takes the UCX event fd away from the progress thread, so that the
    // events of this call wake only this thread; the last one gives it back, armed.
    if (callers_active++ == 0 && efd_in_epoll) {
        epoll_ctl(epfd, EPOLL_CTL_DEL, ucp_efd, nullptr);
        efd_in_epoll = false;
    }
    const int my_fd = thread_wake_fd();
    caller_fds.push_back(my_fd);
    auto spin_until = Clock::now() + opts.busy_poll;
    while (!done.load(std::memory_order_acquire)) {
        if (progress_once()) continue;
        if (done.load(std::memory_order_acquire) || stopped) break;
        if (Clock::now() < spin_until) continue;
        if (poller_fd < 0) {
            poller_fd = my_fd;
            unpolled_since.reset();
        }
        const bool polls = poller_fd == my_fd;
        if (polls) {
            ucs_status_t s = ucp_worker_arm(worker);
            if (s == UCS_ERR_BUSY) continue;
        }
        // The poller ticks for everyone (next_timeout_ms: deadlines, and UCX's unsignalled
        // sends); a caller that does not poll is woken for its call, or to take the role on.
        int timeout = polls ? next_timeout_ms() : kIdleTickMs;
        pollfd fds[2] = {{my_fd, POLLIN, 0}, {ucp_efd, POLLIN, 0}};
        l.unlock();
        const int ready = ::poll(fds, polls ? 2 : 1, timeout);
        if (ready > 0 && (fds[0].revents & POLLIN)) {
            uint64_t v;
            ssize_t rc = ::read(my_fd, &v, sizeof v);
            (void)rc;
        }
        l.relock();
        st_caller_wakeups++;
        if (ready == 0 && !polls && role_lost()) st_unpolled_sleeps++;
    }
    caller_fds.erase(std::find(caller_fds.begin(), caller_fds.end(), my_fd));
    if (poller_fd == my_fd) poller_fd = -1;
    // Nobody polls, yet threads wait: the next one polls (it wakes, finds no poller, takes the
    // role). Also when this thread did not poll: it may be the one a leaving poller woke to
    // take the role over, its own call done meanwhile (a reply that came with the poller's).
    if (caller_fds.empty()) unpolled_since.reset();
    if (poller_fd < 0 && !caller_fds.empty()) {
        if (!unpolled_since) unpolled_since = Clock::now();
        uint64_t one = 1;
        ssize_t rc = ::write(caller_fds.front(), &one, sizeof one);
        (void)rc;
    }
    if (--callers_active == 0 && !stopped) {
        if (opts.busy_poll.count() > 0) {
            // Another call is likely to follow at once: keep the event fd a little longer, so
            // that the progress thread is not woken between calls. It takes the fd back when
            // this grace ends (it checks every millisecond meanwhile).
            efd_grace_until = Clock::now() + opts.busy_poll;
            if (!calls.empty()) nudge();
        } else {
            return_event_fd();
        }
    }
}

void Worker::Impl::return_event_fd() {
    // Hand the event fd back armed: the progress thread must wake for what comes next.
    while (progress_once() || ucp_worker_arm(worker) == UCS_ERR_BUSY) {
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = ucp_efd;
    epoll_ctl(epfd, EPOLL_CTL_ADD, ucp_efd, &ev);
    efd_in_epoll = true;
    if (!calls.empty()) nudge(); // its sleep may have to end at a new deadline
}

void Worker::Impl::teardown() {
    Locked l(this);
    if (listener) {
        ucp_listener_destroy(listener);
        listener = nullptr;
    }
    std::vector<uint64_t> ids;
    for (auto& [id, c] : calls) ids.push_back(id);
    for (uint64_t id : ids) finish(id, Status(Code::cancelled, "transport worker shut down"));

    // Replies already handed to UCX go out first (a daemon's last answers), within a bound.
    auto flush_until = Clock::now() + kCloseGrace / 2;
    while (replies_in_flight > 0 && Clock::now() < flush_until) {
        ucp_worker_progress(worker);
        run_deferred();
    }
    // Then every connection is force-closed: UCX cancels what is still in flight on it
    // (a flush close that meets a rendezvous receive still in progress trips an assertion in
    // UCX 1.13, seen when a client's bulk write was arriving at shutdown).
    std::vector<std::shared_ptr<EndpointState>> all;
    for (auto& [ep, st] : eps) all.push_back(st);
    for (auto& st : all) {
        st->set_broken(Status(Code::cancelled, "transport worker shut down"));
        if (st->owned) close_ep(st, true);
    }
    auto until = Clock::now() + kCloseGrace;
    while (Clock::now() < until) {
        bool any_owned = false;
        for (auto& [ep, st] : eps) any_owned |= st->owned;
        if (!any_owned && calls.empty()) break;
        ucp_worker_progress(worker);
        run_deferred();
    }
    // Whatever UCX did not finish in the grace period ends with the worker.
    ids.clear();
    for (auto& [id, c] : calls) ids.push_back(id);
    for (uint64_t id : ids) {
        calls[id]->ucx_ops = 0;
        maybe_complete(id);
    }
    // Callers still inside drive_until have seen their calls end; let them leave first.
    stopped = true;
    while (callers_active > 0) {
        uint64_t one = 1;
        ssize_t rc = ::write(wakefd, &one, sizeof one);
        (void)rc;
        l.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        l.relock();
    }
    eps.clear();
    handlers.clear();
    for (ucp_mem_h m : mapped) ucp_mem_unmap(ctx, m); // regions whose owners outlive the worker
    mapped.clear();
    ucp_worker_destroy(worker);
    worker = nullptr;
    ucp_cleanup(ctx);
    ctx = nullptr;
}

// ---- connections ----------------------------------------------------------------------------

Result<std::shared_ptr<EndpointState>> Worker::Impl::create_ep(ucp_ep_params_t& params, std::string peer,
                                                               bool outgoing, bool detect_peer_failure) {
    params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_mode = detect_peer_failure ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    params.err_handler.cb = on_ep_error;
    params.err_handler.arg = nullptr;
    ucp_ep_h ep = nullptr;
    ucs_status_t s = ucp_ep_create(worker, &params, &ep);
    if (s != UCS_OK) return ucs_to_status(s, "create endpoint to " + peer);
    auto st = std::make_shared<EndpointState>();
    st->detects_peer_failure = detect_peer_failure;
    st->impl = weak_from_this();
    st->peer = std::move(peer);
    st->outgoing = outgoing;
    st->ep = ep;
    eps[ep] = st;
    last_set_up = Clock::now();
    return st;
}

std::shared_ptr<EndpointState> Worker::Impl::conn_for_reply_ep(ucp_ep_h ep) {
    auto it = eps.find(ep);
    if (it != eps.end()) return it->second;
    // A peer that connected by worker address: UCX made this endpoint during wire-up. It is not
    // ours to close, and UCX reports no errors on it, but replies can be sent through it.
    auto st = std::make_shared<EndpointState>();
    st->impl = weak_from_this();
    st->peer = "peer@address";
    st->ep = ep;
    st->owned = false;
    eps[ep] = st;
    last_set_up = Clock::now();
    return st;
}

void Worker::Impl::close_ep(const std::shared_ptr<EndpointState>& st, bool force) {
    if (!st->ep || st->closing || !st->owned) return;
    st->closing = true;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    // UCX 1.13 refuses to force-close an endpoint without peer-failure detection (invalid
    // parameter, and the endpoint stays): such a one is flushed and closed, which ends when
    // the peer takes what is queued, if ever (calls on it do not wait: maybe_complete).
    p.flags = force && st->detects_peer_failure ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    p.cb.send = on_ep_closed;
    p.user_data = st->ep;
    ucs_status_ptr_t r = ucp_ep_close_nbx(st->ep, &p);
    if (!UCS_PTR_IS_PTR(r)) eps.erase(st->ep); // closed at once (or failed: nothing left to wait for)
}

void Worker::Impl::fail_endpoint(const std::shared_ptr<EndpointState>& st, const Status& why) {
    st->set_broken(why);
    std::vector<uint64_t> ids(st->calls.begin(), st->calls.end());
    for (uint64_t id : ids) finish(id, why);
    // Force-closing completes every UCX request still on the endpoint (with an error), which
    // is what lets the calls above complete within a bounded time.
    close_ep(st, true);
    for (uint64_t id : ids) maybe_complete(id);
    // What relied on this connection to notice the peer's failure fails with it.
    std::vector<std::weak_ptr<EndpointState>> companions = std::move(st->companions);
    st->companions.clear();
    for (auto& weak : companions)
        if (auto c = weak.lock(); c && c->health().ok()) fail_endpoint(c, why);
}

Result<uint16_t> Worker::Impl::do_listen(const std::string& host, uint16_t port) {
    if (listener) return Status(Code::busy, "already listening");
    socklen_t len = 0;
    auto ss = resolve(host, port, true, len);
    if (!ss.ok()) return ss.status();
    ucp_listener_params_t lp{};
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&*ss);
    lp.sockaddr.addrlen = len;
    lp.conn_handler.cb = on_conn_request;
    lp.conn_handler.arg = this;
    ucs_status_t s = ucp_listener_create(worker, &lp, &listener);
    if (s != UCS_OK) {
        listener = nullptr;
        Code code = s == UCS_ERR_BUSY ? Code::busy : Code::io;
        return Status(code, "listen on " + host + ":" + std::to_string(port) + ": " + ucs_status_string(s));
    }
    ucp_listener_attr_t attr{};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    if (ucp_listener_query(listener, &attr) != UCS_OK)
        return Status(Code::internal, "cannot query the listener's address");
    std::string bound = sockaddr_to_string(attr.sockaddr);
    uint16_t bound_port = static_cast<uint16_t>(std::stoul(bound.substr(bound.rfind(':') + 1)));
    JOBFS_INFO("listening on %s:%u", host.c_str(), bound_port);
    return bound_port;
}

// ---- calls ----------------------------------------------------------------------------------

std::unique_ptr<PendingCall> Worker::Impl::make_call(const std::shared_ptr<EndpointState>& ep, uint16_t opcode,
                                                     Bytes message, const CallOptions& options, CallCallback done) {
    auto c = std::make_unique<PendingCall>();
    c->opcode = opcode;
    c->ep = ep;
    c->timeout = options.timeout.count() > 0 ? options.timeout : opts.call_timeout;
    c->deadline = Clock::now() + c->timeout;
    c->message = std::move(message);
    c->bulk_out = options.bulk_out;
    c->bulk_in = options.bulk_in;
    c->keep = options.keep;
    c->done = std::move(done);
    st_calls++;
    return c;
}

void Worker::Impl::call_async(const std::shared_ptr<EndpointState>& ep, uint16_t opcode, Bytes message,
                              const CallOptions& options, CallCallback done) {
    auto c = make_call(ep, opcode, std::move(message), options, std::move(done));
    bool started = false;
    // The progress thread must run after this send even when no event will wake it: UCX
    // queues a send the socket cannot take yet, and only progress pushes it out (the event fd
    // was armed before the send existed). Nudging only for an earlier deadline stalled such
    // calls until their deadline (seen: 4 processes writing one checkpoint at 35 MB/s).
    run_and_nudge([&] {
        start_call(std::move(c));
        started = true;
    });
    if (!started) c->done(Status(Code::cancelled, "transport worker is shut down"));
}

void Worker::Impl::start_call(std::unique_ptr<PendingCall> c) {
    const uint64_t id = next_id++;
    c->id = id;
    PendingCall& call = *c;
    calls[id] = std::move(c);
    deadlines.emplace(call.deadline, id);
    call.ep->calls.insert(id);

    Status health = call.ep->health();
    if (stopping) return finish(id, Status(Code::cancelled, "transport worker shut down"));
    if (!health.ok() || !call.ep->ep || call.ep->closing) {
        return finish(id, health.ok() ? Status(Code::peer_gone, "connection to " + call.ep->peer + " is closed") : health);
    }
    const bool inline_msg = kFrameHeaderSize + call.message.size() <= max_am_header;
    if (!inline_msg && !call.bulk_out.empty())
        return finish(id, Status(Code::too_large, "request message of " + std::to_string(call.message.size()) +
                                                      " bytes cannot travel with a bulk payload"));
    if (call.bulk_out.size() > kMaxBulkBytes || call.message.size() > kMaxMessageBytes)
        return finish(id, Status(Code::too_large, "request too large"));

    FrameHeader fh;
    fh.kind = FrameKind::request;
    fh.flags = inline_msg ? kInlineMessage : 0;
    fh.opcode = call.opcode;
    fh.request_id = id;
    fh.message_length = static_cast<uint32_t>(call.message.size());
    fh.bulk_length = inline_msg ? call.bulk_out.size() : 0;
    call.header.resize(kFrameHeaderSize);
    frame_header_pack(fh, call.header.data());
    const void* data = nullptr;
    size_t data_len = 0;
    if (inline_msg) {
        call.header.insert(call.header.end(), call.message.begin(), call.message.end());
        data = call.bulk_out.data();
        data_len = call.bulk_out.size();
    } else {
        data = call.message.data();
        data_len = call.message.size();
    }

    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    p.cb.send = on_call_send_done;
    p.user_data = id_to_ptr(id);
    p.flags = UCP_AM_SEND_FLAG_REPLY | (data_len >= kRndvThreshold ? UCP_AM_SEND_FLAG_RNDV : 0);
    ucs_status_ptr_t r = ucp_am_send_nbx(call.ep->ep, kAmRequest, call.header.data(), call.header.size(), data,
                                         data_len, &p);
    if (UCS_PTR_IS_ERR(r))
        return finish(id, connection_error(*call.ep, ucs_to_status(UCS_PTR_STATUS(r), "send to " + call.ep->peer)));
    if (r != nullptr)
        ++call.ucx_ops;
    else
        call.request_sent = true;
}

void Worker::Impl::start_rma(std::unique_ptr<PendingCall> c, bool is_put, const void* local, size_t length,
                             uint64_t remote, Bytes rkey) {
    const uint64_t id = next_id++;
    c->id = id;
    c->complete_when_ops_done = true;
    PendingCall& call = *c;
    calls[id] = std::move(c);
    deadlines.emplace(call.deadline, id);
    call.ep->calls.insert(id);
    Status health = call.ep->health();
    if (stopping) return finish(id, Status(Code::cancelled, "transport worker shut down"));
    if (!health.ok() || !call.ep->ep || call.ep->closing)
        return finish(id, health.ok() ? Status(Code::peer_gone, "connection is closed") : health);
    ucs_status_t s = ucp_ep_rkey_unpack(call.ep->ep, rkey.data(), &call.rkey);
    if (s != UCS_OK) {
        call.rkey = nullptr;
        return finish(id, ucs_to_status(s, "unpack remote key"));
    }
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = on_call_send_done;
    p.user_data = id_to_ptr(id);
    ucs_status_ptr_t r = is_put ? ucp_put_nbx(call.ep->ep, local, length, remote, call.rkey, &p)
                                : ucp_get_nbx(call.ep->ep, const_cast<void*>(local), length, remote, call.rkey, &p);
    if (UCS_PTR_IS_ERR(r)) return finish(id, ucs_to_status(UCS_PTR_STATUS(r), is_put ? "RMA put" : "RMA get"));
    if (r != nullptr) ++call.ucx_ops;
    if (is_put) {
        // A put is complete locally when its callback runs; the flush makes it visible remotely.
        ucs_status_ptr_t f = ucp_ep_flush_nbx(call.ep->ep, &p);
        if (UCS_PTR_IS_ERR(f)) return finish(id, ucs_to_status(UCS_PTR_STATUS(f), "RMA flush"));
        if (f != nullptr) ++call.ucx_ops;
    }
    if (call.ucx_ops == 0) finish(id, Status::OK());
}

void Worker::Impl::finish(uint64_t id, Status outcome) {
    auto it = calls.find(id);
    if (it == calls.end()) return;
    if (!it->second->outcome) it->second->outcome = std::move(outcome);
    maybe_complete(id);
}

void Worker::Impl::maybe_complete(uint64_t id) {
    auto it = calls.find(id);
    if (it == calls.end()) return;
    PendingCall& c = *it->second;
    if (!c.outcome) return;
    if (c.ucx_ops > 0) {
        // A connection without peer-failure detection may never let go of a request (its peer
        // stopped or died, and UCX 1.13 cannot force-close it). A failed call whose buffers
        // the transport owns (CallOptions::keep) ends now all the same; its record, and with
        // it the buffers, stays until UCX lets go.
        if (c.outcome->ok() || !c.keep || c.ep->detects_peer_failure || c.delivered) return;
        return deliver(id, c);
    }
    std::unique_ptr<PendingCall> own = std::move(it->second);
    calls.erase(it);
    if (own->rkey) ucp_rkey_destroy(own->rkey);
    if (own->delivered) return; // UCX let go at last: the buffers go with the record
    if (own->outcome->ok()) {
        auto took = duration_cast<milliseconds>(Clock::now() - (own->deadline - own->timeout));
        if (took >= kSlowCall)
            JOBFS_WARN("request %u to %s took %lld ms", own->opcode, own->ep->peer.c_str(),
                       static_cast<long long>(took.count()));
    }
    deliver(id, *own);
}

void Worker::Impl::deliver(uint64_t id, PendingCall& c) {
    c.delivered = true;
    deadlines.erase({c.deadline, id});
    c.ep->calls.erase(id);
    if (c.outcome->ok())
        c.done(std::move(c.reply));
    else
        c.done(*c.outcome);
    c.done = nullptr; // what it holds goes now, not with a record kept for UCX
    // A sync caller usually completes its own call; if another thread did, the caller may be
    // asleep in drive_until and must be woken.
    if (c.waiter != std::thread::id() && c.waiter != std::this_thread::get_id()) {
        uint64_t one = 1;
        ssize_t rc = ::write(c.waiter_fd, &one, sizeof one);
        (void)rc;
    }
}

void Worker::Impl::expire_deadlines() {
    if (deadlines.empty()) return;
    auto now = Clock::now();
    std::vector<uint64_t> due;
    for (auto it = deadlines.begin(); it != deadlines.end() && it->first <= now; ++it) due.push_back(it->second);
    for (uint64_t id : due) {
        auto it = calls.find(id);
        if (it == calls.end()) continue;
        PendingCall& c = *it->second;
        deadlines.erase({c.deadline, id});
        if (!c.outcome)
            c.outcome = Status(Code::timeout, "request " + std::to_string(c.opcode) + " to " + c.ep->peer +
                                                  ": no reply within " + std::to_string(c.timeout.count()) + " ms (" +
                                                  (c.reply_started  ? "reply data incomplete"
                                                   : c.request_sent ? "request sent, no reply"
                                                                    : "request not sent yet") +
                                                  ")");
        if (c.ucx_ops > 0) {
            // UCX still moves this call's buffers: break the connection so that it lets go of them.
            auto ep = c.ep;
            fail_endpoint(ep, Status(Code::timeout, "connection to " + ep->peer + " stalled past a deadline"));
        }
        maybe_complete(id);
    }
}

void Worker::Impl::receive_reply_part(uint64_t id, void* desc, void* dst, size_t length) {
    auto it = calls.find(id);
    if (it == calls.end() || it->second->outcome) {
        ucp_am_data_release(worker, desc);
        if (it != calls.end()) {
            --it->second->ucx_ops;
            maybe_complete(id);
        }
        return;
    }
    PendingCall& c = *it->second;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = on_reply_part_received;
    p.user_data = id_to_ptr(id);
    ucs_status_ptr_t r = ucp_am_recv_data_nbx(worker, desc, dst, length, &p);
    if (UCS_PTR_IS_PTR(r)) return; // ucx_ops was counted when the part was announced
    --c.ucx_ops;
    finish(id, UCS_PTR_IS_ERR(r) ? ucs_to_status(UCS_PTR_STATUS(r), "receive reply from " + c.ep->peer)
                                 : Status::OK());
}

ucs_status_t Worker::Impl::on_reply(const void* header, size_t hlen, void* data, size_t len,
                                    const ucp_am_recv_param_t* param) {
    auto fh = frame_header_parse(header, hlen, len);
    if (!fh.ok() || fh->kind != FrameKind::reply) {
        st_malformed++;
        JOBFS_WARN("dropped a malformed reply: %s", fh.ok() ? "not a reply" : fh.status().to_string().c_str());
        return UCS_OK;
    }
    auto it = calls.find(fh->request_id);
    if (it == calls.end()) return UCS_OK; // late reply to a call that already timed out
    PendingCall& c = *it->second;
    const uint64_t id = c.id;
    c.request_sent = true; // UCX may report the send's completion after the reply
    c.reply_started = true;
    const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
    const auto* inline_bytes = static_cast<const uint8_t*>(header) + kFrameHeaderSize;

    if (fh->status != 0) {
        std::string text;
        if (fh->inline_message())
            text.assign(reinterpret_cast<const char*>(inline_bytes), fh->message_length);
        else if (!rndv)
            text.assign(static_cast<const char*>(data), len);
        finish(id, Status(static_cast<Code>(fh->status), text));
        return UCS_OK;
    }
    if (!fh->inline_message()) {
        if (!rndv) {
            c.reply.message.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + len);
            finish(id, Status::OK());
            return UCS_OK;
        }
        c.reply.message.resize(len);
        ++c.ucx_ops;
        deferred.push_back([this, id, data, dst = c.reply.message.data(), len] { receive_reply_part(id, data, dst, len); });
        return UCS_INPROGRESS;
    }
    c.reply.message.assign(inline_bytes, inline_bytes + fh->message_length);
    c.reply.bulk_length = fh->bulk_length;
    if (fh->bulk_length == 0) {
        finish(id, Status::OK());
        return UCS_OK;
    }
    if (fh->bulk_length > c.bulk_in.size()) {
        finish(id, Status(Code::too_large, "reply bulk of " + std::to_string(fh->bulk_length) +
                                               " bytes does not fit the caller's buffer of " +
                                               std::to_string(c.bulk_in.size())));
        return UCS_OK;
    }
    if (!rndv) {
        std::memcpy(c.bulk_in.data(), data, len);
        finish(id, Status::OK());
        return UCS_OK;
    }
    ++c.ucx_ops;
    deferred.push_back([this, id, data, dst = c.bulk_in.data(), len] { receive_reply_part(id, data, dst, len); });
    return UCS_INPROGRESS;
}

// ---- serving --------------------------------------------------------------------------------

ucs_status_t Worker::Impl::on_request(const void* header, size_t hlen, void* data, size_t len,
                                      const ucp_am_recv_param_t* param) {
    ucp_ep_h reply_ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : nullptr;
    auto fh = frame_header_parse(header, hlen, len);
    if (!fh.ok() || fh->kind != FrameKind::request || reply_ep == nullptr) {
        st_malformed++;
        std::string why = !fh.ok() ? fh.status().to_string() : reply_ep ? "not a request" : "no reply endpoint";
        if (reply_ep) {
            auto conn = conn_for_reply_ep(reply_ep);
            if (conn->malformed++ == 0)
                JOBFS_WARN("dropping connection from %s: %s", conn->peer.c_str(), why.c_str());
            // A peer that sends garbage is not trusted with the connection any longer.
            if (conn->owned) deferred.push_back([this, conn] {
                fail_endpoint(conn, Status(Code::protocol, "malformed frame"));
            });
        } else {
            JOBFS_WARN("dropped a malformed request: %s", why.c_str());
        }
        return UCS_OK;
    }
    auto in = std::make_shared<Incoming>();
    in->impl = weak_from_this();
    in->conn = conn_for_reply_ep(reply_ep);
    in->opcode = fh->opcode;
    in->id = fh->request_id;
    const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
    bool keep = false;
    if (fh->inline_message()) {
        const auto* m = static_cast<const uint8_t*>(header) + kFrameHeaderSize;
        in->message.assign(m, m + fh->message_length);
        in->bulk_length = fh->bulk_length;
        if (fh->bulk_length > 0) {
            if (rndv) {
                in->bulk_desc = data;
                keep = true;
            } else {
                in->eager_bulk.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + len);
            }
        }
    } else if (rndv) {
        in->msg_desc = data;
        in->message.resize(len);
        keep = true;
    } else {
        in->message.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + len);
    }
    deferred.push_back([this, in] { dispatch(in); });
    return keep ? UCS_INPROGRESS : UCS_OK;
}

void Worker::Impl::dispatch(const std::shared_ptr<Incoming>& in) {
    if (in->msg_desc) {
        // An out-of-line message: fetch it before the handler sees the request.
        void* desc = std::exchange(in->msg_desc, nullptr);
        auto* op = new BulkReceive{[this, in](Status s) {
            if (s.ok()) return dispatch(in);
            in->replied = true; // nothing to answer: the connection is broken
        }};
        ucp_request_param_t p{};
        p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        p.cb.recv_am = on_bulk_received;
        p.user_data = op;
        ucs_status_ptr_t r = ucp_am_recv_data_nbx(worker, desc, in->message.data(), in->message.size(), &p);
        if (UCS_PTR_IS_PTR(r)) {
            receives_in_flight++;
            return;
        }
        std::unique_ptr<BulkReceive> own(op);
        own->done(UCS_PTR_IS_ERR(r) ? ucs_to_status(UCS_PTR_STATUS(r), "receive request") : Status::OK());
        return;
    }
    st_served++;
    if (in->opcode == kOpHello) return handle_hello(in);
    // Served: requests of a peer that passed its hello here, of the worker we chose to connect
    // to by address, and of a peer we connected to whose hello answer we checked (it calls
    // back on our own connection).
    const bool trusted = in->conn->authenticated || in->conn->by_address || (in->conn->outgoing && in->conn->established);
    if (!trusted) {
        in->conn->close_after_reply = true;
        in->replied = true;
        return send_reply(in->conn, in->id, in->opcode,
                          Status(Code::permission, "request before hello: connection refused"), {}, {});
    }
    auto h = handlers.find(in->opcode);
    if (h == handlers.end()) {
        in->replied = true;
        return send_reply(in->conn, in->id, in->opcode,
                          Status(Code::unsupported, "unknown opcode " + std::to_string(in->opcode)), {}, {});
    }
    try {
        h->second(ServerCall(in));
    } catch (const std::exception& e) {
        JOBFS_ERROR("handler of opcode %u threw: %s", in->opcode, e.what());
        ServerCall(in).reply(Status(Code::internal, std::string("handler failed: ") + e.what()));
    }
}

void Worker::Impl::handle_hello(const std::shared_ptr<Incoming>& in) {
    in->replied = true;
    auto req = wire::decode<HelloRequest>(in->message);
    Status refuse;
    if (!req.ok())
        refuse = req.status().with_context("hello");
    else if (req->protocol_version != kProtocolVersion)
        refuse = Status(Code::protocol, "peer speaks protocol " + std::to_string(req->protocol_version) +
                                            ", this daemon speaks " + std::to_string(kProtocolVersion));
    else if (!secrets_equal(req->secret, opts.secret))
        refuse = Status(Code::permission, "wrong job secret");
    if (!refuse.ok()) {
        JOBFS_WARN("refused connection from %s: %s", in->conn->peer.c_str(), refuse.to_string().c_str());
        in->conn->close_after_reply = true;
        return send_reply(in->conn, in->id, in->opcode, refuse, {}, {});
    }
    in->conn->authenticated = true;
    in->conn->peer_name = req->name;
    HelloResponse resp;
    resp.name = opts.name;
    send_reply(in->conn, in->id, in->opcode, Status::OK(), wire::encode(resp), {});
}

void Worker::Impl::send_reply(const std::shared_ptr<EndpointState>& conn, uint64_t id, uint16_t opcode,
                              const Status& status, Bytes message, OutBulk bulk) {
    if (!conn->ep || conn->closing || stopping) return;
    if (!status.ok()) {
        message = string_bytes(status.message());
        bulk = {};
    }
    auto op = std::make_unique<ReplySend>();
    op->conn = conn;
    op->keep = std::move(bulk.keep);
    bool inline_msg = kFrameHeaderSize + message.size() <= max_am_header;
    if (!inline_msg && !bulk.data.empty()) {
        JOBFS_ERROR("reply to opcode %u: message of %zu bytes cannot travel with a bulk payload", opcode,
                    message.size());
        return send_reply(conn, id, opcode, Status(Code::internal, "reply message too large for a bulk reply"), {}, {});
    }
    FrameHeader fh;
    fh.kind = FrameKind::reply;
    fh.flags = inline_msg ? kInlineMessage : 0;
    fh.opcode = opcode;
    fh.status = static_cast<int32_t>(status.code());
    fh.request_id = id;
    fh.message_length = static_cast<uint32_t>(message.size());
    fh.bulk_length = inline_msg ? bulk.data.size() : 0;
    op->header.resize(kFrameHeaderSize);
    frame_header_pack(fh, op->header.data());
    const void* data;
    size_t data_len;
    if (inline_msg) {
        op->header.insert(op->header.end(), message.begin(), message.end());
        data = bulk.data.data();
        data_len = bulk.data.size();
    } else {
        op->message = std::move(message);
        data = op->message.data();
        data_len = op->message.size();
    }
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    p.cb.send = on_reply_send_done;
    p.user_data = op.get();
    p.flags = data_len >= kRndvThreshold ? UCP_AM_SEND_FLAG_RNDV : 0;
    replies_in_flight++;
    ucs_status_ptr_t r = ucp_am_send_nbx(conn->ep, kAmReply, op->header.data(), op->header.size(), data, data_len, &p);
    if (UCS_PTR_IS_PTR(r)) {
        op.release(); // on_reply_send_done owns it now
        return;
    }
    reply_sent(std::move(op), UCS_PTR_STATUS(r));
}

Result<Endpoint> Worker::Impl::handshake(std::shared_ptr<EndpointState> st, const std::string& what,
                                         std::chrono::milliseconds timeout) {
    HelloRequest hello;
    hello.secret = opts.secret;
    hello.name = opts.name;
    CallOptions co;
    co.timeout = timeout.count() > 0 ? timeout : opts.connect_timeout;
    auto r = call_sync(st, kOpHello, wire::encode(hello), co);
    Status fail;
    HelloResponse resp;
    if (!r.ok())
        fail = r.status();
    else if (Status d = wire::decode(r->message, resp); !d.ok())
        fail = d;
    else if (resp.protocol_version != kProtocolVersion)
        fail = Status(Code::protocol, "peer speaks protocol " + std::to_string(resp.protocol_version));
    if (!fail.ok()) {
        run_and_nudge([this, st] { close_ep(st, true); });
        return fail.with_context(what);
    }
    run_and_nudge([st, name = resp.name] {
        st->peer_name = name;
        st->established = true;
    });
    return Endpoint(st);
}

Result<Reply> Worker::Impl::call_sync(const std::shared_ptr<EndpointState>& ep, uint16_t opcode, Bytes message,
                                      const CallOptions& options) {
    if (held_by_me())
        return Status(Code::internal, "blocking call from a transport callback (use call_async)");
    struct Wait {
        std::atomic<int> done{0};
        std::optional<Result<Reply>> result;
    };
    Wait w; // completed under the lock, read after drive_until returns: no lifetime race
    auto c = make_call(ep, opcode, std::move(message), options, [&w](Result<Reply> r) {
        w.result.emplace(std::move(r));
        w.done.store(1, std::memory_order_release);
    });
    {
        Locked l(this);
        if (stopping) return Status(Code::cancelled, "transport worker is shut down");
        c->waiter = std::this_thread::get_id();
        c->waiter_fd = thread_wake_fd();
        start_call(std::move(c));
        drive_until(w.done, l);
    }
    if (!w.result) return Status(Code::cancelled, "transport worker shut down");
    return std::move(*w.result);
}

// ---- Worker ---------------------------------------------------------------------------------

Worker::Worker(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Worker>> Worker::create(const WorkerOptions& options) {
    auto impl = std::make_shared<Impl>(options);
    impl->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (impl->wakefd < 0) return Status::from_errno(errno, "eventfd");
    auto started = std::make_shared<std::promise<Status>>();
    auto fut = started->get_future();
    Impl* raw = impl.get();
    impl->thread = std::thread([raw, started] {
        Impl::current = raw;
        Status s = raw->init_ucx();
        bool ok = s.ok();
        started->set_value(std::move(s));
        if (!ok) return;
        raw->loop();
        raw->teardown();
    });
    Status s = fut.get();
    if (!s.ok()) {
        impl->thread.join();
        if (impl->worker) ucp_worker_destroy(impl->worker);
        if (impl->ctx) ucp_cleanup(impl->ctx);
        if (impl->epfd >= 0) ::close(impl->epfd);
        ::close(impl->wakefd);
        return s;
    }
    return std::unique_ptr<Worker>(new Worker(std::move(impl)));
}

Worker::~Worker() {
    {
        Impl::Locked l(impl_.get());
        impl_->stopping = true;
    }
    uint64_t one = 1;
    ssize_t rc = ::write(impl_->wakefd, &one, sizeof one);
    (void)rc;
    impl_->thread.join();
    ::close(impl_->epfd);
    ::close(impl_->wakefd);
}

Result<uint16_t> Worker::listen(const std::string& host, uint16_t port) {
    return impl_->run_sync<uint16_t>([im = impl_.get(), host, port] { return im->do_listen(host, port); });
}

bool Worker::in_callback() const { return impl_->held_by_me(); }

void Worker::stop_listening() {
    auto r = impl_->run_sync<bool>([im = impl_.get()]() -> Result<bool> {
        if (im->listener) ucp_listener_destroy(im->listener);
        im->listener = nullptr;
        return true;
    });
    (void)r;
}

Result<Endpoint> Worker::connect(const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
    std::string what = "connect to " + host + ":" + std::to_string(port);
    auto st = impl_->run_sync<std::shared_ptr<EndpointState>>([im = impl_.get(), host, port, what]()
                                                                   -> Result<std::shared_ptr<EndpointState>> {
        socklen_t len = 0;
        auto ss = resolve(host, port, false, len);
        if (!ss.ok()) return ss.status().with_context(what);
        ucp_ep_params_t p{};
        p.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
        p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
        p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&*ss);
        p.sockaddr.addrlen = len;
        return im->create_ep(p, host + ":" + std::to_string(port), true, im->opts.detect_peer_failure);
    });
    if (!st.ok()) return st.status();
    return impl_->handshake(*st, what, timeout);
}

// Both connections by worker address. `watched` (may be null): the connection the new one
// fails with; the new one then has no peer-failure detection of its own.
Result<Endpoint> Worker::Impl::connect_by_address(std::span<const uint8_t> worker_address, const std::string& peer,
                                                  std::shared_ptr<EndpointState> watched) {
    std::string what = "connect to " + peer;
    Bytes addr(worker_address.begin(), worker_address.end());
    auto st = run_sync<std::shared_ptr<EndpointState>>([this, addr, peer, w = std::move(watched)]()
                                                           -> Result<std::shared_ptr<EndpointState>> {
        if (addr.empty()) return Status(Code::invalid, "empty worker address");
        if (w) {
            if (w->impl.lock().get() != this) return Status(Code::invalid, "the watched connection is not of this worker");
            // Checked and linked under the worker's lock, as fail_endpoint runs: the watched
            // connection cannot fail in between unnoticed.
            if (Status h = w->health(); !h.ok()) return h;
        }
        ucp_ep_params_t p{};
        p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        p.address = reinterpret_cast<const ucp_address_t*>(addr.data());
        auto made = create_ep(p, peer, true, w ? false : opts.detect_peer_failure);
        if (!made.ok()) return made;
        (*made)->by_address = true;
        if (w) w->companions.push_back(*made);
        return made;
    });
    if (!st.ok()) return st.status().with_context(what);
    return handshake(*st, what);
}

Result<Endpoint> Worker::connect_address(std::span<const uint8_t> worker_address, const std::string& peer) {
    return impl_->connect_by_address(worker_address, peer, nullptr);
}

Result<Endpoint> Worker::connect_address_watched(std::span<const uint8_t> worker_address, const std::string& peer,
                                                 const Endpoint& watched) {
    if (!watched.valid()) return Status(Code::invalid, "connect to " + peer + ": no connection to watch");
    return impl_->connect_by_address(worker_address, peer, watched.state_);
}

const Bytes& Worker::address() const { return impl_->address; }

void Worker::set_handler(uint16_t opcode, Handler handler) {
    auto r = impl_->run_sync<bool>([im = impl_.get(), opcode, h = std::move(handler)]() mutable -> Result<bool> {
        im->handlers[opcode] = std::move(h);
        return true;
    });
    (void)r;
}

Result<MemoryRegion> Worker::map_memory(void* address, size_t length) {
    return impl_->run_sync<MemoryRegion>([im = impl_.get(), address, length]() -> Result<MemoryRegion> {
        auto st = std::make_shared<MemoryRegion::State>();
        st->impl = im->weak_from_this();
        ucp_mem_map_params_t mp{};
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
        mp.address = address;
        mp.length = length;
        ucs_status_t s = ucp_mem_map(im->ctx, &mp, &st->memh);
        if (s != UCS_OK) {
            st->memh = nullptr;
            return ucs_to_status(s, "register memory");
        }
        im->mapped.insert(st->memh);
        void* buf = nullptr;
        size_t size = 0;
        s = ucp_rkey_pack(im->ctx, st->memh, &buf, &size);
        if (s != UCS_OK) return ucs_to_status(s, "pack remote key");
        st->rkey.assign(static_cast<uint8_t*>(buf), static_cast<uint8_t*>(buf) + size);
        ucp_rkey_buffer_release(buf);
        st->address = reinterpret_cast<uint64_t>(address);
        st->length = length;
        return MemoryRegion(st);
    });
}

const WorkerOptions& Worker::options() const { return impl_->opts; }

size_t Worker::max_inline_message() const { return impl_->max_am_header - kFrameHeaderSize; }

WorkerStats Worker::stats() const {
    WorkerStats s;
    s.calls_started = impl_->st_calls;
    s.requests_served = impl_->st_served;
    s.wakeups = impl_->st_wakeups;
    s.caller_wakeups = impl_->st_caller_wakeups;
    s.unpolled_sleeps = impl_->st_unpolled_sleeps;
    s.malformed_frames = impl_->st_malformed;
    s.connections_accepted = impl_->st_accepted;
    return s;
}

// ---- Endpoint -------------------------------------------------------------------------------

namespace {
std::shared_ptr<Worker::Impl> impl_of(const std::shared_ptr<EndpointState>& st) {
    return st ? st->impl.lock() : nullptr;
}
} // namespace

Result<Reply> Endpoint::call(uint16_t opcode, Bytes message, const CallOptions& options) const {
    auto im = impl_of(state_);
    if (!im) return Status(Code::cancelled, "endpoint is not connected");
    return im->call_sync(state_, opcode, std::move(message), options);
}

void Endpoint::call_async(uint16_t opcode, Bytes message, const CallOptions& options, CallCallback done) const {
    auto im = impl_of(state_);
    if (!im) return done(Status(Code::cancelled, "endpoint is not connected"));
    im->call_async(state_, opcode, std::move(message), options, std::move(done));
}

namespace {
Status rma(const std::shared_ptr<EndpointState>& st, bool is_put, const void* local, size_t length, uint64_t remote,
           std::span<const uint8_t> rkey, milliseconds timeout) {
    auto im = impl_of(st);
    if (!im) return Status(Code::cancelled, "endpoint is not connected");
    if (im->held_by_me()) return Status(Code::internal, "blocking RMA from a transport callback");
    auto c = std::make_unique<PendingCall>();
    c->ep = st;
    c->timeout = timeout.count() > 0 ? timeout : im->opts.call_timeout;
    c->deadline = Clock::now() + c->timeout;
    std::atomic<int> done{0};
    Status result;
    c->done = [&](Result<Reply> r) {
        result = r.status();
        done.store(1, std::memory_order_release);
    };
    Worker::Impl::Locked l(im.get());
    if (im->stopping) return Status(Code::cancelled, "transport worker is shut down");
    c->waiter = std::this_thread::get_id();
    c->waiter_fd = thread_wake_fd();
    im->start_rma(std::move(c), is_put, local, length, remote, Bytes(rkey.begin(), rkey.end()));
    im->drive_until(done, l);
    return done.load() ? result : Status(Code::cancelled, "transport worker shut down");
}
} // namespace

Status Endpoint::get(std::span<uint8_t> local, uint64_t remote_address, std::span<const uint8_t> rkey,
                     milliseconds timeout) const {
    return rma(state_, false, local.data(), local.size(), remote_address, rkey, timeout);
}

Status Endpoint::put(std::span<const uint8_t> local, uint64_t remote_address, std::span<const uint8_t> rkey,
                     milliseconds timeout) const {
    return rma(state_, true, local.data(), local.size(), remote_address, rkey, timeout);
}

Status Endpoint::debug_send_raw(std::span<const uint8_t> header, std::span<const uint8_t> data) const {
    auto im = impl_of(state_);
    if (!im) return Status(Code::cancelled, "endpoint is not connected");
    auto raw = std::make_shared<RawSend>(RawSend{Bytes(header.begin(), header.end()), Bytes(data.begin(), data.end())});
    return im
        ->run_sync<bool>([st = state_, raw]() -> Result<bool> {
            if (!st->ep || st->closing) return Status(Code::peer_gone, "connection is closed");
            auto* own = new RawSend(std::move(*raw)); // freed when UCX is done with the buffers
            ucp_request_param_t p{};
            p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
            p.flags = UCP_AM_SEND_FLAG_REPLY;
            p.cb.send = on_raw_sent;
            p.user_data = own;
            ucs_status_ptr_t r = ucp_am_send_nbx(st->ep, kAmRequest, own->header.data(), own->header.size(),
                                                 own->data.data(), own->data.size(), &p);
            if (UCS_PTR_IS_PTR(r)) return true;
            delete own;
            if (UCS_PTR_IS_ERR(r)) return ucs_to_status(UCS_PTR_STATUS(r), "raw send");
            return true;
        })
        .status();
}

Status Endpoint::health() const {
    if (!state_) return Status(Code::invalid, "endpoint is not connected");
    return state_->health();
}

const std::string& Endpoint::peer() const {
    static const std::string none = "(none)";
    return state_ ? state_->peer : none;
}

const std::string& Endpoint::peer_name() const {
    static const std::string none = "(none)";
    return state_ ? state_->peer_name : none;
}

void Endpoint::close() {
    auto im = impl_of(state_);
    if (!im) return;
    auto st = state_;
    im->run_and_nudge([im, st] {
        st->set_broken(Status(Code::cancelled, "endpoint closed by its owner"));
        std::vector<uint64_t> ids(st->calls.begin(), st->calls.end());
        for (uint64_t id : ids) im->finish(id, Status(Code::cancelled, "endpoint closed by its owner"));
        im->close_ep(st, false);
    });
}

void Endpoint::abort(const Status& why) const {
    auto im = impl_of(state_);
    if (!im) return;
    auto st = state_;
    auto fail = [im, st, why] { im->fail_endpoint(st, why); };
    // Inside a callback UCX may be progressing this very endpoint: closing it must wait until
    // progress returns, as for UCX's own error callback (on_ep_error).
    if (im->held_by_me()) {
        im->deferred.push_back(fail);
        return;
    }
    im->run_and_nudge([im, fail] { im->deferred.push_back(fail); });
}

// ---- ServerCall -----------------------------------------------------------------------------

uint16_t ServerCall::opcode() const { return in_->opcode; }
std::span<const uint8_t> ServerCall::message() const { return in_->message; }
uint64_t ServerCall::bulk_length() const { return in_->bulk_length; }
const std::string& ServerCall::peer() const { return in_->conn->peer; }
Endpoint ServerCall::connection() const { return Endpoint(in_->conn); }

void ServerCall::receive_bulk(std::span<uint8_t> dst, std::function<void(Status)> done) const {
    auto im = in_->impl.lock();
    if (!im) return done(Status(Code::cancelled, "transport worker is shut down"));
    auto in = in_;
    bool posted = im->run_and_nudge([im, in, dst, done]() mutable {
        if (dst.size() < in->bulk_length) return done(Status(Code::invalid, "bulk buffer too small"));
        if (in->bulk_desc == nullptr) {
            if (in->eager_bulk.size() != in->bulk_length)
                return done(Status(Code::invalid, "request bulk already received"));
            if (!in->eager_bulk.empty()) std::memcpy(dst.data(), in->eager_bulk.data(), in->eager_bulk.size());
            Bytes().swap(in->eager_bulk);
            return done(Status::OK());
        }
        void* desc = std::exchange(in->bulk_desc, nullptr);
        auto* op = new BulkReceive{std::move(done)};
        ucp_request_param_t p{};
        p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        p.cb.recv_am = on_bulk_received;
        p.user_data = op;
        ucs_status_ptr_t r = ucp_am_recv_data_nbx(im->worker, desc, dst.data(), in->bulk_length, &p);
        if (UCS_PTR_IS_PTR(r)) {
            im->receives_in_flight++;
            return;
        }
        std::unique_ptr<BulkReceive> own(op);
        own->done(UCS_PTR_IS_ERR(r) ? ucs_to_status(UCS_PTR_STATUS(r), "receive request bulk") : Status::OK());
    });
    if (!posted) done(Status(Code::cancelled, "transport worker is shut down"));
}

namespace {
void warn_if_slow(const Incoming& in) {
    auto took = duration_cast<milliseconds>(Clock::now() - in.received);
    if (took >= kSlowCall)
        JOBFS_WARN("request %u from %s answered after %lld ms (its handler was slow or waited)", in.opcode,
                   in.conn->peer.c_str(), static_cast<long long>(took.count()));
}

// Both reply()s: the first reply of a call is sent, later ones are dropped. The progress
// thread is nudged only when the send left it something to do (see reply_left_work).
void reply_once(const std::shared_ptr<Incoming>& in, const Status& status, Bytes message, OutBulk bulk) {
    if (in->replied.exchange(true)) return;
    auto im = in->impl.lock();
    if (!im) return;
    warn_if_slow(*in);
    bool left_work = false;
    im->with_lock([&] {
        if (in->bulk_desc) ucp_am_data_release(im->worker, std::exchange(in->bulk_desc, nullptr));
        im->send_reply(in->conn, in->id, in->opcode, status, std::move(message), std::move(bulk));
        left_work = im->reply_left_work(*in->conn);
    });
    if (left_work) im->nudge();
}
} // namespace

void ServerCall::reply(const Status& error) const { reply_once(in_, error, {}, {}); }

void ServerCall::reply(Bytes message, OutBulk bulk) const { reply_once(in_, Status::OK(), std::move(message), std::move(bulk)); }

// ---- MemoryRegion ---------------------------------------------------------------------------

uint64_t MemoryRegion::address() const { return state_ ? state_->address : 0; }
size_t MemoryRegion::length() const { return state_ ? state_->length : 0; }
const Bytes& MemoryRegion::rkey() const {
    static const Bytes none;
    return state_ ? state_->rkey : none;
}

} // namespace jobfs::transport
