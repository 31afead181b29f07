/* romio_mpi.c: MPI-IO cases for tests/romio_test.sh, run under mpirun with 4 ranks on jobfs:
 * names. `romio_mpi CASE FILE`; rank 0 prints one "ok - name" / "not ok - name" line per check
 * (a check fails if it failed on any rank) and the program exits 1 if any failed.
 *
 * Cases: subarray (2-D subarray view, write_all + read_all, independent read-back), columns
 * (each rank a quarter of every row: write_all + read_all, a request four times sparser), atall
 * (write_at_all / read_at_all of another rank's block), indep (independent contiguous and
 * strided writes, MPI_File_sync, read by the other ranks), iwrite (iwrite_at_all /
 * iread_at_all), size (set_size / get_size), excl (MPI_MODE_EXCL on an existing file),
 * atomic (atomic mode: racing writes never torn; shared file pointers; both refused with
 * deferred open), delete (MPI_File_delete, then open fails), reopen (three files one after
 * the other, then a delete),
 * openfail (the open is expected to fail: prints the error class and string), yield (idle
 * ranks yield the CPU while a jobfs file is open, and MPI's setting is back after the close;
 * with JOBFS_MPI_YIELD=0 it is left alone). */
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nprocs, failures;

/* Counts a check: ok on rank 0 only if it held on every rank. */
static void check(int cond, const char *name)
{
    int all;
    MPI_Allreduce(&cond, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (!all) failures++;
    if (rank == 0) { printf("%sok - %s\n", all ? "" : "not ", name); fflush(stdout); }
}

static void report(int rc, const char *what)
{
    if (rc != MPI_SUCCESS) {
        char s[MPI_MAX_ERROR_STRING];
        int len, cls;
        MPI_Error_class(rc, &cls);
        MPI_Error_string(rc, s, &len);
        fprintf(stderr, "# rank %d: %s: error class %d: %s\n", rank, what, cls, s);
    }
}

static int ok(int rc, const char *what) { report(rc, what); return rc == MPI_SUCCESS; }

/* Two-phase forced (romio_cb_read / romio_cb_write enable), 2 aggregators, 64 KiB chunks;
 * $ROMIO_MPI_CB_READ, if set, is the romio_cb_read hint instead (automatic: the driver's
 * choice). */
static MPI_Info coll_info(void)
{
    MPI_Info info;
    const char *cb_read = getenv("ROMIO_MPI_CB_READ");
    MPI_Info_create(&info);
    MPI_Info_set(info, "romio_cb_write", "enable");
    MPI_Info_set(info, "romio_cb_read", cb_read != NULL ? cb_read : "enable");
    MPI_Info_set(info, "cb_nodes", "2");
    MPI_Info_set(info, "cb_config_list", "*:*");
    MPI_Info_set(info, "cb_buffer_size", "65536");
    MPI_Info_set(info, "striping_unit", "65536");
    MPI_Info_set(info, "striping_factor", "2");
    return info;
}

static int value_at(long long i) { return (int)(i * 2654435761u ^ 0x5bd1e995); }

/* 2 x 2 process grid over an N x N int array; each rank owns one quadrant. */
static void case_subarray(const char *file)
{
    const int N = 512, h = N / 2;
    int sizes[2] = {N, N}, subs[2] = {h, h}, starts[2] = {(rank / 2) * h, (rank % 2) * h};
    MPI_Datatype sub;
    MPI_File fh;
    MPI_Info info = coll_info();
    int *mine = malloc(sizeof(int) * h * h), *back = malloc(sizeof(int) * h * h);
    int *whole = malloc(sizeof(int) * N * N);
    int good = 1;

    for (int i = 0; i < h; i++)
        for (int j = 0; j < h; j++)
            mine[i * h + j] = value_at((long long)(starts[0] + i) * N + starts[1] + j);
    MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &sub);
    MPI_Type_commit(&sub);
    good = ok(MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh), "open");
    check(good, "subarray: collective open with striping hints");
    if (!good) return;
    good = ok(MPI_File_set_view(fh, 0, MPI_INT, sub, "native", info), "set_view");
    MPI_Status st;
    int count = -1;
    good = good && ok(MPI_File_write_all(fh, mine, h * h, MPI_INT, &st), "write_all");
    MPI_Get_count(&st, MPI_INT, &count);
    check(good && count == h * h, "subarray: set_view(2-D subarray) + write_all");
    good = ok(MPI_File_sync(fh), "sync");
    MPI_Barrier(MPI_COMM_WORLD);
    good = good && ok(MPI_File_sync(fh), "sync");
    memset(back, 0, sizeof(int) * h * h);
    good = good && ok(MPI_File_seek(fh, 0, MPI_SEEK_SET), "seek"); /* write_all moved it */
    good = good && ok(MPI_File_read_all(fh, back, h * h, MPI_INT, &st), "read_all");
    check(good && memcmp(mine, back, sizeof(int) * h * h) == 0, "subarray: read_all gives the same bytes");
    MPI_Offset size = -1;
    MPI_File_get_size(fh, &size);
    check(size == (MPI_Offset)N * N * sizeof(int), "subarray: file size exact (N*N ints)");
    /* every rank reads the whole file back independently through a plain view */
    good = ok(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL), "set_view");
    good = good && ok(MPI_File_read_at(fh, 0, whole, N * N, MPI_INT, &st), "read_at");
    int bad = 0;
    for (long long i = 0; i < (long long)N * N; i++) bad += whole[i] != value_at(i);
    check(good && bad == 0, "subarray: independent read of the whole file is byte-exact on every rank");
    check(ok(MPI_File_close(&fh), "close"), "subarray: close");
    MPI_Type_free(&sub);
    MPI_Info_free(&info);
    free(mine); free(back); free(whole);
}

