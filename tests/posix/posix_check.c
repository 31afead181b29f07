/* posix_check: POSIX behaviour of a directory's file system, with exact errno values.
 *
 *   posix_check DIR
 *
 * Runs every case in a fresh subdirectory of DIR and prints "ok - NAME" or "not ok - NAME"
 * (with the reason) per case, then "N failed"; exit status 0 only if all passed. The same
 * program runs against a jobfs mount and against a local directory as the control
 * (tests/posix_test.sh): a case that fails on the local disk is a bug of this program.
 * As root the program also checks that another user (uid 65534) is refused.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

static int failures;
static char why[512];

/* Records the reason of a failing check, cut to fit `why` (a function, not snprintf in the
 * macro: GCC's -Wformat-truncation, an error here, flags such cuts at some -O levels). */
__attribute__((format(printf, 1, 2))) static void set_why(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
}
/* Records the reason of a failing check; the case function then returns 1. */
#define REQUIRE(cond, ...)                                                   \
    do {                                                                     \
        if (!(cond)) {                                                       \
            set_why(__VA_ARGS__);                                            \
            return 1;                                                        \
        }                                                                    \
    } while (0)
/* A call that must fail with errno e. */
#define FAILS_WITH(call, e)                                                                  \
    do {                                                                                     \
        errno = 0;                                                                           \
        long r_ = (long)(call);                                                              \
        REQUIRE(r_ == -1 && errno == (e), "%s: expected %s, got %ld (%s)", #call, #e, r_,    \
                strerror(errno));                                                            \
    } while (0)
#define OK(call)                                                                             \
    do {                                                                                     \
        errno = 0;                                                                           \
        long r_ = (long)(call);                                                              \
        REQUIRE(r_ != -1, "%s failed: %s", #call, strerror(errno));                          \
    } while (0)

static void run(const char* name, int (*fn)(void)) {
    why[0] = 0;
    if (fn() == 0) {
        printf("ok - %s\n", name);
    } else {
        printf("not ok - %s: %s\n", name, why);
        failures++;
    }
    fflush(stdout);
}

static int write_all(int fd, const void* p, size_t n) { return write(fd, p, n) == (ssize_t)n ? 0 : -1; }

static int make_file(const char* path, const char* text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    int r = write_all(fd, text, strlen(text));
    return close(fd) == 0 ? r : -1;
}

static int read_text(const char* path, char* out, size_t n) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    ssize_t got = read(fd, out, n - 1);
    close(fd);
    if (got < 0) return -1;
    out[got] = 0;
    return 0;
}

/* ---- files -------------------------------------------------------------------------------- */

static int case_create_excl_trunc(void) {
    int fd;
    OK(fd = open("f", O_WRONLY | O_CREAT | O_EXCL, 0640));
    OK(write_all(fd, "hello world", 11));
    OK(close(fd));
    FAILS_WITH(open("f", O_WRONLY | O_CREAT | O_EXCL, 0640), EEXIST);
    struct stat st;
    OK(stat("f", &st));
    REQUIRE(st.st_size == 11 && (st.st_mode & 0777) == 0640 && S_ISREG(st.st_mode), "size %ld mode %o",
            (long)st.st_size, st.st_mode);
    OK(fd = open("f", O_WRONLY | O_TRUNC));
    OK(close(fd));
    OK(stat("f", &st));
    REQUIRE(st.st_size == 0, "O_TRUNC left %ld bytes", (long)st.st_size);
    FAILS_WITH(open("nope", O_RDONLY), ENOENT);
    FAILS_WITH(open("f/x", O_RDONLY), ENOTDIR);
    return 0;
}

