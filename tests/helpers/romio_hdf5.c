/* romio_hdf5.c: parallel HDF5 through the ROMIO jobfs driver (tests/romio_hdf5_test.sh).
 *
 *   romio_hdf5 write FILE   every rank writes its block of rows of a ROWS x COLS dataset
 *                           "/ckpt/step" with a collective hyperslab write (H5FD_MPIO_COLLECTIVE)
 *   romio_hdf5 read FILE    every rank reads the whole dataset back collectively and checks
 *                           every element
 * FILE is a "jobfs:/..." name: HDF5 hands it to MPI_File_open unchanged. Prints "ok - ..."
 * lines on rank 0; exits 1 on any mismatch or HDF5 error. */
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS_PER_RANK 256
#define COLS 1024

static int value(long row, long col) { return (int)(row * 7919 + col * 31 + 17); }

static hid_t file_access(void)
{
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "cb_config_list", "*:*"); /* every rank of this one host aggregates */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, info);
    MPI_Info_free(&info);
    return fapl;
}

int main(int argc, char **argv)
{
    int rank, nprocs, bad = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc != 3 || (strcmp(argv[1], "write") && strcmp(argv[1], "read"))) {
        if (rank == 0) fprintf(stderr, "usage: romio_hdf5 write|read FILE\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *file = argv[2];
    const hsize_t rows = (hsize_t)ROWS_PER_RANK * nprocs;
    hid_t fapl = file_access();
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);

    if (!strcmp(argv[1], "write")) {
        hid_t f = H5Fcreate(file, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
        if (f < 0) { fprintf(stderr, "rank %d: H5Fcreate %s failed\n", rank, file); MPI_Abort(MPI_COMM_WORLD, 1); }
        hid_t group = H5Gcreate2(f, "/ckpt", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        hsize_t dims[2] = {rows, COLS};
        hid_t space = H5Screate_simple(2, dims, NULL);
        hid_t dset = H5Dcreate2(group, "step", H5T_NATIVE_INT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        hsize_t start[2] = {(hsize_t)rank * ROWS_PER_RANK, 0}, count[2] = {ROWS_PER_RANK, COLS};
        H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL);
        hid_t mem = H5Screate_simple(2, count, NULL);
        int *buf = malloc(sizeof(int) * ROWS_PER_RANK * COLS);
        for (long r = 0; r < ROWS_PER_RANK; ++r)
            for (long c = 0; c < COLS; ++c) buf[r * COLS + c] = value(rank * ROWS_PER_RANK + r, c);
        if (H5Dwrite(dset, H5T_NATIVE_INT, mem, space, dxpl, buf) < 0) bad = 1;
        H5D_mpio_actual_io_mode_t mode;
        H5Pget_mpio_actual_io_mode(dxpl, &mode);
        if (mode == H5D_MPIO_NO_COLLECTIVE) bad = 1;
        free(buf);
        H5Sclose(mem);
        H5Dclose(dset);
        H5Sclose(space);
        H5Gclose(group);
        if (H5Fclose(f) < 0) bad = 1;
        int any = 0;
        MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("%s - write: collective hyperslab write of a %llu x %d dataset (io mode %d)\n",
                   any ? "not ok" : "ok", (unsigned long long)rows, COLS, (int)mode);
        }
        bad = any;
    } else {
        hid_t f = H5Fopen(file, H5F_ACC_RDONLY, fapl);
        if (f < 0) { fprintf(stderr, "rank %d: H5Fopen %s failed\n", rank, file); MPI_Abort(MPI_COMM_WORLD, 1); }
        hid_t dset = H5Dopen2(f, "/ckpt/step", H5P_DEFAULT);
        hid_t space = H5Dget_space(dset);
        hsize_t dims[2] = {0, 0};
        H5Sget_simple_extent_dims(space, dims, NULL);
        if (dims[0] != rows || dims[1] != COLS) bad = 1;
        int *buf = malloc(sizeof(int) * rows * COLS);
        if (!bad && H5Dread(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, dxpl, buf) < 0) bad = 1;
        long wrong = 0;
        for (hsize_t r = 0; !bad && r < rows; ++r)
            for (long c = 0; c < COLS; ++c)
                if (buf[r * COLS + c] != value((long)r, c)) wrong++;
        if (wrong) bad = 1;
        free(buf);
        H5Sclose(space);
        H5Dclose(dset);
        H5Fclose(f);
        int any = 0;
        MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (rank == 0)
            printf("%s - read: every rank read all %llu x %d elements back exactly\n",
                   any ? "not ok" : "ok", (unsigned long long)rows, COLS);
        if (wrong) fprintf(stderr, "rank %d: %ld elements differ\n", rank, wrong);
        bad = any;
    }
    H5Pclose(dxpl);
    H5Pclose(fapl);
    MPI_Finalize();
    return bad;
}