/* Each rank owns a quarter of the columns of an N x N int array: a quarter of every row, so
 * its request spans four times the bytes it reads. */
static void case_columns(const char *file)
{
    const int N = 512, w = N / nprocs;
    int sizes[2] = {N, N}, subs[2] = {N, w}, starts[2] = {0, rank * w};
    MPI_Datatype cols;
    MPI_File fh;
    MPI_Status st;
    MPI_Info info = coll_info();
    int *mine = malloc(sizeof(int) * N * w), *back = calloc((size_t)N * w, sizeof(int));
    int good;

    for (int i = 0; i < N; i++)
        for (int j = 0; j < w; j++) mine[i * w + j] = value_at((long long)i * N + starts[1] + j);
    MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &cols);
    MPI_Type_commit(&cols);
    good = ok(MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh), "open");
    good = good && ok(MPI_File_set_view(fh, 0, MPI_INT, cols, "native", info), "set_view");
    good = good && ok(MPI_File_write_all(fh, mine, N * w, MPI_INT, &st), "write_all");
    good = good && ok(MPI_File_sync(fh), "sync");
    MPI_Barrier(MPI_COMM_WORLD);
    good = good && ok(MPI_File_sync(fh), "sync");
    good = good && ok(MPI_File_seek(fh, 0, MPI_SEEK_SET), "seek");
    good = good && ok(MPI_File_read_all(fh, back, N * w, MPI_INT, &st), "read_all");
    check(good && memcmp(mine, back, sizeof(int) * N * w) == 0, "columns: read_all of a quarter of every row gives the same bytes");
    check(ok(MPI_File_close(&fh), "close"), "columns: close");
    MPI_Type_free(&cols);
    MPI_Info_free(&info);
    free(mine); free(back);
}