static int case_read_write_pread_pwrite(void) {
    int fd;
    char buf[64] = {0};
    OK(fd = open("rw", O_RDWR | O_CREAT | O_TRUNC, 0644));
    OK(write_all(fd, "0123456789", 10));
    REQUIRE(pwrite(fd, "AB", 2, 4) == 2, "pwrite");
    REQUIRE(pread(fd, buf, sizeof buf, 0) == 10 && memcmp(buf, "0123AB6789", 10) == 0, "pread: %s", buf);
    REQUIRE(lseek(fd, 0, SEEK_CUR) == 10, "pwrite moved the offset");
    REQUIRE(pwrite(fd, "Z", 1, 20) == 1, "pwrite past the end");
    memset(buf, 'x', sizeof buf);
    REQUIRE(pread(fd, buf, sizeof buf, 0) == 21, "read after a hole");
    for (int i = 10; i < 20; ++i) REQUIRE(buf[i] == 0, "hole byte %d is %d", i, buf[i]);
    REQUIRE(pread(fd, buf, 10, 21) == 0, "read at EOF is not 0");
    OK(close(fd));
    FAILS_WITH(write(fd, "x", 1), EBADF);
    OK(fd = open("rw", O_RDONLY));
    FAILS_WITH(write(fd, "x", 1), EBADF);
    OK(close(fd));
    return 0;
}

static int case_append_from_two_descriptors(void) {
    int a, b;
    OK(a = open("ap", O_WRONLY | O_CREAT | O_APPEND | O_TRUNC, 0644));
    OK(b = open("ap", O_WRONLY | O_APPEND));
    for (int i = 0; i < 50; ++i) {
        OK(write_all(a, "aaaa\n", 5));
        OK(write_all(b, "bbbb\n", 5));
    }
    OK(close(a));
    OK(close(b));
    struct stat st;
    OK(stat("ap", &st));
    REQUIRE(st.st_size == 500, "size %ld, records overwrote each other", (long)st.st_size);
    return 0;
}

static int case_truncate_ftruncate(void) {
    int fd;
    char buf[16];
    OK(make_file("t", "abcdefghij"));
    OK(truncate("t", 4));
    OK(read_text("t", buf, sizeof buf));
    REQUIRE(strcmp(buf, "abcd") == 0, "after truncate: %s", buf);
    OK(fd = open("t", O_RDWR));
    OK(ftruncate(fd, 8));
    REQUIRE(pread(fd, buf, sizeof buf, 0) == 8 && memcmp(buf, "abcd\0\0\0\0", 8) == 0, "grown part not zero");
    OK(close(fd));
    FAILS_WITH(truncate("nope", 1), ENOENT);
    OK(mkdir("td", 0755));
    FAILS_WITH(truncate("td", 1), EISDIR);
    FAILS_WITH(truncate("t", -1), EINVAL);
    return 0;
}

static int case_unlink_open_file(void) {
    int fd;
    char buf[32] = {0};
    OK(make_file("u", "kept alive"));
    OK(fd = open("u", O_RDWR));
    OK(unlink("u"));
    FAILS_WITH(access("u", F_OK), ENOENT);
    REQUIRE(pread(fd, buf, sizeof buf, 0) == 10 && strcmp(buf, "kept alive") == 0, "read after unlink: %s", buf);
    REQUIRE(pwrite(fd, "!", 1, 10) == 1, "write after unlink");
    struct stat st;
    OK(fstat(fd, &st));
    REQUIRE(st.st_nlink == 0 && st.st_size == 11, "nlink %ld size %ld", (long)st.st_nlink, (long)st.st_size);
    OK(close(fd));
    FAILS_WITH(unlink("u"), ENOENT);
    /* An O_APPEND descriptor of an unlinked file goes on appending (a temporary log). */
    OK(make_file("ua", "one\n"));
    OK(fd = open("ua", O_RDWR | O_APPEND));
    OK(write_all(fd, "two\n", 4));
    OK(unlink("ua"));
    OK(write_all(fd, "three\n", 6));
    memset(buf, 0, sizeof buf);
    REQUIRE(pread(fd, buf, sizeof buf - 1, 0) == 14 && strcmp(buf, "one\ntwo\nthree\n") == 0,
            "appended after unlink: %s", buf);
    OK(close(fd));
    return 0;
}

static int case_fsync_fdatasync(void) {
    int fd;
    OK(fd = open("s", O_WRONLY | O_CREAT | O_TRUNC, 0644));
    OK(write_all(fd, "durable", 7));
    OK(fsync(fd));
    OK(fdatasync(fd));
    OK(close(fd));
    struct stat st;
    OK(stat("s", &st));
    REQUIRE(st.st_size == 7, "size %ld after fsync", (long)st.st_size);
    return 0;
}

