// cluster.h: the cluster descriptor, the one file through which every client finds the
// daemons of a job ($JOBFS_CLUSTER). `jobfs local up` and the Slurm plugin write it:
//
//     # jobfs cluster descriptor
//     version = 1
//     daemons = n1:7117,n2:7117,n3:7117     # host:port of every daemon, in rank order
//     secret = 3f9c…                        # the job secret clients present
//
// It is readable only by the job's user (mode 0600), since it holds the secret.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "daemon_protocol.h"
#include "result.h"
#include "worker.h"

namespace jobfs::client {

struct ClusterInfo {
    std::vector<std::string> daemons; // host:port by rank
    std::string secret;
};

// Reads a descriptor; errors name the file and line.
Result<ClusterInfo> read_cluster(const std::string& path);
// The descriptor named by $JOBFS_CLUSTER.
Result<ClusterInfo> read_cluster_from_env();
// Writes a descriptor atomically (temporary file, then rename) with mode 0600 (the writer
// lives in ucx-transport/cluster_descriptor.h, which jobfsd shares).
Status write_cluster(const std::string& path, const ClusterInfo& info);

// Connects `worker` to daemon `rank` of the descriptor (`timeout` 0: the worker's connect_timeout).
Result<transport::Endpoint> connect_daemon(transport::Worker& worker, const ClusterInfo& info, uint32_t rank,
                                           std::chrono::milliseconds timeout = std::chrono::milliseconds{0});
// The newest chain table (docs/replication.md) of the daemons `eps` (endpoint r is daemon r),
// all asked at once, each answer awaited at most `timeout`; a daemon that does not answer, or
// answers a table of another size, has no say. Version 0: no daemon had one.
proto::ChainTable newest_chain_table(std::span<const transport::Endpoint> eps, std::chrono::milliseconds timeout);
// Connects `worker` to every daemon of the descriptor, in rank order (endpoint r is daemon r).
// A daemon that is down gets an unconnected endpoint (its calls fail at once); so does one that
// did not answer within kFirstConnectTry while the chain table of those that did has it offline
// (a node of the job failed: it is not waited for, for the whole connect timeout).
constexpr std::chrono::milliseconds kFirstConnectTry{2000};
Result<std::vector<transport::Endpoint>> connect_daemons(transport::Worker& worker, const ClusterInfo& info);

} // namespace jobfs::client
