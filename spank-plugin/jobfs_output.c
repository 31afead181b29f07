/* jobfs_output.c: a line for the user in their job's output file, from the epilog (a failed
 * stage-out, jobfs_prolog.c). Slurm 22.05 gives the epilog no output path, so slurmctld's job
 * record is asked for it (slurm_load_job, from the Slurm process that loaded the plugin, as in
 * jobfs_leftovers.c); slurm_get_job_stderr expands it as Slurm does (%j, %u, %x, %A, %a, a
 * relative path under the job's working directory, stdout when stderr is not separate, the
 * default slurm-ID.out). %N (the batch host) is left to us.
 *
 * The file is opened by a child with the job user's uid, gid and groups, never by root: the
 * path is the user's to choose, and may be a symbolic link to anything. It is only appended
 * to, never created: a file missing on this node (not on a shared file system here) is not
 * reachable and is left alone, and so is anything but a regular file. The child gets a few
 * seconds (an NFS server that hangs must not hold up the epilog).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

#include "jobfs_spank.h"

#define OUTPUT_TIMEOUT_S 10
#define MAX_GROUPS 256

/* `pattern` with each %N (the batch host) replaced; NULL if nothing to replace or no memory. */
static char *expand_batch_host(const char *pattern, const char *host)
{
	size_t n = 0, hl = strlen(host);
	const char *p;
	char *out, *o;

	for (p = pattern; *p; p++)
		if (p[0] == '%' && p[1] == '%')
			p++;
		else if (p[0] == '%' && p[1] == 'N')
			n++;
	if (!n || !(out = malloc(strlen(pattern) + n * hl + 1)))
		return NULL;
	for (p = pattern, o = out; *p; p++) {
		if (p[0] == '%' && p[1] == '%') {
			*o++ = *p++;
			*o++ = *p;
		} else if (p[0] == '%' && p[1] == 'N') {
			memcpy(o, host, hl);
			o += hl;
			p++;
		} else {
			*o++ = *p;
		}
	}
	*o = '\0';
	return out;
}

/* The job's stderr path (its stdout when both go to one file), expanded; -1 if there is none
 * (not a batch job: srun's output goes to the srun, which has ended) or slurmctld does not say. */
int jobfs_job_output_path(uint32_t id, char *path, size_t len)
{
	job_info_msg_t *msg = NULL;
	int rc = -1;
	uint32_t i;

	if (slurm_load_job(&msg, id, SHOW_ALL) != SLURM_SUCCESS)
		return -1;
	for (i = 0; i < msg->record_count; i++) {
		slurm_job_info_t *j = &msg->job_array[i];
		char **field, *orig, *expanded;

		if (j->job_id != id || !j->batch_flag)
			continue;
		/* The field slurm_get_job_stderr formats, with %N expanded first. */
		field = j->std_err ? &j->std_err : &j->std_out;
		orig = *field;
		expanded = orig && j->batch_host ? expand_batch_host(orig, j->batch_host) : NULL;
		if (expanded)
			*field = expanded;
		slurm_get_job_stderr(path, (int)len, j);
		*field = orig;
		free(expanded);
		rc = path[0] == '/' ? 0 : -1;
		break;
	}
	slurm_free_job_info_msg(msg);
	return rc;
}

/* In the child: become the user, append, exit 0 or with the errno of what failed. */
static void append_as_user(const char *path, const char *text, size_t len, uid_t uid, gid_t gid,
			   const gid_t *groups, int ngroups)
{
	struct stat st;
	int fd;

	if (setgroups(ngroups, groups) != 0 || setgid(gid) != 0 || setuid(uid) != 0)
		_exit(EPERM);
	/* O_NONBLOCK: a FIFO in the path's place must not block the open. */
	fd = open(path, O_WRONLY | O_APPEND | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		_exit(errno ? errno : EIO);
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		_exit(EINVAL);
	if (write(fd, text, len) != (ssize_t)len)
		_exit(EIO);
	_exit(close(fd) == 0 ? 0 : EIO);
}

int jobfs_append_job_output(const struct jobfs_job *job, const char *path, const char *text)
{
	gid_t groups[MAX_GROUPS];
	int ngroups = MAX_GROUPS, status = 0;
	pid_t pid;

	/* The groups are looked up before the fork: NSS is not async-signal-safe. */
	if (getgrouplist(job->user, job->gid, groups, &ngroups) < 0) {
		groups[0] = job->gid;
		ngroups = 1;
	}
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0)
		append_as_user(path, text, strlen(text), job->uid, job->gid, groups, ngroups);
	if (jobfs_wait_child(pid, OUTPUT_TIMEOUT_S, &status) != 0)
		return -1;
	if (!WIFEXITED(status)) {
		errno = EINTR;
		return -1;
	}
	errno = WEXITSTATUS(status);
	return errno ? -1 : 0;
}