static int case_mmap_shared_write(void) {
    int fd;
    OK(fd = open("m", O_RDWR | O_CREAT | O_TRUNC, 0644));
    OK(ftruncate(fd, 8192));
    char* p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(p != MAP_FAILED, "mmap: %s", strerror(errno));
    memcpy(p + 4096, "mapped", 6);
    OK(msync(p, 8192, MS_SYNC));
    OK(munmap(p, 8192));
    OK(close(fd));
    char buf[8] = {0};
    OK(fd = open("m", O_RDONLY));
    REQUIRE(pread(fd, buf, 6, 4096) == 6 && memcmp(buf, "mapped", 6) == 0, "read back: %s", buf);
    OK(close(fd));
    return 0;
}

/* A shared mapping and read(2)/write(2) through other descriptors see each other's bytes, also
 * through descriptors opened for writing and O_APPEND (jobfs-fuse opens those in direct-io mode,
 * which the kernel maps only when jobfs-fuse got FUSE_DIRECT_IO_ALLOW_MMAP). */
static int case_mmap_and_write_coherent(void) {
    int fd, other;
    OK(fd = open("mc", O_RDWR | O_CREAT | O_TRUNC | O_APPEND, 0644));
    OK(ftruncate(fd, 8192));
    char* p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(p != MAP_FAILED, "mmap of an O_RDWR | O_APPEND descriptor: %s", strerror(errno));
    OK(other = open("mc", O_RDWR));
    memcpy(p, "by-map", 6);
    char buf[8] = {0};
    REQUIRE(pread(other, buf, 6, 0) == 6 && memcmp(buf, "by-map", 6) == 0, "read(2) after the mapping wrote: %.6s", buf);
    REQUIRE(pwrite(other, "by-write", 8, 4096) == 8, "pwrite: %s", strerror(errno));
    REQUIRE(memcmp(p + 4096, "by-write", 8) == 0, "the mapping after write(2): %.8s", p + 4096);
    OK(munmap(p, 8192));
    OK(close(other));
    OK(close(fd));
    return 0;
}

/* A process that keeps rereading a page while another rewrites it sees each write with the first
 * read that starts after the write returned. (jobfs-fuse: the writer's pages bypass the page
 * cache, and a reread that refilled the cache while a write was on its way must not keep its
 * stale page. The reader opens the file afresh for every read: with -o no_direct_writes the
 * kernel writes through the pages, and an open that dropped them, or a close that moved the
 * file's mtime so that the next read dropped them, while a write was on its way left a page
 * from before it in the cache.) */
