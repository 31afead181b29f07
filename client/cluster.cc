#include "client/cluster.h"

#include "cluster_descriptor.h"
#include "daemon_protocol.h"
#include "log.h"
#include "rpc.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <latch>
#include <optional>
#include <sstream>
#include <thread>

namespace jobfs::client {
namespace {

std::string trim(const std::string& s) {
    size_t b = s.find_first_not_of(" \t\r");
    size_t e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// Daemons connected at once by connect_daemons (threads waiting on their handshakes).
constexpr size_t kParallelConnects = 16;

} // namespace

Result<ClusterInfo> read_cluster(const std::string& path) {
    std::ifstream in(path);
    if (!in) return Status::from_errno(errno, "cannot read cluster descriptor " + path);
    ClusterInfo info;
    bool versioned = false;
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
        const std::string where = path + ":" + std::to_string(n);
        line = trim(line.substr(0, line.find('#')));
        if (line.empty()) continue;
        size_t eq = line.find('=');
        if (eq == std::string::npos) return Status(Code::invalid, where + ": expected key = value");
        std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
        if (key == "version") {
            if (value != "1") return Status(Code::unsupported, where + ": descriptor version " + value + ", this client reads 1");
            versioned = true;
        } else if (key == "daemons") {
            std::stringstream ss(value);
            for (std::string d; std::getline(ss, d, ',');) {
                d = trim(d);
                if (d.rfind(':') == std::string::npos) return Status(Code::invalid, where + ": '" + d + "' is not host:port");
                info.daemons.push_back(d);
            }
        } else if (key == "secret") {
            info.secret = value;
        } else {
            return Status(Code::invalid, where + ": unknown key '" + key + "'");
        }
    }
    if (!versioned) return Status(Code::invalid, path + ": no 'version = 1' line: not a jobfs cluster descriptor");
    if (info.daemons.empty()) return Status(Code::invalid, path + ": no daemons listed");
    return info;
}

Result<ClusterInfo> read_cluster_from_env() {
    const char* p = std::getenv("JOBFS_CLUSTER");
    if (!p || !*p)
        return Status(Code::not_found, "JOBFS_CLUSTER is not set: start a file system with 'jobfs local up' "
                                       "(or a Slurm job with --jobfs) and export what it prints");
    return read_cluster(p);
}

Status write_cluster(const std::string& path, const ClusterInfo& info) {
    return transport::write_cluster_descriptor(path, info.daemons, info.secret);
}

Result<transport::Endpoint> connect_daemon(transport::Worker& worker, const ClusterInfo& info, uint32_t rank,
                                           std::chrono::milliseconds timeout) {
    if (rank >= info.daemons.size()) return Status(Code::invalid, "no jobfs daemon " + std::to_string(rank));
    const std::string& d = info.daemons[rank];
    const size_t colon = d.rfind(':');
    if (colon == std::string::npos) return Status(Code::invalid, "daemon address '" + d + "' lacks a port");
    return worker.connect(d.substr(0, colon), static_cast<uint16_t>(std::stoul(d.substr(colon + 1))), timeout);
}

proto::ChainTable newest_chain_table(std::span<const transport::Endpoint> eps, std::chrono::milliseconds timeout) {
    std::vector<proto::ChainTable> got(eps.size());
    std::latch answered(static_cast<std::ptrdiff_t>(eps.size()));
    transport::CallOptions o;
    o.timeout = timeout;
    for (size_t r = 0; r < eps.size(); ++r)
        transport::rpc::call_async<proto::ChainTableGet>(eps[r], proto::Empty{}, o,
                                                          [&got, &answered, r](Result<proto::ChainTable> t, size_t) {
                                                              if (t.ok()) got[r] = std::move(*t);
                                                              answered.count_down();
                                                          });
    answered.wait();
    proto::ChainTable newest;
    for (auto& t : got)
        if (t.states.size() == eps.size() && proto::newer_table(t, newest)) newest = std::move(t);
    return newest;
}

Result<std::vector<transport::Endpoint>> connect_daemons(transport::Worker& worker, const ClusterInfo& info) {
    if (info.daemons.empty()) return Status(Code::invalid, "the cluster descriptor names no daemon");
    // Connected side by side: each connection is a few round trips (tcp, UCX's wire-up, the
    // hello), spent waiting. One after the other they made a client's start grow with the
    // job's size (3 daemons on one host: 8-25 ms of waiting).
    const size_t n = info.daemons.size();
    std::vector<std::optional<Result<transport::Endpoint>>> made(n);
    // Connects the daemons `ranks` side by side, each within `timeout`.
    auto connect_all = [&](const std::vector<uint32_t>& ranks, std::chrono::milliseconds timeout) {
        std::atomic<size_t> next{0};
        auto connect_some = [&] {
            for (size_t k; (k = next.fetch_add(1)) < ranks.size();)
                made[ranks[k]].emplace(connect_daemon(worker, info, ranks[k], timeout));
        };
        std::vector<std::jthread> helpers;
        for (size_t k = 1; k < std::min(ranks.size(), kParallelConnects); ++k) helpers.emplace_back(connect_some);
        connect_some();
    };
    // A first try of kFirstConnectTry. A daemon that did not answer within it is looked up in
    // the chain table of those that did: one the table has offline (its node failed, or hung)
    // is not waited for; any other gets the rest of the connect timeout (it may be busy).
    // Before, a client that started while a node of its job was down waited the whole connect
    // timeout (10 s) for it: every jobfs command, MPI_File_open and stage-out after the failure.
    const auto full = worker.options().connect_timeout;
    const auto first = std::min(full, kFirstConnectTry);
    std::vector<uint32_t> all(n);
    for (uint32_t r = 0; r < n; ++r) all[r] = r;
    connect_all(all, first);
    std::vector<uint32_t> silent;
    for (uint32_t r = 0; r < n; ++r)
        if (!made[r]->ok() && made[r]->status().code() == Code::timeout) silent.push_back(r);
    if (!silent.empty() && full > first) {
        std::vector<transport::Endpoint> answered(n); // the silent ones' unconnected: no say
        for (uint32_t r = 0; r < n; ++r)
            if (made[r]->ok()) answered[r] = **made[r];
        const proto::ChainTable t = newest_chain_table(answered, kFirstConnectTry);
        std::vector<uint32_t> again;
        for (uint32_t r : silent) {
            if (t.states.size() == n && t.states[r] == proto::kDaemonOffline) {
                JOBFS_INFO("jobfs daemon %u (%s) did not answer and is offline in chain table %llu: not waited for", r,
                           info.daemons[r].c_str(), static_cast<unsigned long long>(t.version));
                continue;
            }
            again.push_back(r);
        }
        if (!again.empty()) connect_all(again, full - first);
    }
    std::vector<transport::Endpoint> eps;
    Status first_unreachable;
    size_t reachable = 0;
    for (uint32_t r = 0; r < n; ++r) {
        Result<transport::Endpoint>& ep = *made[r];
        if (!ep.ok()) {
            Status s = ep.status().with_context("jobfs daemon " + std::to_string(r) + " (" + info.daemons[r] + ")");
            // A daemon that is down (chain replication keeps its data readable elsewhere)
            // gets an unconnected endpoint, whose calls fail at once; a wrong secret or a
            // stranger on the port ends the connect.
            const Code c = s.code();
            if (c != Code::refused && c != Code::timeout && c != Code::peer_gone && c != Code::cancelled) return s;
            if (first_unreachable.ok()) first_unreachable = s;
            eps.emplace_back();
            continue;
        }
        reachable++;
        eps.push_back(*ep);
    }
    if (reachable == 0) return first_unreachable;
    return eps;
}

} // namespace jobfs::client