/* Each rank writes a block of B bytes (not a multiple of the chunk size) at rank * B. */
static void case_atall(const char *file)
{
    const int B = 1000003;
    char *buf = malloc(B), *back = malloc(B);
    MPI_File fh;
    MPI_Info info = coll_info();
    MPI_Status st;
    int good;

    for (int i = 0; i < B; i++) buf[i] = (char)(rank * 31 + i * 7);
    good = ok(MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh), "open");
    good = good && ok(MPI_File_write_at_all(fh, (MPI_Offset)rank * B, buf, B, MPI_BYTE, &st), "write_at_all");
    check(good, "atall: write_at_all of 4 blocks of 1000003 bytes");
    good = ok(MPI_File_sync(fh), "sync");
    MPI_Barrier(MPI_COMM_WORLD);
    good = good && ok(MPI_File_sync(fh), "sync");
    int other = (rank + 1) % nprocs;
    good = good && ok(MPI_File_read_at_all(fh, (MPI_Offset)other * B, back, B, MPI_BYTE, &st), "read_at_all");
    int bad = 0;
    for (int i = 0; i < B; i++) bad += back[i] != (char)(other * 31 + i * 7);
    check(good && bad == 0, "atall: read_at_all of another rank's block is byte-exact");
    MPI_Offset size = -1;
    MPI_File_get_size(fh, &size);
    check(size == (MPI_Offset)nprocs * B, "atall: file size exact (4 * 1000003)");
    check(ok(MPI_File_close(&fh), "close"), "atall: close");
    MPI_Info_free(&info);
    free(buf); free(back);
}

/* Independent I/O: rank r writes piece p of P bytes at (p * nprocs + r) * P, once with
 * contiguous write_at calls and once (a second file region) through a strided view. */
static void case_indep(const char *file)
{
    const int P = 5000, pieces = 40;
    const long long half = (long long)P * pieces * nprocs;
    char *buf = malloc((size_t)P * pieces), *all = malloc((size_t)(2 * half));
    MPI_File fh;
    MPI_Status st;
    MPI_Datatype vec, ftype;
    int good = 1;

    for (int p = 0; p < pieces; p++)
        for (int i = 0; i < P; i++) buf[p * P + i] = (char)((p * nprocs + rank) * 13 + i);
    good = ok(MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh), "open");
    for (int p = 0; good && p < pieces; p++)
        good = ok(MPI_File_write_at(fh, ((MPI_Offset)p * nprocs + rank) * P, buf + p * P, P, MPI_BYTE, &st), "write_at");
    check(good, "indep: independent contiguous write_at");
    /* strided: a vector view, one MPI_File_write of all pieces (ROMIO's WriteStrided) */
    MPI_Type_vector(pieces, P, P * nprocs, MPI_BYTE, &vec);
    MPI_Type_create_resized(vec, 0, (MPI_Aint)P * pieces * nprocs, &ftype);
    MPI_Type_commit(&ftype);
    good = ok(MPI_File_set_view(fh, half + (MPI_Offset)rank * P, MPI_BYTE, ftype, "native", MPI_INFO_NULL), "set_view");
    good = good && ok(MPI_File_write(fh, buf, P * pieces, MPI_BYTE, &st), "write");
    check(good, "indep: independent strided write (vector view)");
    char *mine = malloc((size_t)P * pieces);
    good = ok(MPI_File_read_at(fh, 0, mine, P * pieces, MPI_BYTE, &st), "read_at strided");
    check(good && memcmp(mine, buf, (size_t)P * pieces) == 0, "indep: independent strided read of own pieces");
    good = ok(MPI_File_sync(fh), "sync");
    MPI_Barrier(MPI_COMM_WORLD);
    good = good && ok(MPI_File_sync(fh), "sync");
    good = good && ok(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL), "set_view");
    good = good && ok(MPI_File_read_at(fh, 0, all, (int)(2 * half), MPI_BYTE, &st), "read_at");
    int bad = 0;
    long long first = -1;
    for (long long o = 0; o < 2 * half; o++) {
        long long q = (o % half) / P;
        if (all[o] != (char)(q * 13 + (o % P)) && bad++ == 0) first = o;
    }
    if (bad) fprintf(stderr, "# rank %d: %d bytes differ, the first at %lld\n", rank, bad, first);
    check(good && bad == 0, "indep: after MPI_File_sync + barrier every rank reads all ranks' data");
    MPI_Offset size = -1;
    MPI_File_get_size(fh, &size);
    check(size == 2 * half, "indep: file size exact");
    check(ok(MPI_File_close(&fh), "close"), "indep: close");
    MPI_Type_free(&ftype);
    MPI_Type_free(&vec);
    free(buf); free(all); free(mine);
}

