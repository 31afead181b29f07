// config.cc: jobfsd's option table and its parsing with Boost.Program_options.
#include "server/config.h"

#include <boost/program_options.hpp>

#include <cctype>
#include <fstream>
#include <sstream>

#include "hostlist.h"
#include "priority.h"

namespace jobfs::server {
namespace po = boost::program_options;

namespace {

// A byte count written with an optional binary unit.
struct ByteSize {
    uint64_t value = 0;
};

// Boost.Program_options finds this overload by argument-dependent lookup.
void validate(boost::any& v, const std::vector<std::string>& values, ByteSize*, int) {
    po::validators::check_first_occurrence(v);
    const std::string& s = po::validators::get_single_string(values);
    auto r = parse_size(s);
    if (!r.ok()) throw po::invalid_option_value(s);
    v = ByteSize{*r};
}

struct Table {
    po::options_description desc{"jobfsd options (flags, or key=value lines in jobfs.conf)"};
    DaemonConfig c;
    ByteSize chunk{4ull << 20}, direct_min{256ull << 10}, writeback_min{256ull << 10};
    std::string daemons;
    long attr_lease_ms = 3000, call_timeout_ms = 30000, startup_timeout_ms = 60000, heartbeat_ms = 200, failure_timeout_ms = 5000;

    Table() {
        desc.add_options()
            ("help,h", "print this help")
            ("config", po::value(&c.config_file), "jobfs.conf to read (flags override it)")
            ("data-dir", po::value(&c.data_dir), "directory for this daemon's chunks and metadata (required; %r: the rank)")
            ("listen", po::value(&c.listen)->default_value(c.listen), "address to listen on")
            ("port", po::value(&c.port)->default_value(c.port), "TCP port to listen on (0: any free port, with bootstrap=pmix)")
            ("chunk-size", po::value(&chunk)->default_value(chunk, "4M"), "default chunk size of new files (64 KiB multiple; k, M, G)")
            ("stripe-count", po::value(&c.stripe_count)->default_value(c.stripe_count), "daemons a new file spreads over (0: all)")
            ("replicas", po::value(&c.replicas)->default_value(c.replicas), "copies of each chunk (1 to 3)")
            ("bootstrap", po::value(&c.bootstrap)->default_value(c.bootstrap), "how daemons find each other: static or pmix")
            ("daemons", po::value(&daemons), "every daemon in rank order: host[:port] items, hosts as Slurm host lists (n[1-4]), or slurm for $SLURM_JOB_NODELIST; no port: --port (static bootstrap)")
            ("rank", po::value(&c.rank)->default_value(c.rank), "this daemon's index in --daemons (-1: the entry matching --listen/--port)")
            ("secret-file", po::value(&c.secret_file), "file holding the job secret clients and daemons must present")
            ("cluster-file", po::value(&c.cluster_file), "rank 0 writes the cluster descriptor for clients here once the group is ready")
            ("io-threads", po::value(&c.io_threads)->default_value(c.io_threads), "threads for disk and metadata work")
            ("busy-poll-us", po::value(&c.busy_poll_us)->default_value(c.busy_poll_us), "microseconds the transport polls after activity before sleeping")
            ("nice", po::value(&c.nice)->default_value(c.nice), "CPU priority of the daemon (-20 to 19): ahead of MPI ranks that busy-wait (a negative value needs root)")
            ("direct-io", po::value(&c.direct_io)->default_value(c.direct_io), "write aligned chunk pieces to the disk with O_DIRECT, past the page cache, so that they are not read back from memory (true/false; off by itself where the file system has no O_DIRECT)")
            ("direct-io-min", po::value(&direct_min)->default_value(direct_min, "256K"), "smallest piece written with O_DIRECT; smaller ones go through the page cache, where writeback merges them (k, M)")
            ("early-writeback-min", po::value(&writeback_min)->default_value(writeback_min, "256K"), "a piece at least this large written through the page cache goes to the disk at once, not at the fsync (k, M; 0: when the kernel's flusher gets to it)")
            ("local-reads", po::value(&c.local_reads)->default_value(c.local_reads), "let clients on this node read large ranges of chunks from the chunk files themselves, checked against the stored checksums (true/false)")
            ("attr-lease-ms", po::value(&attr_lease_ms)->default_value(attr_lease_ms), "how long a client may answer stat from attributes it was given, unless recalled first (0: clients ask every time)")
            ("call-timeout-ms", po::value(&call_timeout_ms)->default_value(call_timeout_ms), "deadline of a request to a peer")
            ("startup-timeout-ms", po::value(&startup_timeout_ms)->default_value(startup_timeout_ms), "how long to wait for the whole group at start")
            ("heartbeat-ms", po::value(&heartbeat_ms)->default_value(heartbeat_ms), "milliseconds between heartbeats to each peer daemon")
            ("failure-timeout-ms", po::value(&failure_timeout_ms)->default_value(failure_timeout_ms), "a daemon silent this long is taken offline by the manager (its chains shrink)")
            ("log-level", po::value(&c.log_level)->default_value(c.log_level), "error, warn, info or debug");
    }

