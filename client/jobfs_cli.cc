// jobfs: the command-line tool. `jobfs help` lists the commands; `jobfs CMD --help` explains one.
//
//   jobfs local up [-n N] [--dir D]     start N daemons on this host, print the export line
//   jobfs local down [--dir D]          stop them and remove what `local up` created
//   jobfs status [--idle-check[=S]]     the daemons, their disks, namespaces, RSS and CPU
//   jobfs ls|stat|mkdir|rm PATH…        namespace
//   jobfs cp SRC DST                    copy between the local file system and jobfs
//                                       (jobfs paths are written jobfs:/path)
//   jobfs layout PATH [--chunk-size S] [--stripe-count N]
//                                       show or set the striping of a file or directory
//   jobfs ckpt [-p P] [--block-mib M] [--strided [--stride-mib S]]
//                                       the checkpoint job: P processes write one shared file
//                                       (contiguous blocks or strided pieces), read it back,
//                                       verify it, and compare with the local disk
//   jobfs stage-in s3://B/PREFIX DST    copy objects from an S3 store (stage/, man jobfs-stage)
//   jobfs stage-out SRC s3://B/PREFIX   copy files to an S3 store
// Exit status: 0 success, 1 failure (the reason on stderr), 2 bad usage.
#include <boost/program_options.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cctype>
#include <cstring>
#include <fstream>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <thread>

#include "client/client.h"
#include "client/local_cluster.h"
#include "client/scrub.h"
#include "client/stage/stage.h"
#include "log.h"

namespace po = boost::program_options;
using namespace jobfs;
using namespace jobfs::client;
using Clock = std::chrono::steady_clock;

