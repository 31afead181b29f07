/* jobfs_srun.c: srun (local context), sbatch and salloc (allocator context). The options were
 * checked by their callbacks already; what is left is to hand the stage lists to the prolog
 * and epilog, which see a repeated option only once (its last value), and the submitter's
 * AWS_* credentials, which the prolog and epilog do not see otherwise (jobfs_stage.c).
 */
#include <stdio.h>

#include "jobfs_spank.h"

int jobfs_srun_init_post_opt(spank_t sp)
{
	const struct jobfs_request *req = &jobfs_ctx.request;
	spank_err_t e;
	int rc = 0;

	if (!req->enabled)
		goto out;
	if (req->stage_in) {
		e = spank_job_control_setenv(sp, "JOBFS_STAGE_IN", req->stage_in, 1);
		if (e != ESPANK_SUCCESS) {
			slurm_error("jobfs: cannot pass --jobfs-stage-in to the job: %s", spank_strerror(e));
			rc = -1;
			goto out;
		}
	}
	if (req->stage_out) {
		e = spank_job_control_setenv(sp, "JOBFS_STAGE_OUT", req->stage_out, 1);
		if (e != ESPANK_SUCCESS) {
			slurm_error("jobfs: cannot pass --jobfs-stage-out to the job: %s", spank_strerror(e));
			rc = -1;
			goto out;
		}
	}
	if ((req->stage_in || req->stage_out) && jobfs_stage_pass_credentials(sp) != 0)
		rc = -1;
out:
	return rc;
}
