/* romio_bench.c: a shared checkpoint through MPI-IO, as bench/mpiio-ckpt runs it under mpirun.
 *   jobfs-bench-romio FILE TOTAL_MIB [BLOCK_MIB [contig|subarray [cold]]]
 * contig (default): each of the N ranks writes its contiguous TOTAL/N share of FILE with
 *   MPI_File_write_at_all calls of BLOCK_MIB (default 16) MiB.
 * subarray: the file is a series of 2-D arrays of 8-byte elements, one per step; the ranks
 *   form a 2-D process grid (MPI_Dims_create) and each owns a tile of BLOCK_MIB MiB of every
 *   array (rows of 4 KiB), set as its file view (MPI_Type_create_subarray) and written with
 *   MPI_File_write_all: every rank's data interleaves with its neighbours' in every row, so
 *   this is the case two-phase collective I/O exists for.
 * Then MPI_File_sync and close: the write time runs from the open to the end of the close on
 * the slowest rank. The same is read back (read_at_all / read_all) and checked; with `cold`,
 * again after rank 0 dropped the page cache (root). Rank 0 prints "write MB/s X", "read MB/s
 * Y" and "read-cold MB/s Z" (MB = 10^6 bytes). Hints: cb_nodes = N,
 * cb_config_list *:*, cb_buffer_size = BLOCK.
 * As IOR does, only the I/O is timed: each rank's share is made before the write's clock
 * starts (as a program's checkpoint is in its memory before it writes it), and is read back
 * into memory that was touched before the read's clock starts (a restart reads into a model
 * already allocated) and compared once the clock stopped. Timed, making and comparing the
 * bytes took as long as reading them from the page cache and stood in both sides' read
 * figures: here, 16 MiB made and compared in 1.5-1.9 ms by one process alone (2.9-7.3 ms by
 * each of 4 on the 2 cores), and read warm in 2.3-4.0 ms by one process, through jobfs_pread
 * and pread alike. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void die(int rc, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int len;
    MPI_Error_string(rc, s, &len);
    fprintf(stderr, "jobfs-bench-romio: %s: %s\n", what, s);
    MPI_Abort(MPI_COMM_WORLD, 1);
}
#define CHECK(call, what) do { int rc_ = (call); if (rc_ != MPI_SUCCESS) die(rc_, what); } while (0)

static void fill(uint64_t *p, size_t n, uint64_t off)
{
    for (size_t i = 0; i < n; i++) p[i] = (off / 8 + i) * 0x9E3779B97F4A7C15ull;
}

/* Reads the checkpoint back as it was written into `back` (the rank's whole share, touched
 * first) and returns the read time (open to the end of the close on the slowest rank); *bad
 * counts the blocks that differ from `data`, compared after the clock stopped. */
static double read_back(const char *file, MPI_Info info, int subarray, MPI_Datatype tile, int rank, int rounds,
                        MPI_Offset share, MPI_Offset step_bytes, int block, const uint64_t *data, uint64_t *back,
                        long *bad)
{
    MPI_File fh;
    memset(back, 0xff, (size_t)share); /* nothing of an earlier read left to compare */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    CHECK(MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_RDONLY, info, &fh), "open for reading");
    for (int k = 0; k < rounds; k++) {
        uint64_t *to = back + (size_t)k * (block / 8);
        if (subarray) {
            CHECK(MPI_File_set_view(fh, k * step_bytes, MPI_UINT64_T, tile, "native", info), "set_view");
            CHECK(MPI_File_read_all(fh, to, block / 8, MPI_UINT64_T, MPI_STATUS_IGNORE), "read_all");
        } else {
            CHECK(MPI_File_read_at_all(fh, rank * share + (MPI_Offset)k * block, to, block, MPI_BYTE,
                                       MPI_STATUS_IGNORE), "read_at_all");
        }
    }
    CHECK(MPI_File_close(&fh), "close");
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime() - t0;
    for (int k = 0; k < rounds; k++)
        *bad += memcmp(data + (size_t)k * (block / 8), back + (size_t)k * (block / 8), block) != 0;
    return t;
}

/* Empties the page cache (rank 0, as root) so that the next read comes from the disks: what a
 * restart after a failure reads. */
