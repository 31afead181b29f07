/* ad_jobfs.c: the jobfs ADIO driver of ROMIO. MPI-IO on "jobfs:/path" names goes straight to
 * the jobfs daemons through the libjobfs C API (jobfs.h); there is no kernel file descriptor.
 *
 *  - One jobfs_t connection per process, made at the first open from $JOBFS_CLUSTER, shared by
 *    every open file and ended when the last one is closed.
 *  - Open: the first aggregator creates the file with the layout of the striping_unit /
 *    striping_factor hints (ADIOI_GEN_OpenColl), then the others open it. The file's real
 *    chunk size goes to every rank (through fd->blksize, which GEN_OpenColl broadcasts) and
 *    becomes the striping_unit the generic two-phase code aligns file domains to, so each
 *    aggregator's domain covers whole chunks.
 *  - Contiguous reads and writes: jobfs_pread / jobfs_pwrite. Strided independent reads: the
 *    generic data-sieving read (it only reads through ReadContig and takes no lock, as this
 *    driver has no locks); strided independent writes: the generic naive path, one write per
 *    piece (no read-modify-write, which would need locks). Collective: ROMIO's two-phase;
 *    reads where every daemon is on this node and each rank wants at least half of the bytes
 *    its request spans read independently instead (ADIOI_JOBFS_ReadStridedColl).
 *  - No locks, no shared file pointer, no atomic mode (MPI_File_set_atomicity(fh, 1) fails).
 *  - The nonblocking collectives (MPI_File_iread_all, iwrite_at_all, ...) run the blocking
 *    two-phase call and return a completed request; the stock romio321 leaves them NULL.
 */
#include "ad_jobfs.h"
#include "adioi.h"
#include "hint_fns.h"
#include "mpiu_greq.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jobfs.h>

struct ADIOI_Fns_struct ADIO_JOBFS_operations = {
    ADIOI_JOBFS_Open,              /* Open */
    ADIOI_JOBFS_OpenColl,          /* OpenColl */
    ADIOI_JOBFS_ReadContig,        /* ReadContig */
    ADIOI_JOBFS_WriteContig,       /* WriteContig */
    ADIOI_JOBFS_ReadStridedColl,   /* ReadStridedColl: two-phase, or on one node independent */
    ADIOI_GEN_WriteStridedColl,    /* WriteStridedColl: two-phase */
    ADIOI_GEN_SeekIndividual,      /* SeekIndividual */
    ADIOI_JOBFS_Fcntl,             /* Fcntl */
    ADIOI_JOBFS_SetInfo,           /* SetInfo */
    ADIOI_JOBFS_ReadStrided,       /* ReadStrided: generic sieving through ReadContig */
    ADIOI_JOBFS_WriteStrided,      /* WriteStrided: generic naive, one WriteContig per piece */
    ADIOI_JOBFS_Close,             /* Close */
    ADIOI_FAKE_IreadContig,        /* IreadContig */
    ADIOI_FAKE_IwriteContig,       /* IwriteContig */
    ADIOI_FAKE_IODone,             /* ReadDone */
    ADIOI_FAKE_IODone,             /* WriteDone */
    ADIOI_FAKE_IOComplete,         /* ReadComplete */
    ADIOI_FAKE_IOComplete,         /* WriteComplete */
    ADIOI_FAKE_IreadStrided,       /* IreadStrided */
    ADIOI_FAKE_IwriteStrided,      /* IwriteStrided */
    ADIOI_JOBFS_Flush,             /* Flush */
    ADIOI_JOBFS_Resize,            /* Resize */
    ADIOI_JOBFS_Delete,            /* Delete */
    ADIOI_JOBFS_Feature,           /* Feature */
    "JOBFS: the jobfs parallel file system",
    ADIOI_JOBFS_IreadStridedColl,  /* IreadStridedColl */
    ADIOI_JOBFS_IwriteStridedColl  /* IwriteStridedColl */
};

/* ---- the connection ----------------------------------------------------------------------- */

/* One connection per process, made at its first open and kept until MPI_Finalize, so that a
 * checkpoint's write and its read-back, or a step's many files, do not each connect to every
 * daemon again inside their timed open (5-13 ms for one process on this host, more with a rank
 * on every core). It ends in the delete callback of an attribute of MPI_COMM_SELF, which MPI
 * runs first thing in MPI_Finalize (MPI-3.1, 8.7.1). */
