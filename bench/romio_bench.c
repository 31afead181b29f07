/* romio_bench.c: a shared checkpoint through MPI-IO, as bench/romio runs it under mpirun.
 *   jobfs-bench-romio FILE TOTAL_MIB [BLOCK_MIB]
 * Each of the N ranks writes its contiguous TOTAL/N share of FILE with MPI_File_write_at_all
 * calls of BLOCK_MIB (default 16) MiB, then MPI_File_sync and close: the write time runs from
 * the open to the end of the close on the slowest rank. Then the same read back with
 * MPI_File_read_at_all and checked. Rank 0 prints "write MB/s X" and "read MB/s Y"
 * (MB = 10^6 bytes). Hints: cb_nodes = N, cb_config_list *:*, cb_buffer_size = BLOCK. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    const MPI_Offset share = total / nprocs;
    const int rounds = (int)(share / block);
    char cb[32];
    MPI_Info info;
    MPI_File fh;
    uint64_t *buf = malloc(block), *back = malloc(block);

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
        MPI_Offset off = rank * share + (MPI_Offset)k * block;
        fill(buf, block / 8, (uint64_t)off);
        CHECK(MPI_File_write_at_all(fh, off, buf, block, MPI_BYTE, MPI_STATUS_IGNORE), "write_at_all");
    }
    CHECK(MPI_File_sync(fh), "sync");
    CHECK(MPI_File_close(&fh), "close");
    MPI_Barrier(MPI_COMM_WORLD);
    double tw = MPI_Wtime() - t0;

    long bad = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    CHECK(MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_RDONLY, info, &fh), "open for reading");
    for (int k = 0; k < rounds; k++) {
        MPI_Offset off = rank * share + (MPI_Offset)k * block;
        CHECK(MPI_File_read_at_all(fh, off, back, block, MPI_BYTE, MPI_STATUS_IGNORE), "read_at_all");
        fill(buf, block / 8, (uint64_t)off);
        bad += memcmp(buf, back, block) != 0;
    }
    CHECK(MPI_File_close(&fh), "close");
    MPI_Barrier(MPI_COMM_WORLD);
    double tr = MPI_Wtime() - t0;
    long allbad = 0;
    MPI_Reduce(&bad, &allbad, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        double mb = (double)share * nprocs / 1e6;
        printf("%s: %d ranks, %.0f MB, blocks of %d MiB\n", file, nprocs, mb, block >> 20);
        printf("write MB/s %.1f\n", mb / tw);
        printf("read MB/s %.1f\n", mb / tr);
        printf("verified: %s\n", allbad ? "NO" : "yes");
    }
    MPI_Info_free(&info);
    free(buf);
    free(back);
    MPI_Finalize();
    return allbad ? 1 : 0;
}
