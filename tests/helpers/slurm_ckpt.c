/* slurm_ckpt.c: the MPI job of tests/slurm_test.sh: a collective checkpoint through ROMIO (a jobfs:
 * name selects ad_jobfs); each rank writes its 1 MiB block (byte i = (rank * 7 + i) % 251) with one
 * MPI_File_write_at_all. The test reads the file back through the FUSE mount of another node. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
	int rank, size, rc;
	const int block = 1 << 20;
	MPI_File fh;
	char *buf = malloc(block);
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (int i = 0; i < block; i++)
		buf[i] = (char)((rank * 7 + i) % 251);
	rc = MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
	if (rc == MPI_SUCCESS)
		rc = MPI_File_write_at_all(fh, (MPI_Offset)rank * block, buf, block, MPI_BYTE, MPI_STATUS_IGNORE);
	if (rc == MPI_SUCCESS)
		rc = MPI_File_close(&fh);
	if (rc != MPI_SUCCESS) {
		char msg[MPI_MAX_ERROR_STRING]; int len;
		MPI_Error_string(rc, msg, &len);
		fprintf(stderr, "rank %d: %s\n", rank, msg);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	printf("rank %d of %d wrote its block\n", rank, size);
	MPI_Finalize();
	return 0;
}
