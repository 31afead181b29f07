// bootstrap_pmix.h: jobfsd's place in the group from PMIx, for daemons started by a launcher
// (`mpirun -np N jobfsd ...`, `srun --mpi=pmix -n N jobfsd ...`) instead of from a static list.
//
// The rank is PMIx's rank of this process, the size PMIX_JOB_SIZE: jobfsd must be the only
// program of its job (an MPMD launch that mixes it with other programs is refused). Every
// daemon Puts the host:port it listens on (PMIX_GLOBAL), Commits, and a Fence with
// PMIX_COLLECT_DATA hands everyone everyone's: the same `daemons` list the static bootstrap
// reads from its configuration. Lock rules: one thread (Daemon::start) uses it; PMIx runs its
// own progress thread until finalize, which inherits jobfsd's blocked stop signals.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "result.h"

namespace jobfs::server {

class PmixBootstrap {
public:
    // PMIx_Init and the job's size. Fails promptly (refused) when no PMIx server is there.
    static Result<std::unique_ptr<PmixBootstrap>> init();
    ~PmixBootstrap(); // finalize(kFinalizeLimit) if not done yet

    // PMIx_Finalize, waited for at most `limit`. A launcher that is ending the job may not
    // answer it (mpirun, between its SIGTERM and its SIGKILL, serves no PMIx request, so
    // jobfsd finalizes as soon as the group is up, not at stop). Then this returns
    // Code::timeout and leaves the call running on a thread of its own, which is harmless.
    Status finalize(std::chrono::milliseconds limit);
    static constexpr std::chrono::milliseconds kFinalizeLimit{2000};

    PmixBootstrap(const PmixBootstrap&) = delete;
    PmixBootstrap& operator=(const PmixBootstrap&) = delete;

    uint32_t rank() const { return rank_; }
    uint32_t size() const { return size_; }

    // Publishes `address` (host:port) and returns every daemon's, by rank, once all published
    // theirs (Put, Commit, Fence with collected data, Get of each rank).
    Result<std::vector<std::string>> exchange(const std::string& address, std::chrono::milliseconds timeout);

    // Returns once every daemon of the job got here (a Fence without data).
    Status barrier(std::chrono::milliseconds timeout);

    struct Impl;

private:
    PmixBootstrap() = default;
    std::unique_ptr<Impl> impl_;
    uint32_t rank_ = 0;
    uint32_t size_ = 0;
    bool finalized_ = false;
};

// The host peers and clients are told to reach this daemon at: `listen` when it names one
// address; for a wildcard listen (0.0.0.0, ::, empty) this node's hostname if it resolves to
// an address other than loopback, else the first IPv4 address of an interface that is up and
// not loopback, else the hostname anyway (one-host groups).
std::string advertised_host(const std::string& listen);

} // namespace jobfs::server
