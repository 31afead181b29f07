// sequential_reads.h: which bytes of a file to ask this node's disks for ahead of a reader
// that reads it in order (FileIO's read-ahead of local reads, LocalReads::prefetch).
//
// Why tolerant: the reads of one sequential reader do not always arrive in order. The kernel
// sends a FUSE mount's readahead of a file as several 1 MiB READs at once, and jobfs-fuse's
// worker threads finish them in any order; an MPI rank's two-phase I/O does the like. Asking
// for "the read that starts where the last one ended" caught only 21-32 % of fio's sequential
// reads through the mount (session 32). Here a read that starts within a window of where the
// file's reads have reached so far (up to kMaxAhead behind it or kWindow ahead, or 4 times
// its length) continues the run; kRunReads reads make a run. A run whose reads cover less
// than half of the bytes they span (a strided reader: every 8th MiB of a checkpoint) is not
// read ahead: most of what it would be given it never reads.
//
// What is asked for: up to kWindow (or twice the read, up to kMaxAhead) past the furthest
// byte read, in pieces of at least kBatch (each piece costs a round trip to the daemon and a
// hand-over to LocalReads' page cache filler), each byte once. The file's end cuts both.
//
// Measured (session 33, fio 4 jobs of 1 MiB cold reads of 1 GiB through the mount, median of
// 5-6 alternating runs against one set of daemons): a window of 8 MiB in 4 MiB pieces read
// ~6 % faster than none; 16 MiB was slower than 8 (the disk then serves reads asked for long
// before the ones readers wait for).
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace jobfs::client {

class SequentialReads {
public:
    static constexpr uint64_t kWindow = 8u << 20;
    static constexpr uint64_t kMaxAhead = 32u << 20;
    static constexpr uint64_t kBatch = 4u << 20;
    // Reads that make a run: a random reader's two reads that happen to land near each other
    // do not.
    static constexpr uint32_t kRunReads = 3;
    // Reads shorter than this are not followed (after_read returns at once, takes no lock): a
    // small reader's pieces come from the page cache the kernel's own readahead (or an earlier
    // read) filled, and there are many of them.
    static constexpr uint64_t kMinRead = 128u << 10;
    // Files followed at once; past this, all are forgotten (and start over at their next read).
    static constexpr size_t kMaxFiles = 4096;

    // A range of bytes of a file to ask for: [from, to).
    struct Range {
        uint64_t from = 0, to = 0;
        bool empty() const { return from >= to; }
    };

    // A read of [offset, offset + length) of file `ino`, `file_size` bytes long, just ended;
    // `cold`: some of it was not in the page cache. Returns what to ask the disks for now
    // (empty: nothing).
    Range after_read(uint64_t ino, uint64_t offset, uint64_t length, uint64_t file_size, bool cold);
    // All of the range after_read last returned for `ino` was in the page cache already: a hot
    // file, not read ahead again until a read of it finds bytes that are not.
    void found_cached(uint64_t ino);

private:
    struct File {
        uint64_t start = 0;   // the lowest offset read in the current run
        uint64_t reached = 0; // the furthest end of a read of the current run
        uint64_t ahead = 0;   // asked for up to here
        uint64_t bytes = 0;   // read in the run
        uint32_t reads = 0;   // in the run
        bool cached = false;
    };
    std::mutex mu_; // guards files_
    std::unordered_map<uint64_t, File> files_;
};

} // namespace jobfs::client
