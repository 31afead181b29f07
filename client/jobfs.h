/* jobfs.h: the C API of libjobfs, the client library of the jobfs parallel file system.
 *
 * A program connects once (jobfs_connect), then works with paths and open files much as with
 * the POSIX calls of the same names. File data goes straight from the caller's buffer to the
 * storage daemons that hold its chunks: a large pwrite or pread fans out to every daemon of
 * the file's stripe at once. `man 3 libjobfs` describes every function.
 *
 * Conventions
 *  - Names: a function that mirrors a POSIX call has that call's name with the jobfs_ prefix
 *    (jobfs_pwrite, jobfs_rename, jobfs_getxattr); the others are jobfs_<object>_<verb>
 *    (jobfs_file_get_layout) or jobfs_<verb> for the connection (jobfs_connect). Outputs
 *    come last.
 *  - Results: 0 (or a count) on success, -errno on failure (-ENOENT, -EEXIST, ...); the
 *    global errno is left alone. jobfs_last_error() gives the message of this thread's last
 *    failure, with the context -errno alone loses ("open /ckpt/a: lookup 'ckpt': no such
 *    file or directory").
 *  - Paths are absolute within jobfs ("/ckpt/step100"); "." components are ignored, ".." is
 *    taken lexically ("/a/b/../c" is "/a/c", as cd -L; above the root stays at the root).
 *    Offsets and sizes are uint64_t, whatever off_t is.
 *  - File length: written bytes count towards a file's length once the writer's handle is
 *    fsynced or closed (jobfs_fsync, jobfs_close); until then other clients see the length
 *    last settled, the writing handle sees its own writes.
 *
 * Thread safety: every function may be called from any thread. One jobfs_t serves any number
 * of threads at once; one jobfs_file_t may be read, written, synced and queried by several
 * threads at once. Closing a handle (jobfs_close, jobfs_closedir) must not race with other
 * calls on that same handle, and jobfs_disconnect must come after every handle of the
 * connection was closed. A jobfs_dir_t is read by one thread at a time.
 *
 * C99 or later, or C++; link with -ljobfs (pkg-config --cflags --libs jobfs).
 */
#ifndef JOBFS_H
#define JOBFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define JOBFS_API_VERSION 1

/* A connection to one jobfs file system (all its daemons). (The tag is not "jobfs", which
 * C++ code knows as the namespace of libjobfs's C++ API.) */
typedef struct jobfs_fs jobfs_t;
/* An open file. */
typedef struct jobfs_file jobfs_file_t;
/* An open directory, read entry by entry. */
typedef struct jobfs_dir jobfs_dir_t;

/* How a file's bytes are spread: cut into chunk_size chunks (a power of two, 4 KiB to 1 GiB),
 * placed round-robin over stripe_count daemons. 0 in a field means "the default": for a new
 * file, its directory's default layout, else 4 MiB chunks over all daemons. As MPI-IO hints:
 * striping_unit = chunk_size, striping_factor = stripe_count. */
typedef struct jobfs_layout {
    uint32_t chunk_size;
    uint32_t stripe_count;
} jobfs_layout_t;

/* File types of directory entries (jobfs_dirent_t.type). */
enum jobfs_file_type {
    JOBFS_TYPE_REGULAR = 1,
    JOBFS_TYPE_DIRECTORY = 2,
    JOBFS_TYPE_SYMLINK = 3
};

/* One directory entry. "." and ".." are not reported. */
typedef struct jobfs_dirent {
    uint64_t ino;
    uint32_t type;      /* enum jobfs_file_type */
    char name[256];     /* NUL-terminated; at most 255 bytes */
} jobfs_dirent_t;

/* jobfs_rename flags (the values of renameat2(2)'s). */
#define JOBFS_RENAME_NOREPLACE 1u
#define JOBFS_RENAME_EXCHANGE 2u

/* jobfs_setxattr flags (the values of setxattr(2)'s). */
#define JOBFS_XATTR_CREATE 1
#define JOBFS_XATTR_REPLACE 2

/* jobfs_utimens times: nanoseconds since the epoch, or one of these. */
#define JOBFS_UTIME_NOW INT64_MIN          /* the daemon's clock, now */
#define JOBFS_UTIME_OMIT (INT64_MIN + 1)   /* leave this time as it is */