namespace {

int fail(const Status& s) {
    std::fprintf(stderr, "jobfs: %s\n", s.message().empty() ? s.to_string().c_str() : s.message().c_str());
    return 1;
}

int usage(const std::string& msg) {
    std::fprintf(stderr, "jobfs: %s (jobfs help lists the commands)\n", msg.c_str());
    return 2;
}

std::string default_local_dir() { return "/tmp/jobfs-local-" + std::to_string(getuid()); }

std::string self_dir() {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    std::string d(self);
    return d.substr(0, d.rfind('/'));
}

// jobfsd: $JOBFSD, next to an installed jobfs (../sbin), in a build tree (../server), or PATH.
std::string find_jobfsd() {
    if (const char* e = std::getenv("JOBFSD")) return e;
    for (const std::string& c : {self_dir() + "/../sbin/jobfsd", self_dir() + "/../server/jobfsd"})
        if (access(c.c_str(), X_OK) == 0) return c;
    return "jobfsd";
}

// Parses a subcommand's options; returns false (after printing help or an error) when the
// command should not run, with the exit code in *rc.
bool parse(int argc, char** argv, po::options_description& desc, po::positional_options_description& pos,
           po::variables_map& vm, const char* synopsis, int* rc) {
    desc.add_options()("help,h", "this help");
    try {
        po::store(po::command_line_parser(argc, argv).options(desc).positional(pos).run(), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        *rc = usage(e.what());
        return false;
    }
    if (vm.count("help")) {
        std::cout << "usage: " << synopsis << "\n\n" << desc;
        *rc = 0;
        return false;
    }
    return true;
}

Result<std::unique_ptr<Client>> connect() { return Client::connect_env(); }

std::string type_char(uint8_t t) { return t == 2 ? "d" : t == 3 ? "l" : "-"; }

std::string mode_string(const proto::Attr& a) {
    std::string s = type_char(a.type);
    const char* rwx = "rwxrwxrwx";
    for (int i = 0; i < 9; ++i) s += (a.mode & (0400 >> i)) ? rwx[i] : '-';
    return s;
}

// ---- local up / down ------------------------------------------------------------------------

int cmd_local(int argc, char** argv) {
    if (argc < 2) return usage("local up or local down");
    const std::string what = argv[1];
    po::options_description desc("options");
    std::string dir;
    uint32_t n = 3;
    std::string chunk, log_level;
    desc.add_options()("dir,d", po::value(&dir)->default_value(default_local_dir()), "directory for data, logs and the descriptor")
        ("daemons,n", po::value(&n)->default_value(3), "daemons to start (local up)")
        ("chunk-size", po::value(&chunk)->default_value("4M"), "chunk size of the daemons (local up)")
        ("log-level", po::value(&log_level)->default_value("warn"), "the daemons' log level: error, warn, info or debug (local up)");
    po::positional_options_description pos;
    po::variables_map vm;
    int rc = 0;
    if (!parse(argc - 1, argv + 1, desc, pos, vm, "jobfs local up|down [options]", &rc)) return rc;
    if (what == "up") {
        if (access((dir + "/pids").c_str(), F_OK) == 0)
            return fail(Status(Code::exists, "a local file system already runs in " + dir + " (jobfs local down first)"));
        LocalClusterOptions o;
        o.jobfsd = find_jobfsd();
        o.dir = dir;
        o.daemons = n;
        o.extra_args = {"--chunk-size", chunk, "--log-level", log_level};
        auto c = LocalCluster::start(o);
        if (!c.ok()) return fail(c.status().with_context("local up"));
        Status d = (*c)->detach();
        if (!d.ok()) return fail(d);
        std::printf("jobfs: %u daemons up in %s\nexport JOBFS_CLUSTER=%s\n", n, dir.c_str(), (*c)->descriptor_path().c_str());
        return 0;
    }
    if (what == "down") {
        Status s = LocalCluster::stop_detached(dir);
        if (!s.ok()) return fail(s);
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
        if (ec) return fail(Status(Code::io, "remove " + dir + ": " + ec.message()));
        std::printf("jobfs: local file system in %s stopped and removed\n", dir.c_str());
        return 0;
    }
    return usage("local up or local down, not '" + what + "'");
}

// ---- namespace commands ---------------------------------------------------------------------

int cmd_status(int argc, char** argv) {
    po::options_description desc("options");
    double idle_secs = 0;
    desc.add_options()("idle-check", po::value(&idle_secs)->implicit_value(5)->value_name("SECONDS"),
                       "sample each daemon's CPU time twice, SECONDS apart (default 5), and print its CPU %");
    po::positional_options_description pos;
    po::variables_map vm;
    int rc = 0;
    if (!parse(argc, argv, desc, pos, vm, "jobfs status [--idle-check[=SECONDS]]", &rc)) return rc;
    if (vm.count("idle-check") && !(idle_secs > 0 && idle_secs <= 3600))
        return usage("--idle-check takes 0 < SECONDS <= 3600");
    auto info = read_cluster_from_env();
    if (!info.ok()) return fail(info.status());
    const auto connected = Clock::now();
    auto c = Client::connect(*info);
    if (!c.ok()) return fail(c.status());
    const uint32_t n = (*c)->daemon_count();
    std::vector<proto::DaemonStatsResponse> first(n);
    // The chain table (docs/replication.md): each daemon's state as the newest table has it.
    auto table = (*c)->chain_table();
    if (!table.ok()) return fail(table.status());
    if (table->version == 0)
        std::printf("chain table: none (daemons without membership)\n");
    else
        std::printf("chain table: version %llu, published by daemon %u\n", static_cast<unsigned long long>(table->version),
                    table->manager);
    auto state_of = [&](uint32_t r) -> std::string {
        if (table->states.size() != n) return "serving";
        switch (table->states[r]) {
        case proto::kDaemonServing: return "serving";
        case proto::kDaemonSyncing: {
            const uint64_t total = table->sync_total[r], done = table->sync_done[r];
            return "syncing " + std::to_string(total ? done * 100 / total : 0) + "%";
        }
        default: return "offline";
        }
    };
    std::printf("%-4s %-22s %-12s %12s %12s %10s %10s %10s %10s %7s %6s %7s %11s %10s %10s %8s %10s\n", "rank", "address",
                "state", "disk total", "disk free", "inodes", "chunks", "rss", "cpu", "threads", "locks", "conns", "local reads", "arena wr",
                "shm fwd", "leases", "delegated");
    bool all_up = true;
    for (uint32_t r = 0; r < n; ++r) {
        const auto& ep = (*c)->daemons()[r];
        auto space = transport::rpc::call<proto::DiskSpace>(ep, proto::Empty{});
        auto counts = transport::rpc::call<proto::MetaCounts>(ep, proto::Empty{});
        auto stats = transport::rpc::call<proto::DaemonStats>(ep, proto::Empty{});
        if (!space.ok() || !stats.ok()) {
            // A lost daemon is part of the picture, not the end of it.
            all_up = false;
            std::printf("%-4u %-22s %-12s (%s)\n", r, info->daemons[r].c_str(), state_of(r).c_str(),
                        (space.ok() ? stats.status() : space.status()).message().c_str());
            continue;
        }
        first[r] = *stats;
        std::printf("%-4u %-22s %-12s %10.1f G %10.1f G %10llu %10llu %8.1f M %8.2f s %7u %6llu %7llu %11llu %8.1f M %8.1f M %8llu %10llu\n", r,
                    info->daemons[r].c_str(), state_of(r).c_str(), space->total_bytes / 1e9, space->free_bytes / 1e9,
                    counts.ok() ? static_cast<unsigned long long>(counts->inodes) : 0ull,
                    static_cast<unsigned long long>(space->chunk_files), stats->rss_bytes / 1048576.0,
                    (stats->cpu_user_us + stats->cpu_system_us) / 1e6, stats->threads,
                    static_cast<unsigned long long>(stats->locks_held),
                    static_cast<unsigned long long>(stats->connections_accepted),
                    static_cast<unsigned long long>(stats->local_reads), stats->arena_write_bytes / 1048576.0,
                    stats->shm_forward_bytes / 1048576.0, static_cast<unsigned long long>(stats->leases_held),
                    static_cast<unsigned long long>(stats->delegations_granted));
    }
    if (!vm.count("idle-check")) return all_up ? 0 : 1;
    // CPU % over the interval: the CPU time each daemon used between two samples, over the
    // wall time between them (100 % = one core busy). A daemon at rest should show 0.0.
    // The first sample waits until this connection's set-up no longer counts: a daemon looks
    // for set-up traffic every 100 ms for set_up_ticks after a connection (worker.cc).
    std::fflush(stdout);
    std::this_thread::sleep_until(connected + transport::WorkerOptions{}.set_up_ticks);
    std::vector<Clock::time_point> t0(n);
    for (uint32_t r = 0; r < n; ++r) {
        auto s = transport::rpc::call<proto::DaemonStats>((*c)->daemons()[r], proto::Empty{});
        if (!s.ok()) return fail(s.status().with_context("daemon " + std::to_string(r)));
        first[r] = *s;
        t0[r] = Clock::now();
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(idle_secs));
    std::printf("\nCPU over %.1f s:\n", idle_secs);
    for (uint32_t r = 0; r < n; ++r) {
        auto s = transport::rpc::call<proto::DaemonStats>((*c)->daemons()[r], proto::Empty{});
        if (!s.ok()) return fail(s.status().with_context("daemon " + std::to_string(r)));
        const double wall = std::chrono::duration<double>(Clock::now() - t0[r]).count();
        const double cpu = ((s->cpu_user_us + s->cpu_system_us) - (first[r].cpu_user_us + first[r].cpu_system_us)) / 1e6;
        const double beats = static_cast<double>(s->heartbeats_sent - first[r].heartbeats_sent);
        std::printf("%-4u %-22s cpu %6.2f %%  (%.3f s user+system)  rss %.1f M  heartbeats sent %.1f/s\n", r,
                    info->daemons[r].c_str(), wall > 0 ? 100.0 * cpu / wall : 0.0, cpu, s->rss_bytes / 1048576.0,
                    wall > 0 ? beats / wall : 0.0);
    }
    return 0;
}

int cmd_scrub(int argc, char** argv) {
    po::options_description desc("options");
    std::string path = "/";
    bool quiet = false;
    desc.add_options()("path", po::value(&path), "file or directory to scrub (default /)")
        ("quiet,q", po::bool_switch(&quiet), "no line per file");
    po::positional_options_description pos;
    pos.add("path", 1);
    po::variables_map vm;
    int rc = 0;
    if (!parse(argc, argv, desc, pos, vm, "jobfs scrub [PATH] [-q]\n\n"
               "Has every replica of every chunk of the files below PATH read and verify its copy,\n"
               "repairs corrupt copies and copies that differ from the chain's tail, and reports.", &rc))
        return rc;
    auto info = read_cluster_from_env();
    if (!info.ok()) return fail(info.status());
    auto c = Client::connect(*info);
    if (!c.ok()) return fail(c.status());
    auto rep = scrub(**c, path, [&](const std::string& p, const ScrubReport& r) {
        if (!quiet)
            std::printf("%s: %llu copies checked so far, %llu corrupt, %llu repaired\n", p.c_str(),
                        static_cast<unsigned long long>(r.copies), static_cast<unsigned long long>(r.corrupt),
                        static_cast<unsigned long long>(r.repaired));
    });
    if (!rep.ok()) return fail(rep.status().with_context("scrub " + path));
    std::printf("scrub %s: %llu files, %llu chunks, %llu copies, %.1f MB verified; %llu corrupt, %llu differing, "
                "%llu repaired, %llu not repaired, %llu unreachable\n",
                path.c_str(), static_cast<unsigned long long>(rep->files), static_cast<unsigned long long>(rep->chunks),
                static_cast<unsigned long long>(rep->copies), rep->bytes / 1e6,
                static_cast<unsigned long long>(rep->corrupt), static_cast<unsigned long long>(rep->mismatched),
                static_cast<unsigned long long>(rep->repaired), static_cast<unsigned long long>(rep->unrepaired),
                static_cast<unsigned long long>(rep->unreachable));
    // Exit status: 0 all copies good (or repaired), 1 something could not be checked or fixed.
    return rep->unrepaired == 0 && rep->unreachable == 0 ? 0 : 1;
}

int cmd_ls(int argc, char** argv) {
    po::options_description desc("options");
    std::string path;
    desc.add_options()("path", po::value(&path)->default_value("/"), "directory to list")("long,l", "sizes, modes, owners");
    po::positional_options_description pos;
    pos.add("path", 1);
    po::variables_map vm;
    int rc = 0;
    if (!parse(argc, argv, desc, pos, vm, "jobfs ls [-l] [PATH]", &rc)) return rc;
    auto c = connect();
    if (!c.ok()) return fail(c.status());
    auto a = (*c)->stat(path);
    if (!a.ok()) return fail(a.status());
    std::vector<std::pair<std::string, proto::Attr>> rows;
    if (a->type != 2) {
        rows.push_back({path, *a});
    } else {
        auto entries = (*c)->list(path);
        if (!entries.ok()) return fail(entries.status());
        for (auto& e : *entries) {
            auto st = vm.count("long") ? (*c)->lstat(path + "/" + e.name) : Result<proto::Attr>(proto::Attr{});
            rows.push_back({e.name, st.ok() ? *st : proto::Attr{}});
        }
    }
    for (auto& [name, st] : rows) {
        if (vm.count("long"))
            std::printf("%s %6u %6u %14llu %s\n", mode_string(st).c_str(), st.uid, st.gid,
                        static_cast<unsigned long long>(st.size), name.c_str());
        else
            std::printf("%s\n", name.c_str());
    }
    return 0;
}

int cmd_stat(int argc, char** argv) {
    if (argc < 2 || !std::strcmp(argv[1], "--help")) return argc < 2 ? usage("stat PATH") : (std::puts("usage: jobfs stat PATH"), 0);
    auto c = connect();
    if (!c.ok()) return fail(c.status());
    auto a = (*c)->lstat(argv[1]);
    if (!a.ok()) return fail(a.status());
    std::printf("  path: %s\n  type: %s\n inode: %llu (shard %u)\n  size: %llu\n  mode: %04o (%s)\n   uid: %u\n   gid: %u\n links: %u\n"
                "layout: chunk %u bytes, stripe %u%s\n",
                argv[1], a->type == 2 ? "directory" : a->type == 3 ? "symlink" : "file",
                static_cast<unsigned long long>(a->ino), proto::shard_of(a->ino), static_cast<unsigned long long>(a->size),
                a->mode & 07777, mode_string(*a).c_str(), a->uid, a->gid, a->nlink, a->chunk_size, a->stripe_count,
                a->stripe_count == 0 ? " (all daemons)" : "");
    return 0;
}

int cmd_mkdir(int argc, char** argv) {
    po::options_description desc("options");
    std::vector<std::string> paths;
    desc.add_options()("parents,p", "make parents as needed, no error if existing")("path", po::value(&paths), "directories");
    po::positional_options_description pos;
    pos.add("path", -1);
    po::variables_map vm;
    int rc = 0;
    if (!parse(argc, argv, desc, pos, vm, "jobfs mkdir [-p] PATH...", &rc)) return rc;
    if (paths.empty()) return usage("mkdir needs a path");
    auto c = connect();
    if (!c.ok()) return fail(c.status());
    for (const auto& p : paths) {
        if (vm.count("parents")) {
            std::string sofar;
            std::stringstream ss(p);
            for (std::string part; std::getline(ss, part, '/');) {
                if (part.empty()) continue;
                sofar += "/" + part;
                auto r = (*c)->mkdir(sofar);
                if (!r.ok() && r.status().code() != Code::exists) return fail(r.status());
            }
        } else {
            auto r = (*c)->mkdir(p);
            if (!r.ok()) return fail(r.status());
        }
    }
    return 0;
}

Status remove_tree(Client& c, const std::string& path) {
    auto a = c.lstat(path);
    if (!a.ok()) return a.status();
    if (a->type != 2) return c.unlink(path);
    auto entries = c.list(path);
    if (!entries.ok()) return entries.status();
    for (auto& e : *entries) {
        Status s = remove_tree(c, path + "/" + e.name);
        if (!s.ok()) return s;
    }
    return c.rmdir(path);
}

int cmd_rm(int argc, char** argv) {
    po::options_description desc("options");
    std::vector<std::string> paths;
    desc.add_options()("recursive,r", "remove directories and their contents")("path", po::value(&paths), "paths");
    po::positional_options_description pos;
    pos.add("path", -1);
    po::variables_map vm;
    int rc = 0;
    if (!parse(argc, argv, desc, pos, vm, "jobfs rm [-r] PATH...", &rc)) return rc;
    if (paths.empty()) return usage("rm needs a path");
    auto c = connect();
    if (!c.ok()) return fail(c.status());
    for (const auto& p : paths) {
        Status s = vm.count("recursive") ? remove_tree(**c, p) : (*c)->unlink(p);
        if (!s.ok()) return fail(s);
    }
    return 0;
}

// ---- cp -------------------------------------------------------------------------------------

void progress(const char* what, uint64_t done, uint64_t total, Clock::time_point t0) {
    if (!isatty(STDERR_FILENO)) return;
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    int pct = total ? static_cast<int>(100.0 * done / total) : 100;
    std::fprintf(stderr, "\r%s [%-40s] %3d%% %8.1f MB/s", what, std::string(pct * 40 / 100, '#').c_str(), pct,
                 secs > 0 ? done / secs / 1e6 : 0.0);
    if (done >= total) std::fputc('\n', stderr);
}

int cmd_cp(int argc, char** argv) {
    po::options_description desc("options");
    std::string src, dst;
    size_t buf_mib = 64;
    desc.add_options()("src", po::value(&src), "source: a local path or jobfs:/path")
        ("dst", po::value(&dst), "destination: a local path or jobfs:/path")
        ("buffer-mib", po::value(&buf_mib)->default_value(64), "MiB moved per request");
    po::positional_options_description pos;
    pos.add("src", 1).add("dst", 1);
    po::variables_map vm;
    int rc = 0;
    if (!parse(argc, argv, desc, pos, vm, "jobfs cp SRC DST   (one of them jobfs:/path)", &rc)) return rc;
    if (src.empty() || dst.empty()) return usage("cp needs SRC and DST");
    const bool in = dst.rfind("jobfs:", 0) == 0, out = src.rfind("jobfs:", 0) == 0;
    if (in == out) return usage("cp copies between the local file system and jobfs: prefix exactly one path with jobfs:");
    if (buf_mib == 0) return usage("--buffer-mib must be at least 1");
    auto c = connect();
    if (!c.ok()) return fail(c.status());
    // The buffer: no larger than the file (at least 1 MiB; a pipe gets it all) and not zeroed
    // first. A 64 MiB buffer zeroed for a 64 KiB file was two thirds of the command's 0.43 s
    // (memset and page faults, perf on this VM).
    std::unique_ptr<uint8_t[]> buffer;
    std::span<uint8_t> buf;
    auto make_buffer = [&](uint64_t file_size, bool regular) {
        uint64_t n = buf_mib << 20;
        if (regular) n = std::min<uint64_t>(n, std::max<uint64_t>(file_size, 1 << 20));
        buffer = std::make_unique_for_overwrite<uint8_t[]>(n);
        buf = {buffer.get(), n};
    };
    const auto t0 = Clock::now();
    if (in) {
        int fd = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return fail(Status::from_errno(errno, "open " + src));
        struct stat st {};
        fstat(fd, &st);
        make_buffer(static_cast<uint64_t>(st.st_size), S_ISREG(st.st_mode));
        auto f = (*c)->open(dst.substr(6), O_WRONLY | O_CREAT | O_TRUNC, st.st_mode & 0777);
        if (!f.ok()) {
            ::close(fd);
            return fail(f.status());
        }
        uint64_t off = 0;
        for (;;) {
            ssize_t n = ::read(fd, buf.data(), buf.size());
            if (n < 0) {
                ::close(fd);
                return fail(Status::from_errno(errno, "read " + src));
            }
            if (n == 0) break;
            Status s = (*c)->pwrite(**f, off, std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)));
            if (!s.ok()) {
                ::close(fd);
                return fail(s.with_context("write " + dst));
            }
            off += static_cast<uint64_t>(n);
            progress("cp", off, static_cast<uint64_t>(st.st_size), t0);
        }
        ::close(fd);
        Status s = (*c)->close(**f);
        if (!s.ok()) return fail(s);
        return 0;
    }
    auto f = (*c)->open(src.substr(6), O_RDONLY);
    if (!f.ok()) return fail(f.status());
    int fd = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return fail(Status::from_errno(errno, "create " + dst));
    const uint64_t size = (*f)->size();
    make_buffer(size, true);
    for (uint64_t off = 0; off < size;) {
        auto n = (*c)->pread(**f, off, buf);
        if (!n.ok()) {
            ::close(fd);
            return fail(n.status().with_context("read " + src));
        }
        if (*n == 0) break;
        if (::write(fd, buf.data(), *n) != static_cast<ssize_t>(*n)) {
            ::close(fd);
            return fail(Status::from_errno(errno, "write " + dst));
        }
        off += *n;
        progress("cp", off, size, t0);
    }
    if (::close(fd) != 0) return fail(Status::from_errno(errno, "close " + dst));
    return 0;
}

