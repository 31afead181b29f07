// priority.h: the CPU priority of jobfs's daemons: jobfsd (nice in jobfs.conf) and jobfs-fuse
// (-o nice).
//
// Why: the daemons share their nodes' cores with the job. MPI ranks that wait in a collective
// busy-poll, and when a node runs more ranks than cores (or all of them) they spin in
// sched_yield(). Under Linux's EEVDF scheduler (6.6 on) such spinners were seen to keep the
// daemons' runnable threads off both cores of this 2-core machine for 10 to 30 s: the
// aggregator's chunk writes then waited for their whole deadline and the checkpoint failed
// with MPI_ERR_IO (bench/mpiio-ckpt with write-behind: 6 of 6 runs at nice 0, 0 of 10 at
// nice -10). A daemon uses CPU only while it serves requests that the job is waiting for, so it
// runs ahead of the job: nice -10 by default. jobfs-fuse is on the path of every file operation of
// the job's programs through the mount, so it runs at the same priority.
#pragma once

#include "result.h"

namespace jobfs {

// Whether nice is a nice value at all (-20 to 19).
bool daemon_nice_valid(int nice);

// Sets the nice value of the calling thread, which the threads it starts later inherit: call
// it before the daemon starts any. A value out of range fails with Code::invalid; one the
// process may not take (a negative one without root or RLIMIT_NICE) with Code::permission.
// Either changes nothing.
Status daemon_priority_set(int nice);

// The nice value of the calling thread.
int daemon_priority_get();

} // namespace jobfs
