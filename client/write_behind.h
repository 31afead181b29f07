// write_behind.h: buffered, asynchronous writes of one open file.
//
// A write is copied and sent to its chunk daemons while the caller goes on; up to `limit`
// bytes may be in flight per file, then the writer waits. So a process writing a checkpoint
// in 1 MiB pieces keeps every daemon busy instead of paying one round trip per piece, as a
// page cache does for a local file. The price is the same as a page cache's: a failure
// (ENOSPC, a daemon gone) is reported by a later write, fsync or close of the file rather
// than by the write that caused it, and other clients see the data once it is flushed
// (fsync, close): MPI-IO's consistency, and close-to-open, not POSIX's read-after-write
// across processes. Hence opt-in in libjobfs (ClientOptions::write_behind_bytes). jobfs-fuse
// has it on by default (InodeClientOptions, -o write_behind_mib): there one WriteBehind is
// shared by all handles of an inode and every read waits for it, so POSIX's read-after-write
// holds between the processes of a node.
//
// Writes that overlap are written in the order they were made: a write waits for any write
// in flight that it overlaps.
//
// Errors are sticky: after one write failed, every later write, flush and close of this file
// returns that error.
//
// How: each write is copied (FileIO::hold: straight into the write arena for pieces bound for
// this node's daemons) and handed to a pool of writer threads (shared by the files of a
// client), which send it with FileIO's pwrite, so several pieces are on their way at once.
// Stalls seen before jobfsd ran at nice -10: with more runnable threads than cores (four MPI
// ranks busy-polling two cores) a chunk write went unanswered for 6-28 s, sometimes until its
// 30 s deadline. It looked like a UCX hang but was the scheduler: the ranks spun in
// sched_yield() at 100% system time while the daemons' runnable threads got no CPU (see
// ucx-transport/priority.h). At nice -10, 4 ranks with 64 MiB of write behind wrote 1 GiB at
// 718-832 MB/s in 5 of 5 runs (463-784 without write behind). ad_jobfs leaves it off by default
// still, so that a failed write is reported by the MPI call that made it.
//
// Thread safety: any thread may call any method; writes from several threads interleave.
#pragma once

#include <boost/asio/thread_pool.hpp>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <span>

#include "client/file_io.h"

namespace jobfs::client {

class WriteBehind {
public:
    // Writer threads per client: enough to keep a few chunk daemons busy from one file.
    static constexpr int kWriterThreads = 4;

    // pool: the client's writer threads (kWriterThreads), alive as long as this object.
    WriteBehind(const FileIO& io, boost::asio::thread_pool& pool, uint64_t ino, const Layout& layout,
                size_t limit_bytes);
    ~WriteBehind(); // waits for what is in flight (the buffers are its own)
    WriteBehind(const WriteBehind&) = delete;
    WriteBehind& operator=(const WriteBehind&) = delete;

    // Copies data and starts writing it at offset; first waits while the limit is reached.
    // Returns the sticky error of an earlier write, if any (and then writes nothing).
    Status write(uint64_t offset, std::span<const uint8_t> data);
    // Waits until every write started has completed; the sticky error, or ok.
    Status flush();
    // Waits until nothing is in flight, without reporting errors (before a read).
    void quiesce();

private:
    struct State {
        std::mutex mu;
        std::condition_variable cv;
        size_t bytes_in_flight = 0;
        std::multiset<std::pair<uint64_t, uint64_t>> ranges; // [offset, end) of writes in flight
        Status error;
    };
    // A write started by write() has ended with s: its bytes are no longer in flight.
    static void done(State& state, uint64_t offset, uint64_t size, Status s);

    const FileIO& io_;
    boost::asio::thread_pool& pool_;
    uint64_t ino_;
    Layout layout_;
    size_t limit_;
    std::shared_ptr<State> state_;
};

} // namespace jobfs::client