// ---- stage-in / stage-out -------------------------------------------------------------------

// SLURM_NODEID / SLURM_NNODES as defaults of --rank / --ranks, so that every node of a job
// takes its share without options.
int env_int(const char* name, int dflt) {
    const char* v = std::getenv(name);
    return v && *v ? std::atoi(v) : dflt;
}

std::optional<uint64_t> parse_size(const std::string& text);

// Only parses and calls: the staging itself is stage/stage.cc.
int cmd_stage(int argc, char** argv, bool in) {
    po::options_description desc("options");
    stage::StageOptions o;
    o.in = in;
    std::string part = "16M", threshold = "64M", progress = "auto";
    desc.add_options()("src", po::value(&o.src), "source")("dst", po::value(&o.dst), "destination")
        ("parallel,P", po::value(&o.parallel)->default_value(8), "requests in flight on this node")
        ("part-size", po::value(&part)->default_value("16M"), "objects larger than this move in parts of this size (ranged GETs, multipart upload)")
        ("multipart-threshold", po::value(&threshold)->default_value("64M"), "stage-out: files up to this size are one PUT (held in memory), larger ones multipart")
        ("rank", po::value(&o.rank)->default_value(env_int("SLURM_NODEID", 0)), "this node's share (default $SLURM_NODEID)")
        ("ranks", po::value(&o.ranks)->default_value(env_int("SLURM_NNODES", 1)), "nodes sharing the work (default $SLURM_NNODES)")
        ("endpoint-url", po::value(&o.s3.endpoint_url), "S3 endpoint, e.g. http://127.0.0.1:9000 (default $AWS_ENDPOINT_URL, else AWS)")
        ("profile", po::value(&o.s3.profile), "profile of ~/.aws/credentials and ~/.aws/config (default $AWS_PROFILE)")
        ("region", po::value(&o.s3.region), "signing region (default $AWS_REGION, the profile's, us-east-1)")
        ("addressing", po::value(&o.s3.addressing), "path or virtual (default: path with an endpoint URL, virtual for AWS)")
        ("manifest", po::value(&o.manifest), "write the manifest here (a path, jobfs:/path or s3:// URL)")
        ("no-manifest", "write no manifest")
        ("no-resume", "copy everything, even objects a previous run completed")
        ("retries", po::value(&o.retry.attempts)->default_value(6), "attempts per request (retried on 5xx, throttling, dropped connections)")
        ("progress", po::value(&progress)->default_value("auto"), "auto, bar, lines or none")
        ("progress-interval", po::value(&o.progress_interval_s)->default_value(5.0), "seconds between progress lines")
        ("quiet,q", "no summary line");
    po::positional_options_description pos;
    pos.add("src", 1).add("dst", 1);
    po::variables_map vm;
    int rc = 0;
    const std::string synopsis = std::string("jobfs ") + (in ? "stage-in s3://BUCKET/PREFIX DST" : "stage-out SRC s3://BUCKET/PREFIX") +
                                 "   (DST/SRC: jobfs:/path or a local path; man jobfs-stage)";
    if (!parse(argc, argv, desc, pos, vm, synopsis.c_str(), &rc)) return rc;
    if (o.src.empty() || o.dst.empty()) return usage(std::string(in ? "stage-in" : "stage-out") + " needs SRC and DST");
    auto ps = parse_size(part);
    if (!ps) return usage("--part-size '" + part + "' is not a size");
    o.part_size = *ps;
    auto pt = parse_size(threshold);
    if (!pt) return usage("--multipart-threshold '" + threshold + "' is not a size");
    o.multipart_threshold = *pt;
    if (o.parallel < 1 || o.parallel > 256) return usage("--parallel must be 1..256");
    if (o.ranks < 1 || o.rank < 0 || o.rank >= o.ranks) return usage("--rank must be in 0..ranks-1");
    if (o.retry.attempts < 1) return usage("--retries must be at least 1");
    if (progress == "auto") o.progress = -1;
    else if (progress == "bar") o.progress = 1;
    else if (progress == "lines") o.progress = 2;
    else if (progress == "none") o.progress = 0;
    else return usage("--progress is auto, bar, lines or none");
    o.write_manifest = !vm.count("no-manifest");
    o.resume = !vm.count("no-resume");
    o.quiet = vm.count("quiet") > 0;
    stage::StageSummary sum;
    Status s = stage::stage_run(o, &sum);
    if (!o.quiet && sum.objects > 0)
        std::printf("jobfs %s: %llu objects (%llu copied, %llu skipped as complete, %llu failed), %llu bytes in %.2f s, %.1f MB/s\n",
                    in ? "stage-in" : "stage-out", static_cast<unsigned long long>(sum.objects),
                    static_cast<unsigned long long>(sum.copied), static_cast<unsigned long long>(sum.skipped),
                    static_cast<unsigned long long>(sum.failed), static_cast<unsigned long long>(sum.bytes), sum.seconds,
                    sum.seconds > 0 ? static_cast<double>(sum.bytes) / 1e6 / sum.seconds : 0.0);
    std::fflush(stdout);
    return s.ok() ? 0 : fail(s);
}

