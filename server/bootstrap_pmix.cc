// bootstrap_pmix.cc: PMIx_Init / Put / Commit / Fence / Get / Finalize for jobfsd.
#include "server/bootstrap_pmix.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pmix.h>
#include <unistd.h>

#include <cstring>
#include <future>
#include <thread>

#include "log.h"

namespace jobfs::server {

namespace {

constexpr const char* kAddressKey = "jobfs.daemon.address";

Status pmix_error(pmix_status_t rc, const std::string& what, const std::string& hint = "") {
    Code code = rc == PMIX_ERR_UNREACH ? Code::refused
                : rc == PMIX_ERR_TIMEOUT ? Code::timeout
                : rc == PMIX_ERR_NOT_FOUND ? Code::not_found
                                           : Code::internal;
    std::string msg = "pmix: " + what + " failed: " + PMIx_Error_string(rc) + " (" + std::to_string(rc) + ")";
    if (!hint.empty()) msg += " (" + hint + ")";
    return Status(code, msg);
}

// A PMIx integer of any width as uint64 (job sizes come as uint32, but launchers differ).
bool value_to_u64(const pmix_value_t* v, uint64_t& out) {
    switch (v->type) {
    case PMIX_UINT32: out = v->data.uint32; return true;
    case PMIX_UINT64: out = v->data.uint64; return true;
    case PMIX_UINT16: out = v->data.uint16; return true;
    case PMIX_UINT8: out = v->data.uint8; return true;
    case PMIX_SIZE: out = v->data.size; return true;
    case PMIX_INT: if (v->data.integer < 0) return false; out = static_cast<uint64_t>(v->data.integer); return true;
    case PMIX_INT32: if (v->data.int32 < 0) return false; out = static_cast<uint64_t>(v->data.int32); return true;
    default: return false;
    }
}

// A job-level number (PMIX_JOB_SIZE, PMIX_APP_SIZE) of this namespace.
Result<uint64_t> get_job_number(const pmix_proc_t& me, const char* key) {
    pmix_proc_t wild;
    PMIX_PROC_CONSTRUCT(&wild);
    std::memcpy(wild.nspace, me.nspace, sizeof wild.nspace);
    wild.rank = PMIX_RANK_WILDCARD;
    pmix_value_t* v = nullptr;
    pmix_status_t rc = PMIx_Get(&wild, key, nullptr, 0, &v);
    if (rc != PMIX_SUCCESS) return pmix_error(rc, std::string("PMIx_Get(") + key + ")");
    uint64_t n = 0;
    bool ok = value_to_u64(v, n);
    PMIX_VALUE_RELEASE(v);
    if (!ok) return Status(Code::protocol, std::string("pmix: ") + key + " is not a number");
    return n;
}

bool is_loopback(const sockaddr* sa) {
    if (sa->sa_family == AF_INET)
        return (ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr);
    return false;
}

} // namespace

struct PmixBootstrap::Impl {
    pmix_proc_t me;
};

Result<std::unique_ptr<PmixBootstrap>> PmixBootstrap::init() {
    std::unique_ptr<PmixBootstrap> b(new PmixBootstrap());
    b->impl_ = std::make_unique<Impl>();
    PMIX_PROC_CONSTRUCT(&b->impl_->me);
    pmix_status_t rc = PMIx_Init(&b->impl_->me, nullptr, 0);
    if (rc != PMIX_SUCCESS) {
        b->impl_.reset(); // nothing to finalize
        return pmix_error(rc, "PMIx_Init",
                          rc == PMIX_ERR_UNREACH ? "not launched by mpirun or srun --mpi=pmix?" : "");
    }
    const pmix_proc_t& me = b->impl_->me;
    if (me.rank >= PMIX_RANK_VALID) // undefined, wildcard and the other special ranks
        return Status(Code::protocol, "pmix: PMIx gave no rank to this process");
    b->rank_ = me.rank;
    auto job_size = get_job_number(me, PMIX_JOB_SIZE);
    if (!job_size.ok()) return job_size.status();
    if (*job_size == 0 || *job_size > UINT32_MAX || b->rank_ >= *job_size)
        return Status(Code::protocol, "pmix: rank " + std::to_string(b->rank_) + " in a job of size " +
                                          std::to_string(*job_size));
    // All ranks of the namespace take part in the fences below, so they must all be jobfsd.
    auto app_size = get_job_number(me, PMIX_APP_SIZE);
    if (app_size.ok() && *app_size != *job_size)
        return Status(Code::unsupported, "pmix: jobfsd is " + std::to_string(*app_size) + " of the " +
                                             std::to_string(*job_size) +
                                             " processes of its job: start it as a job (or job step) of its own");
    b->size_ = static_cast<uint32_t>(*job_size);
    JOBFS_INFO("pmix: namespace %s, rank %u of %u", me.nspace, b->rank_, b->size_);
    return b;
}

PmixBootstrap::~PmixBootstrap() {
    Status s = finalize(kFinalizeLimit);
    if (!s.ok()) JOBFS_WARN("%s", s.message().c_str());
}

Status PmixBootstrap::finalize(std::chrono::milliseconds limit) {
    if (!impl_ || finalized_) return Status::OK();
    finalized_ = true;
    // The helper owns what it shares with us, so it may outlive this object.
    auto done = std::make_shared<std::promise<pmix_status_t>>();
    auto result = done->get_future();
    std::thread([done] { done->set_value(PMIx_Finalize(nullptr, 0)); }).detach();
    if (result.wait_for(limit) != std::future_status::ready)
        return Status(Code::timeout, "pmix: PMIx_Finalize did not return within " + std::to_string(limit.count()) +
                                         " ms (the launcher is ending the job?); going on without it");
    pmix_status_t rc = result.get();
    if (rc != PMIX_SUCCESS) return pmix_error(rc, "PMIx_Finalize");
    return Status::OK();
}

namespace {

// Fence over the whole namespace; `collect` asks for every rank's committed data.
pmix_status_t fence(const pmix_proc_t& me, bool collect, std::chrono::milliseconds timeout) {
    pmix_proc_t all;
    PMIX_PROC_CONSTRUCT(&all);
    std::memcpy(all.nspace, me.nspace, sizeof all.nspace);
    all.rank = PMIX_RANK_WILDCARD;
    // PMIX_TIMEOUT is in whole seconds; round up so that a short timeout still waits.
    int seconds = static_cast<int>((timeout.count() + 999) / 1000);
    pmix_info_t info[2];
    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_CONSTRUCT(&info[1]);
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
    pmix_status_t rc = PMIx_Fence(&all, 1, info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    return rc;
}

} // namespace

Result<std::vector<std::string>> PmixBootstrap::exchange(const std::string& address, std::chrono::milliseconds timeout) {
    const pmix_proc_t& me = impl_->me;
    pmix_value_t val;
    PMIX_VALUE_CONSTRUCT(&val);
    val.type = PMIX_STRING;
    val.data.string = const_cast<char*>(address.c_str()); // PMIx_Put copies it
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, kAddressKey, &val);
    if (rc != PMIX_SUCCESS) return pmix_error(rc, "PMIx_Put");
    rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) return pmix_error(rc, "PMIx_Commit");
    rc = fence(me, true, timeout);
    if (rc != PMIX_SUCCESS)
        return pmix_error(rc, "PMIx_Fence (address exchange)",
                          rc == PMIX_ERR_TIMEOUT ? "not every daemon of the job got there" : "");