/* ---- connection ------------------------------------------------------------------------ */

/* Connects to the file system of the cluster descriptor cluster_file, or of the file named by
 * $JOBFS_CLUSTER when cluster_file is NULL. Requests carry this process's uid, gid and groups. */
int jobfs_connect(const char *cluster_file, jobfs_t **out);
/* Ends the connection and frees fs (NULL is fine). -EBUSY, and nothing happens, while files or
 * directories of it are still open. */
int jobfs_disconnect(jobfs_t *fs);
/* Number of storage daemons of the file system (> 0), or -EINVAL. */
int jobfs_daemon_count(const jobfs_t *fs);
/* Number of those daemons that run on this node and whose chunks this process reads from their
 * files (0 to jobfs_daemon_count), or -EINVAL. */
int jobfs_local_daemon_count(const jobfs_t *fs);
/* Returns once every create and unlink this connection answered itself in a directory
 * delegated to it (libjobfs(3), "Caching and write behind") is at the daemons: 0, or -EIO if
 * some were lost since the last call (the daemons took the directory back while this process
 * did not answer; the log says which). A checkpoint point for namespace changes, as fsync is
 * for a file's bytes. */
int jobfs_sync_namespace(jobfs_t *fs);
/* The message of this thread's last failed call ("" if none failed yet). Valid until the
 * thread's next jobfs call. A successful call leaves it as it is, as with errno. */
const char *jobfs_last_error(void);

/* ---- files ----------------------------------------------------------------------------- */

/* Opens path. flags as open(2): one of O_RDONLY, O_WRONLY, O_RDWR, plus O_CREAT, O_EXCL,
 * O_TRUNC; other flags are ignored. mode: permission bits of a new file. hint: the layout of a
 * file this call creates (NULL: the directory's default); ignored for an existing file. */
int jobfs_open(jobfs_t *fs, const char *path, int flags, mode_t mode, const jobfs_layout_t *hint,
               jobfs_file_t **out);
/* Settles the file's length (as jobfs_fsync does, without forcing data to disk) and frees f,
 * also when the result is an error (NULL is fine). */
int jobfs_close(jobfs_file_t *f);
/* Reads up to count bytes at offset: the number read, short only at the end of the file
 * (0 at or past it); holes read as zeros. */
ssize_t jobfs_pread(jobfs_file_t *f, void *buf, size_t count, uint64_t offset);
/* Writes count bytes at offset: count, or -errno (part of the data may then be written). */
ssize_t jobfs_pwrite(jobfs_file_t *f, const void *buf, size_t count, uint64_t offset);
/* Writes count bytes at the end of the file and returns count; *offset (if not NULL) gets
 * where they went. Appends of every client, process and handle land whole, one after another,
 * and the length covers them at once (a log that the ranks of a job share). A failure after
 * the place was given leaves a hole of zeros there. */
ssize_t jobfs_append(jobfs_file_t *f, const void *buf, size_t count, uint64_t *offset);
/* Makes the data written so far durable on the daemons and settles the file's length. */
int jobfs_fsync(jobfs_file_t *f);
/* Makes this handle's writes so far visible to every client, without forcing them to disk:
 * writes still on their way (write behind, JOBFS_WRITE_BEHIND_MIB) are waited for, and the
 * file's length is settled. A write-behind failure is returned here. */
int jobfs_flush(jobfs_file_t *f);
/* Attributes of the open file; st_size includes this handle's unsettled writes. */
int jobfs_fstat(jobfs_file_t *f, struct stat *st);
/* Sets the length of a file open for writing; a shorter one drops the data past it. */
int jobfs_ftruncate(jobfs_file_t *f, uint64_t size);
/* The file's length as jobfs_fstat reports it. */
int jobfs_file_get_size(jobfs_file_t *f, uint64_t *size);
/* The layout the file has, never 0 fields: its chunk size, and the number of daemons its
 * chunks go to (a recorded 0, "all daemons", comes back as jobfs_daemon_count()). */
int jobfs_file_get_layout(const jobfs_file_t *f, jobfs_layout_t *layout);