static jobfs_t *jobfs_conn;
static int jobfs_conn_refs;   /* files open, and a delete under way */
static int jobfs_conn_kept;   /* the attribute is set: the connection outlives its files */
static int jobfs_conn_keyval = MPI_KEYVAL_INVALID;

/* Open MPI's progress engine (libopen-pal, which this component links; declared in
 * opal/runtime/opal_progress.h): whether a rank with nothing to progress calls sched_yield().
 * The jobfs daemons run on the job's own nodes, and ranks that spin while they wait (in a
 * collective, for another rank's data) take the cores the daemons need to answer them: with
 * more ranks than cores a checkpoint written through ad_jobfs crawled. So while a jobfs file
 * is open, idle ranks yield (JOBFS_MPI_YIELD=0 leaves MPI's setting alone); the setting found
 * is restored when the last one closes. */
extern bool opal_progress_set_yield_when_idle(bool yieldopt);
static bool yield_set;    /* this driver turned yielding on */
static bool yield_before; /* what it was before */

static void yield_begin(void)
{
    const char *want = getenv("JOBFS_MPI_YIELD");
    if (want != NULL && strcmp(want, "0") == 0) return;
    yield_before = opal_progress_set_yield_when_idle(true);
    yield_set = true;
}

static void yield_end(void)
{
    if (!yield_set) return;
    opal_progress_set_yield_when_idle(yield_before);
    yield_set = false;
}

static int conn_end(MPI_Comm comm, int keyval, void *value, void *extra)
{
    (void)comm;
    (void)keyval;
    (void)value;
    (void)extra;
    /* A file the program left open keeps it: its libjobfs handle must not outlive it. */
    if (jobfs_conn != NULL && jobfs_conn_refs == 0) {
        jobfs_disconnect(jobfs_conn);
        jobfs_conn = NULL;
    }
    jobfs_conn_kept = 0;
    return MPI_SUCCESS;
}

/* Connects on first use. 0, or -errno with *msg set to a static explanation or
 * jobfs_last_error(). */
static int conn_acquire(jobfs_t **out, const char **msg)
{
    if (jobfs_conn == NULL) {
        const char *cluster = getenv("JOBFS_CLUSTER");
        if (cluster == NULL || cluster[0] == '\0') {
            *msg = "JOBFS_CLUSTER is not set: it must name the cluster file of the jobfs "
                   "daemons (jobfs local up prints it; jobs started with --jobfs have it)";
            return -ENOENT;
        }
        /* JOBFS_WRITE_BEHIND_MIB is left to the user (libjobfs reads it here). It keeps
         * MPI-IO's semantics (writes are settled by MPI_File_sync and close) and writes about
         * 15% faster, but a failed write would then be reported by a later call than the one
         * that made it (ad_jobfs(7)): not on by default. */
        int rc = jobfs_connect(NULL, &jobfs_conn);
        if (rc < 0) {
            jobfs_conn = NULL;
            *msg = jobfs_last_error();
            return rc;
        }
        /* Without the attribute (it cannot fail in practice), the last close disconnects. */
        if (jobfs_conn_keyval == MPI_KEYVAL_INVALID &&
            MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, conn_end, &jobfs_conn_keyval, NULL) != MPI_SUCCESS)
            jobfs_conn_keyval = MPI_KEYVAL_INVALID;
        jobfs_conn_kept = jobfs_conn_keyval != MPI_KEYVAL_INVALID &&
                          MPI_Comm_set_attr(MPI_COMM_SELF, jobfs_conn_keyval, NULL) == MPI_SUCCESS;
    }
    if (jobfs_conn_refs == 0) yield_begin();
    jobfs_conn_refs++;
    *out = jobfs_conn;
    return 0;
}

static void conn_release(void)
{
    if (jobfs_conn_refs > 0 && --jobfs_conn_refs == 0) {
        yield_end();
        if (!jobfs_conn_kept) {
            jobfs_disconnect(jobfs_conn);
            jobfs_conn = NULL;
        }
    }
}

/* ---- errors and tracing ------------------------------------------------------------------ */

