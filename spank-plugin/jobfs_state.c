/* jobfs_state.c: a job's directory on a node, state_dir/ID, written by the prolog and read by
 * the job's steps and its epilog (separate processes, so the state lives in files):
 *
 *   info        key=value lines: the job, its daemon, its mount (root's, mode 0644)
 *   error       the reason the file system could not be set up (the steps fail with it)
 *   cluster     the cluster descriptor, $JOBFS_CLUSTER (the job user's, mode 0600: the secret)
 *   secret      the job secret for jobfsd (the job user's, mode 0600)
 *   jobfsd.log, fuse.log
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jobfs_spank.h"

int jobfs_write_file(const char *path, const char *text, mode_t mode, uid_t uid, gid_t gid)
{
	char tmp[PATH_MAX + 8];
	size_t len = strlen(text);
	int fd, rc = -1;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return -1;
	if (fchown(fd, uid, gid) != 0 || fchmod(fd, mode) != 0 || write(fd, text, len) != (ssize_t)len ||
	    fsync(fd) != 0)
		goto out;
	rc = 0;
out:
	close(fd);
	if (rc == 0 && rename(tmp, path) != 0)
		rc = -1;
	if (rc != 0) {
		int e = errno;

		unlink(tmp);
		errno = e;
	}
	return rc;
}

int jobfs_read_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n, total = 0;

	if (fd < 0)
		return -1;
	while ((size_t)total + 1 < len && (n = read(fd, buf + total, len - 1 - total)) > 0)
		total += n;
	buf[total] = '\0';
	close(fd);
	return (int)total;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP || flag == FTW_D)
		return rmdir(path) != 0 && errno != ENOENT ? -1 : 0;
	return unlink(path) != 0 && errno != ENOENT ? -1 : 0;
}

/* rm -rf, not crossing into other file systems (a mount left inside stays untouched). */
int jobfs_remove_tree(const char *path)
{
	struct stat st;

	if (lstat(path, &st) != 0)
		return errno == ENOENT ? 0 : -1;
	return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

int jobfs_mkdir_p(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	char *p;

	if (strlen(path) >= sizeof(buf)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(buf, path);
	for (p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) != 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(buf, mode) != 0 && errno != EEXIST)
		return -1;
	return 0;
}

int jobfs_state_write(const struct jobfs_job *job, const struct jobfs_request *req)
{
	char path[PATH_MAX + 16];
	char *text = NULL;
	int rc;

	if (asprintf(&text,
		     "id=%" PRIu32 "\nuid=%u\ngid=%u\nuser=%s\nnode=%s\nnodelist=%s\nnode_index=%" PRIu32
		     "\nnode_count=%" PRIu32 "\nport=%u\ndata_dir=%s\nmount=%s\ncluster_file=%s\ncreated_mount=%d\n"
		     "jobfsd_pid=%d\nfuse_pid=%d\nstage_in=%s\nstage_out=%s\n",
		     job->id, (unsigned)job->uid, (unsigned)job->gid, job->user, job->node, job->nodelist,
		     job->node_index, job->node_count, (unsigned)job->port, job->data_dir, job->mount, job->cluster_file,
		     job->created_mount ? 1 : 0, (int)job->jobfsd_pid, (int)job->fuse_pid,
		     req->stage_in ? req->stage_in : "", req->stage_out ? req->stage_out : "") < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/info", job->job_dir);
	rc = jobfs_write_file(path, text, 0644, 0, 0);
	free(text);
	return rc;
}

static void copy_value(char *dst, size_t len, const char *v)
{
	snprintf(dst, len, "%s", v);
}

int jobfs_state_read(const char *job_dir, struct jobfs_job *job, struct jobfs_request *req)
{
	char path[PATH_MAX + 16];
	char *buf = malloc(65536), *line, *save = NULL;
	int rc = -1;

	if (!buf)
		return -1;
	snprintf(path, sizeof(path), "%s/info", job_dir);
	if (jobfs_read_file(path, buf, 65536) < 0)
		goto out;
	snprintf(job->job_dir, sizeof(job->job_dir), "%s", job_dir);
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *v = strchr(line, '=');

		if (!v)
			continue;
		*v++ = '\0';
		if (!strcmp(line, "id")) job->id = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(line, "uid")) job->uid = (uid_t)strtoul(v, NULL, 10);
		else if (!strcmp(line, "gid")) job->gid = (gid_t)strtoul(v, NULL, 10);
		else if (!strcmp(line, "user")) copy_value(job->user, sizeof(job->user), v);
		else if (!strcmp(line, "node")) copy_value(job->node, sizeof(job->node), v);
		else if (!strcmp(line, "nodelist")) copy_value(job->nodelist, sizeof(job->nodelist), v);
		else if (!strcmp(line, "node_index")) job->node_index = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(line, "node_count")) job->node_count = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(line, "port")) job->port = (uint16_t)strtoul(v, NULL, 10);
		else if (!strcmp(line, "data_dir")) copy_value(job->data_dir, sizeof(job->data_dir), v);
		else if (!strcmp(line, "mount")) copy_value(job->mount, sizeof(job->mount), v);
		else if (!strcmp(line, "cluster_file")) copy_value(job->cluster_file, sizeof(job->cluster_file), v);
		else if (!strcmp(line, "created_mount")) job->created_mount = atoi(v) != 0;
		else if (!strcmp(line, "jobfsd_pid")) job->jobfsd_pid = (pid_t)atoi(v);
		else if (!strcmp(line, "fuse_pid")) job->fuse_pid = (pid_t)atoi(v);
		else if (!strcmp(line, "stage_in") && *v && req) req->stage_in = strdup(v);
		else if (!strcmp(line, "stage_out") && *v && req) req->stage_out = strdup(v);
	}
	rc = 0;
out:
	free(buf);
	return rc;
}

int jobfs_state_set_error(const char *job_dir, const char *msg)
{
	char path[PATH_MAX + 16];
	char text[JOBFS_MSG_MAX + 2];

	snprintf(path, sizeof(path), "%s/error", job_dir);
	snprintf(text, sizeof(text), "%s\n", msg);
	return jobfs_write_file(path, text, 0644, 0, 0);
}

int jobfs_state_get_error(const char *job_dir, char *msg, size_t len)
{
	char path[PATH_MAX + 16];
	int n;

	snprintf(path, sizeof(path), "%s/error", job_dir);
	n = jobfs_read_file(path, msg, len);
	if (n <= 0)
		return -1;
	while (n > 0 && msg[n - 1] == '\n')
		msg[--n] = '\0';
	return 0;
}