static int case_reread_sees_every_write(void) {
    enum { kRounds = 400, kWrite = 1 << 20 }; /* large writes: long on their way */
    static unsigned char block[kWrite];
    int wfd = -1, rfd = -1, rc = 0;
    char page[4096] = {0};
    OK(wfd = open("reread", O_RDWR | O_CREAT | O_TRUNC, 0644));
    OK(write_all(wfd, block, sizeof block));
    pid_t pid = fork();
    if (pid == 0) { /* keeps the page in the page cache, until killed */
        for (;;) {
            int fd = open("reread", O_RDONLY);
            if (fd < 0 || pread(fd, page, sizeof page, 0) < 0) _exit(1);
            close(fd);
        }
    }
    OK(pid);
    rfd = open("reread", O_RDONLY);
    if (rfd < 0) {
        set_why("open: %s", strerror(errno));
        rc = -1;
    }
    for (unsigned i = 1; rc == 0 && i <= kRounds; ++i) {
        unsigned got = 0;
        memcpy(block, &i, sizeof i);
        if (pwrite(wfd, block, sizeof block, 0) != (ssize_t)sizeof block) {
            set_why("pwrite in round %u: %s", i, strerror(errno));
            rc = -1;
        } else if (pread(rfd, &got, sizeof got, 0) != (ssize_t)sizeof got || got != i) {
            set_why("round %u: a read after the write returned %u", i, got);
            rc = -1;
        }
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    if (rfd >= 0) close(rfd);
    close(wfd);
    return rc;
}

static int case_locks(void) {
    int fd, fd2;
    OK(fd = open("l", O_RDWR | O_CREAT, 0644));
    OK(flock(fd, LOCK_EX));
    OK(fd2 = open("l", O_RDWR));
    FAILS_WITH(flock(fd2, LOCK_EX | LOCK_NB), EWOULDBLOCK);
    OK(flock(fd, LOCK_UN));
    OK(flock(fd2, LOCK_EX | LOCK_NB));
    OK(flock(fd2, LOCK_UN));
    /* fcntl byte-range locks are per process: a child must see the parent's lock. */
    struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 100};
    OK(fcntl(fd, F_SETLK, &lk));
    pid_t pid = fork();
    if (pid == 0) {
        struct flock t = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 50, .l_len = 10};
        int r = fcntl(fd2, F_SETLK, &t);
        _exit(r == -1 && (errno == EAGAIN || errno == EACCES) ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a child got a lock the parent holds");
    OK(close(fd2));
    OK(close(fd));
    return 0;
}

/* ---- names -------------------------------------------------------------------------------- */

static int case_mkdir_rmdir_errors(void) {
    OK(mkdir("d", 0755));
    FAILS_WITH(mkdir("d", 0755), EEXIST);
    OK(make_file("d/f", "x"));
    FAILS_WITH(rmdir("d"), ENOTEMPTY);
    FAILS_WITH(rmdir("d/f"), ENOTDIR);
    FAILS_WITH(unlink("d"), EISDIR);
    FAILS_WITH(mkdir("nope/sub", 0755), ENOENT);
    FAILS_WITH(mkdir("d/f/sub", 0755), ENOTDIR);
    char longname[300];
    memset(longname, 'n', 256);
    longname[256] = 0;
    FAILS_WITH(mkdir(longname, 0755), ENAMETOOLONG);
    longname[255] = 0;
    OK(mkdir(longname, 0755));
    OK(rmdir(longname));
    OK(unlink("d/f"));
    OK(rmdir("d"));
    FAILS_WITH(rmdir("d"), ENOENT);
    struct stat st;
    OK(mkdir("nl", 0755));
    OK(mkdir("nl/a", 0755));
    OK(mkdir("nl/b", 0755));
    OK(stat("nl", &st));
    REQUIRE(st.st_nlink == 4, "nlink of a directory with two subdirectories is %ld", (long)st.st_nlink);
    return 0;
}

static int case_rename(void) {
    char buf[16];
    OK(make_file("r1", "one"));
    OK(make_file("r2", "two"));
    OK(rename("r1", "r2"));
    FAILS_WITH(access("r1", F_OK), ENOENT);
    OK(read_text("r2", buf, sizeof buf));
    REQUIRE(strcmp(buf, "one") == 0, "rename over: %s", buf);
    OK(mkdir("rd", 0755));
    OK(mkdir("rd/sub", 0755));
    OK(mkdir("re", 0755));
    OK(rename("rd", "re/moved"));
    OK(access("re/moved/sub", F_OK));
    FAILS_WITH(rename("re", "re/moved/sub/loop"), EINVAL);
    OK(mkdir("empty", 0755));
    OK(rename("empty", "re/moved/sub")); /* over an empty directory */
    OK(mkdir("full", 0755));
    OK(make_file("full/x", "x"));
    FAILS_WITH(rename("re/moved", "full"), ENOTEMPTY);
    FAILS_WITH(rename("r2", "re"), EISDIR);
    FAILS_WITH(rename("re", "r2"), ENOTDIR);
    FAILS_WITH(rename("nope", "x"), ENOENT);
    OK(make_file("r3", "three"));
    FAILS_WITH(syscall(SYS_renameat2, AT_FDCWD, "r3", AT_FDCWD, "r2", RENAME_NOREPLACE), EEXIST);
    OK(syscall(SYS_renameat2, AT_FDCWD, "r3", AT_FDCWD, "r4", RENAME_NOREPLACE));
    return 0;
}

static int case_readdir_large_and_seekdir(void) {
    OK(mkdir("big", 0755));
    char name[64];
    for (int i = 0; i < 2000; ++i) {
        snprintf(name, sizeof name, "big/entry-%04d", i);
        OK(make_file(name, ""));
    }
    DIR* d = opendir("big");
    REQUIRE(d, "opendir: %s", strerror(errno));
    int n = 0, dots = 0;
    long mark = -1;
    char marked[256] = "";
    struct dirent* e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) {
            dots++;
            continue;
        }
        if (++n == 1000) {
            mark = telldir(d);
        }
        if (n == 1001) snprintf(marked, sizeof marked, "%s", e->d_name);
    }
    REQUIRE(n == 2000 && dots == 2, "readdir saw %d entries and %d dots", n, dots);
    seekdir(d, mark);
    e = readdir(d);
    REQUIRE(e && !strcmp(e->d_name, marked), "seekdir went to %s, not %s", e ? e->d_name : "(end)", marked);
    rewinddir(d);
    n = 0;
    while ((e = readdir(d))) n++;
    REQUIRE(n == 2002, "after rewinddir %d entries", n);
    closedir(d);
    return 0;
}

