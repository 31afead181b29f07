#!/usr/bin/env python3
"""fcntl_lock.py: fcntl(2) byte-range locks for tests/fuse_test.sh, one call per run.

  fcntl_lock.py FILE hold START LEN SECONDS   write-lock the range, print "held", keep it SECONDS,
                                              print "done" (the lock goes with the process)
  fcntl_lock.py FILE flock-hold 0 0 SECONDS   the same with an exclusive flock(2) lock
  fcntl_lock.py FILE try START LEN            F_SETLK a write lock: "got", or "refused ERRNO"
  fcntl_lock.py FILE wait START LEN           F_SETLKW a write lock, then "got"
  fcntl_lock.py FILE get START LEN            F_GETLK of a write lock: "none", or
                                              "write|read START LEN PID" of the lock in the way
  fcntl_lock.py FILE rewrite START TEXT MARK  under a write lock on the bytes of TEXT, write TEXT
                                              there; give the lock back (the file kept open),
                                              then create file MARK and stay 2 s
  fcntl_lock.py FILE reread START LEN MARK    print the bytes; once file MARK exists, take a read
                                              lock on them and print them again (the same open file)
  fcntl_lock.py FILE flock-rewrite START TEXT MARK
                                              under an exclusive flock(2) lock of a second, read-only
                                              descriptor, write TEXT through the first; close the
                                              read-only one (which gives the lock back), then
                                              create file MARK and stay 2 s
  fcntl_lock.py FILE flock-reread START LEN MARK
                                              reread with a shared flock(2) lock; the bytes are
                                              printed with newlines as spaces
LEN 0 is to the end of the file."""
import fcntl
import os
import struct
import sys
import time

path, op, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
length = int(sys.argv[4]) if op not in ("rewrite", "flock-rewrite") else 0
fd = os.open(path, os.O_RDWR)
if op in ("hold", "flock-hold"):
    if op == "hold":
        fcntl.lockf(fd, fcntl.LOCK_EX, length, start)
    else:
        fcntl.flock(fd, fcntl.LOCK_EX)
    print("held", flush=True)
    time.sleep(float(sys.argv[5]))
    print("done", flush=True)
elif op == "try":
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, length, start)
        print("got")
    except OSError as e:
        print("refused", e.errno)
elif op == "wait":
    fcntl.lockf(fd, fcntl.LOCK_EX, length, start)
    print("got")
elif op == "get":
    fmt = "hhqqi"  # struct flock on x86_64/aarch64 Linux: type, whence, start, len, pid
    got = struct.unpack(fmt, fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack(fmt, fcntl.F_WRLCK, 0, start, length, 0)))
    if got[0] == fcntl.F_UNLCK:
        print("none")
    else:
        print("write" if got[0] == fcntl.F_WRLCK else "read", got[2], got[3], got[4])
elif op == "rewrite":
    text = sys.argv[4].encode()
    fcntl.lockf(fd, fcntl.LOCK_EX, len(text), start)
    os.pwrite(fd, text, start)
    fcntl.lockf(fd, fcntl.LOCK_UN, len(text), start)
    open(sys.argv[5], "w").close()
    time.sleep(2)
elif op == "reread":
    print(os.pread(fd, length, start).decode(), flush=True)
    while not os.path.exists(sys.argv[5]):
        time.sleep(0.02)
    fcntl.lockf(fd, fcntl.LOCK_SH, length, start)
    print(os.pread(fd, length, start).decode(), flush=True)
elif op == "flock-rewrite":
    ro = os.open(path, os.O_RDONLY)
    fcntl.flock(ro, fcntl.LOCK_EX)
    os.pwrite(fd, sys.argv[4].encode(), start)
    os.close(ro)
    open(sys.argv[5], "w").close()
    time.sleep(2)
elif op == "flock-reread":
    print(os.pread(fd, length, start).decode().replace("\n", " "), flush=True)
    while not os.path.exists(sys.argv[5]):
        time.sleep(0.02)
    fcntl.flock(fd, fcntl.LOCK_SH)
    print(os.pread(fd, length, start).decode().replace("\n", " "), flush=True)
else:
    sys.exit("fcntl_lock.py: unknown operation " + op)
