/* spank_jobfs.c: the SPANK entry points of spank_jobfs.so. Each one hands over to the file of
 * the Slurm context it runs in (see jobfs_spank.h); nothing else happens here.
 *
 *   context      process                 what spank_jobfs does
 *   local        srun                    checks --jobfs* options, passes stage lists to the prolog
 *   allocator    sbatch, salloc          the same
 *   job_script   slurmd's prolog/epilog  starts / stops jobfsd and the mount on this node (root)
 *   remote       a step's slurmstepd     gives the tasks JOBFS_MOUNT, JOBFS_CLUSTER; fails the
 *                                        step (the batch step: its task) with the prolog's error
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobfs_spank.h"

SPANK_PLUGIN(jobfs, 1)

struct jobfs_context jobfs_ctx;

/* plugstack.conf is read in every context: each one is a process of its own. */
static int config_load(int ac, char **av)
{
	char err[JOBFS_MSG_MAX];
	int rc = 0;

	if (jobfs_ctx.config_ok)
		goto out;
	if (jobfs_config_parse(&jobfs_ctx.config, ac, av, err, sizeof(err)) != 0) {
		slurm_error("spank_jobfs: plugstack.conf: %s", err);
		rc = -1;
		goto out;
	}
	jobfs_ctx.config_ok = true;
out:
	return rc;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	if (config_load(ac, av) != 0)
		return -1;
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
	case S_CTX_REMOTE:
	case S_CTX_JOB_SCRIPT:
		return jobfs_options_register(sp);
	default:
		return 0;
	}
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
		return jobfs_srun_init_post_opt(sp);
	default:
		return 0;
	}
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_REMOTE)
		return 0;
	return jobfs_slurmstepd_user_init(sp);
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_REMOTE)
		return 0;
	return jobfs_slurmstepd_task_init(sp);
}

int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	if (config_load(ac, av) != 0)
		return -1;
	return jobfs_prolog(sp);
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	if (config_load(ac, av) != 0)
		return -1;
	return jobfs_epilog(sp);
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	(void)sp;
	(void)ac;
	(void)av;
	free(jobfs_ctx.request.stage_in);
	free(jobfs_ctx.request.stage_out);
	jobfs_ctx.request.stage_in = jobfs_ctx.request.stage_out = NULL;
	return 0;
}
