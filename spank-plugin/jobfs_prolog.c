/* jobfs_prolog.c: slurmd's job prolog and epilog (job_script context, root, once per job on
 * every node of the allocation). The prolog starts this node's jobfsd, waits until the group
 * is up, mounts jobfs-fuse for the job user and writes what the steps need into the job's
 * state directory; the epilog, after the last task of the job, unmounts, stops the daemon and
 * removes the node's job data. docs/slurm.md says why here and not in a step.
 *
 * A failure is not returned to slurmd: a failed prolog drains the node and requeues the job,
 * which is the admin's remedy for a broken node, not for a job whose file system did not come
 * up. It is written to the state directory instead, where every step of the job finds it and
 * fails with it, so the user reads it in the job's output (jobfs_slurmstepd.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jobfs_spank.h"

#define ENV_MAX 8

/* The environment of the programs we start: not slurmd's, only what they need. */
static void daemon_env(const struct jobfs_config *c, char *store, size_t store_len, char *envp[ENV_MAX])
{
	int n = 0;

	envp[n++] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
	envp[n++] = "LANG=C";
	if (c->ucx_tls[0]) {
		snprintf(store, store_len, "UCX_TLS=%s", c->ucx_tls);
		envp[n++] = store;
	}
	envp[n] = NULL;
}

static int job_identify(spank_t sp, struct jobfs_job *job, const struct jobfs_config *c, char *err, size_t errlen)
{
	struct passwd pw, *res = NULL;
	char pwbuf[4096];
	const char *env;
	char **hosts = NULL;
	size_t count = 0, i;
	int rc = -1;

	if (spank_get_item(sp, S_JOB_ID, &job->id) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_UID, &job->uid) != ESPANK_SUCCESS) {
		snprintf(err, errlen, "the job's id or user is not known to the prolog");
		goto out;
	}
	if (getpwuid_r(job->uid, &pw, pwbuf, sizeof(pwbuf), &res) != 0 || !res) {
		snprintf(err, errlen, "user %u is not known on node", (unsigned)job->uid);
		goto out;
	}
	snprintf(job->user, sizeof(job->user), "%s", pw.pw_name);
	if (spank_get_item(sp, S_JOB_GID, &job->gid) != ESPANK_SUCCESS) {
		env = getenv("SLURM_JOB_GID");
		job->gid = env ? (gid_t)strtoul(env, NULL, 10) : pw.pw_gid;
	}
	env = getenv("SLURMD_NODENAME");
	if (!env || !*env) {
		snprintf(err, errlen, "SLURMD_NODENAME is not set in the prolog");
		goto out;
	}
	snprintf(job->node, sizeof(job->node), "%s", env);
	env = getenv("SLURM_JOB_NODELIST");
	if (!env || !*env)
		env = getenv("SLURM_NODELIST");
	if (!env || !*env || strlen(env) >= sizeof(job->nodelist)) {
		snprintf(err, errlen, "the job's node list is not known to the prolog");
		goto out;
	}
	snprintf(job->nodelist, sizeof(job->nodelist), "%s", env);
	if (jobfs_hostlist_expand(job->nodelist, &hosts, &count) != 0) {
		snprintf(err, errlen, "cannot read the node list '%s'", job->nodelist);
		goto out;
	}
	job->node_count = (uint32_t)count;
	job->node_index = UINT32_MAX;
	for (i = 0; i < count; i++)
		if (!strcmp(hosts[i], job->node))
			job->node_index = (uint32_t)i;
	if (job->node_index == UINT32_MAX) {
		snprintf(err, errlen, "node %s is not in the job's node list %s", job->node, job->nodelist);
		goto out;
	}
	job->port = (uint16_t)(c->port_min + job->id % ((unsigned)c->port_max - c->port_min + 1));
	snprintf(job->job_dir, sizeof(job->job_dir), "%s/%" PRIu32, c->state_dir, job->id);
	snprintf(job->data_dir, sizeof(job->data_dir), "%s/job-%" PRIu32, c->storage_dir, job->id);
	snprintf(job->cluster_file, sizeof(job->cluster_file), "%s/cluster", job->job_dir);
	rc = 0;