static int error_class(int neg_errno)
{
    switch (-neg_errno) {
    case ENOENT: return MPI_ERR_NO_SUCH_FILE;
    case EEXIST: return MPI_ERR_FILE_EXISTS;
    case EACCES: case EPERM: return MPI_ERR_ACCESS;
    case ENOSPC: case EDQUOT: return MPI_ERR_NO_SPACE;
    case EROFS: return MPI_ERR_READ_ONLY;
    case EISDIR: case ENOTDIR: case ENAMETOOLONG: return MPI_ERR_BAD_FILE;
    case EINVAL: return MPI_ERR_ARG;
    default: return MPI_ERR_IO;
    }
}

/* Open MPI's ROMIO glue drops the text of error codes, so the reason is printed here (once,
 * on the process that saw it); the MPI error class tells the kind. quiet: an outcome the
 * class says fully (a missing file on open, an existing one with MPI_MODE_EXCL). */
static void set_error(int *error_code, const char *myname, int line, int rc, const char *what,
                      const char *name, const char *msg, int quiet)
{
    if (!quiet)
        fprintf(stderr, "ad_jobfs: %s jobfs:%s: %s\n", what, name ? name : "", msg);
    *error_code = MPIO_Err_create_code(MPI_SUCCESS, MPIR_ERR_RECOVERABLE, (char *)myname, line,
                                       rc == 0 ? MPI_ERR_IO : error_class(rc), "**io",
                                       "**io %s", msg);
}

/* JOBFS_ROMIO_TRACE: one line per driver call on stderr, written at once (mpirun forwards
 * the ranks' output; separate writes of one line could interleave). */
