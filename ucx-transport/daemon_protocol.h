// daemon_protocol.h: the messages between clients and jobfsd, and between daemons.
//
// This header is the one place that lists them: every RPC is one JOBFS_RPC line with its
// request and response, next to the structs that carry its fields (wire.h explains the
// encoding). Opcodes are part of the protocol: append, never renumber. Bulk payloads (chunk
// data) travel beside the message, not inside it.
#pragma once

#include <cstdint>
#include <string>

#include "rpc.h"

namespace jobfs::proto {

struct Empty {
    JOBFS_NO_FIELDS
};

// ---- chunks (server/chunk_service) ----------------------------------------------------------

struct ChunkRef {
    uint64_t ino = 0;
    uint64_t index = 0;
    JOBFS_FIELDS(ino, index)
};

// Request bulk: `length` bytes to write at `offset` within the chunk.
struct ChunkWriteRequest {
    ChunkRef chunk;
    uint64_t offset = 0;
    uint64_t length = 0;
    JOBFS_FIELDS(chunk, offset, length)
};

// Reply bulk: the bytes read; `length` says how many the chunk holds there (short at its end).
struct ChunkReadRequest {
    ChunkRef chunk;
    uint64_t offset = 0;
    uint64_t length = 0;
    JOBFS_FIELDS(chunk, offset, length)
};
struct ChunkReadResponse {
    uint64_t length = 0;
    JOBFS_FIELDS(length)
};

struct ChunkTruncateRequest {
    ChunkRef chunk;
    uint64_t length = 0;
    JOBFS_FIELDS(chunk, length)
};

struct FileChunksRequest {
    uint64_t ino = 0;
    JOBFS_FIELDS(ino)
};

struct SpaceResponse {
    uint64_t total_bytes = 0;
    uint64_t free_bytes = 0;
    uint64_t chunk_files = 0;
    JOBFS_FIELDS(total_bytes, free_bytes, chunk_files)
};

JOBFS_RPC(ChunkWrite, 32, ChunkWriteRequest, Empty);
JOBFS_RPC(ChunkRead, 33, ChunkReadRequest, ChunkReadResponse);
JOBFS_RPC(ChunkTruncate, 34, ChunkTruncateRequest, Empty);
JOBFS_RPC(ChunkSync, 35, ChunkRef, Empty);
JOBFS_RPC(FileRemoveChunks, 36, FileChunksRequest, Empty);
JOBFS_RPC(DiskSpace, 37, Empty, SpaceResponse);

} // namespace jobfs::proto
