// jobfsd: the jobfs storage daemon. Prints "ready rank=R size=N port=P" once the whole group
// is connected (started by hand or a script with bootstrap=static, or as a job of its own by
// mpirun / srun --mpi=pmix with bootstrap=pmix); SIGTERM or SIGINT ends it gracefully (exit
// 0). Exit 1: could not start (the reason is on stderr); exit 2: bad configuration or command
// line.
#include <signal.h>
#include <sys/resource.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "log.h"
#include "priority.h"
#include "server/config.h"
#include "server/daemon.h"

using namespace jobfs;

int main(int argc, char** argv) {
    std::string help;
    auto config = server::parse_daemon_config(argc, argv, &help);
    if (!help.empty()) {
        std::printf("usage: jobfsd [--config jobfs.conf] [options]\n\n%s", help.c_str());
        return 0;
    }
    if (!config.ok()) {
        std::fprintf(stderr, "jobfsd: %s (jobfsd --help lists the options)\n", config.status().message().c_str());
        return 2;
    }
    log::Level level = config->log_level == "error" ? log::Level::error
                       : config->log_level == "info" ? log::Level::info
                       : config->log_level == "debug" ? log::Level::debug
                                                      : log::Level::warn;
    log::set_level(level);
    std::string name = "jobfsd"; // under PMIx the rank is known only once started
    if (config->bootstrap == "static")
        if (auto rank = server::find_rank(*config); rank.ok()) name += "." + std::to_string(*rank);
    log::set_name(name);

    // A peer or client that vanishes must cost an error, not the daemon (EPIPE, not SIGPIPE).
    ::signal(SIGPIPE, SIG_IGN);
    // Descriptors: up to three per open chunk (data, checksums, the data again with O_DIRECT;
    // 256 chunks kept open), one per connection of every client of the job, SQLite's. A soft
    // limit of 1024, common under Slurm, is too tight for a large job: take the hard limit.
    if (rlimit nofile{}; ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        if (::setrlimit(RLIMIT_NOFILE, &nofile) != 0) JOBFS_WARN("cannot raise the open file limit: %s", std::strerror(errno));
    }
    // Block the stop signals before any thread starts, so that only sigwait() below sees them.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    // Before any thread starts: they all inherit it (priority.h says why the daemon runs ahead).
    if (config->nice != daemon_priority_get()) {
        Status s = daemon_priority_set(config->nice);
        if (!s.ok())
            JOBFS_WARN("%s: running at nice %d instead; MPI ranks that busy-wait may then hold requests back "
                       "(nice in jobfs.conf(5))", s.to_string().c_str(), daemon_priority_get());
    }

    auto daemon = server::Daemon::start(*config);
    if (!daemon.ok()) {
        JOBFS_ERROR("cannot start: %s", daemon.status().to_string().c_str());
        return 1;
    }
    log::set_name("jobfsd." + std::to_string((*daemon)->rank())); // known now under PMIx too
    std::printf("ready rank=%u size=%u port=%u\n", (*daemon)->rank(), (*daemon)->size(), (*daemon)->port());
    std::fflush(stdout);
    // Whoever waited for "ready" may close its end now: UCX (which logs to stdout) must not
    // write into that pipe later, so stdout becomes the log (stderr) from here on.
    ::dup2(STDERR_FILENO, STDOUT_FILENO);

    int sig = 0;
    sigwait(&stop_signals, &sig);
    JOBFS_INFO("signal %d: stopping", sig);
    (*daemon)->stop();
    JOBFS_INFO("stopped");
    return 0;
}
