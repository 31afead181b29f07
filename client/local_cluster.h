// local_cluster.h: N jobfsd processes on this host, for `jobfs local up` and for tests.
//
// Starts the daemons on free loopback ports with data directories under `dir`, a fresh job
// secret, waits until every one printed "ready", and writes the cluster descriptor
// <dir>/cluster that clients read. stop() ends them gracefully (SIGTERM, then waits);
// the destructor does so too. A daemon's standard error goes to <dir>/jobfsd.<rank>.log.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "client/cluster.h"
#include "result.h"

namespace jobfs::client {

struct LocalClusterOptions {
    std::string jobfsd;             // path of the jobfsd program
    std::string dir;                // where data, logs and the descriptor go
    uint32_t daemons = 3;
    std::vector<std::string> extra_args; // passed to every jobfsd
    std::chrono::milliseconds ready_timeout{30000};
};

class LocalCluster {
public:
    static Result<std::unique_ptr<LocalCluster>> start(const LocalClusterOptions& options);
    ~LocalCluster();

    const ClusterInfo& info() const { return info_; }
    std::string descriptor_path() const { return options_.dir + "/cluster"; }
    pid_t pid(uint32_t rank) const { return pids_[rank]; }

    Status stop(std::chrono::milliseconds grace = std::chrono::milliseconds(15000));
    void kill(uint32_t rank); // SIGKILL one daemon (fault injection)
    // Starts a killed daemon again on its data directory and waits for its "ready".
    Status restart(uint32_t rank);
    // Lets the daemons outlive this object (jobfs local up): their pids go to <dir>/pids, where
    // stop_detached() finds them.
    Status detach();
    static Status stop_detached(const std::string& dir, std::chrono::milliseconds grace = std::chrono::milliseconds(15000));

private:
    explicit LocalCluster(LocalClusterOptions o) : options_(std::move(o)) {}
    static Result<std::unique_ptr<LocalCluster>> start_once(const LocalClusterOptions& options);
    LocalClusterOptions options_;
    ClusterInfo info_;
    std::vector<pid_t> pids_;
    std::vector<std::vector<std::string>> args_; // each daemon's command line, for restart
    // Forks daemon `rank` with args_[rank]; returns the read end of its stdout.
    Result<int> spawn(uint32_t rank);
};

// A loopback TCP port that binds now, below the kernel's ephemeral range (see the .cc), and
// none of the last 1024 this process was given. Thread-safe.
Result<uint16_t> pick_free_port();

// A random job secret (32 hex digits from the kernel's random source).
Result<std::string> make_secret();

} // namespace jobfs::client