out:
	jobfs_hostlist_free(hosts, count);
	return rc;
}

/* The descriptor clients read ($JOBFS_CLUSTER), the same on every node (client/cluster.h). */
static int write_descriptors(struct jobfs_job *job, const struct jobfs_config *c, char *daemons,
			     size_t daemons_len, char *err, size_t errlen)
{
	char secret[200], path[PATH_MAX + 16], *text = NULL;
	char **hosts = NULL;
	size_t count = 0, i, off = 0;
	int rc = -1;

	if (jobfs_secret_derive(c->key_file, job->id, job->uid, secret, sizeof(secret), err, errlen) != 0)
		goto out;
	if (jobfs_hostlist_expand(job->nodelist, &hosts, &count) != 0) {
		snprintf(err, errlen, "cannot read the node list '%s'", job->nodelist);
		goto out;
	}
	daemons[0] = '\0';
	for (i = 0; i < count; i++) {
		int n = snprintf(daemons + off, daemons_len - off, "%s%s:%u", i ? "," : "", hosts[i],
				 (unsigned)job->port);

		if (n < 0 || (size_t)n >= daemons_len - off) {
			snprintf(err, errlen, "the node list is too long");
			goto out;
		}
		off += n;
	}
	snprintf(path, sizeof(path), "%s/secret", job->job_dir);
	if (jobfs_write_file(path, secret, 0600, job->uid, job->gid) != 0) {
		snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
		goto out;
	}
	if (asprintf(&text, "# jobfs cluster descriptor (job %" PRIu32 ")\nversion = 1\ndaemons = %s\nsecret = %s\n",
		     job->id, daemons, secret) < 0)
		goto out;
	if (jobfs_write_file(job->cluster_file, text, 0600, job->uid, job->gid) != 0) {
		snprintf(err, errlen, "cannot write %s: %s", job->cluster_file, strerror(errno));
		goto out;
	}
	rc = 0;
out:
	free(text);
	memset(secret, 0, sizeof(secret));
	jobfs_hostlist_free(hosts, count);
	return rc;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* jobfsd prints "ready ..." once it is connected to every daemon of the group. 0 then;
 * otherwise -ETIMEDOUT, or -ECHILD with how it ended in `how`. */
static int wait_ready(int fd, pid_t pid, unsigned timeout_s, char *how, size_t how_len)
{
	char buf[256];
	size_t got = 0;
	double deadline = now_s() + timeout_s;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int left = (int)((deadline - now_s()) * 1000);
		ssize_t n;

		if (jobfs_child_exited(pid, how, how_len))
			return -ECHILD;
		if (left <= 0)
			return -ETIMEDOUT;
		if (poll(&p, 1, left > 100 ? 100 : left) < 0 && errno != EINTR)
			return -errno;
		if (!(p.revents & (POLLIN | POLLHUP)))
			continue;
		n = read(fd, buf + got, sizeof(buf) - 1 - got);
		if (n <= 0) { /* stdout closed: it is ending */
			usleep(100000);
			continue;
		}
		got += n;
		buf[got] = '\0';
		/* Whole lines only; UCX writes its own errors to stdout too ("...already in use"). */
		for (;;) {
			char *nl = strchr(buf, '\n');

			if (!nl)
				break;
			*nl = '\0';
			if (!strncmp(buf, "ready rank=", 11))
				return 0;
			memmove(buf, nl + 1, got - (nl + 1 - buf) + 1);
			got -= nl + 1 - buf;
		}
		if (got == sizeof(buf) - 1)
			got = 0;
	}
}

