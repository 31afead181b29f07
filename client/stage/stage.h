// stage.h: `jobfs stage-in` and `jobfs stage-out`: copy a tree of objects between an S3
// bucket prefix and jobfs (or a POSIX file system), in parallel, verified, resumable.
// Design, consistency and the manifest: docs/staging.md; the command: jobfs-stage(1).
#pragma once

#include <cstdint>
#include <string>

#include "result.h"
#include "client/stage/s3_client.h"
#include "client/stage/s3_config.h"

namespace jobfs::stage {

inline constexpr char kManifestName[] = ".jobfs-stage-manifest";

struct StageOptions {
    bool in = true;              // stage-in: S3 → files; stage-out: files → S3
    std::string src, dst;
    S3Options s3;
    RetryPolicy retry;
    int parallel = 8;            // requests in flight on this node
    uint64_t part_size = 16ull << 20;  // ranged-GET / multipart part size; larger objects are split
    // Stage-out: files up to this size are one PUT (held in memory whole, so up to
    // parallel x this much memory); larger ones a multipart upload in part_size parts.
    // One PUT is cheaper for servers that copy parts again at completion (s3rver, RGW).
    uint64_t multipart_threshold = 64ull << 20;
    int rank = 0, ranks = 1;     // this node's share: objects whose key hashes to rank
    std::string manifest;        // where the manifest goes ("" = DST/.jobfs-stage-manifest[.rank-R])
    bool write_manifest = true;
    bool resume = true;          // skip what a previous run completed
    int progress = -1;           // -1 auto (bar on a tty, lines otherwise), 0 off, 1 bar, 2 lines
    double progress_interval_s = 5;
    bool quiet = false;          // no summary line
};

struct StageSummary {
    uint64_t objects = 0, copied = 0, skipped = 0, failed = 0;
    uint64_t bytes = 0;          // bytes moved by this run (skipped objects not counted)
    double seconds = 0;
};

// Runs one staging; an error Status when anything failed (each failure was already printed
// to stderr, naming the object), so the caller exits non-zero.
Status stage_run(const StageOptions& opts, StageSummary* summary);

// The rank that handles key among ranks (FNV-1a of the key: the same on every node).
int stage_rank_of(const std::string& key, int ranks);

} // namespace jobfs::stage
