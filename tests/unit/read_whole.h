// read_whole.h: a jobfs file's bytes, read whole through a libjobfs Client (tests comparing
// what one client wrote with what another reads).
#pragma once

#include <fcntl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "client/client.h"
#include "result.h"

namespace jobfs::test {

inline Result<std::vector<uint8_t>> read_whole(client::Client& c, const std::string& path) {
    auto f = c.open(path, O_RDONLY);
    if (!f.ok()) return f.status();
    std::vector<uint8_t> out((*f)->size());
    auto n = c.pread(**f, 0, out);
    if (!n.ok()) return n.status();
    out.resize(*n);
    JOBFS_RETURN_IF_ERROR(c.close(**f));
    return out;
}

} // namespace jobfs::test