static int case_symlinks_and_hard_links(void) {
    char buf[64];
    OK(make_file("target", "via link"));
    OK(symlink("target", "sl"));
    ssize_t n = readlink("sl", buf, sizeof buf);
    REQUIRE(n == 6 && memcmp(buf, "target", 6) == 0, "readlink");
    OK(read_text("sl", buf, sizeof buf));
    REQUIRE(strcmp(buf, "via link") == 0, "read through the symlink: %s", buf);
    struct stat st;
    OK(lstat("sl", &st));
    REQUIRE(S_ISLNK(st.st_mode) && st.st_size == 6, "lstat of a symlink");
    OK(symlink("loop2", "loop1"));
    OK(symlink("loop1", "loop2"));
    FAILS_WITH(open("loop1", O_RDONLY), ELOOP);
    FAILS_WITH(readlink("target", buf, sizeof buf), EINVAL);
    OK(link("target", "hard"));
    OK(stat("target", &st));
    REQUIRE(st.st_nlink == 2, "nlink %ld after link", (long)st.st_nlink);
    FAILS_WITH(link("target", "hard"), EEXIST);
    OK(mkdir("ld", 0755));
    FAILS_WITH(link("ld", "ld2"), EPERM);
    OK(unlink("target"));
    OK(read_text("hard", buf, sizeof buf));
    REQUIRE(strcmp(buf, "via link") == 0, "data through the other link");
    OK(stat("hard", &st));
    REQUIRE(st.st_nlink == 1, "nlink %ld after unlink", (long)st.st_nlink);
    return 0;
}