static int start_daemon(struct jobfs_job *job, const struct jobfs_config *c, const struct jobfs_request *req,
			const char *daemons, char *err, size_t errlen)
{
	char *envp[ENV_MAX], envstore[200], log[PATH_MAX + 16], secret_file[PATH_MAX + 16];
	char chunk[32], replicas[16], stripe[16], timeout_ms[24], port[8], rank[16], nice[8], how[64] = "";
	int out[2] = { -1, -1 }, log_fd = -1, rc = -1, w;

	daemon_env(c, envstore, sizeof(envstore), envp);
	snprintf(log, sizeof(log), "%s/jobfsd.log", job->job_dir);
	snprintf(secret_file, sizeof(secret_file), "%s/secret", job->job_dir);
	snprintf(chunk, sizeof(chunk), "%" PRIu64, req->chunk_size ? req->chunk_size : c->chunk_size);
	snprintf(replicas, sizeof(replicas), "%" PRIu32, req->replicas ? req->replicas : c->replicas);
	snprintf(stripe, sizeof(stripe), "%" PRIu32, req->stripe_set ? req->stripe_count : c->stripe_count);
	snprintf(timeout_ms, sizeof(timeout_ms), "%u", c->startup_timeout_s * 1000);
	snprintf(port, sizeof(port), "%u", (unsigned)job->port);
	snprintf(rank, sizeof(rank), "%" PRIu32, job->node_index);
	snprintf(nice, sizeof(nice), "%d", c->daemon_nice);
	char *argv[] = { (char *)c->jobfsd, "--data-dir", job->data_dir, "--daemons", (char *)daemons,
			 "--rank", rank, "--port", port, "--secret-file", secret_file,
			 "--chunk-size", chunk, "--replicas", replicas, "--stripe-count", stripe,
			 "--startup-timeout-ms", timeout_ms, "--log-level", (char *)c->log_level,
			 "--nice", nice, NULL };

	if (jobfs_remove_tree(job->data_dir) != 0 || jobfs_mkdir_p(c->storage_dir, 0755) != 0 ||
	    mkdir(job->data_dir, 0700) != 0 || chown(job->data_dir, job->uid, job->gid) != 0) {
		snprintf(err, errlen, "cannot create the data directory %s: %s", job->data_dir, strerror(errno));
		goto out;
	}
	log_fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (log_fd < 0 || pipe2(out, O_CLOEXEC) != 0) {
		snprintf(err, errlen, "cannot create %s: %s", log, strerror(errno));
		goto out;
	}
	if (jobfs_spawn_detached(argv, envp, job->uid, job->gid, c->daemon_nice, out[1], log_fd,
				 &job->jobfsd_pid) != 0) {
		snprintf(err, errlen, "cannot start %s: %s", c->jobfsd, strerror(errno));
		goto out;
	}
	close(out[1]);
	out[1] = -1;
	w = wait_ready(out[0], job->jobfsd_pid, c->startup_timeout_s + 10, how, sizeof(how));
	if (w != 0) {
		char tail[512];

		jobfs_log_tail(log, tail, sizeof(tail));
		snprintf(err, errlen, "jobfsd did not start (%s): %s",
			 w == -ETIMEDOUT ? "no answer in time" : w == -ECHILD ? how : strerror(-w), tail);
		goto out;
	}
	rc = 0;
out:
	if (out[0] >= 0)
		close(out[0]);
	if (out[1] >= 0)
		close(out[1]);
	if (log_fd >= 0)
		close(log_fd);
	return rc;
}

/* The mount point: mount_root/ID, made here; or the user's --jobfs-mount, which must be a
 * directory the user owns already (fusermount's rule), reached without symlinks. */
static int prepare_mount_point(struct jobfs_job *job, const struct jobfs_config *c, const struct jobfs_request *req,
			       char *err, size_t errlen)
{
	struct stat st;
	char real[PATH_MAX];

	if (!req->mount[0]) {
		snprintf(job->mount, sizeof(job->mount), "%s/%" PRIu32, c->mount_root, job->id);
		umount2(job->mount, MNT_DETACH); /* a mount left by a crashed node before */
		if (jobfs_mkdir_p(c->mount_root, 0755) != 0 || (mkdir(job->mount, 0700) != 0 && errno != EEXIST)) {
			snprintf(err, errlen, "cannot create the mount point %s: %s", job->mount, strerror(errno));
			return -1;
		}
		job->created_mount = true;
		return 0;
	}
	snprintf(job->mount, sizeof(job->mount), "%s", req->mount);
	if (!realpath(job->mount, real) || strcmp(real, job->mount) != 0 || lstat(job->mount, &st) != 0 ||
	    !S_ISDIR(st.st_mode) || st.st_uid != job->uid) {
		snprintf(err, errlen, "--jobfs-mount=%s: must be an existing directory of user %s on node %s, "
			 "named without symbolic links", job->mount, job->user, job->node);
		return -1;
	}
	return 0;
}

