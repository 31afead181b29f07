// fuse_session_io.h: jobfs-fuse's reads and writes of /dev/fuse (fuse_session_custom_io), for
// two things of the FUSE protocol that libfuse 3.14 does not pass on.
//
// * FUSE_DIRECT_IO_ALLOW_MMAP. jobfs-fuse opens files for writing in direct-io mode
//   (FOPEN_DIRECT_IO; jobfs_fuse.cc, direct_io). Without this flag (Linux 6.6, FUSE 7.39) the
//   kernel refuses a shared mmap of such a file (ENODEV). It lives in flags2 of the INIT reply,
//   which libfuse 3.14 fills only from the capabilities it knows: read notes whether the
//   kernel's INIT request offers it, writev adds it to the INIT reply when it does.
// * FUSE_WRITE_KILL_SUIDGID. Before a write through its page cache the kernel drops setuid and
//   setgid itself (file_remove_privs); before a direct write it only flags the request, when
//   the writer may not keep them (no CAP_FSETID), and leaves the dropping to the server. libfuse
//   3.14 keeps the request's write_flags to itself: read notes the flag of the request it
//   read, for the handler that the same thread runs next (libfuse's workers read a request
//   and then handle it, one at a time).
// Every other message passes through unchanged.
//
// One FUSE session per process (this state is the process's). Thread-safe: libfuse's workers
// call both functions concurrently; the INIT exchange happens before any other request.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>

namespace jobfs::fuse {

// fuse_custom_io's read and writev (userdata unused).
ssize_t session_io_read(int fd, void* buf, size_t len, void* userdata);
ssize_t session_io_writev(int fd, struct iovec* iov, int count, void* userdata);

// Whether the kernel's INIT offered FUSE_DIRECT_IO_ALLOW_MMAP, so that the reply grants it:
// known from the moment the INIT request was read (before the init handler runs).
bool session_direct_mmap_offered();

// Whether the request this thread read last is a write flagged FUSE_WRITE_KILL_SUIDGID.
bool session_write_kills_setid();

} // namespace jobfs::fuse