static void case_iwrite(const char *file)
{
    const int B = 300000;
    char *buf = malloc(B), *back = malloc(B);
    MPI_File fh;
    MPI_Request req;
    MPI_Status st;
    MPI_Info info = coll_info();
    int good, count = -1;

    for (int i = 0; i < B; i++) buf[i] = (char)(rank + i * 3);
    good = ok(MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh), "open");
    good = good && ok(MPI_File_iwrite_at_all(fh, (MPI_Offset)rank * B, buf, B, MPI_BYTE, &req), "iwrite_at_all");
    good = good && ok(MPI_Wait(&req, &st), "wait");
    MPI_Get_count(&st, MPI_BYTE, &count);
    check(good && count == B, "iwrite: iwrite_at_all + MPI_Wait, status counts the bytes");
    good = ok(MPI_File_sync(fh), "sync");
    MPI_Barrier(MPI_COMM_WORLD);
    good = good && ok(MPI_File_sync(fh), "sync");
    good = good && ok(MPI_File_iread_at_all(fh, (MPI_Offset)rank * B, back, B, MPI_BYTE, &req), "iread_at_all");
    good = good && ok(MPI_Wait(&req, &st), "wait");
    check(good && memcmp(buf, back, B) == 0, "iwrite: iread_at_all gives the same bytes");
    check(ok(MPI_File_close(&fh), "close"), "iwrite: close");
    MPI_Info_free(&info);
    free(buf); free(back);
}

static void case_size(const char *file)
{
    MPI_File fh;
    MPI_Offset size = -1;
    int good = ok(MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh), "open");
    good = good && ok(MPI_File_set_size(fh, 12345), "set_size");
    good = good && ok(MPI_File_get_size(fh, &size), "get_size");
    check(good && size == 12345, "size: set_size(12345), get_size on every rank");
    good = ok(MPI_File_set_size(fh, 100), "set_size");
    MPI_Barrier(MPI_COMM_WORLD);
    good = good && ok(MPI_File_get_size(fh, &size), "get_size");
    check(good && size == 100, "size: set_size shrinks to 100");
    check(ok(MPI_File_close(&fh), "close"), "size: close");
}

static void case_excl(const char *file)
{
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    int cls = -1;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    else MPI_File_close(&fh);
    check(rc != MPI_SUCCESS && cls == MPI_ERR_FILE_EXISTS, "excl: MPI_MODE_EXCL on an existing file fails with MPI_ERR_FILE_EXISTS");
}

/* Atomic mode: every rank writes the same 1 MiB (16 chunks of 64K, so one write fans out to
 * several daemons) filled with its own byte, 20 times over, racing the others; in atomic mode
 * each read must see one rank's write whole, never a mixture. Then shared file pointers: each
 * rank appends one record with MPI_File_write_shared; after sync-barrier-sync every record is
 * in the file exactly once, one after the other. With deferred open, neither is available. */