static int mount_fs(struct jobfs_job *job, const struct jobfs_config *c, char *err, size_t errlen)
{
	char *envp[ENV_MAX], envstore[200], log[PATH_MAX + 16], tail[512], options[80];
	/* jobfs-fuse runs as root: it sets its own nice value (jobfs-fuse(8), -o nice). */
	char *argv[] = { (char *)c->jobfs_fuse, "--cluster", job->cluster_file, job->mount, "-o", options, NULL };
	int log_fd, status = 0, rc = -1, run;

	snprintf(options, sizeof(options), "allow_other,default_permissions,nice=%d", c->daemon_nice);
	daemon_env(c, envstore, sizeof(envstore), envp);
	snprintf(log, sizeof(log), "%s/fuse.log", job->job_dir);
	log_fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (log_fd < 0) {
		snprintf(err, errlen, "cannot create %s: %s", log, strerror(errno));
		goto out;
	}
	run = jobfs_run(argv, envp, 0, 0, log_fd, log_fd, c->startup_timeout_s + 10, &status);
	if (run != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		char how[64];

		if (run != 0)
			snprintf(how, sizeof(how), "%s", errno == ETIMEDOUT ? "no answer in time" : strerror(errno));
		else if (WIFSIGNALED(status))
			snprintf(how, sizeof(how), "killed by signal %d", WTERMSIG(status));
		else
			snprintf(how, sizeof(how), "exit status %d", WEXITSTATUS(status));
		jobfs_log_tail(log, tail, sizeof(tail));
		snprintf(err, errlen, "jobfs-fuse could not mount %s (%s): %s", job->mount, how, tail);
		goto out;
	}
	job->fuse_pid = jobfs_find_process(c->jobfs_fuse, job->mount);
	/* The file system is the job user's: its root is theirs and closed to everyone else (the
	 * kernel checks with default_permissions; the daemons check every namespace call). */
	if (chown(job->mount, job->uid, job->gid) != 0 || chmod(job->mount, 0700) != 0) {
		snprintf(err, errlen, "cannot give %s to user %s: %s", job->mount, job->user, strerror(errno));
		goto out;
	}
	rc = 0;
out:
	if (log_fd >= 0)
		close(log_fd);
	return rc;
}

/* Undoes what the prolog did on this node; used by the epilog, by a failed prolog and for the
 * leftovers of a job whose epilog did not run here (jobfs_leftovers.c). The data stays when
 * the admin keeps it or when keep (a failed stage-out) says so. */
void jobfs_teardown(const struct jobfs_job *job, const struct jobfs_config *c, bool keep)
{
	pid_t pid;

	if (job->mount[0]) {
		if (umount2(job->mount, 0) != 0 && errno != EINVAL && errno != ENOENT) {
			slurm_info("spank_jobfs: job %" PRIu32 ": unmount %s: %s; detaching it", job->id, job->mount,
				   strerror(errno));
			umount2(job->mount, MNT_DETACH);
		}
		pid = job->fuse_pid > 0 && jobfs_pid_is(job->fuse_pid, c->jobfs_fuse) ? job->fuse_pid
										     : jobfs_find_process(c->jobfs_fuse, job->mount);
		if (pid > 0 && jobfs_stop_pid(pid, 5) != 0)
			slurm_error("spank_jobfs: job %" PRIu32 ": jobfs-fuse (pid %d) did not stop at once", job->id, (int)pid);
		if (job->created_mount && rmdir(job->mount) != 0 && errno != ENOENT)
			slurm_error("spank_jobfs: job %" PRIu32 ": cannot remove %s: %s", job->id, job->mount, strerror(errno));
	}
	pid = job->jobfsd_pid > 0 && jobfs_pid_is(job->jobfsd_pid, c->jobfsd) ? job->jobfsd_pid : -1;
	if (pid < 0 && job->data_dir[0])
		pid = jobfs_find_process(c->jobfsd, job->data_dir);
	if (pid > 0 && jobfs_stop_pid(pid, 10) != 0)
		slurm_error("spank_jobfs: job %" PRIu32 ": jobfsd (pid %d) needed SIGKILL", job->id, (int)pid);
	if (job->data_dir[0] && !c->keep_data && !keep && jobfs_remove_tree(job->data_dir) != 0)
		slurm_error("spank_jobfs: job %" PRIu32 ": cannot remove %s: %s", job->id, job->data_dir, strerror(errno));
}