// ---- layout ---------------------------------------------------------------------------------

// "4M", "512K", "1G", "65536": bytes, with an optional binary K/M/G suffix. Nothing on junk,
// zero or overflow.
std::optional<uint64_t> parse_size(const std::string& text) {
    if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return std::nullopt;
    size_t used = 0;
    unsigned long long v = 0;
    try {
        v = std::stoull(text, &used);
    } catch (const std::exception&) {
        return std::nullopt;
    }
    std::string suffix = text.substr(used);
    if (suffix.size() == 2 && (suffix[1] == 'i' || suffix[1] == 'B' || suffix[1] == 'b')) suffix.pop_back();
    int shift = 0;
    if (suffix.empty()) shift = 0;
    else if (suffix == "K" || suffix == "k") shift = 10;
    else if (suffix == "M" || suffix == "m") shift = 20;
    else if (suffix == "G" || suffix == "g") shift = 30;
    else return std::nullopt;
    if (v == 0 || v > (UINT64_MAX >> shift)) return std::nullopt;
    return static_cast<uint64_t>(v) << shift;
}

std::string size_string(uint64_t b) {
    if (b != 0 && b % (1ull << 30) == 0) return std::to_string(b >> 30) + "G";
    if (b != 0 && b % (1ull << 20) == 0) return std::to_string(b >> 20) + "M";
    if (b != 0 && b % (1ull << 10) == 0) return std::to_string(b >> 10) + "K";
    return std::to_string(b);
}

