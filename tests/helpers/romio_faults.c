/* romio_faults.c: the MPI side of tests/romio_faults_test.sh, a collective checkpoint through
 * ad_jobfs while the test kills a daemon.
 *
 *   romio_faults write FILE ROUNDS BLOCK DIR   every rank writes ROUNDS blocks of BLOCK bytes,
 *       one MPI_File_write_at_all per round (block (round * nprocs + rank) of the file). Rank 0
 *       creates DIR/writing after a third of the rounds (the test then kills a daemon and creates
 *       DIR/killed) and counts the rounds it started after DIR/killed appeared. A round is
 *       acknowledged for a rank when its write_at_all returned MPI_SUCCESS; rank 0 writes the
 *       acknowledged blocks, one index a line, to DIR/acked, and prints a summary. Exit 0 if
 *       every call returned (errors are reported, not fatal: they are what the test judges).
 *   romio_faults verify FILE BLOCK DIR   every rank reads its share of the blocks in DIR/acked
 *       (independent MPI_File_read_at) and compares them with the pattern; rank 0 prints
 *       "ok - NAME" / "not ok - NAME"; exit 1 if any block differs or cannot be read. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, nprocs;

/* The bytes of block b: a 64-bit counter mixed with the block index, so a block written at
 * the wrong place, a stale block or a block of zeros all differ. */
static void fill(uint64_t *p, size_t block, long long b)
{
    for (size_t i = 0; i < block / 8; i++) p[i] = (uint64_t)b * 0x9e3779b97f4a7c15ull ^ (i * 0xbf58476d1ce4e5b9ull + 1);
}

static void report(int rc, const char *what, long long b)
{
    char s[MPI_MAX_ERROR_STRING];
    int len, cls;
    MPI_Error_class(rc, &cls);
    MPI_Error_string(rc, s, &len);
    fprintf(stderr, "# rank %d: %s block %lld: error class %d: %s\n", rank, what, b, cls, s);
}

static int do_write(const char *file, int rounds, size_t block, const char *dir)
{
    char writing[4096], killed[4096], acked[4096];
    snprintf(writing, sizeof writing, "%s/writing", dir);
    snprintf(killed, sizeof killed, "%s/killed", dir);
    snprintf(acked, sizeof acked, "%s/acked", dir);
    uint64_t *buf = malloc(block);
    int *ok = calloc(rounds, sizeof(int)), *all = calloc((size_t)rounds * nprocs, sizeof(int));
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    if (rc != MPI_SUCCESS) {
        report(rc, "open", -1);
        return 1;
    }
    int after_kill = 0;
    for (int r = 0; r < rounds; r++) {
        const long long b = (long long)r * nprocs + rank;
        if (rank == 0 && access(killed, F_OK) == 0) after_kill++;
        fill(buf, block, b);
        MPI_Status st;
        rc = MPI_File_write_at_all(fh, (MPI_Offset)b * (MPI_Offset)block, buf, (int)block, MPI_BYTE, &st);
        int count = 0;
        if (rc == MPI_SUCCESS) MPI_Get_count(&st, MPI_BYTE, &count);
        ok[r] = rc == MPI_SUCCESS && (size_t)count == block;
        if (rc != MPI_SUCCESS) report(rc, "write_at_all", b);
        if (r == rounds / 3 && rank == 0) fclose(fopen(writing, "w"));
    }
    rc = MPI_File_close(&fh);
    if (rc != MPI_SUCCESS) report(rc, "close", -1);
    const int closed = rc == MPI_SUCCESS;
    MPI_Gather(ok, rounds, MPI_INT, all, rounds, MPI_INT, 0, MPI_COMM_WORLD);
    int all_closed;
    MPI_Reduce(&closed, &all_closed, 1, MPI_INT, MPI_LAND, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        FILE *f = fopen(acked, "w");
        int n = 0;
        for (int p = 0; p < nprocs; p++)
            for (int r = 0; r < rounds; r++)
                if (all[p * rounds + r]) {
                    fprintf(f, "%lld\n", (long long)r * nprocs + p);
                    n++;
                }
        fclose(f);
        printf("# write: %d of %d blocks acknowledged, %d rounds started after the kill, close %s\n", n, rounds * nprocs,
               after_kill, all_closed ? "succeeded" : "failed");
        printf("after_kill %d\nacked %d of %d\n", after_kill, n, rounds * nprocs);
        fflush(stdout);
    }
    free(buf);
    free(ok);
    free(all);
    return 0;
}

static int do_verify(const char *file, size_t block, const char *dir)
{
    char acked[4096];
    snprintf(acked, sizeof acked, "%s/acked", dir);
    FILE *f = fopen(acked, "r");
    if (!f) {
        fprintf(stderr, "# rank %d: no %s\n", rank, acked);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    uint64_t *want = malloc(block), *got = malloc(block);
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    const int opened = rc == MPI_SUCCESS;
    int good = opened, checked = 0;
    if (!opened) report(rc, "open", -1);
    long long b;
    for (int line = 0; good && fscanf(f, "%lld", &b) == 1; line++) {
        if (line % nprocs != rank) continue;
        fill(want, block, b);
        MPI_Status st;
        int count = 0;
        rc = MPI_File_read_at(fh, (MPI_Offset)b * (MPI_Offset)block, got, (int)block, MPI_BYTE, &st);
        if (rc != MPI_SUCCESS) {
            report(rc, "read_at", b);
            good = 0;
            break;
        }
        MPI_Get_count(&st, MPI_BYTE, &count);
        if ((size_t)count != block || memcmp(want, got, block) != 0) {
            fprintf(stderr, "# rank %d: block %lld differs (%d bytes read)\n", rank, b, count);
            good = 0;
        }
        checked++;
    }
    fclose(f);
    if (opened) MPI_File_close(&fh);
    int all, total;
    MPI_Allreduce(&good, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    MPI_Reduce(&checked, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("%sok - verify: every acknowledged block reads back exactly (%d blocks)\n", all ? "" : "not ", total);
        fflush(stdout);
    }
    free(want);
    free(got);
    return all ? 0 : 1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    int rc = 2;
    if (argc == 6 && strcmp(argv[1], "write") == 0)
        rc = do_write(argv[2], atoi(argv[3]), (size_t)atoll(argv[4]), argv[5]);
    else if (argc == 5 && strcmp(argv[1], "verify") == 0)
        rc = do_verify(argv[2], (size_t)atoll(argv[3]), argv[4]);
    else if (rank == 0)
        fprintf(stderr, "usage: romio_faults write FILE ROUNDS BLOCK DIR | verify FILE BLOCK DIR\n");
    MPI_Finalize();
    return rc;
}
