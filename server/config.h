// config.h: jobfsd's configuration: one table of typed items, read from a jobfs.conf file
// (key=value lines, '#' comments, as slurm.conf) and overridden by command-line flags of the
// same names (--data-dir or data_dir=... / data-dir=... in the file).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "result.h"

namespace jobfs::server {

struct DaemonConfig {
    std::string config_file;            // config: the jobfs.conf read, if any
    std::string data_dir;               // data-dir: where chunks and metadata live (required;
                                        // %r becomes the rank, %% a percent sign)
    std::string listen = "0.0.0.0";     // listen: address to listen on
    uint16_t port = 7117;               // port: TCP port of the transport listener (0: any free
                                        // one, pmix bootstrap only)
    uint64_t chunk_size = 4ull << 20;   // chunk-size: default stripe chunk (64 KiB multiple)
    uint32_t stripe_count = 0;          // stripe-count: daemons a file spreads over (0 = all)
    uint32_t replicas = 1;              // replicas: copies of each chunk (1..3)
    std::string bootstrap = "static";   // bootstrap: static (daemons list) or pmix
    std::vector<std::string> daemons;   // daemons: host:port of every daemon, in rank order
    int64_t rank = -1;                  // rank: this daemon's index in daemons (-1: find by address)
    std::string secret_file;            // secret-file: per-job secret shared by daemons and clients
    std::string cluster_file;           // cluster-file: rank 0 writes the client descriptor here
    uint32_t io_threads = 4;            // io-threads: threads doing disk and SQLite work
    uint32_t busy_poll_us = 0;          // busy-poll-us: transport polling after activity
    int nice = -10;                     // nice: CPU priority of the daemon's threads (priority.h)
    bool direct_io = false;             // direct-io: aligned chunk writes with O_DIRECT (chunk_store.h)
    uint64_t direct_io_min = 256 << 10; // direct-io-min: ... of at least this many bytes
    uint64_t early_writeback_min = 256 << 10; // early-writeback-min: start writing buffered pieces
                                              // this large to the disk at once (0: never)
    bool local_reads = true;            // local-reads: readers on this node read chunk files themselves
                                        // (local_read_server.h)
    std::chrono::milliseconds attr_lease{3000};       // attr-lease-ms: clients keep leased attributes (attr_leases.h)
    std::chrono::milliseconds call_timeout{30000};    // call-timeout-ms
    std::chrono::milliseconds startup_timeout{60000}; // startup-timeout-ms: wait for the group
    std::chrono::milliseconds heartbeat{200};          // heartbeat-ms: between heartbeats to each peer
    std::chrono::milliseconds failure_timeout{5000};   // failure-timeout-ms: silence that makes a daemon offline
    std::string log_level = "warn";     // log-level: error, warn, info, debug
};

// Parses "4M", "4MiB", "64k", "1G", "65536" (binary units). Code::invalid otherwise.
Result<uint64_t> parse_size(const std::string& text);

// Reads the configuration: defaults, then the file named by --config (if any), then flags.
// --help fills `help` and returns the defaults. Errors name the file and line or the flag.
Result<DaemonConfig> parse_daemon_config(int argc, const char* const* argv, std::string* help = nullptr);

// A path with %r replaced by the rank and %% by '%' (data-dir under PMIx, where the rank is
// not known when the command line is written). Any other '%' stays as it is.
std::string expand_rank(const std::string& pattern, uint32_t rank);

// The option table as text (for --help and the man page).
std::string daemon_config_help();

} // namespace jobfs::server