void print_layout(const std::string& path, const proto::Attr& a, const ClusterInfo& info) {
    const uint32_t n = static_cast<uint32_t>(info.daemons.size());
    std::printf("path: %s (%s)\n", path.c_str(), a.type == 2 ? "directory" : "file");
    if (a.chunk_size == 0)
        std::printf("chunk size: default (%s for new files)\n", size_string(4ull << 20).c_str());
    else
        std::printf("chunk size: %s (%u bytes)\n", size_string(a.chunk_size).c_str(), a.chunk_size);
    if (a.stripe_count == 0)
        std::printf("stripe count: 0 (all %u daemons)\n", n);
    else
        std::printf("stripe count: %u%s\n", a.stripe_count,
                    a.stripe_count > n ? (" (only " + std::to_string(n) + " daemons: all of them)").c_str() : "");
    if (a.replicas == 0)
        std::printf("replicas: default (jobfsd replicas=)\n");
    else
        std::printf("replicas: %u%s\n", a.replicas,
                    n > 0 && a.replicas > n ? (" (only " + std::to_string(n) + " daemons: " + std::to_string(n) + " copies)").c_str() : "");
    if (a.type == 2 || n == 0) return;
    const Layout l{a.chunk_size ? a.chunk_size : 4ull << 20, a.stripe_count, a.replicas};
    const uint32_t width = stripe_width(l, n);
    const uint64_t chunks = (a.size + l.chunk_size - 1) / l.chunk_size;
    std::printf("size: %llu bytes in %llu chunk%s\n", static_cast<unsigned long long>(a.size),
                static_cast<unsigned long long>(chunks), chunks == 1 ? "" : "s");
    std::printf("stripe set (chunk i on the (i %% %u)-th):\n", width);
    for (uint32_t k = 0; k < width; ++k) {
        const uint32_t rank = chunk_daemon(a.ino, k, l, n);
        const uint64_t held = chunks > k ? (chunks - k + width - 1) / width : 0;
        std::printf("  daemon %u %-22s %llu chunk%s", rank, info.daemons[rank].c_str(),
                    static_cast<unsigned long long>(held), held == 1 ? "" : "s");
        // The chunk indices it holds: k, k + width, k + 2 width…, the first few of them.
        for (uint64_t j = 0; j < held && j < 6; ++j)
            std::printf("%s%llu", j == 0 ? " (" : ", ", static_cast<unsigned long long>(k + j * width));
        if (held > 6) std::printf(", ...");
        if (held > 0) std::printf(")");
        std::printf("\n");
    }
    if (chain_length(l, n) > 1) {
        std::printf("chains (head first; the first chunks):\n");
        for (uint64_t i = 0; i < chunks && i < 8; ++i) {
            const Chain c = chunk_chain(a.ino, i, l, n);
            std::printf("  chunk %llu:", static_cast<unsigned long long>(i));
            for (uint32_t k = 0; k < c.length; ++k) std::printf(" %u", c.ranks[k]);
            std::printf("\n");
        }
    }
}