static void case_atomic(const char *file)
{
    const int len = 1 << 20, rounds = 20;
    MPI_File fh;
    MPI_Info info = coll_info();
    int good = ok(MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh), "open");
    MPI_Info_free(&info);
    int rc = good ? MPI_File_set_atomicity(fh, 1) : -1;
    int flag = -1;
    if (good) MPI_File_get_atomicity(fh, &flag);
    check(good && rc == MPI_SUCCESS && flag == 1, "atomic: set_atomicity(1) is accepted and reads back 1");
    char *buf = malloc(len), *in = malloc(len);
    int torn = 0, io_ok = good;
    for (int r = 0; good && r < rounds; ++r) {
        memset(buf, 'a' + rank, len);
        io_ok &= ok(MPI_File_write_at(fh, 0, buf, len, MPI_BYTE, MPI_STATUS_IGNORE), "write_at");
        io_ok &= ok(MPI_File_read_at(fh, 0, in, len, MPI_BYTE, MPI_STATUS_IGNORE), "read_at");
        for (int i = 1; i < len; ++i)
            if (in[i] != in[0]) { torn++; break; }
        if (in[0] < 'a' || in[0] >= 'a' + nprocs) torn++;
    }
    check(io_ok, "atomic: 20 rounds of racing 1 MiB writes and reads succeed");
    check(torn == 0, "atomic: every read saw one rank's 1 MiB write whole (no torn mixture)");
    MPI_Barrier(MPI_COMM_WORLD);

    /* Shared file pointer: records "rank N\n" of 16 bytes, appended by all. */
    char rec[16], all[64 * 16];
    MPI_Offset start = 0;
    memset(rec, ' ', sizeof rec);
    snprintf(rec, sizeof rec, "rank %d", rank);
    rec[15] = '\n';
    int sp = good && ok(MPI_File_set_atomicity(fh, 0), "set_atomicity(0)");
    sp = sp && ok(MPI_File_seek_shared(fh, len, MPI_SEEK_SET), "seek_shared");
    sp = sp && ok(MPI_File_get_position_shared(fh, &start), "get_position_shared");
    MPI_Barrier(MPI_COMM_WORLD); /* every rank read the start before any record moves it */
    sp = sp && ok(MPI_File_write_shared(fh, rec, sizeof rec, MPI_BYTE, MPI_STATUS_IGNORE), "write_shared");
    sp = sp && ok(MPI_File_sync(fh), "sync");
    MPI_Barrier(MPI_COMM_WORLD);
    sp = sp && ok(MPI_File_sync(fh), "sync");
    MPI_Offset end = -1;
    sp = sp && ok(MPI_File_get_position_shared(fh, &end), "get_position_shared");
    check(sp && start == len && end == len + 16 * nprocs,
          "shared: seek_shared, then write_shared by every rank moves the shared pointer by all records");
    int seen[64] = {0}, okrec = sp && nprocs <= 64;
    if (okrec) okrec = ok(MPI_File_read_at(fh, len, all, 16 * nprocs, MPI_BYTE, MPI_STATUS_IGNORE), "read_at");
    for (int i = 0; okrec && i < nprocs; ++i) {
        int who = -1;
        if (sscanf(all + 16 * i, "rank %d", &who) != 1 || who < 0 || who >= nprocs || all[16 * i + 15] != '\n') okrec = 0;
        else seen[who]++;
    }
    for (int i = 0; okrec && i < nprocs; ++i)
        if (seen[i] != 1) okrec = 0;
    check(okrec, "shared: every rank's record is in the file exactly once, back to back");
    free(buf);
    free(in);
    if (good) check(ok(MPI_File_close(&fh), "close"), "atomic: the file closes");

    /* Deferred open: no window, so both are refused with an error, nothing hangs. */
    MPI_Info_create(&info);
    MPI_Info_set(info, "romio_no_indep_rw", "true");
    good = ok(MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_RDWR, info, &fh), "open deferred");
    MPI_Info_free(&info);
    rc = good ? MPI_File_set_atomicity(fh, 1) : MPI_SUCCESS;
    check(good && rc != MPI_SUCCESS, "atomic: with romio_no_indep_rw (deferred open) set_atomicity(1) is refused");
    if (good) MPI_File_close(&fh);
}

static void case_delete(const char *file)
{
    MPI_File fh;
    int good = 1;
    if (rank == 0) good = ok(MPI_File_delete(file, MPI_INFO_NULL), "delete");
    MPI_Barrier(MPI_COMM_WORLD);
    check(good, "delete: MPI_File_delete");
    int rc = MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    int cls = -1;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    else MPI_File_close(&fh);
    check(rc != MPI_SUCCESS && cls == MPI_ERR_NO_SUCH_FILE, "delete: opening it again fails with MPI_ERR_NO_SUCH_FILE");
}

