// priority.cc: the daemons' CPU priority (see priority.h).
#include "priority.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace jobfs {

// On Linux a nice value belongs to a thread: PRIO_PROCESS with this thread's id sets only it,
// and the threads it creates afterwards start with it.
bool daemon_nice_valid(int nice) { return nice >= -20 && nice <= 19; }

Status daemon_priority_set(int nice) {
    if (!daemon_nice_valid(nice))
        return Status(Code::invalid, "nice=" + std::to_string(nice) + ": not a nice value (-20 to 19)");
    const id_t self = static_cast<id_t>(::syscall(SYS_gettid));
    if (::setpriority(PRIO_PROCESS, self, nice) != 0)
        return Status::from_errno(errno, "set the daemon's nice value to " + std::to_string(nice));
    return Status::OK();
}

int daemon_priority_get() {
    errno = 0;
    return ::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)));
}

} // namespace jobfs
