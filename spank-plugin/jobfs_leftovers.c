/* jobfs_leftovers.c: what a job left on a node whose epilog never ran there. A node that
 * crashed (or whose slurmd died) while a job ran is marked down, Slurm ends the job with
 * NODE_FAIL and runs the epilog on the other nodes only; the crashed node's disk keeps the
 * job's data, its state directory and its mount point. The next jobfs prolog on that node
 * removes them, for every job that slurmctld says is over: unknown to it (purged), or ended
 * and no longer completing. A job that runs, is pending (a requeued job's own prolog starts
 * afresh) or completes keeps everything, and so does every job when slurmctld does not answer.
 *
 * Runs in the job prolog (jobfs_prolog.c), as root. slurm_load_job comes from the Slurm
 * process that loaded the plugin (libslurmfull), as spank_* do.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

#include "jobfs_spank.h"

/* Whether slurmctld says job `id` is over (its state directory here is a leftover). */
static bool job_is_over(uint32_t id)
{
	job_info_msg_t *msg = NULL;
	bool over = true;
	uint32_t i;

	if (slurm_load_job(&msg, id, SHOW_ALL) != SLURM_SUCCESS) {
		over = slurm_get_errno() == ESLURM_INVALID_JOB_ID;
		if (!over)
			slurm_info("spank_jobfs: cannot ask slurmctld about job %" PRIu32 " (%s); its files on this "
				   "node stay", id, slurm_strerror(slurm_get_errno()));
		goto out;
	}
	for (i = 0; i < msg->record_count; i++) {
		const slurm_job_info_t *j = &msg->job_array[i];

		if (j->job_id == id && ((j->job_state & JOB_COMPLETING) ||
					(j->job_state & JOB_STATE_BASE) < JOB_COMPLETE))
			over = false;
	}
out:
	slurm_free_job_info_msg(msg);
	return over;
}

/* Takes down what job `id` left: its processes if any survived (found by their arguments only:
 * the pids recorded may belong to other processes by now), the mount, the data (unless the
 * admin keeps it or a failed stage-out's note says it must stay) and the state directory. */
static void leftover_remove(const struct jobfs_config *c, uint32_t id)
{
	struct jobfs_job job;
	struct jobfs_request req;
	char job_dir[PATH_MAX], note[PATH_MAX + 32];
	struct stat st;
	bool keep;

	memset(&job, 0, sizeof(job));
	memset(&req, 0, sizeof(req));
	snprintf(job_dir, sizeof(job_dir), "%s/%" PRIu32, c->state_dir, id);
	if (jobfs_state_read(job_dir, &job, &req) != 0) { /* it ended before its daemon started */
		job.id = id;
		snprintf(job.data_dir, sizeof(job.data_dir), "%s/job-%" PRIu32, c->storage_dir, id);
		snprintf(job.mount, sizeof(job.mount), "%s/%" PRIu32, c->mount_root, id);
		job.created_mount = stat(job.mount, &st) == 0;
		if (!job.created_mount)
			job.mount[0] = '\0';
	}
	snprintf(job.cluster_file, sizeof(job.cluster_file), "%s/cluster", job_dir);
	job.jobfsd_pid = 0;
	job.fuse_pid = jobfs_find_process(c->jobfs_fuse, job.cluster_file);
	if (!job.created_mount && job.fuse_pid <= 0)
		job.mount[0] = '\0'; /* the user's directory: another job may be mounted there now */
	snprintf(note, sizeof(note), "%s.stage-out-failed", job.data_dir);
	keep = access(note, F_OK) == 0;
	jobfs_teardown(&job, c, keep);
	if (jobfs_remove_tree(job_dir) != 0)
		slurm_error("spank_jobfs: job %" PRIu32 ": cannot remove %s", id, job_dir);
	slurm_info("spank_jobfs: job %" PRIu32 " is over, but its epilog did not run on this node (did the node "
		   "fail?): removed what it left here%s", id,
		   c->keep_data ? " but its data (keep_data)" : keep ? " but its data (its stage-out failed)" : "");
	free(req.stage_in);
	free(req.stage_out);
}

void jobfs_leftovers_remove(const struct jobfs_config *c, uint32_t current)
{
	DIR *d = opendir(c->state_dir);
	struct dirent *e;

	while (d && (e = readdir(d))) {
		char *end;
		unsigned long id = strtoul(e->d_name, &end, 10);

		if (end == e->d_name || *end || id == 0 || id > UINT32_MAX || id == current)
			continue;
		if (job_is_over((uint32_t)id))
			leftover_remove(c, (uint32_t)id);
	}
	if (d)
		closedir(d);
}
