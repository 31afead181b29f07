/* c_api_compile: a C99 program (built -std=c99 -pedantic -Wall -Wextra -Werror) that uses
 * jobfs.h as a C user would, against the file system named by $JOBFS_CLUSTER: a striped file
 * written and read back byte for byte, its size and layout, a directory listing, an xattr and
 * the errors of a few wrong calls. Prints "ok - name" / "not ok - name" per step (TAP-like,
 * for tests/case-driver) and exits 1 if any failed. Run by tests/c_api_test.sh. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/jobfs.h"

static int failures = 0;

static void check(int ok, const char *name) {
    if (ok) {
        printf("ok - c99: %s\n", name);
    } else {
        printf("not ok - c99: %s (%s)\n", name, jobfs_last_error());
        ++failures;
    }
}

/* Bytes that differ at every position and between seeds (a small LCG). */
static void fill(unsigned char *buf, size_t n, unsigned seed) {
    uint64_t x = 2463534242u + seed;
    size_t i;
    for (i = 0; i < n; ++i) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (unsigned char)(x >> 33);
    }
}

int main(void) {
    const size_t n = (5u << 20) + 123; /* more than a few chunks, not chunk-aligned */
    jobfs_t *fs = NULL;
    jobfs_file_t *f = NULL;
    jobfs_dir_t *d = NULL;
    jobfs_dirent_t e;
    jobfs_layout_t hint, got;
    struct stat st;
    unsigned char *in = malloc(n), *out = malloc(n);
    uint64_t size = 0;
    char value[16];
    int found = 0, rc;

    if (!in || !out) return 2;
    fill(in, n, 7);
    memset(out, 0, n);

    rc = jobfs_connect(NULL, &fs);
    check(rc == 0, "connect through $JOBFS_CLUSTER");
    if (rc != 0) goto out_free;
    check(jobfs_daemon_count(fs) == 3, "three daemons");
    check(jobfs_mkdir(fs, "/c99", 0755) == 0, "mkdir");
    check(jobfs_mkdir(fs, "/c99", 0755) == -EEXIST, "mkdir again is -EEXIST");
    check(jobfs_sync_namespace(fs) == 0, "sync_namespace");

    hint.chunk_size = 1u << 20;
    hint.stripe_count = 2;
    rc = jobfs_open(fs, "/c99/data", O_RDWR | O_CREAT | O_EXCL, 0640, &hint, &f);
    check(rc == 0, "open with O_CREAT|O_EXCL and a layout hint");
    if (rc != 0) goto out_disconnect;
    check(jobfs_pwrite(f, in, n, 0) == (ssize_t)n, "pwrite 5 MiB");
    check(jobfs_fsync(f) == 0, "fsync");
    check(jobfs_file_get_size(f, &size) == 0 && size == n, "size after fsync");
    check(jobfs_file_get_layout(f, &got) == 0 && got.chunk_size == 1u << 20 && got.stripe_count == 2,
          "layout of the open file is the hint");
    check(jobfs_close(f) == 0, "close");

    rc = jobfs_open(fs, "/c99/data", O_RDONLY, 0, NULL, &f);
    check(rc == 0, "open for reading");
    if (rc != 0) goto out_disconnect;
    check(jobfs_pread(f, out, n, 0) == (ssize_t)n && memcmp(in, out, n) == 0, "pread returns the same bytes");
    check(jobfs_pread(f, out, 100, n) == 0, "pread at the end returns 0");
    check(jobfs_pwrite(f, in, 1, 0) == -EBADF, "pwrite on a read-only handle is -EBADF");
    check(jobfs_close(f) == 0, "close the reader");

    rc = jobfs_open(fs, "/c99/log", O_WRONLY | O_CREAT, 0644, NULL, &f);
    check(rc == 0, "open a log");
    if (rc != 0) goto out_disconnect;
    check(jobfs_append(f, "ab", 2, NULL) == 2 && jobfs_append(f, "cd", 2, &size) == 2 && size == 2,
          "append twice: the second at offset 2");
    check(jobfs_close(f) == 0, "close the log");

    check(jobfs_stat(fs, "/c99/data", &st) == 0 && (uint64_t)st.st_size == n && S_ISREG(st.st_mode) &&
              (st.st_mode & 07777) == 0640,
          "stat: size, type and mode");
    check(jobfs_setxattr(fs, "/c99/data", "user.step", "42", 2, JOBFS_XATTR_CREATE) == 0, "setxattr");
    check(jobfs_getxattr(fs, "/c99/data", "user.step", value, sizeof value) == 2 && memcmp(value, "42", 2) == 0,
          "getxattr");

    check(jobfs_opendir(fs, "/c99", &d) == 0, "opendir");
    while (d && (rc = jobfs_readdir(d, &e)) == 1)
        if (strcmp(e.name, "data") == 0 && e.type == JOBFS_TYPE_REGULAR) ++found;
    check(rc == 0 && found == 1, "readdir lists the file once");
    check(jobfs_closedir(d) == 0, "closedir");

    check(jobfs_open(fs, "/c99/none", O_RDONLY, 0, NULL, &f) == -ENOENT && f == NULL, "open of a missing file");
    check(strstr(jobfs_last_error(), "/c99/none") != NULL, "the last error names the path");
    check(jobfs_rmdir(fs, "/c99") == -ENOTEMPTY, "rmdir of a full directory is -ENOTEMPTY");
    check(jobfs_unlink(fs, "/c99/data") == 0 && jobfs_unlink(fs, "/c99/log") == 0, "unlink");
    check(jobfs_rmdir(fs, "/c99") == 0, "rmdir");
    check(jobfs_disconnect(fs) == 0, "disconnect");
    fs = NULL;

out_disconnect:
    jobfs_disconnect(fs);
out_free:
    free(out);
    free(in);
    return failures ? 1 : 0;
}