int cmd_layout(int argc, char** argv) {
    po::options_description desc("options");
    std::string path, chunk;
    uint32_t stripes = 0, replicas = 0;
    desc.add_options()("path", po::value(&path), "file or directory in jobfs")
        ("replicas", po::value(&replicas), "set the copies of each chunk (1 to 3; 0 on a directory: the daemons' default)")
        ("chunk-size", po::value(&chunk), "set the chunk size: bytes or with K, M, G (a power of two from 4K to 1G)")
        ("stripe-count", po::value(&stripes), "set the number of daemons to stripe over (0 = all)");
    po::positional_options_description pos;
    pos.add("path", 1);
    po::variables_map vm;
    int rc = 0;
    if (!parse(argc, argv, desc, pos, vm, "jobfs layout PATH [--chunk-size SIZE] [--stripe-count N] [--replicas R]\n\n"
               "Without options shows the layout of PATH (for a file: which daemons hold its chunks);\n"
               "with options sets it. A file's layout can change only while it is empty; a directory's\n"
               "is the default for files created in it afterwards.", &rc))
        return rc;
    if (path.empty()) return usage("layout needs a path");
    const bool set = vm.count("chunk-size") || vm.count("stripe-count") || vm.count("replicas");
    if (replicas > kMaxReplicas) return usage("replicas must be 1, 2 or 3");
    std::optional<uint64_t> chunk_bytes;
    if (vm.count("chunk-size")) {
        chunk_bytes = parse_size(chunk);
        if (!chunk_bytes) return usage("bad chunk size '" + chunk + "' (bytes, or a number with K, M or G)");
        if (*chunk_bytes > UINT32_MAX) return usage("chunk size " + chunk + " is too large (at most 1G)");
    }
    auto info = read_cluster_from_env();
    if (!info.ok()) return fail(info.status());
    auto c = Client::connect(*info);
    if (!c.ok()) return fail(c.status());
    auto a = (*c)->stat(path);
    if (!a.ok()) return fail(a.status());
    if (set) {
        if (a->type == 3) return fail(Status(Code::invalid, "layout " + path + ": a symlink has no layout"));
        // Options not given keep their current value.
        Layout l{chunk_bytes ? *chunk_bytes : a->chunk_size, vm.count("stripe-count") ? stripes : a->stripe_count,
                 vm.count("replicas") ? replicas : a->replicas};
        auto r = (*c)->set_layout(path, l);
        if (!r.ok()) {
            if (r.status().code() == Code::busy)
                return fail(Status(Code::busy, "layout " + path +
                                                   ": layout can only change while the file is empty (EBUSY)"));
            return fail(r.status());
        }
        a = r;
    }
    print_layout(path, *a, *info);
    return 0;
}

// ---- ckpt: the checkpoint job ----------------------------------------------------------------

// The byte at offset o of a checkpoint: a function of o alone, so any process can check any
// range without having written it.
void fill(uint8_t* p, size_t n, uint64_t offset) {
    for (size_t i = 0; i < n; i += 8) {
        uint64_t x = splitmix64((offset + i) / 8);
        std::memcpy(p + i, &x, std::min<size_t>(8, n - i));
    }
}

// MemAvailable of /proc/meminfo in bytes (0: unknown).
uint64_t mem_available() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    uint64_t kib = 0;
    std::string unit;
    while (in >> key >> kib) {
        std::getline(in, unit);
        if (key == "MemAvailable:") return kib << 10;
    }
    return 0;
}

struct Phase {
    double secs = 0;       // from the start signal until the last process was done
    double start_secs = 0; // forking the processes until each was ready (not in secs)
    bool ok = true;
};