static void case_openfail(const char *file)
{
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    if (rc == MPI_SUCCESS) {
        MPI_File_close(&fh);
    } else if (rank == 0) {
        char s[MPI_MAX_ERROR_STRING];
        int len, cls;
        MPI_Error_class(rc, &cls);
        MPI_Error_string(cls, s, &len);
        printf("open failed: class %d (%s)\n", cls, s);
    }
    check(rc != MPI_SUCCESS, "openfail: MPI_File_open fails");
}

/* Three files, one after the other, each closed before the next is opened (a checkpoint, its
 * read-back, the next step's), then a delete: tests/romio_test.sh counts the connections the
 * daemons accepted meanwhile (one per rank: the driver keeps it until MPI_Finalize). */
static void case_reopen(const char *file)
{
    const int B = 1 << 20;
    char *buf = malloc(B), *back = malloc(B);
    MPI_File fh;
    MPI_Status st;
    int good;

    for (int i = 0; i < B; i++) buf[i] = (char)(rank * 13 + i * 5);
    good = ok(MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh), "open");
    good = good && ok(MPI_File_write_at_all(fh, (MPI_Offset)rank * B, buf, B, MPI_BYTE, &st), "write_at_all");
    good = good && ok(MPI_File_close(&fh), "close");
    check(good, "reopen: a checkpoint written and closed");
    good = ok(MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh), "open");
    good = good && ok(MPI_File_read_at_all(fh, (MPI_Offset)rank * B, back, B, MPI_BYTE, &st), "read_at_all");
    good = good && ok(MPI_File_close(&fh), "close");
    check(good && memcmp(buf, back, B) == 0, "reopen: opened again, read back byte-exact");
    MPI_Offset size = -1;
    good = ok(MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh), "open");
    good = good && ok(MPI_File_get_size(fh, &size), "get_size");
    good = good && ok(MPI_File_close(&fh), "close");
    check(good && size == (MPI_Offset)nprocs * B, "reopen: a third open sees its size");
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) good = ok(MPI_File_delete(file, MPI_INFO_NULL), "delete");
    check(good, "reopen: deleted");
    free(buf); free(back);
}

/* Open MPI's progress engine (libopen-pal; opal/runtime/opal_progress.h). */
extern bool opal_progress_yield_when_idle;

static void case_yield(const char *file)
{
    MPI_File fh;
    const bool before = opal_progress_yield_when_idle;
    int good = ok(MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh), "open");
    const bool during = opal_progress_yield_when_idle;
    if (good) good = ok(MPI_File_close(&fh), "close");
    const bool after = opal_progress_yield_when_idle;
    const char *want = getenv("JOBFS_MPI_YIELD");
    if (want != NULL && strcmp(want, "0") == 0)
        check(good && during == before && after == before, "yield: with JOBFS_MPI_YIELD=0 MPI's setting is left alone");
    else
        check(good && !before && during && !after,
              "yield: idle ranks yield while a jobfs file is open, and do not after its close (as before)");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc != 3) {
        if (rank == 0) fprintf(stderr, "usage: romio_mpi CASE FILE\n");
        MPI_Finalize();
        return 2;
    }
    const char *c = argv[1], *file = argv[2];
    if (!strcmp(c, "subarray") && nprocs == 4) case_subarray(file);
    else if (!strcmp(c, "columns") && nprocs == 4) case_columns(file);
    else if (!strcmp(c, "atall")) case_atall(file);
    else if (!strcmp(c, "indep")) case_indep(file);
    else if (!strcmp(c, "iwrite")) case_iwrite(file);
    else if (!strcmp(c, "size")) case_size(file);
    else if (!strcmp(c, "excl")) case_excl(file);
    else if (!strcmp(c, "atomic")) case_atomic(file);
    else if (!strcmp(c, "delete")) case_delete(file);
    else if (!strcmp(c, "openfail")) case_openfail(file);
    else if (!strcmp(c, "yield")) case_yield(file);
    else if (!strcmp(c, "reopen")) case_reopen(file);
    else {
        if (rank == 0) fprintf(stderr, "romio_mpi: unknown case %s (or subarray or columns without 4 ranks)\n", c);
        MPI_Finalize();
        return 2;
    }
    MPI_Finalize();
    return failures ? 1 : 0;
}
