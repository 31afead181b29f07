/* ad_jobfs_shared.c: the shared file pointer and atomic mode of jobfs: files.
 *
 * ROMIO keeps a shared file pointer in a hidden file guarded by fcntl locks, and makes atomic
 * mode out of the same locks; jobfs has neither a kernel fd nor byte-range locks. Both only
 * have to hold among the processes that opened the file together (MPI-IO semantics), so they
 * live in an MPI window on rank 0 of the file's communicator, made when the file is opened
 * collectively and freed when it is closed:
 *   slot 0  the shared file pointer, in etypes: MPI_Fetch_and_op (SUM / REPLACE) is atomic;
 *   slot 1  unused by its value: an exclusive lock of the window is the file's atomic-mode
 *           mutex, held for the whole of one read or write call (also a strided one).
 * With deferred open (hint romio_no_indep_rw) not every process takes part in open and close,
 * so no window is made: shared file pointers and atomic mode then fail with a message.
 * ROMIO serialises its calls (one global critical section), so the list below needs no lock. */
#include "ad_jobfs.h"
#include "adio_extern.h"

#include <stdio.h>

struct jobfs_window {
    ADIO_File fd;
    MPI_Win win;
    int atomic_depth; /* nesting of jobfs_atomic_begin on this process */
    struct jobfs_window *next;
};

static struct jobfs_window *windows;

static struct jobfs_window *window_of(ADIO_File fd)
{
    struct jobfs_window *w;
    for (w = windows; w != NULL; w = w->next)
        if (w->fd == fd) return w;
    return NULL;
}

void ADIOI_JOBFS_Shared_create(ADIO_File fd, int opened_here)
{
    int bad = !opened_here, any_bad = 0;
    struct jobfs_window *w;
    void *base = NULL;
    int rank;

    if (fd->hints->deferred_open) return;
    /* Collective over the file's communicator: only when the open worked everywhere, or a
     * failed open (which ROMIO never closes) would leave the others' window behind. */
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, fd->comm);
    if (any_bad) return;
    MPI_Comm_rank(fd->comm, &rank);
    w = ADIOI_Calloc(1, sizeof *w);
    w->fd = fd;
    /* Without a one-sided component for the job's network (Open MPI's ob1 over tcp between
     * nodes has none here), the allocation fails: then there is no window, and the file has
     * no shared pointer or atomic mode. That must not abort the job: errors return here. */
    MPI_Errhandler old_handler;
    MPI_Comm_get_errhandler(fd->comm, &old_handler);
    MPI_Comm_set_errhandler(fd->comm, MPI_ERRORS_RETURN);
    int rc = MPI_Win_allocate(rank == 0 ? 2 * sizeof(long long) : 0, sizeof(long long), MPI_INFO_NULL,
                              fd->comm, &base, &w->win);
    MPI_Comm_set_errhandler(fd->comm, old_handler);
    MPI_Errhandler_free(&old_handler);
    if (rc != MPI_SUCCESS) {
        ADIOI_Free(w);
        return;
    }
    if (rank == 0) {
        /* Before any other process can reach the window: they all pass the fence first. */
        ((long long *)base)[0] = 0;
        ((long long *)base)[1] = 0;
    }
    MPI_Win_fence(0, w->win);
    w->next = windows;
    windows = w;
}

void ADIOI_JOBFS_Shared_free(ADIO_File fd)
{
    struct jobfs_window **p, *w;
    for (p = &windows; *p != NULL; p = &(*p)->next) {
        if ((*p)->fd != fd) continue;
        w = *p;
        *p = w->next;
        MPI_Win_free(&w->win); /* collective, as MPI_File_close is */
        ADIOI_Free(w);
        return;
    }
}

int ADIOI_JOBFS_Shared_available(ADIO_File fd) { return window_of(fd) != NULL; }