// Returns once `procs` bytes came through the pipe, one from each process, or it reached EOF
// (every writer gone).
void await_all(int fd, uint32_t procs) {
    for (uint32_t n = 0; n < procs;) {
        char buf[64];
        const ssize_t got = ::read(fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        n += static_cast<uint32_t>(got);
    }
}

// Runs fn(rank, ready, done) in P child processes; the phase fails if any child does. Each
// calls ready() once set up (a jobfs client connected to the daemons, as an MPI rank is long
// before its checkpoint; its data made), which returns when every process is, and done() when
// its I/O is: the time is counted from the first to the last done, as an IOR-style run times
// its phases between barriers. The file's open and close are in the timed part, the check of
// the bytes read back is not.
template <class Fn>
Phase run_procs(uint32_t procs, Fn fn) {
    Phase ph;
    int ready_pipe[2], go_pipe[2], done_pipe[2];
    if (::pipe(ready_pipe) != 0) return Phase{0, 0, false};
    if (::pipe(go_pipe) != 0) {
        ::close(ready_pipe[0]);
        ::close(ready_pipe[1]);
        return Phase{0, 0, false};
    }
    if (::pipe(done_pipe) != 0) {
        for (int fd : {ready_pipe[0], ready_pipe[1], go_pipe[0], go_pipe[1]}) ::close(fd);
        return Phase{0, 0, false};
    }
    const auto forked = Clock::now();
    std::vector<pid_t> kids;
    for (uint32_t r = 0; r < procs; ++r) {
        pid_t p = fork();
        if (p == 0) {
            ::close(ready_pipe[0]);
            ::close(go_pipe[1]);
            ::close(done_pipe[0]);
            const auto ready = [&] {
                char c = 1, g;
                if (::write(ready_pipe[1], &c, 1) != 1) _exit(1);
                ::close(ready_pipe[1]);
                while (::read(go_pipe[0], &g, 1) < 0 && errno == EINTR) {
                }
            };
            const auto done = [&] {
                char c = 1;
                if (::write(done_pipe[1], &c, 1) != 1) _exit(1);
                ::close(done_pipe[1]);
            };
            int rc = fn(r, ready, done);
            std::fflush(stderr);
            _exit(rc);
        }
        kids.push_back(p);
    }
    ::close(ready_pipe[1]);
    ::close(go_pipe[0]);
    ::close(done_pipe[1]);
    await_all(ready_pipe[0], procs); // every process ready, or ended (a failed set-up)
    ::close(ready_pipe[0]);
    const auto t0 = Clock::now();
    ph.start_secs = std::chrono::duration<double>(t0 - forked).count();
    ::close(go_pipe[1]); // go: every read of it returns 0
    await_all(done_pipe[0], procs); // every process done, or ended (a failure)
    ph.secs = std::chrono::duration<double>(Clock::now() - t0).count();
    ::close(done_pipe[0]);
    for (pid_t p : kids) {
        int st = 0;
        waitpid(p, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ph.ok = false;
    }
    return ph;
}

int cmd_ckpt(int argc, char** argv) {
    po::options_description desc("options");
    uint32_t procs = 4;
    uint64_t block_mib = 256, piece_mib = 16, stride_mib = 1, write_behind_mib = 32;
    std::string path, local_dir;
    desc.add_options()("procs,p", po::value(&procs)->default_value(4), "writer processes")
        ("block-mib", po::value(&block_mib)->default_value(256), "MiB each process writes (its block of the file)")
        ("piece-mib", po::value(&piece_mib)->default_value(16), "MiB per write call (contiguous)")
        ("strided", "strided instead of contiguous: process r of P writes every P-th piece of stride-mib MiB")
        ("stride-mib", po::value(&stride_mib)->default_value(1), "MiB per piece with --strided")
        ("write-behind-mib", po::value(&write_behind_mib)->default_value(32),
         "MiB of writes each process keeps in flight (buffered, as a checkpoint library or MPI-IO may); 0: each write waits")
        ("path", po::value(&path)->default_value("/ckpt.bin"), "the shared checkpoint file in jobfs")
        ("local-dir", po::value(&local_dir)->default_value("/tmp"), "where the local-disk baseline writes")
        ("keep", "keep the files afterwards");
    po::positional_options_description pos;
    po::variables_map vm;
    int rc = 0;
    if (!parse(argc, argv, desc, pos, vm, "jobfs ckpt [options]", &rc)) return rc;
    if (procs == 0 || block_mib == 0 || piece_mib == 0 || stride_mib == 0)
        return usage("procs, block-mib, piece-mib and stride-mib must be positive");
    const bool strided = vm.count("strided") != 0;
    const uint64_t block = block_mib << 20, total = block * procs;
    const uint64_t piece = strided ? std::min(stride_mib << 20, total) : std::min(piece_mib, block_mib) << 20;
    // The processes hold the checkpoint in memory (their shares, below), as the application
    // whose checkpoint it stands for does.
    if (const uint64_t avail = mem_available(); avail > 0 && total > avail / 4 * 3)
        return usage("procs x block-mib = " + std::to_string(total >> 20) + " MiB does not fit in memory (" +
                     std::to_string(avail >> 20) + " MiB available): the processes hold their blocks in memory");
    // The ranges process r writes (and reads back), one write call each: contiguous, its block
    // in piece-mib steps; strided, every P-th stride-mib piece of the whole file (piece k goes
    // to process k % P), the same total either way.
    auto ranges_of = [&](uint32_t r) {
        std::vector<std::pair<uint64_t, size_t>> out;
        if (strided) {
            for (uint64_t off = uint64_t{r} * piece; off < total; off += uint64_t{procs} * piece)
                out.push_back({off, static_cast<size_t>(std::min(piece, total - off))});
        } else {
            for (uint64_t off = r * block; off < (r + 1) * block; off += piece)
                out.push_back({off, static_cast<size_t>(std::min(piece, (r + 1) * block - off))});
        }
        return out;
    };
    {
        // The parent makes the file and lets go of its connection before forking the writers.
        auto c = connect();
        if (!c.ok()) return fail(c.status());
        auto f = (*c)->open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (!f.ok()) return fail(f.status());
        Status s = (*c)->close(**f);
        if (!s.ok()) return fail(s);
    }
    if (strided)
        std::printf("ckpt: %u processes x %llu MiB, strided (every %u-th %llu MiB piece), into jobfs:%s (%llu MiB)\n",
                    procs, static_cast<unsigned long long>(block_mib), procs,
                    static_cast<unsigned long long>(piece >> 20), path.c_str(), static_cast<unsigned long long>(total >> 20));
    else
        std::printf("ckpt: %u processes x %llu MiB into jobfs:%s (%llu MiB)\n", procs,
                    static_cast<unsigned long long>(block_mib), path.c_str(), static_cast<unsigned long long>(total >> 20));
    std::fflush(stdout);

    // A process's share, as an application holds its checkpoint: made before the clock starts
    // (writers), or memory touched for it (readers, a restart reading into a model already
    // allocated), the bytes read back checked after the clock stopped. Made and checked inside
    // the timed loop, they took about as long as reading the bytes from the page cache, and
    // stood in both sides' figures.
    // Its ranges one after another in `data`.
    struct Share {
        std::vector<std::pair<uint64_t, size_t>> ranges;
        std::vector<uint8_t> data;
    };
    const auto share_of = [&](uint32_t r, bool write) {
        Share sh{ranges_of(r), {}};
        uint64_t n = 0;
        for (auto [off, len] : sh.ranges) n += len;
        sh.data.resize(n); // zeroed: every page touched
        if (write) {
            uint64_t at = 0;
            for (auto [off, len] : sh.ranges) fill(sh.data.data() + std::exchange(at, at + len), len, off);
        }
        return sh;
    };
    const auto check_share = [&](const Share& sh) -> Status {
        std::vector<uint8_t> want(piece);
        uint64_t at = 0;
        for (auto [off, n] : sh.ranges) {
            fill(want.data(), n, off);
            if (std::memcmp(sh.data.data() + std::exchange(at, at + n), want.data(), n) != 0)
                return Status(Code::io, "verify: bytes at " + std::to_string(off) + " differ");
        }
        return Status::OK();
    };
    auto jobfs_rank = [&](uint32_t r, bool write, const auto& ready, const auto& done) -> int {
        ClientOptions o;
        o.write_behind_bytes = write_behind_mib << 20;
        auto c = Client::connect_env(o);
        if (!c.ok()) return fail(c.status());
        Share sh = share_of(r, write);
        ready();
        auto f = (*c)->open(path, write ? O_WRONLY : O_RDONLY);
        if (!f.ok()) return fail(f.status());
        uint64_t at = 0;
        for (auto [off, n] : sh.ranges) {
            const std::span<uint8_t> part(sh.data.data() + std::exchange(at, at + n), n);
            if (write) {
                Status s = (*c)->pwrite(**f, off, part);
                if (!s.ok()) return fail(s);
            } else {
                auto got = (*c)->pread(**f, off, part);
                if (!got.ok()) return fail(got.status());
                if (*got != n) return fail(Status(Code::io, "read back: " + std::to_string(*got) + " bytes at " +
                                                               std::to_string(off) + ", expected " + std::to_string(n)));
            }
        }
        Status s = write ? (*c)->fsync(**f) : Status::OK();
        if (s.ok()) s = (*c)->close(**f);
        if (!s.ok()) return fail(s);
        done();
        if (!write) s = check_share(sh);
        return s.ok() ? 0 : fail(s);
    };
    const std::string local = local_dir + "/jobfs-ckpt-baseline." + std::to_string(getpid());
    auto local_rank = [&](uint32_t r, bool write, const auto& ready, const auto& done) -> int {
        Share sh = share_of(r, write);
        ready();
        int fd = ::open(local.c_str(), (write ? O_WRONLY | O_CREAT : O_RDONLY) | O_CLOEXEC, 0644);
        if (fd < 0) return fail(Status::from_errno(errno, "open " + local));
        uint64_t at = 0;
        for (auto [off, n] : sh.ranges) {
            uint8_t* part = sh.data.data() + std::exchange(at, at + n);
            if (write) {
                if (::pwrite(fd, part, n, static_cast<off_t>(off)) != static_cast<ssize_t>(n))
                    return fail(Status::from_errno(errno, "write " + local));
            } else {
                if (::pread(fd, part, n, static_cast<off_t>(off)) != static_cast<ssize_t>(n))
                    return fail(Status::from_errno(errno, "read " + local));
            }
        }
        if (write && ::fsync(fd) != 0) return fail(Status::from_errno(errno, "fsync " + local));
        ::close(fd);
        done();
        const Status s = write ? Status::OK() : check_share(sh);
        if (!s.ok()) return fail(s.with_context("local disk " + local));
        return 0;
    };

    Phase jw = run_procs(procs, [&](uint32_t r, const auto& ready, const auto& done) { return jobfs_rank(r, true, ready, done); });
    if (!jw.ok) return fail(Status(Code::io, "ckpt: a writer failed"));
    {
        auto c = connect();
        if (!c.ok()) return fail(c.status());
        auto st = (*c)->stat(path);
        if (!st.ok()) return fail(st.status());
        if (st->size != total)
            return fail(Status(Code::io, "ckpt: size " + std::to_string(st->size) + " after close, expected " + std::to_string(total)));
    }
    Phase jr = run_procs(procs, [&](uint32_t r, const auto& ready, const auto& done) { return jobfs_rank(r, false, ready, done); });
    if (!jr.ok) return fail(Status(Code::io, "ckpt: read-back or verification failed"));
    ::unlink(local.c_str());
    Phase lw = run_procs(procs, [&](uint32_t r, const auto& ready, const auto& done) { return local_rank(r, true, ready, done); });
    Phase lr = run_procs(procs, [&](uint32_t r, const auto& ready, const auto& done) { return local_rank(r, false, ready, done); });
    if (!vm.count("keep")) {
        ::unlink(local.c_str());
        auto c = connect();
        if (c.ok()) (void)(*c)->unlink(path);
    }
    if (!lw.ok || !lr.ok) return fail(Status(Code::io, "ckpt: the local-disk baseline failed in " + local_dir));
    const double mb = total / 1e6;
    std::printf("ckpt: verified %llu bytes read back from jobfs\n", static_cast<unsigned long long>(total));
    std::printf("ckpt: %u processes started and connected to the daemons in %.0f ms (writers) and %.0f ms (readers), "
                "before the timed part\n", procs, jw.start_secs * 1e3, jr.start_secs * 1e3);
    const char* kind = strided ? "ckpt-strided" : "ckpt";
    std::printf("bench %s-read: jobfs %.1f MB/s, baseline %.1f MB/s, ratio %.2f\n", kind, mb / jr.secs, mb / lr.secs,
                lr.secs / jr.secs);
    std::printf("bench %s-write: jobfs %.1f MB/s, baseline %.1f MB/s, ratio %.2f\n", kind, mb / jw.secs, mb / lw.secs,
                lw.secs / jw.secs);
    return 0;
}

void help() {
    std::puts("usage: jobfs COMMAND [options]   (jobfs COMMAND --help for one)\n\n"
              "  local up [-n N] [--dir D]   start N daemons on this host; prints the JOBFS_CLUSTER export\n"
              "  local down [--dir D]        stop them and remove their data\n"
              "  status [--idle-check[=S]]   chain table, daemons' states, disks, inodes, RSS and CPU time\n"
              "  ls [-l] [PATH]              list a directory\n"
              "  stat PATH                   attributes and layout\n"
              "  mkdir [-p] PATH...          make directories\n"
              "  rm [-r] PATH...             remove files (and directories with -r)\n"
              "  cp SRC DST                  copy a file in or out (jobfs:/path names the jobfs side)\n"
              "  layout PATH [--chunk-size S] [--stripe-count N] [--replicas R]\n"
              "                              show or set the striping of a file or directory\n"
              "  scrub [PATH]                verify every copy of every chunk, repair bad ones, report\n"
              "  ckpt [-p P] [--block-mib M] [--strided [--stride-mib S]]\n"
              "                              the checkpoint job: P processes write one file, read it back,\n"
              "                              verify every byte, and compare with the local disk\n"
              "  stage-in s3://B/PREFIX DST   copy objects into jobfs:/path or a local path (man jobfs-stage)\n"
              "  stage-out SRC s3://B/PREFIX  copy files out to an S3 bucket\n\n"
              "Commands other than local find the file system through $JOBFS_CLUSTER.");
}

} // namespace

int main(int argc, char** argv) {
    log::set_name("jobfs");
    if (argc < 2 || !std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
        help();
        return argc < 2 ? 2 : 0;
    }
    const std::string cmd = argv[1];
    if (cmd == "local") return cmd_local(argc - 1, argv + 1);
    if (cmd == "status") return cmd_status(argc - 1, argv + 1);
    if (cmd == "ls") return cmd_ls(argc - 1, argv + 1);
    if (cmd == "stat") return cmd_stat(argc - 1, argv + 1);
    if (cmd == "mkdir") return cmd_mkdir(argc - 1, argv + 1);
    if (cmd == "rm") return cmd_rm(argc - 1, argv + 1);
    if (cmd == "cp") return cmd_cp(argc - 1, argv + 1);
    if (cmd == "layout") return cmd_layout(argc - 1, argv + 1);
    if (cmd == "ckpt") return cmd_ckpt(argc - 1, argv + 1);
    if (cmd == "scrub") return cmd_scrub(argc - 1, argv + 1);
    if (cmd == "stage-in") return cmd_stage(argc - 1, argv + 1, true);
    if (cmd == "stage-out") return cmd_stage(argc - 1, argv + 1, false);
    return usage("unknown command '" + cmd + "'");
}