/* ---- namespace ------------------------------------------------------------------------- */

/* stat follows a final symlink, lstat does not. st_blksize is the chunk size. */
int jobfs_stat(jobfs_t *fs, const char *path, struct stat *st);
int jobfs_lstat(jobfs_t *fs, const char *path, struct stat *st);
int jobfs_mkdir(jobfs_t *fs, const char *path, mode_t mode);
int jobfs_rmdir(jobfs_t *fs, const char *path);
/* Removes a name; the data goes with the last name. */
int jobfs_unlink(jobfs_t *fs, const char *path);
/* flags: 0, JOBFS_RENAME_NOREPLACE or JOBFS_RENAME_EXCHANGE. */
int jobfs_rename(jobfs_t *fs, const char *from, const char *to, unsigned int flags);
int jobfs_truncate(jobfs_t *fs, const char *path, uint64_t size);
/* Makes path a symlink to target (stored as given, resolved when used). */
int jobfs_symlink(jobfs_t *fs, const char *target, const char *path);
/* Copies the target of symlink path into buf, NUL-terminated, and returns its length (without
 * the NUL); -ERANGE if buf (size bytes) cannot hold it with its NUL. */
ssize_t jobfs_readlink(jobfs_t *fs, const char *path, char *buf, size_t size);
/* Hard link: path becomes another name of existing (a symlink is linked, not followed). */
int jobfs_link(jobfs_t *fs, const char *existing, const char *path);
int jobfs_chmod(jobfs_t *fs, const char *path, mode_t mode);
/* (uid_t)-1 / (gid_t)-1 leave that one as it is. Does not follow a final symlink if
 * nofollow is non-zero (lchown). */
int jobfs_chown(jobfs_t *fs, const char *path, uid_t uid, gid_t gid, int nofollow);
/* Sets access and modification time (nanoseconds since the epoch, JOBFS_UTIME_NOW or
 * JOBFS_UTIME_OMIT); the inode's change time becomes now. */
int jobfs_utimens(jobfs_t *fs, const char *path, int64_t atime_ns, int64_t mtime_ns);

/* ---- directories ----------------------------------------------------------------------- */

int jobfs_opendir(jobfs_t *fs, const char *path, jobfs_dir_t **out);
/* The next entry, in name order: 1 with *entry filled, 0 at the end, or -errno. Entries are
 * fetched from the daemon a page at a time. */
int jobfs_readdir(jobfs_dir_t *dir, jobfs_dirent_t *entry);
/* Frees dir (NULL is fine). */
int jobfs_closedir(jobfs_dir_t *dir);

/* ---- extended attributes (user.*, trusted.*, security.*; a final symlink is followed) ---- */

/* Copies the value of attribute name into value and returns its size; with size 0 only
 * returns the size needed. -ERANGE if size is too small, -ENODATA if there is no such
 * attribute. */
ssize_t jobfs_getxattr(jobfs_t *fs, const char *path, const char *name, void *value, size_t size);
/* flags: 0, JOBFS_XATTR_CREATE (-EEXIST if it exists) or JOBFS_XATTR_REPLACE (-ENODATA if
 * not). Values up to 64 KiB. */
int jobfs_setxattr(jobfs_t *fs, const char *path, const char *name, const void *value, size_t size,
                   int flags);
/* The names of the attributes, each NUL-terminated, one after another; returns the bytes used
 * (with size 0: the bytes needed); -ERANGE if size is too small. */
ssize_t jobfs_listxattr(jobfs_t *fs, const char *path, char *list, size_t size);
int jobfs_removexattr(jobfs_t *fs, const char *path, const char *name);

/* ---- layout ------------------------------------------------------------------------------ */

/* A file's layout as recorded, or a directory's default for new files (0 fields: the
 * default; stripe_count 0 means all daemons). */
int jobfs_layout_get(jobfs_t *fs, const char *path, jobfs_layout_t *layout);
/* Sets an empty file's layout (-EBUSY once it holds data) or a directory's default for files
 * created in it later. Owner or root. */
int jobfs_layout_set(jobfs_t *fs, const char *path, const jobfs_layout_t *layout);

#ifdef __cplusplus
}
#endif

#endif /* JOBFS_H */