int jobfs_prolog(spank_t sp)
{
	struct jobfs_context *ctx = &jobfs_ctx;
	struct jobfs_job *job = &ctx->job;
	char err[JOBFS_MSG_MAX] = "", msg[JOBFS_MSG_MAX + 300], daemons[16384];
	double t0 = now_s();
	int rc = 0, parse_rc;

	memset(job, 0, sizeof(*job));
	parse_rc = jobfs_request_from_job(sp, &ctx->request, err, sizeof(err));
	if (parse_rc == 0 && !ctx->request.enabled)
		goto out; /* no --jobfs: nothing to do, nothing paid */
	if (job_identify(sp, job, &ctx->config, parse_rc ? msg : err, parse_rc ? sizeof(msg) : sizeof(err)) != 0)
		goto fail_early;
	jobfs_leftovers_remove(&ctx->config, job->id); /* of jobs that ended while this node was down */
	if (jobfs_mkdir_p(ctx->config.state_dir, 0755) != 0 || jobfs_remove_tree(job->job_dir) != 0 ||
	    mkdir(job->job_dir, 0755) != 0) {
		snprintf(err, sizeof(err), "cannot create %s: %s", job->job_dir, strerror(errno));
		goto fail_early;
	}
	if (parse_rc != 0) /* checked at submission; only a changed plugin version gets here */
		goto fail;
	if (write_descriptors(job, &ctx->config, daemons, sizeof(daemons), err, sizeof(err)) != 0)
		goto fail;
	if (start_daemon(job, &ctx->config, &ctx->request, daemons, err, sizeof(err)) != 0)
		goto fail;
	jobfs_state_write(job, &ctx->request); /* from here the epilog can find the daemon */
	if (prepare_mount_point(job, &ctx->config, &ctx->request, err, sizeof(err)) != 0)
		goto fail;
	if (mount_fs(job, &ctx->config, err, sizeof(err)) != 0)
		goto fail;
	if (jobfs_state_write(job, &ctx->request) != 0) {
		snprintf(err, sizeof(err), "cannot write %s/info: %s", job->job_dir, strerror(errno));
		goto fail;
	}
	/* A failed stage-in leaves the file system up: the other nodes read this node's mark
	 * through it, and the epilog takes it down as usual. */
	if (jobfs_stage_in(ctx, err, sizeof(err)) != 0)
		goto fail_staged;
	slurm_info("spank_jobfs: job %" PRIu32 ": jobfs of %" PRIu32 " nodes mounted on %s (port %u) in %.2f s",
		   job->id, job->node_count, job->mount, (unsigned)job->port, now_s() - t0);
	goto out;
fail:
	jobfs_teardown(job, &ctx->config, false);
	jobfs_state_write(job, &ctx->request);
	/* fall through */
fail_staged:
fail_early:
	snprintf(msg, sizeof(msg), "jobfs: on node %s: %s", job->node[0] ? job->node : "?", err);
	slurm_error("spank_jobfs: job %" PRIu32 ": %s", job->id, msg);
	if (job->job_dir[0] && jobfs_state_set_error(job->job_dir, msg) != 0)
		rc = -1; /* nowhere to tell the steps: fail the prolog itself */
out:
	return rc;
}

/* "/a:s3://b/c;/d:s3://e/" as "/a -> s3://b/c, /d -> s3://e/" (an item that does not split is
 * shown as it is). */