    std::vector<std::string> daemons(size_);
    for (uint32_t r = 0; r < size_; ++r) {
        if (r == rank_) {
            daemons[r] = address;
            continue;
        }
        pmix_proc_t peer;
        PMIX_PROC_CONSTRUCT(&peer);
        std::memcpy(peer.nspace, me.nspace, sizeof peer.nspace);
        peer.rank = r;
        pmix_value_t* v = nullptr;
        rc = PMIx_Get(&peer, kAddressKey, nullptr, 0, &v);
        if (rc != PMIX_SUCCESS) return pmix_error(rc, "PMIx_Get of daemon " + std::to_string(r) + "'s address");
        bool ok = v->type == PMIX_STRING && v->data.string != nullptr;
        if (ok) daemons[r] = v->data.string;
        PMIX_VALUE_RELEASE(v);
        if (!ok || daemons[r].rfind(':') == std::string::npos)
            return Status(Code::protocol, "pmix: daemon " + std::to_string(r) + " published no host:port");
    }
    return daemons;
}

Status PmixBootstrap::barrier(std::chrono::milliseconds timeout) {
    pmix_status_t rc = fence(impl_->me, false, timeout);
    if (rc != PMIX_SUCCESS)
        return pmix_error(rc, "PMIx_Fence (group ready)",
                          rc == PMIX_ERR_TIMEOUT ? "not every daemon of the job got there" : "");
    return Status::OK();
}

std::string advertised_host(const std::string& listen) {
    if (!listen.empty() && listen != "0.0.0.0" && listen != "::" && listen != "[::]" && listen != "*") return listen;
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
    std::string host = name;
    if (!host.empty()) {
        addrinfo hints{};
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* res = nullptr;
        if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) == 0) {
            bool routable = false;
            for (addrinfo* a = res; a && !routable; a = a->ai_next) routable = !is_loopback(a->ai_addr);
            ::freeaddrinfo(res);
            if (routable) return host;
        }
    }
    ifaddrs* ifs = nullptr;
    if (::getifaddrs(&ifs) == 0) {
        std::string found;
        for (ifaddrs* i = ifs; i && found.empty(); i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
            if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK) || is_loopback(i->ifa_addr)) continue;
            char text[INET_ADDRSTRLEN];
            if (::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text))
                found = text;
        }
        ::freeifaddrs(ifs);
        if (!found.empty()) return found;
    }
    return host.empty() ? std::string("127.0.0.1") : host;
}

} // namespace jobfs::server