static void drop_caches(int rank)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        sync();
        FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
        if (!f || fputs("3\n", f) < 0 || fclose(f) != 0) {
            fprintf(stderr, "jobfs-bench-romio: cannot drop the page cache (needs root)\n");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    int rank, nprocs;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 3) {
        if (rank == 0) fprintf(stderr, "usage: jobfs-bench-romio FILE TOTAL_MIB [BLOCK_MIB]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *file = argv[1];
    const MPI_Offset total = (MPI_Offset)atoll(argv[2]) << 20;
    const int block = (argc > 3 ? atoi(argv[3]) : 16) << 20;
    const int subarray = argc > 4 && !strcmp(argv[4], "subarray");
    const int cold = argc > 5 && !strcmp(argv[5], "cold");
    if (argc > 4 && !subarray && strcmp(argv[4], "contig")) {
        if (rank == 0) fprintf(stderr, "jobfs-bench-romio: pattern is contig or subarray\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* subarray: a tile of block bytes is `rows` rows of 4 KiB (512 elements) */
    int dims[2] = {0, 0};
    MPI_Dims_create(nprocs, 2, dims);
    const int cols = 512, rows = block / (cols * 8);
    int gsizes[2] = {dims[0] * rows, dims[1] * cols}, lsizes[2] = {rows, cols};
    int starts[2] = {(rank / dims[1]) * rows, (rank % dims[1]) * cols};
    MPI_Datatype tile;
    MPI_Type_create_subarray(2, gsizes, lsizes, starts, MPI_ORDER_C, MPI_UINT64_T, &tile);
    MPI_Type_commit(&tile);
    const MPI_Offset step_bytes = (MPI_Offset)block * nprocs; /* one whole 2-D array */
    const MPI_Offset share = total / nprocs;
    const int rounds = (int)(share / block);
    char cb[32];
    MPI_Info info;
    MPI_File fh;
    /* The rank's share as it is written (data) and as it is read back (back). */
    uint64_t *data = malloc((size_t)share), *back = malloc((size_t)share);
    if (data == NULL || back == NULL || rounds == 0) {
        if (rank == 0) fprintf(stderr, "jobfs-bench-romio: no memory for a share of %lld bytes, or a share smaller than a block\n", (long long)share);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int k = 0; k < rounds; k++) /* element i of the tile of step k / of the block at off */
        fill(data + (size_t)k * (block / 8), block / 8,
             (uint64_t)(subarray ? k * step_bytes + rank * (MPI_Offset)block : rank * share + (MPI_Offset)k * block));

    MPI_Info_create(&info);
    snprintf(cb, sizeof cb, "%d", nprocs);
    MPI_Info_set(info, "cb_nodes", cb);
    MPI_Info_set(info, "cb_config_list", "*:*");
    snprintf(cb, sizeof cb, "%d", block);
    MPI_Info_set(info, "cb_buffer_size", cb);

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    CHECK(MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_CREATE | MPI_MODE_WRONLY, info, &fh), "open");
    for (int k = 0; k < rounds; k++) {
        const uint64_t *from = data + (size_t)k * (block / 8);
        if (subarray) {
            CHECK(MPI_File_set_view(fh, k * step_bytes, MPI_UINT64_T, tile, "native", info), "set_view");
            CHECK(MPI_File_write_all(fh, from, block / 8, MPI_UINT64_T, MPI_STATUS_IGNORE), "write_all");
        } else {
            CHECK(MPI_File_write_at_all(fh, rank * share + (MPI_Offset)k * block, from, block, MPI_BYTE,
                                        MPI_STATUS_IGNORE), "write_at_all");
        }
    }
    CHECK(MPI_File_sync(fh), "sync");
    CHECK(MPI_File_close(&fh), "close");
    MPI_Barrier(MPI_COMM_WORLD);
    double tw = MPI_Wtime() - t0;

    long bad = 0;
    double tr = read_back(file, info, subarray, tile, rank, rounds, share, step_bytes, block, data, back, &bad);
    double tc = 0;
    if (cold) {
        drop_caches(rank);
        tc = read_back(file, info, subarray, tile, rank, rounds, share, step_bytes, block, data, back, &bad);
    }
    long allbad = 0;
    MPI_Reduce(&bad, &allbad, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        double mb = (double)share * nprocs / 1e6;
        printf("%s: %d ranks, %.0f MB, %s of %d MiB\n", file, nprocs, mb,
               subarray ? "2-D subarray tiles" : "contiguous blocks", block >> 20);
        printf("write MB/s %.1f\n", mb / tw);
        printf("read MB/s %.1f\n", mb / tr);
        if (cold) printf("read-cold MB/s %.1f\n", mb / tc);
        printf("verified: %s\n", allbad ? "NO" : "yes");
    }
    MPI_Type_free(&tile);
    MPI_Info_free(&info);
    free(data);
    free(back);
    MPI_Finalize();
    return allbad ? 1 : 0;
}