static void no_window(ADIO_File fd, int *error_code, const char *myname, const char *what)
{
    fprintf(stderr, "ad_jobfs: jobfs:%s: %s needs the file opened by all processes of its "
            "communicator (not with romio_no_indep_rw) and MPI one-sided communication between "
            "them\n", fd->filename, what);
    *error_code = MPIO_Err_create_code(MPI_SUCCESS, MPIR_ERR_RECOVERABLE, (char *)myname,
                                       __LINE__, MPI_ERR_UNSUPPORTED_OPERATION, "**io",
                                       "**io %s", what);
}

/* The shared pointer's value before adding incr (etypes), as ADIO_Get_shared_fp. */
void ADIOI_JOBFS_Get_shared_fp(ADIO_File fd, ADIO_Offset incr, ADIO_Offset *shared_fp,
                               int *error_code)
{
    struct jobfs_window *w = window_of(fd);
    long long add = (long long)incr, old = 0;
    *shared_fp = 0;
    if (w == NULL) return no_window(fd, error_code, "ADIOI_JOBFS_GET_SHARED_FP", "a shared file pointer");
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, w->win);
    MPI_Fetch_and_op(&add, &old, MPI_LONG_LONG, 0, 0, MPI_SUM, w->win);
    MPI_Win_unlock(0, w->win);
    *shared_fp = (ADIO_Offset)old;
    *error_code = MPI_SUCCESS;
}

void ADIOI_JOBFS_Set_shared_fp(ADIO_File fd, ADIO_Offset offset, int *error_code)
{
    struct jobfs_window *w = window_of(fd);
    long long value = (long long)offset, old = 0;
    if (w == NULL) return no_window(fd, error_code, "ADIOI_JOBFS_SET_SHARED_FP", "a shared file pointer");
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, w->win);
    MPI_Fetch_and_op(&value, &old, MPI_LONG_LONG, 0, 0, MPI_REPLACE, w->win);
    MPI_Win_unlock(0, w->win);
    *error_code = MPI_SUCCESS;
}

void ADIOI_JOBFS_Atomic_begin(ADIO_File fd)
{
    struct jobfs_window *w;
    long long ignored = 0, got = 0;
    if (!fd->atomicity || (w = window_of(fd)) == NULL || w->atomic_depth++ > 0) return;
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, w->win);
    /* MPI may take a lock lazily, at the first operation: make it hold the lock now. */
    MPI_Fetch_and_op(&ignored, &got, MPI_LONG_LONG, 0, 1, MPI_NO_OP, w->win);
    MPI_Win_flush(0, w->win);
}

void ADIOI_JOBFS_Atomic_end(ADIO_File fd)
{
    struct jobfs_window *w = window_of(fd);
    if (w == NULL || w->atomic_depth == 0 || --w->atomic_depth > 0) return;
    MPI_Win_unlock(0, w->win);
}

/* Strided independent I/O is atomic as a whole: the generic routines run inside the mutex. */
void ADIOI_JOBFS_ReadStrided(ADIO_File fd, void *buf, int count, MPI_Datatype datatype,
                             int file_ptr_type, ADIO_Offset offset, ADIO_Status *status,
                             int *error_code)
{
    ADIOI_JOBFS_Atomic_begin(fd);
    ADIOI_GEN_ReadStrided(fd, buf, count, datatype, file_ptr_type, offset, status, error_code);
    ADIOI_JOBFS_Atomic_end(fd);
}

void ADIOI_JOBFS_WriteStrided(ADIO_File fd, const void *buf, int count, MPI_Datatype datatype,
                              int file_ptr_type, ADIO_Offset offset, ADIO_Status *status,
                              int *error_code)
{
    ADIOI_JOBFS_Atomic_begin(fd);
    ADIOI_GEN_WriteStrided_naive(fd, buf, count, datatype, file_ptr_type, offset, status,
                                 error_code);
    ADIOI_JOBFS_Atomic_end(fd);
}