static void stage_specs_text(const char *list, char *out, size_t len)
{
	char a[PATH_MAX + 8], b[PATH_MAX + 8], *copy = strdup(list), *save = NULL, *item;
	size_t o = 0;

	snprintf(out, len, "%s", list);
	if (!copy)
		return;
	out[0] = '\0';
	for (item = strtok_r(copy, ";", &save); item && o < len; item = strtok_r(NULL, ";", &save)) {
		if (jobfs_stage_split_spec(item, a, b, PATH_MAX) == 0)
			o += snprintf(out + o, len - o, "%s%s -> %s", o ? ", " : "", a, b);
		else
			o += snprintf(out + o, len - o, "%s%s", o ? ", " : "", item);
	}
	free(copy);
}

/* A failed stage-out: the data stays on every node (it is spread over all of them) and the
 * user is told where: in their job's output file when this node reaches it (appended as the
 * user, jobfs_output.c; every node adds its own line), in a note next to the data that they
 * own, and in slurmd's log. */
static void stage_out_failed(const struct jobfs_job *job, const struct jobfs_config *c, const char *specs,
			     const char *why)
{
	char note[PATH_MAX + 32], text[JOBFS_MSG_MAX * 2], out[PATH_MAX], line[JOBFS_MSG_MAX * 3], what[JOBFS_MSG_MAX];

	snprintf(note, sizeof(note), "%s.stage-out-failed", job->data_dir);
	snprintf(text, sizeof(text), "jobfs: job %" PRIu32 ": stage-out failed, nothing was thrown away: %s\n"
		 "jobfs: the job's data stays in %s on node %s (and the job's other nodes)%s\n", job->id, why,
		 job->data_dir, job->node, c->keep_data ? "" : " until an administrator removes it");
	slurm_error("spank_jobfs: job %" PRIu32 ": stage-out failed: %s; the job's data stays in %s on node %s",
		    job->id, why, job->data_dir, job->node);
	if (jobfs_write_file(note, text, 0600, job->uid, job->gid) != 0)
		slurm_error("spank_jobfs: job %" PRIu32 ": cannot write %s: %s", job->id, note, strerror(errno));
	if (jobfs_job_output_path(job->id, out, sizeof(out)) != 0) {
		slurm_info("spank_jobfs: job %" PRIu32 ": no output file of the job known (not a batch job, or "
			   "slurmctld did not say): the stage-out failure is not written there", job->id);
		return;
	}
	stage_specs_text(specs, what, sizeof(what));
	snprintf(line, sizeof(line), "spank_jobfs: stage-out of %s failed: %s; the job's data stays at %s on node %s "
		 "for a retry: it is kept until an administrator removes it, and %s there says the same\n",
		 what, why, job->data_dir, job->node, note);
	if (jobfs_append_job_output(job, out, line) != 0)
		slurm_info("spank_jobfs: job %" PRIu32 ": the stage-out failure is not in the job's output %s: %s "
			   "(not reachable from node %s as user %s)", job->id, out, strerror(errno), job->node, job->user);
}

int jobfs_epilog(spank_t sp)
{
	struct jobfs_context *ctx = &jobfs_ctx;
	struct jobfs_job *job = &ctx->job;
	char job_dir[PATH_MAX], err[JOBFS_MSG_MAX];
	uint32_t id = 0;
	struct stat st;

	if (spank_get_item(sp, S_JOB_ID, &id) != ESPANK_SUCCESS)
		return 0;
	snprintf(job_dir, sizeof(job_dir), "%s/%" PRIu32, ctx->config.state_dir, id);
	if (stat(job_dir, &st) != 0)
		return 0; /* no jobfs in this job: nothing to do, nothing paid */
	memset(job, 0, sizeof(*job));
	if (jobfs_state_read(job_dir, job, &ctx->request) == 0) {
		bool keep = false;

		if (jobfs_state_get_error(job_dir, err, sizeof(err)) == 0)
			jobfs_stage_out_skipped(ctx, err);
		else if (jobfs_stage_out(ctx, err, sizeof(err)) != 0) {
			keep = true;
			stage_out_failed(job, &ctx->config, ctx->request.stage_out, err);
		}
		jobfs_teardown(job, &ctx->config, keep);
	}
	if (jobfs_remove_tree(job_dir) != 0)
		slurm_error("spank_jobfs: job %" PRIu32 ": cannot remove %s: %s", id, job_dir, strerror(errno));
	return 0;
}
