// daemon.h: one jobfsd: its stores, its transport worker, and its place in the group.
//
// start() finds its rank and the group (from the static `daemons` list, or from PMIx with
// bootstrap=pmix: server/bootstrap_pmix.h), and returns once this daemon listens and is
// connected to every peer of the group (under PMIx: once every daemon is; the moment jobfsd
// prints "ready"; PMIx is finalized then); then rank 0 writes cluster-file if one is set.
// stop() is the graceful end (SIGTERM): remove the cluster file, stop listening, finish what
// is in flight, close the stores. Lock rules: a Daemon is driven by one thread (jobfsd's
// main); its services run on the transport and I/O threads it owns.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "result.h"
#include "server/config.h"

namespace jobfs::server {

class Daemon {
public:
    static Result<std::unique_ptr<Daemon>> start(const DaemonConfig& config);
    ~Daemon(); // stop() if not stopped yet

    void stop();
    uint32_t rank() const { return rank_; }
    uint32_t size() const { return static_cast<uint32_t>(config_.daemons.size()); }
    uint16_t port() const { return port_; }

    struct Parts;

private:
    Daemon(DaemonConfig config, uint32_t rank);
    DaemonConfig config_;
    uint32_t rank_;
    uint16_t port_ = 0;
    bool wrote_cluster_file_ = false;
    std::unique_ptr<Parts> parts_;
};

// This daemon's rank under the static bootstrap: config.rank, or the entry of config.daemons
// that names this daemon's listen address and port (a port that only one entry uses is enough).
Result<uint32_t> find_rank(const DaemonConfig& config);

// The job secret from config.secret_file (trailing newline removed); empty without a file.
Result<std::string> read_secret(const std::string& path);

} // namespace jobfs::server
