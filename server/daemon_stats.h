// daemon_stats.h: the DaemonStats RPC: what a daemon costs its node (resident memory, CPU time
// used so far, threads, uptime), for `jobfs status` and for checking that it idles at rest.
#pragma once

#include <functional>

#include "daemon_protocol.h"
#include "result.h"
#include "worker.h"

namespace jobfs::server {

// This process's figures now: RSS from /proc/self/status (VmRSS), threads from the same file,
// CPU time from getrusage(RUSAGE_SELF), uptime since the first call (ServeDaemonStats makes
// that call at startup).
Result<proto::DaemonStatsResponse> daemon_stats();

// Registers the DaemonStats handler on `worker`. It answers on the progress thread: reading
// one /proc file and getrusage do not block. `add` fills in the service's own counters.
void serve_daemon_stats(transport::Worker& worker, std::function<void(proto::DaemonStatsResponse&)> add);

} // namespace jobfs::server
