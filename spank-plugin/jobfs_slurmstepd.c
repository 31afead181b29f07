/* jobfs_slurmstepd.c: a job step's slurmstepd (remote context), before its tasks start. The
 * prolog set the file system up on this node (or wrote why it could not): the step gives the
 * tasks its mount and descriptor, or fails with that reason, which Slurm prints in the job's
 * output ("slurmstepd: error: jobfs: on node n2: ..."). A job without jobfs costs one stat().
 *
 * Where a step fails: an srun step in user_init (no task is started). The batch step fails in
 * its task instead (task_init, before the script is executed): slurmctld drains the node of a
 * batch step whose launch failed ("batch job complete failure"), and a user's wrong S3 secret
 * must not take a node out of service; a task that exits 1 only fails the job.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "jobfs_spank.h"

#define STEP_EXTERN 0xfffffffcu /* SLURM_EXTERN_CONT: the job's extern step */
#define STEP_BATCH 0xfffffffbu  /* SLURM_BATCH_SCRIPT: the batch script's step */

/* The step cannot have jobfs: now (srun steps), or in its task (the batch step). */
static int step_fail(struct jobfs_context *ctx, uint32_t step, const char *msg)
{
	if (step == STEP_BATCH) {
		snprintf(ctx->task_error, sizeof(ctx->task_error), "%s", msg);
		return 0;
	}
	slurm_error("%s", msg);
	return -1;
}

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
			snprintf(msg, sizeof(msg), "jobfs: job %" PRIu32 " has no jobfs: --jobfs must be given when the "
				 "job is submitted (srun, sbatch or salloc), not only to a step of it", id);
			rc = step_fail(ctx, step, msg);
		}
		goto out;
	}
	if (jobfs_state_get_error(job_dir, msg, sizeof(msg)) == 0) {
		rc = step_fail(ctx, step, msg);
		goto out;
	}
	if (jobfs_state_read(job_dir, &job, &req) != 0 || !job.mount[0]) {
		snprintf(msg, sizeof(msg), "jobfs: job %" PRIu32 ": the file system is not set up on this node (%s: %s)",
			 id, job_dir, strerror(errno));
		rc = step_fail(ctx, step, msg);
		goto out;
	}
	if (spank_setenv(sp, "JOBFS_MOUNT", job.mount, 1) != ESPANK_SUCCESS ||
	    spank_setenv(sp, "JOBFS_CLUSTER", job.cluster_file, 1) != ESPANK_SUCCESS ||
	    (req.stage_in && spank_setenv(sp, "JOBFS_STAGE_IN", req.stage_in, 1) != ESPANK_SUCCESS) ||
	    (req.stage_out && spank_setenv(sp, "JOBFS_STAGE_OUT", req.stage_out, 1) != ESPANK_SUCCESS)) {
		snprintf(msg, sizeof(msg), "jobfs: job %" PRIu32 ": cannot set the tasks' environment", id);
		rc = step_fail(ctx, step, msg);
	}
out:
	free(req.stage_in);
	free(req.stage_out);
	return rc;
}

/* The batch step's task, before the script is executed: the failure user_init kept. */
int jobfs_slurmstepd_task_init(spank_t sp)
{
	(void)sp;
	if (!jobfs_ctx.task_error[0])
		return 0;
	slurm_error("%s", jobfs_ctx.task_error);
	return -1;
}