    Status check() {
        c.chunk_size = chunk.value;
        c.direct_io_min = direct_min.value;
        c.early_writeback_min = writeback_min.value;
        c.call_timeout = std::chrono::milliseconds(call_timeout_ms);
        c.attr_lease = std::chrono::milliseconds(attr_lease_ms);
        // A change waits for a silent holder's lease to end: within the clients' own 30 s
        // request deadline, or the change would be reported failed though it was made.
        if (attr_lease_ms < 0 || attr_lease_ms > 20000)
            return Status(Code::invalid, "attr-lease-ms must be 0 to 20000");
        c.startup_timeout = std::chrono::milliseconds(startup_timeout_ms);
        c.heartbeat = std::chrono::milliseconds(heartbeat_ms);
        c.failure_timeout = std::chrono::milliseconds(failure_timeout_ms);
        if (heartbeat_ms <= 0 || failure_timeout_ms < 2 * heartbeat_ms)
            return Status(Code::invalid, "heartbeat-ms must be positive and failure-timeout-ms at least twice it");
        c.daemons.clear();
        if (!daemons.empty()) {
            // host:port items; hosts may be Slurm host lists (n[1-4]) and "slurm" is the job's
            // node list; an item without a port takes port=.
            auto list = daemon_list_expand(daemons, c.port);
            if (!list.ok()) return list.status();
            c.daemons = std::move(*list);
        }
        if (c.data_dir.empty()) return Status(Code::invalid, "data-dir is required");
        if (c.chunk_size == 0 || c.chunk_size % (64 * 1024) != 0 || c.chunk_size > (1ull << 30))
            return Status(Code::invalid, "chunk-size must be a multiple of 64 KiB, at most 1 GiB");
        if (c.replicas < 1 || c.replicas > 3) return Status(Code::invalid, "replicas must be 1, 2 or 3");
        if (c.bootstrap != "static" && c.bootstrap != "pmix")
            return Status(Code::invalid, "bootstrap must be static or pmix, not '" + c.bootstrap + "'");
        if (c.bootstrap == "static" && c.daemons.empty())
            return Status(Code::invalid, "static bootstrap needs daemons=host:port,...");
        if (c.bootstrap == "pmix" && !c.daemons.empty())
            return Status(Code::invalid, "bootstrap=pmix learns the daemons from PMIx: drop daemons=");
        if (c.bootstrap == "pmix" && c.rank >= 0)
            return Status(Code::invalid, "bootstrap=pmix takes the rank from PMIx: drop rank=");
        if (c.bootstrap == "static" && c.port == 0)
            return Status(Code::invalid, "port=0 (any free port) needs bootstrap=pmix: a static list names every port");
        if (c.rank >= static_cast<int64_t>(c.daemons.size()) && c.bootstrap == "static")
            return Status(Code::invalid, "rank " + std::to_string(c.rank) + " is past the " +
                                             std::to_string(c.daemons.size()) + " daemons listed");
        if (c.io_threads == 0 || c.io_threads > 256) return Status(Code::invalid, "io-threads must be 1 to 256");
        if (!daemon_nice_valid(c.nice)) return Status(Code::invalid, "nice must be -20 to 19");
        if (c.log_level != "error" && c.log_level != "warn" && c.log_level != "info" && c.log_level != "debug")
            return Status(Code::invalid, "log-level must be error, warn, info or debug");
        return Status::OK();
    }
};

// One line of jobfs.conf as a flag: "data_dir = /x" -> "--data-dir=/x"; blank and '#' lines
// give nothing.
Result<std::string> conf_line_to_flag(const std::string& raw) {
    std::string line = raw.substr(0, raw.find('#'));
    size_t a = line.find_first_not_of(" \t\r");
    if (a == std::string::npos) return std::string();
    size_t eq = line.find('=');
    if (eq == std::string::npos) return Status(Code::invalid, "expected key=value");
    std::string key = line.substr(a, eq - a);
    std::string val = line.substr(eq + 1);
    auto trim = [](std::string& s) {
        size_t b = s.find_first_not_of(" \t\r");
        size_t e = s.find_last_not_of(" \t\r");
        s = b == std::string::npos ? "" : s.substr(b, e - b + 1);
    };
    trim(key);
    trim(val);
    for (char& ch : key) {
        if (ch == '_') ch = '-';
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    }
    if (key.empty()) return Status(Code::invalid, "empty key");
    if (key == "config" || key == "help") return Status(Code::invalid, "'" + key + "' is not a file setting");
    return "--" + key + "=" + val;
}

} // namespace

Result<uint64_t> parse_size(const std::string& text) {
    size_t i = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    if (i == 0 || i > 19) return Status(Code::invalid, "'" + text + "' is not a size");
    uint64_t n = std::stoull(text.substr(0, i));
    std::string unit = text.substr(i);
    for (char& ch : unit) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    int shift = -1;
    if (unit.empty() || unit == "b") shift = 0;
    else if (unit == "k" || unit == "kb" || unit == "kib") shift = 10;
    else if (unit == "m" || unit == "mb" || unit == "mib") shift = 20;
    else if (unit == "g" || unit == "gb" || unit == "gib") shift = 30;
    else if (unit == "t" || unit == "tb" || unit == "tib") shift = 40;
    if (shift < 0) return Status(Code::invalid, "'" + text + "': unknown unit '" + unit + "' (k, M, G, T)");
    if (shift > 0 && n > (UINT64_MAX >> shift)) return Status(Code::range, "'" + text + "' is too large");
    return n << shift;
}

std::string expand_rank(const std::string& pattern, uint32_t rank) {
    std::string out;
    for (size_t i = 0; i < pattern.size(); ++i) {
        if (pattern[i] == '%' && i + 1 < pattern.size() && (pattern[i + 1] == 'r' || pattern[i + 1] == '%')) {
            out += pattern[i + 1] == 'r' ? std::to_string(rank) : "%";
            ++i;
        } else {
            out += pattern[i];
        }
    }
    return out;
}

std::string daemon_config_help() {
    Table t;
    std::ostringstream os;
    os << t.desc;
    return os.str();
}

Result<DaemonConfig> parse_daemon_config(int argc, const char* const* argv, std::string* help) {
    Table t;
    po::variables_map vm;
    try {
        // Flags are stored first: for every option the first stored value wins, so a flag
        // overrides the same key in the file.
        po::store(po::command_line_parser(argc, argv).options(t.desc).run(), vm);
        if (vm.count("help")) {
            if (help) *help = daemon_config_help();
            DaemonConfig defaults;
            return defaults;
        }
        if (vm.count("config")) {
            const std::string file = vm["config"].as<std::string>();
            std::ifstream in(file);
            if (!in) return Status::from_errno(errno, "cannot read " + file);
            std::string line;
            for (int lineno = 1; std::getline(in, line); ++lineno) {
                auto flag = conf_line_to_flag(line);
                std::string where = file + ":" + std::to_string(lineno);
                if (!flag.ok()) return flag.status().with_context(where);
                if (flag->empty()) continue;
                const char* args[] = {"jobfs.conf", flag->c_str()};
                try {
                    po::store(po::command_line_parser(2, args).options(t.desc).run(), vm);
                } catch (const po::error& e) {
                    return Status(Code::invalid, where + ": " + e.what());
                }
            }
        }
        po::notify(vm);
    } catch (const po::error& e) {
        return Status(Code::invalid, e.what());
    }
    Status s = t.check();
    if (!s.ok()) return s;
    return t.c;
}

} // namespace jobfs::server
