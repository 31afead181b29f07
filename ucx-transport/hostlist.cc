#include "hostlist.h"

#include <cstdlib>

namespace jobfs {

namespace {

constexpr size_t kMaxHosts = 1 << 20; // a typo like n[1-999999999] must not eat the memory

// Splits at commas that are not inside brackets.
Result<std::vector<std::string>> split_top(const std::string& s) {
    std::vector<std::string> out;
    std::string cur;
    int depth = 0;
    for (char c : s) {
        if (c == '[') ++depth;
        if (c == ']' && --depth < 0) return Status(Code::invalid, "host list '" + s + "': unmatched ']'");
        if (c == ',' && depth == 0) {
            out.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    if (depth != 0) return Status(Code::invalid, "host list '" + s + "': unmatched '['");
    out.push_back(cur);
    return out;
}

bool all_digits(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; }

// Appends every expansion of one item (brackets expanded left to right).
Status expand_item(const std::string& item, std::vector<std::string>& out) {
    const size_t open = item.find('[');
    if (open == std::string::npos) {
        if (item.find(']') != std::string::npos) return Status(Code::invalid, "host '" + item + "': unmatched ']'");
        out.push_back(item);
        return Status::OK();
    }
    const size_t close = item.find(']', open);
    if (close == std::string::npos) return Status(Code::invalid, "host '" + item + "': unmatched '['");
    const std::string prefix = item.substr(0, open), rest = item.substr(close + 1);
    std::string body = item.substr(open + 1, close - open - 1);
    size_t pos = 0;
    while (pos <= body.size()) {
        size_t comma = body.find(',', pos);
        std::string part = body.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        pos = comma == std::string::npos ? body.size() + 1 : comma + 1;
        size_t dash = part.find('-');
        std::string lo = part.substr(0, dash), hi = dash == std::string::npos ? lo : part.substr(dash + 1);
        if (!all_digits(lo) || !all_digits(hi) || lo.size() > 18 || hi.size() > 18)
            return Status(Code::invalid, "host '" + item + "': '" + part + "' is not a number or range");
        const unsigned long long a = std::strtoull(lo.c_str(), nullptr, 10), b = std::strtoull(hi.c_str(), nullptr, 10);
        if (b < a) return Status(Code::invalid, "host '" + item + "': range " + part + " runs backwards");
        if (b - a >= kMaxHosts) return Status(Code::invalid, "host '" + item + "': range " + part + " is too large");
        const size_t width = lo.size() > 1 && lo[0] == '0' ? lo.size() : 0;
        for (unsigned long long n = a; n <= b; ++n) {
            std::string num = std::to_string(n);
            if (num.size() < width) num.insert(0, width - num.size(), '0');
            Status s = expand_item(prefix + num + rest, out);
            if (!s.ok()) return s;
            if (out.size() > kMaxHosts) return Status(Code::invalid, "host list expands to too many hosts");
        }
    }
    return Status::OK();
}

std::string trim(const std::string& s) {
    size_t a = s.find_first_not_of(" \t\r\n");
    if (a == std::string::npos) return std::string();
    size_t b = s.find_last_not_of(" \t\r\n");
    return s.substr(a, b - a + 1);
}

} // namespace

Result<std::vector<std::string>> hostlist_expand(const std::string& list) {
    auto items = split_top(list);
    if (!items.ok()) return items.status();
    std::vector<std::string> out;
    for (const std::string& raw : *items) {
        std::string item = trim(raw);
        if (item.empty()) continue;
        Status s = expand_item(item, out);
        if (!s.ok()) return s;
    }
    return out;
}

Result<std::vector<std::string>> daemon_list_expand(const std::string& value, uint16_t default_port) {
    std::string v = trim(value);
    if (v == "slurm") {
        const char* env = std::getenv("SLURM_JOB_NODELIST");
        if (!env || !*env) env = std::getenv("SLURM_NODELIST");
        if (!env || !*env)
            return Status(Code::invalid, "daemons=slurm, but neither SLURM_JOB_NODELIST nor SLURM_NODELIST is set");
        v = env;
    }
    auto items = split_top(v);
    if (!items.ok()) return items.status();
    std::vector<std::string> out;
    for (const std::string& raw : *items) {
        std::string item = trim(raw);
        if (item.empty()) continue;
        // host[:port]: the port follows the last ']' (if any) after a ':'.
        size_t after = item.rfind(']');
        size_t colon = item.find(':', after == std::string::npos ? 0 : after);
        std::string hosts = item, port;
        if (colon != std::string::npos) {
            hosts = item.substr(0, colon);
            port = item.substr(colon + 1);
            if (!all_digits(port) || port.size() > 5 || std::stoul(port) == 0 || std::stoul(port) > 65535)
                return Status(Code::invalid, "daemons: '" + item + "' has a bad port");
        } else if (default_port == 0) {
            return Status(Code::invalid, "daemons: '" + item + "' names no port and port=0");
        } else {
            port = std::to_string(default_port);
        }
        if (hosts.empty()) return Status(Code::invalid, "daemons: '" + item + "' names no host");
        std::vector<std::string> names;
        Status s = expand_item(hosts, names);
        if (!s.ok()) return s;
        for (auto& n : names) out.push_back(n + ":" + port);
        if (out.size() > kMaxHosts) return Status(Code::invalid, "daemons: too many");
    }
    return out;
}

} // namespace jobfs
