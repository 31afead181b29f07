// fs_store.h: the file side of staging, one interface over jobfs (libjobfs, "jobfs:/path")
// and a POSIX file system (a plain path: a parallel file system, the jobfs FUSE mount…).
//
// Writes go to a temporary name next to the target and are renamed into place only when the
// whole object is there (commit), so a partial copy never carries the final name. The
// object's ETag is kept in the xattr user.jobfs.stage.etag of the file, written before the
// rename: a later run that finds the file with the same size and ETag skips it (resume).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "result.h"

namespace jobfs::client { class Client; }

namespace jobfs::stage {

inline constexpr char kEtagXattr[] = "user.jobfs.stage.etag";

struct FileInfo {
    std::string rel;  // path below the listed directory, '/'-separated
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    bool is_dir = false;
};

class WriteHandle {
public:
    virtual ~WriteHandle() = default;
    virtual Status pwrite(uint64_t offset, std::span<const uint8_t> data) = 0;
    // Closes and renames onto the final name (with the ETag given to create recorded).
    virtual Status commit() = 0;
    // commit(), or, where a store renames by the batch, later: `done` gets the outcome once
    // the file carries its final name (or failed to, its temporary file then removed), at
    // the latest in the store's flush_commits(). May run on another thread.
    virtual void commit_later(std::function<void(Status)> done) { done(commit()); }
    // Closes and removes the temporary file (after a failure).
    virtual void discard() = 0;
};

class ReadHandle {
public:
    virtual ~ReadHandle() = default;
    virtual Result<size_t> pread(uint64_t offset, std::span<uint8_t> out) = 0;
};

class FileStore {
public:
    virtual ~FileStore() = default;
    // "jobfs:/a" for jobfs, the path itself otherwise: how messages name a file.
    virtual std::string display(const std::string& path) const = 0;
    virtual Result<FileInfo> stat(const std::string& path) = 0;
    // Every regular file below dir (recursively), with rel set.
    virtual Result<std::vector<FileInfo>> list_files(const std::string& dir) = 0;
    virtual Status mkdirs(const std::string& dir) = 0;
    // The names in dir (any type); none when dir does not exist. One listing, where a lookup
    // per name would cost a metadata call each (stage-in's resume check).
    virtual Result<std::vector<std::string>> names(const std::string& dir) = 0;
    // The ETag recorded by a finished copy, or "" when there is none.
    virtual std::string recorded_etag(const std::string& path) = 0;
    // A temporary file beside path, of `size` bytes once written, that commit() puts in place
    // with etag ("" for none) recorded on it (recorded_etag).
    virtual Result<std::unique_ptr<WriteHandle>> create(const std::string& path, uint64_t size,
                                                       const std::string& etag) = 0;
    virtual Result<std::unique_ptr<ReadHandle>> open(const std::string& path) = 0;
    // Puts in place every file given to commit_later and not yet renamed, and runs their
    // `done` callbacks, before it returns. Where the store answers creates and renames itself
    // and sends them later (jobfs's delegated directories), also waits until they are at the
    // file system: an error says some were lost, and files reported committed may be missing.
    virtual Status flush_commits() { return Status::OK(); }
    // Writes a small file whole (the manifest), through a temporary name.
    Status write_file(const std::string& path, const std::string& data);
};

std::unique_ptr<FileStore> fs_store_local();
// Connects to the jobfs of $JOBFS_CLUSTER.
Result<std::unique_ptr<FileStore>> fs_store_jobfs();

} // namespace jobfs::stage
