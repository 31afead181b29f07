/* ad_jobfs.h: the jobfs ADIO driver of ROMIO (jobfs: file names), over the libjobfs C API.
 * Built into a renamed Open MPI io component (mca_io_romio_jobfs.so); see ad_jobfs(7). */
#ifndef AD_JOBFS_INCLUDE
#define AD_JOBFS_INCLUDE

#include "adio.h"

void ADIOI_JOBFS_Open(ADIO_File fd, int *error_code);
void ADIOI_JOBFS_OpenColl(ADIO_File fd, int rank, int access_mode, int *error_code);
void ADIOI_JOBFS_Close(ADIO_File fd, int *error_code);
void ADIOI_JOBFS_ReadContig(ADIO_File fd, void *buf, int count, MPI_Datatype datatype,
                            int file_ptr_type, ADIO_Offset offset, ADIO_Status *status,
                            int *error_code);
void ADIOI_JOBFS_WriteContig(ADIO_File fd, const void *buf, int count, MPI_Datatype datatype,
                             int file_ptr_type, ADIO_Offset offset, ADIO_Status *status,
                             int *error_code);
void ADIOI_JOBFS_Fcntl(ADIO_File fd, int flag, ADIO_Fcntl_t *fcntl_struct, int *error_code);
void ADIOI_JOBFS_SetInfo(ADIO_File fd, MPI_Info users_info, int *error_code);
void ADIOI_JOBFS_Flush(ADIO_File fd, int *error_code);
void ADIOI_JOBFS_Resize(ADIO_File fd, ADIO_Offset size, int *error_code);
void ADIOI_JOBFS_Delete(const char *filename, int *error_code);
int ADIOI_JOBFS_Feature(ADIO_File fd, int flag);
void ADIOI_JOBFS_ReadStridedColl(ADIO_File fd, void *buf, int count, MPI_Datatype datatype,
                                 int file_ptr_type, ADIO_Offset offset, ADIO_Status *status,
                                 int *error_code);
void ADIOI_JOBFS_IreadStridedColl(ADIO_File fd, void *buf, int count, MPI_Datatype datatype,
                                  int file_ptr_type, ADIO_Offset offset, MPI_Request *request,
                                  int *error_code);
void ADIOI_JOBFS_IwriteStridedColl(ADIO_File fd, const void *buf, int count,
                                   MPI_Datatype datatype, int file_ptr_type, ADIO_Offset offset,
                                   MPI_Request *request, int *error_code);

/* ad_jobfs_shared.c: shared file pointer and atomic mode over an MPI window on rank 0 */
void ADIOI_JOBFS_Shared_create(ADIO_File fd, int opened_here);
void ADIOI_JOBFS_Shared_free(ADIO_File fd);
int ADIOI_JOBFS_Shared_available(ADIO_File fd);
void ADIOI_JOBFS_Get_shared_fp(ADIO_File fd, ADIO_Offset incr, ADIO_Offset *shared_fp,
                               int *error_code);
void ADIOI_JOBFS_Set_shared_fp(ADIO_File fd, ADIO_Offset offset, int *error_code);
void ADIOI_JOBFS_Atomic_begin(ADIO_File fd);
void ADIOI_JOBFS_Atomic_end(ADIO_File fd);
void ADIOI_JOBFS_ReadStrided(ADIO_File fd, void *buf, int count, MPI_Datatype datatype,
                             int file_ptr_type, ADIO_Offset offset, ADIO_Status *status,
                             int *error_code);
void ADIOI_JOBFS_WriteStrided(ADIO_File fd, const void *buf, int count, MPI_Datatype datatype,
                              int file_ptr_type, ADIO_Offset offset, ADIO_Status *status,
                              int *error_code);

#endif