static int trace_on = -1;
static void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void trace(const char *fmt, ...)
{
    char line[512];
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int n = snprintf(line, sizeof line, "[ad_jobfs %d] ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 32) n = (int)sizeof line - 32;
    /* The time last, so that the "[ad_jobfs PID] op" start scripts match stays as it was; it
     * lines up the ranks' traces. */
    snprintf(line + n, sizeof line - n, " @%ld.%06ld\n", (long)now.tv_sec, now.tv_nsec / 1000);
    if (write(2, line, strlen(line)) < 0) { /* nothing to do */ }
}
#define TRACE(...)                                                                      \
    do {                                                                                \
        if (trace_on < 0) trace_on = getenv("JOBFS_ROMIO_TRACE") != NULL;               \
        if (trace_on) trace(__VA_ARGS__);                                               \
    } while (0)

/* jobfs paths are absolute: "jobfs:ckpt/a" means /ckpt/a. Returns malloc'ed memory. */
static char *jobfs_path(const char *filename)
{
    size_t n = strlen(filename);
    char *p = ADIOI_Malloc(n + 2);
    if (filename[0] == '/') memcpy(p, filename, n + 1);
    else { p[0] = '/'; memcpy(p + 1, filename, n + 1); }
    return p;
}

/* ---- open and close ----------------------------------------------------------------------- */

void ADIOI_JOBFS_Open(ADIO_File fd, int *error_code)
{
    static char myname[] = "ADIOI_JOBFS_OPEN";
    jobfs_t *fs;
    jobfs_file_t *f = NULL;
    jobfs_layout_t hint, layout;
    const char *msg;
    int flags = 0, rc;
    mode_t perm;

    rc = conn_acquire(&fs, &msg);
    if (rc < 0) {
        set_error(error_code, myname, __LINE__, 0, "cannot reach the file system for",
                  fd->filename, msg, 0);
        return;
    }
    if (fd->perm == ADIO_PERM_NULL) {
        mode_t old_mask = umask(022);
        umask(old_mask);
        perm = 0666 & ~old_mask;
    } else {
        perm = (mode_t)fd->perm;
    }
    if (fd->access_mode & ADIO_RDONLY) flags |= O_RDONLY;
    if (fd->access_mode & ADIO_WRONLY) flags |= O_WRONLY;
    if (fd->access_mode & ADIO_RDWR) flags |= O_RDWR;
    if (fd->access_mode & ADIO_CREATE) flags |= O_CREAT;
    if (fd->access_mode & ADIO_EXCL) flags |= O_EXCL;

    hint.chunk_size = fd->hints->striping_unit > 0 ? (uint32_t)fd->hints->striping_unit : 0;
    hint.stripe_count = fd->hints->striping_factor > 0 ? (uint32_t)fd->hints->striping_factor : 0;

    char *path = jobfs_path(fd->filename);
    /* Two-phase collective writes read the gaps of a collective buffer before writing it back
     * (read-modify-write), also on a file the user opened MPI_MODE_WRONLY: open it for reading
     * too where the permissions allow (ROMIO's ufs gets the same from ADIO_Feature's data
     * sieving answer, which jobfs cannot give: it has no byte-range locks to offer). */
    if ((flags & O_ACCMODE) == O_WRONLY) {
        rc = jobfs_open(fs, path, (flags & ~O_ACCMODE) | O_RDWR, perm, &hint, &f);
        if (rc == -EACCES) rc = jobfs_open(fs, path, flags, perm, &hint, &f);
    } else {
        rc = jobfs_open(fs, path, flags, perm, &hint, &f);
    }
    TRACE("open %s flags=0x%x chunk=%u stripes=%u -> %d", path, flags, hint.chunk_size,
          hint.stripe_count, rc);
    ADIOI_Free(path);
    if (rc < 0) {
        set_error(error_code, myname, __LINE__, rc, "open", fd->filename, jobfs_last_error(),
                  rc == -ENOENT || rc == -EEXIST);
        conn_release();
        return;
    }
    fd->fs_ptr = f;
    fd->fd_sys = -1;
    fd->fd_direct = -1;
    if (jobfs_file_get_layout(f, &layout) == 0 && layout.chunk_size > 0)
        fd->blksize = layout.chunk_size;
    if (fd->access_mode & ADIO_APPEND) {
        uint64_t size = 0;
        jobfs_file_get_size(f, &size);
        fd->fp_ind = fd->fp_sys_posn = (ADIO_Offset)size;
    }
    *error_code = MPI_SUCCESS;
}

void ADIOI_JOBFS_OpenColl(ADIO_File fd, int rank, int access_mode, int *error_code)
{
    char value[32];

    ADIOI_GEN_OpenColl(fd, rank, access_mode, error_code);
    ADIOI_JOBFS_Shared_create(fd, *error_code == MPI_SUCCESS); /* collective */
    if (*error_code != MPI_SUCCESS) return;
    /* Every rank now has the chunk size of the file in fd->blksize (GEN_OpenColl broadcasts
     * it from the first aggregator, also to deferred-open ranks). Two-phase aligns the file
     * domains to striping_unit; all ranks must use the same value. */
    fd->hints->striping_unit = (int)fd->blksize;
    snprintf(value, sizeof value, "%ld", (long)fd->blksize);
    ADIOI_Info_set(fd->info, "striping_unit", value);
    if (fd->fs_ptr != NULL) {
        jobfs_layout_t layout;
        if (jobfs_file_get_layout(fd->fs_ptr, &layout) == 0) {
            fd->hints->striping_factor = (int)layout.stripe_count;
            snprintf(value, sizeof value, "%u", layout.stripe_count);
            ADIOI_Info_set(fd->info, "striping_factor", value);
        }
    }
    TRACE("opencoll %s rank=%d is_agg=%d cb_nodes=%d striping_unit=%d", fd->filename, rank,
          fd->is_agg, fd->hints->cb_nodes, fd->hints->striping_unit);
}

void ADIOI_JOBFS_Close(ADIO_File fd, int *error_code)
{
    static char myname[] = "ADIOI_JOBFS_CLOSE";
    jobfs_file_t *f = fd->fs_ptr;

    *error_code = MPI_SUCCESS;
    ADIOI_JOBFS_Shared_free(fd); /* collective, as MPI_File_close */
    if (f == NULL) return;
    fd->fs_ptr = NULL;
    int rc = jobfs_close(f);
    TRACE("close %s -> %d", fd->filename, rc);
    if (rc < 0)
        set_error(error_code, myname, __LINE__, rc, "close", fd->filename, jobfs_last_error(), 0);
    conn_release();
}

/* ---- data --------------------------------------------------------------------------------- */

static int not_open(ADIO_File fd, int *error_code, const char *myname, int line)
{
    if (fd->fs_ptr != NULL) return 0;
    set_error(error_code, myname, line, -EBADF, "I/O on", fd->filename,
              "the file is not open on this process", 0);
    return 1;
}

void ADIOI_JOBFS_ReadContig(ADIO_File fd, void *buf, int count, MPI_Datatype datatype,
                            int file_ptr_type, ADIO_Offset offset, ADIO_Status *status,
                            int *error_code)
{
    static char myname[] = "ADIOI_JOBFS_READCONTIG";
    MPI_Count datatype_size, len, done = 0;

    if (not_open(fd, error_code, myname, __LINE__)) return;
    MPI_Type_size_x(datatype, &datatype_size);
    len = datatype_size * (MPI_Count)count;
    if (file_ptr_type == ADIO_INDIVIDUAL) offset = fd->fp_ind;

    /* libjobfs reads up to the file's settled length (it asks for it again when a read goes
     * past what the handle knew), so a short count is the end of the file. */
    ADIOI_JOBFS_Atomic_begin(fd);
    while (done < len) {
        ssize_t n = jobfs_pread(fd->fs_ptr, (char *)buf + done, (size_t)(len - done),
                                (uint64_t)(offset + done));
        if (n < 0) {
            ADIOI_JOBFS_Atomic_end(fd);
            set_error(error_code, myname, __LINE__, (int)n, "read", fd->filename,
                      jobfs_last_error(), 0);
            return;
        }
        if (n == 0) break; /* end of file */
        done += n;
        if (done < len) break; /* short: the end of the file too */
    }
    ADIOI_JOBFS_Atomic_end(fd);
    TRACE("read %s off=%lld len=%lld got=%lld", fd->filename, (long long)offset,
          (long long)len, (long long)done);
    if (file_ptr_type == ADIO_INDIVIDUAL) fd->fp_ind += done;
    fd->fp_sys_posn = offset + done;
#ifdef HAVE_STATUS_SET_BYTES
    MPIR_Status_set_bytes(status, datatype, done);
#endif
    *error_code = MPI_SUCCESS;
}

void ADIOI_JOBFS_WriteContig(ADIO_File fd, const void *buf, int count, MPI_Datatype datatype,
                             int file_ptr_type, ADIO_Offset offset, ADIO_Status *status,
                             int *error_code)
{
    static char myname[] = "ADIOI_JOBFS_WRITECONTIG";
    MPI_Count datatype_size, len;

    if (not_open(fd, error_code, myname, __LINE__)) return;
    MPI_Type_size_x(datatype, &datatype_size);
    len = datatype_size * (MPI_Count)count;
    if (file_ptr_type == ADIO_INDIVIDUAL) offset = fd->fp_ind;

    if (len > 0) {
        ADIOI_JOBFS_Atomic_begin(fd);
        ssize_t n = jobfs_pwrite(fd->fs_ptr, buf, (size_t)len, (uint64_t)offset);
        /* Atomic mode: the write is whole for every reader once the mutex is let go, also
         * with write behind, and so is the length it gives the file. */
        if (n >= 0 && fd->atomicity) {
            int rc = jobfs_flush(fd->fs_ptr);
            if (rc < 0) n = rc;
        }
        ADIOI_JOBFS_Atomic_end(fd);
        TRACE("write %s off=%lld len=%lld -> %lld", fd->filename, (long long)offset,
              (long long)len, (long long)n);
        if (n < 0) {
            set_error(error_code, myname, __LINE__, (int)n, "write", fd->filename,
                      jobfs_last_error(), 0);
            return;
        }
    }
    if (file_ptr_type == ADIO_INDIVIDUAL) fd->fp_ind += len;
    fd->fp_sys_posn = offset + len;
#ifdef HAVE_STATUS_SET_BYTES
    MPIR_Status_set_bytes(status, datatype, len);
#endif
    *error_code = MPI_SUCCESS;
}

/* ---- control ------------------------------------------------------------------------------ */

void ADIOI_JOBFS_Fcntl(ADIO_File fd, int flag, ADIO_Fcntl_t *fcntl_struct, int *error_code)
{
    static char myname[] = "ADIOI_JOBFS_FCNTL";

    switch (flag) {
    case ADIO_FCNTL_GET_FSIZE: {
        uint64_t size = 0;
        int rc;
        if (not_open(fd, error_code, myname, __LINE__)) return;
        rc = jobfs_file_get_size(fd->fs_ptr, &size);
        if (rc < 0) {
            set_error(error_code, myname, __LINE__, rc, "size of", fd->filename,
                      jobfs_last_error(), 0);
            return;
        }
        fcntl_struct->fsize = (ADIO_Offset)size;
        *error_code = MPI_SUCCESS;
        return;
    }
    case ADIO_FCNTL_SET_DISKSPACE:
        /* reads and writes back through ReadContig/WriteContig */
        ADIOI_GEN_Prealloc(fd, fcntl_struct->diskspace, error_code);
        return;
    case ADIO_FCNTL_SET_ATOMICITY:
        /* Atomic mode: every read and write call of the file runs inside one mutex of its
         * communicator (ad_jobfs_shared.c); writes are written through, so the next holder
         * of the mutex sees them. */
        if (fcntl_struct->atomicity == 0 || ADIOI_JOBFS_Shared_available(fd)) {
            fd->atomicity = fcntl_struct->atomicity != 0;
            *error_code = MPI_SUCCESS;
            return;
        }
        *error_code = MPIO_Err_create_code(MPI_SUCCESS, MPIR_ERR_RECOVERABLE, myname, __LINE__,
                                           MPI_ERR_UNSUPPORTED_OPERATION, "**io",
                                           "**io %s", "no atomic mode with deferred open");
        fprintf(stderr, "ad_jobfs: jobfs:%s: atomic mode needs the file opened by all "
                "processes of its communicator (not with romio_no_indep_rw)\n", fd->filename);
        return;
    default:
        *error_code = MPIO_Err_create_code(MPI_SUCCESS, MPIR_ERR_RECOVERABLE, myname, __LINE__,
                                           MPI_ERR_ARG, "**flag", "**flag %d", flag);
        return;
    }
}

void ADIOI_JOBFS_SetInfo(ADIO_File fd, MPI_Info users_info, int *error_code)
{
    static char myname[] = "ADIOI_JOBFS_SETINFO";
    int at_open = !fd->hints->initialized;
    int striping_unit = fd->hints->striping_unit;

    ADIOI_GEN_SetInfo(fd, users_info, error_code);
    if (*error_code != MPI_SUCCESS) return;
    if (at_open) {
        /* striping_unit (GEN_SetInfo takes it) and striping_factor: the layout of a file
         * this open creates */
        fd->hints->striping_factor = 0;
        if (users_info != MPI_INFO_NULL) {
            ADIOI_Info_check_and_install_int(fd, users_info, "striping_factor",
                                             &fd->hints->striping_factor, myname, error_code);
            if (*error_code != MPI_SUCCESS) return;
        }
    } else {
        /* after the open, striping_unit is the file's chunk size, whatever a later
         * MPI_File_set_view or MPI_File_set_info says */
        fd->hints->striping_unit = striping_unit;
    }
    /* Data-sieving writes need locks, which jobfs does not have. */
    fd->hints->ds_write = ADIOI_HINT_DISABLE;
    ADIOI_Info_set(fd->info, "romio_ds_write", "disable");
}

void ADIOI_JOBFS_Flush(ADIO_File fd, int *error_code)
{
    static char myname[] = "ADIOI_JOBFS_FLUSH";

    *error_code = MPI_SUCCESS;
    if (fd->fs_ptr == NULL) return; /* deferred open: nothing written here */
    int rc = jobfs_fsync(fd->fs_ptr);
    TRACE("fsync %s -> %d", fd->filename, rc);
    if (rc < 0)
        set_error(error_code, myname, __LINE__, rc, "sync", fd->filename, jobfs_last_error(), 0);
}

void ADIOI_JOBFS_Resize(ADIO_File fd, ADIO_Offset size, int *error_code)
{
    static char myname[] = "ADIOI_JOBFS_RESIZE";
    int rank, rc = 0, root = fd->hints->ranklist[0];

    MPI_Comm_rank(fd->comm, &rank);
    if (rank == root) {
        /* the first aggregator always has the file open */
        if (fd->fs_ptr == NULL) rc = -EBADF;
        else if (size < 0) rc = -EINVAL;
        else rc = jobfs_ftruncate(fd->fs_ptr, (uint64_t)size);
        if (rc < 0)
            fprintf(stderr, "ad_jobfs: set size of jobfs:%s to %lld: %s\n", fd->filename,
                    (long long)size, fd->fs_ptr ? jobfs_last_error() : "not open");
    }
    MPI_Bcast(&rc, 1, MPI_INT, root, fd->comm);
    if (rc < 0) {
        *error_code = MPIO_Err_create_code(MPI_SUCCESS, MPIR_ERR_RECOVERABLE, myname, __LINE__,
                                           error_class(rc), "**io", "**io %s",
                                           "jobfs_ftruncate failed");
        return;
    }
    *error_code = MPI_SUCCESS;
}

void ADIOI_JOBFS_Delete(const char *filename, int *error_code)
{
    static char myname[] = "ADIOI_JOBFS_DELETE";
    jobfs_t *fs;
    const char *msg;
    int rc = conn_acquire(&fs, &msg);

    if (rc < 0) {
        set_error(error_code, myname, __LINE__, 0, "cannot reach the file system for",
                  filename, msg, 0);
        return;
    }
    char *path = jobfs_path(filename);
    rc = jobfs_unlink(fs, path);
    TRACE("unlink %s -> %d", path, rc);
    ADIOI_Free(path);
    if (rc < 0)
        set_error(error_code, myname, __LINE__, rc, "delete", filename, jobfs_last_error(),
                  rc == -ENOENT);
    else
        *error_code = MPI_SUCCESS;
    conn_release();
}

int ADIOI_JOBFS_Feature(ADIO_File fd, int flag)
{
    (void)fd;
    switch (flag) {
    case ADIO_TWO_PHASE:
    case ADIO_SCALABLE_RESIZE:
    case ADIO_UNLINK_AFTER_CLOSE:
        return 1;
    case ADIO_SHARED_FP:   /* ad_jobfs_shared.c */
    case ADIO_ATOMIC_MODE:
        return 1;
    case ADIO_LOCKS:
    case ADIO_DATA_SIEVING_WRITES:
    case ADIO_SCALABLE_OPEN:
    default:
        return 0;
    }
}

/* ---- collective reads ---------------------------------------------------------------------- */

/* Two-phase reads every byte once, by the aggregators, and then sends each rank its part: on
 * one node that is a copy out of the page cache, then a copy into MPI's shared memory and one
 * out of it, and every rank waits for every aggregator at every step. Where all the daemons
 * are on this node, reading costs a copy from the page cache and nothing else, so a rank that
 * reads the span of its own request with data sieving (ADIOI_JOBFS_ReadStrided) reads less,
 * as long as at least half of what it reads is its own: 4 ranks reading a 1 GiB checkpoint of
 * 2-D tiles (half of every row each) back warm, 5631-6620 MB/s that way against 4101-4199
 * through two-phase (ufs, two-phase: 4591-4950); with 16 ranks, a quarter of every row each,
 * 2190-2566 against 2510-3035, so sparser requests stay two-phase. The choice is made
 * together (one allreduce of two numbers): all ranks go one way. A romio_cb_read hint of
 * enable or disable is followed as given.
 * Each rank settles its own writes first (jobfs_flush: the file's length, nothing forced to
 * disk; free when it wrote nothing): a rank may now read what another rank wrote in a
 * collective call just before, where two-phase had the writing aggregator read it back
 * itself (ROMIO's noncontig_coll does that, with no sync between). */
#define JOBFS_INDEPENDENT_MIN_DENSITY 0.5

void ADIOI_JOBFS_ReadStridedColl(ADIO_File fd, void *buf, int count, MPI_Datatype datatype,
                                 int file_ptr_type, ADIO_Offset offset, ADIO_Status *status,
                                 int *error_code)
{
    /* mine/all[0]: 1 if every daemon is on this node; [1]: own bytes / bytes spanned */
    double mine[2] = {0, 1}, all[2] = {0, 0};
    MPI_Count size;
    ADIO_Offset *offsets = NULL, *lengths = NULL, start = 0, end = -1, fp = fd->fp_ind;
    int pieces = 0, flushed = 0;

    if (fd->hints->cb_read != ADIOI_HINT_AUTO || fd->hints->cb_pfr != ADIOI_HINT_DISABLE ||
        fd->hints->deferred_open || jobfs_conn == NULL) {
        ADIOI_GEN_ReadStridedColl(fd, buf, count, datatype, file_ptr_type, offset, status, error_code);
        return;
    }
    if (jobfs_local_daemon_count(jobfs_conn) == jobfs_daemon_count(jobfs_conn)) {
        flushed = jobfs_flush(fd->fs_ptr);
        mine[0] = flushed == 0;
    }
    MPI_Type_size_x(datatype, &size);
    /* The density only counts where this rank may read independently (a job over several
     * nodes goes two-phase whatever it is, and pays the allreduce alone). */
    if (mine[0] == 1 && size * (MPI_Count)count > 0) {
        ADIOI_Calc_my_off_len(fd, count, datatype, file_ptr_type, offset, &offsets, &lengths,
                              &start, &end, &pieces);
        fd->fp_ind = fp; /* it moves the individual pointer; the read below moves it again */
        ADIOI_Free(offsets);
        ADIOI_Free(lengths);
        if (end >= start) mine[1] = (double)(size * (MPI_Count)count) / (double)(end - start + 1);
    }
    MPI_Allreduce(mine, all, 2, MPI_DOUBLE, MPI_MIN, fd->comm);
    if (all[0] == 1 && all[1] >= JOBFS_INDEPENDENT_MIN_DENSITY) {
        TRACE("read_all %s: independent (every daemon on this node, density %.2f)", fd->filename, all[1]);
        fd->hints->cb_read = ADIOI_HINT_DISABLE; /* ROMIO's own independent path, as that hint asks */
        ADIOI_GEN_ReadStridedColl(fd, buf, count, datatype, file_ptr_type, offset, status, error_code);
        fd->hints->cb_read = ADIOI_HINT_AUTO;
        return;
    }
    ADIOI_GEN_ReadStridedColl(fd, buf, count, datatype, file_ptr_type, offset, status, error_code);
    /* A failed flush (a write behind that failed) is this call's error, after the collective
     * read the other ranks needed this one for. */
    if (flushed < 0 && *error_code == MPI_SUCCESS)
        set_error(error_code, "ADIOI_JOBFS_READSTRIDEDCOLL", __LINE__, flushed, "flush before reading",
                  fd->filename, jobfs_last_error(), 0);
}

/* ---- nonblocking collectives: blocking two-phase, then a completed request ---------------- */

/* The request of a finished collective: the bytes moved, or the error (the nonblocking
 * collective slots run the blocking two-phase, as Debian's build leaves them NULL). */
static void completed_request(ADIO_File fd, int count, MPI_Datatype datatype, MPI_Request *request,
                              int *error_code)
{
    MPI_Count typesize;
    MPI_Offset nbytes = 0;
    if (*error_code == MPI_SUCCESS) {
        MPI_Type_size_x(datatype, &typesize);
        nbytes = (MPI_Offset)count * (MPI_Offset)typesize;
    }
    MPIO_Completed_request_create(&fd, nbytes, error_code, request);
}

void ADIOI_JOBFS_IreadStridedColl(ADIO_File fd, void *buf, int count, MPI_Datatype datatype,
                                  int file_ptr_type, ADIO_Offset offset, MPI_Request *request,
                                  int *error_code)
{
    ADIO_Status status;
    fd->fns->ADIOI_xxx_ReadStridedColl(fd, buf, count, datatype, file_ptr_type, offset,
                                       &status, error_code);
    completed_request(fd, count, datatype, request, error_code);
}

void ADIOI_JOBFS_IwriteStridedColl(ADIO_File fd, const void *buf, int count,
                                   MPI_Datatype datatype, int file_ptr_type, ADIO_Offset offset,
                                   MPI_Request *request, int *error_code)
{
    ADIO_Status status;
    fd->fns->ADIOI_xxx_WriteStridedColl(fd, buf, count, datatype, file_ptr_type, offset,
                                        &status, error_code);
    completed_request(fd, count, datatype, request, error_code);
}
