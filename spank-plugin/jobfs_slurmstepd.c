/* jobfs_slurmstepd.c: a job step's slurmstepd (remote context), before its tasks start. The
 * prolog set the file system up on this node (or wrote why it could not): the step gives the
 * tasks its mount and descriptor, or fails with that reason, which Slurm prints in the job's
 * output ("slurmstepd: error: jobfs: on node n2: ..."). A job without jobfs costs one stat().
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "jobfs_spank.h"

#define STEP_EXTERN 0xfffffffcu /* SLURM_EXTERN_CONT: the job's extern step */

int jobfs_slurmstepd_user_init(spank_t sp)
{
	struct jobfs_context *ctx = &jobfs_ctx;
	struct jobfs_job job;
	struct jobfs_request req;
	char job_dir[PATH_MAX], msg[JOBFS_MSG_MAX];
	uint32_t id = 0, step = 0;
	struct stat st;
	int rc = 0;

	memset(&job, 0, sizeof(job));
	memset(&req, 0, sizeof(req));
	if (spank_get_item(sp, S_JOB_ID, &id) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS || step == STEP_EXTERN)
		goto out;
	snprintf(job_dir, sizeof(job_dir), "%s/%" PRIu32, ctx->config.state_dir, id);
	if (stat(job_dir, &st) != 0) {
		if (ctx->request.enabled) {
			slurm_error("jobfs: job %" PRIu32 " has no jobfs: --jobfs must be given when the job is "
				    "submitted (srun, sbatch or salloc), not only to a step of it", id);
			rc = -1;
		}
		goto out;
	}
	if (jobfs_state_get_error(job_dir, msg, sizeof(msg)) == 0) {
		slurm_error("%s", msg);
		rc = -1;
		goto out;
	}
	if (jobfs_state_read(job_dir, &job, &req) != 0 || !job.mount[0]) {
		slurm_error("jobfs: job %" PRIu32 ": the file system is not set up on this node (%s: %s)", id,
			    job_dir, strerror(errno));
		rc = -1;
		goto out;
	}
	if (spank_setenv(sp, "JOBFS_MOUNT", job.mount, 1) != ESPANK_SUCCESS ||
	    spank_setenv(sp, "JOBFS_CLUSTER", job.cluster_file, 1) != ESPANK_SUCCESS ||
	    (req.stage_in && spank_setenv(sp, "JOBFS_STAGE_IN", req.stage_in, 1) != ESPANK_SUCCESS) ||
	    (req.stage_out && spank_setenv(sp, "JOBFS_STAGE_OUT", req.stage_out, 1) != ESPANK_SUCCESS)) {
		slurm_error("jobfs: job %" PRIu32 ": cannot set the tasks' environment", id);
		rc = -1;
	}
out:
	free(req.stage_in);
	free(req.stage_out);
	return rc;
}