static int case_chmod_chown_utimensat(void) {
    struct stat st;
    OK(make_file("attr", "x"));
    OK(chmod("attr", 0600));
    OK(stat("attr", &st));
    REQUIRE((st.st_mode & 07777) == 0600, "mode %o", st.st_mode & 07777);
    struct timespec ts[2] = {{.tv_sec = 1000000000, .tv_nsec = 5}, {.tv_sec = 1100000000, .tv_nsec = 123456789}};
    OK(utimensat(AT_FDCWD, "attr", ts, 0));
    OK(stat("attr", &st));
    REQUIRE(st.st_atim.tv_sec == 1000000000 && st.st_mtim.tv_sec == 1100000000 && st.st_mtim.tv_nsec == 123456789,
            "times %ld %ld.%09ld", (long)st.st_atim.tv_sec, (long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
    if (geteuid() == 0) {
        OK(chown("attr", 1234, 5678));
        OK(stat("attr", &st));
        REQUIRE(st.st_uid == 1234 && st.st_gid == 5678, "owner %d:%d", (int)st.st_uid, (int)st.st_gid);
        OK(chown("attr", 0, 0));
    }
    FAILS_WITH(chmod("nope", 0600), ENOENT);
    return 0;
}

static int case_other_user_refused(void) {
    if (geteuid() != 0) return 0; /* needs root to become another user */
    OK(mkdir("private", 0700));
    OK(make_file("private/secret", "s"));
    OK(make_file("ro", "r"));
    OK(chmod("ro", 0644));
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
        int bad = 0;
        if (!(open("private/secret", O_RDONLY) == -1 && errno == EACCES)) bad |= 4;
        if (!(open("ro", O_WRONLY) == -1 && errno == EACCES)) bad |= 8;
        if (!(chmod("ro", 0777) == -1 && errno == EPERM)) bad |= 16;
        if (!(mkdir("private/x", 0755) == -1 && errno == EACCES)) bad |= 32;
        _exit(bad);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0, "another user was let through (code %d)",
            WEXITSTATUS(status));
    return 0;
}

/* Another user's write drops setuid and setgid (with group execute), through a plain and an
 * O_APPEND descriptor alike (jobfs places appends itself, past the kernel's page cache). */
static int case_write_drops_setid(void) {
    if (geteuid() != 0) return 0; /* needs root to become another user */
    const int flags[2] = {O_WRONLY, O_WRONLY | O_APPEND};
    for (int i = 0; i < 2; ++i) {
        OK(make_file("setid", "0123"));
        OK(chmod("setid", 06777));
        pid_t pid = fork();
        if (pid == 0) {
            if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
            int fd = open("setid", flags[i]);
            if (fd < 0 || write(fd, "x", 1) != 1 || close(fd) != 0) _exit(3);
            _exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the other user's write failed (code %d)",
                WEXITSTATUS(status));
        struct stat st;
        OK(stat("setid", &st));
        REQUIRE((st.st_mode & 07777) == 0777, "%s write left mode %o", i ? "an O_APPEND" : "a plain",
                (unsigned)(st.st_mode & 07777));
        REQUIRE(st.st_size == (i ? 5 : 4), "size %ld", (long)st.st_size);
    }
    return 0;
}

static int case_statfs(void) {
    struct statvfs sv;
    OK(statvfs(".", &sv));
    REQUIRE(sv.f_blocks > 0 && sv.f_bsize > 0 && sv.f_bfree <= sv.f_blocks && sv.f_namemax >= 255,
            "blocks %lu bsize %lu free %lu namemax %lu", (unsigned long)sv.f_blocks, (unsigned long)sv.f_bsize,
            (unsigned long)sv.f_bfree, (unsigned long)sv.f_namemax);
    return 0;
}

static int case_xattrs(void) {
    char buf[64];
    OK(make_file("x", ""));
    OK(setxattr("x", "user.k", "v1", 2, 0));
    REQUIRE(getxattr("x", "user.k", buf, sizeof buf) == 2 && !memcmp(buf, "v1", 2), "getxattr");
    FAILS_WITH(setxattr("x", "user.k", "v2", 2, XATTR_CREATE), EEXIST);
    FAILS_WITH(setxattr("x", "user.n", "v2", 2, XATTR_REPLACE), ENODATA);
    FAILS_WITH(getxattr("x", "user.none", buf, sizeof buf), ENODATA);
    FAILS_WITH(getxattr("x", "user.k", buf, 1), ERANGE);
    REQUIRE(getxattr("x", "user.k", NULL, 0) == 2, "size query");
    ssize_t n = listxattr("x", buf, sizeof buf);
    REQUIRE(n > 0 && memmem(buf, (size_t)n, "user.k", 7), "listxattr");
    OK(removexattr("x", "user.k"));
    FAILS_WITH(removexattr("x", "user.k"), ENODATA);
    return 0;
}

/* Read-after-write between processes of one node: what one process wrote (still open, not
 * fsync'ed) another process reads at once through its own descriptor, also the last piece
 * (jobfs-fuse may still be sending writes to the daemons when write(2) returns). */
static int case_write_read_by_another_process(void) {
    enum { kPiece = 1 << 20, kPieces = 8 };
    static unsigned char piece[kPiece];
    int fd;
    OK(fd = open("raw", O_WRONLY | O_CREAT | O_TRUNC, 0644));
    for (int i = 0; i < kPieces; ++i) {
        memset(piece, 'a' + i, sizeof piece);
        OK(write_all(fd, piece, sizeof piece));
    }
    pid_t pid = fork();
    if (pid == 0) {
        static unsigned char got[kPiece];
        int rfd = open("raw", O_RDONLY);
        if (rfd < 0) _exit(10);
        struct stat st;
        if (fstat(rfd, &st) != 0 || st.st_size != (off_t)kPiece * kPieces) _exit(11);
        for (int i = kPieces - 1; i >= 0; --i) { /* the last written first */
            if (pread(rfd, got, sizeof got, (off_t)i * kPiece) != (ssize_t)sizeof got) _exit(12);
            for (size_t k = 0; k < sizeof got; ++k)
                if (got[k] != 'a' + i) _exit(20 + i);
        }
        _exit(0);
    }
    int status = 0;
    OK(pid);
    OK(waitpid(pid, &status, 0));
    OK(close(fd));
    REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "the reader exited %d (11: wrong size, 12: short read, 20+i: wrong bytes in piece i)",
            WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}

static int case_sparse_file(void) {
    int fd;
    OK(fd = open("sparse", O_RDWR | O_CREAT | O_TRUNC, 0644));
    REQUIRE(pwrite(fd, "end", 3, 256 << 20) == 3, "pwrite at 256 MiB");
    OK(fsync(fd));
    struct stat st;
    OK(fstat(fd, &st));
    REQUIRE(st.st_size == (256 << 20) + 3, "size %ld", (long)st.st_size);
    /* Allocation is not checked here: jobfs reports st_blocks from the size (its daemons, not
     * the metadata shard, know what is allocated); tests/fuse_test.sh checks the daemons' disks. */
    char buf[4096];
    REQUIRE(pread(fd, buf, sizeof buf, 100 << 20) == (ssize_t)sizeof buf, "read in the hole");
    for (size_t i = 0; i < sizeof buf; ++i) REQUIRE(buf[i] == 0, "hole byte not zero");
    OK(close(fd));
    return 0;
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: posix_check DIR\n");
        return 2;
    }
    char work[4096];
    snprintf(work, sizeof work, "%s/posix-check-%d", argv[1], (int)getpid());
    if (mkdir(work, 0755) != 0 || chdir(work) != 0) {
        fprintf(stderr, "posix_check: cannot make %s: %s\n", work, strerror(errno));
        return 2;
    }
    umask(022);
    run("open O_CREAT|O_EXCL, O_TRUNC, ENOENT, ENOTDIR", case_create_excl_trunc);
    run("read, write, pread, pwrite, holes, EOF, EBADF", case_read_write_pread_pwrite);
    run("O_APPEND from two descriptors keeps every record", case_append_from_two_descriptors);
    run("truncate and ftruncate, EISDIR, EINVAL", case_truncate_ftruncate);
    run("unlink of an open file", case_unlink_open_file);
    run("fsync and fdatasync", case_fsync_fdatasync);
    run("shared mmap writes are read back", case_mmap_shared_write);
    run("a shared mapping and writes through other descriptors, also O_APPEND, see each other", case_mmap_and_write_coherent);
    run("flock and fcntl locks between processes of this node", case_locks);
    run("mkdir, rmdir and their errors, ENAMETOOLONG, directory nlink", case_mkdir_rmdir_errors);
    run("rename: over files, directories, into itself, RENAME_NOREPLACE", case_rename);
    run("readdir of 2,000 entries, telldir/seekdir, rewinddir", case_readdir_large_and_seekdir);
    run("symlink, readlink, ELOOP, link and nlink", case_symlinks_and_hard_links);
    run("chmod, chown, utimensat with nanoseconds", case_chmod_chown_utimensat);
    run("another user is refused (EACCES, EPERM)", case_other_user_refused);
    run("another user's write drops setuid and setgid, also through O_APPEND", case_write_drops_setid);
    run("statvfs", case_statfs);
    run("xattrs: set, get, list, remove, flags, ERANGE, ENODATA", case_xattrs);
    run("a sparse file of 256 MiB reads zeros in its hole", case_sparse_file);
    run("8 MiB written and still open are read at once by another process", case_write_read_by_another_process);
    run("a process rereading a page sees every write of another once it returned", case_reread_sees_every_write);
    printf("%d failed\n", failures);
    return failures ? 1 : 0;
}
