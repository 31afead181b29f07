// scrub.h: `jobfs scrub`: walk files, have every replica of every chunk verify its copy, repair
// what is corrupt or differs from the tail, and report (docs/replication.md, "Integrity").
//
// For each chunk of each file below a path, every serving replica reads its whole copy and
// checks every block's CRC32C (ChunkScrub); a corrupt copy is replaced from another replica by
// the daemon itself. Then the replicas' (length, CRC of all bytes) are compared: a copy that
// differs from the tail's (the tail holds every committed write) is replaced from the tail.
// Files are scrubbed one after the other, their chunks `kParallel` at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "client/client.h"

namespace jobfs::client {

struct ScrubReport {
    uint64_t files = 0;
    uint64_t chunks = 0;
    uint64_t copies = 0;         // chunk copies verified
    uint64_t bytes = 0;          // bytes verified, all copies
    uint64_t corrupt = 0;        // copies that failed their checks
    uint64_t mismatched = 0;     // copies that checked out but differed from the tail's
    uint64_t repaired = 0;       // copies replaced
    uint64_t unrepaired = 0;     // copies found bad that could not be replaced
    uint64_t unreachable = 0;    // copies whose daemon did not answer
};

// Scrubs the file at `path`, or every file below it if it is a directory. `progress` (may be
// empty) is called after each file with its path and the totals so far. Errors of single
// copies are counted and logged; the result fails only when the walk itself does.
Result<ScrubReport> scrub(Client& client, const std::string& path,
                          const std::function<void(const std::string&, const ScrubReport&)>& progress = {});

} // namespace jobfs::client
