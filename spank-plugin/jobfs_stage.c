/* jobfs_stage.c: --jobfs-stage-in / --jobfs-stage-out, run by the job prolog and epilog on
 * every node with `jobfs stage-in|stage-out --rank NODE --ranks NODES` (each node copies its
 * share), as the job user, never as root: the program runs with the user's uid, gid, HOME
 * (their ~/.aws) and the AWS_* variables of the submitting environment (srun/sbatch/salloc
 * pass them as job control variables, jobfs_stage_pass_credentials). docs/slurm.md says why.
 *
 * The nodes' prologs (and epilogs) are not synchronised with each other, so each node writes
 * how its share ended into the job's file system (/.jobfs-stage/in.NODE or out.NODE, a
 * symbolic link to "ok" or the error) and waits until every node has written one:
 *  - stage-in: a node whose share failed fails the job on every node (each prolog records the
 *    first failure it reads, and every step, the batch step included, fails with it before
 *    any user code runs);
 *  - stage-out: no epilog stops its daemon while another node still reads chunks or marks
 *    from it; if any share failed, every node keeps its data (the chunks of a file
 *    are spread over all).
 * Only jobfs is shared between the nodes (their /tmp may be private), and the markers go
 * through the node's FUSE mount, which does not cache missing names (jobfs_fuse.cc).
 * A node that crashed never marks (Slurm runs no epilog there): while a mark is missing, the
 * waiting node asks slurmctld now and then whether that node is down, and counts its share
 * as failed if so (slurm_load_node_single comes from the Slurm process that loaded the
 * plugin, as in jobfs_leftovers.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pwd.h>
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

#define MARK_DIR ".jobfs-stage"

/* What the S3 client reads from its environment (client/stage/s3_config.cc). */
static const char *const aws_vars[] = {
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
	"AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_CA_BUNDLE",
	"AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", NULL,
};

/* srun, sbatch, salloc: the prolog and epilog do not see the job's environment, only job
 * control variables (as SPANK_JOBFS_AWS_...). Only jobs that stage pay for this. */
int jobfs_stage_pass_credentials(spank_t sp)
{
	char name[64];
	const char *v;
	int i;

	for (i = 0; aws_vars[i]; i++) {
		v = getenv(aws_vars[i]);
		if (!v)
			continue;
		snprintf(name, sizeof(name), "JOBFS_%s", aws_vars[i]);
		if (spank_job_control_setenv(sp, name, v, 1) != ESPANK_SUCCESS) {
			slurm_error("jobfs: cannot pass %s to the job's staging", aws_vars[i]);
			return -1;
		}
	}
	return 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The environment of `jobfs stage-*`: the user's identity and credentials, the job's
 * descriptor; nothing of slurmd's (root's) environment. Strings in store (freed by the caller). */
static int stage_env(const struct jobfs_context *ctx, char *envp[32], char *store[32])
{
	struct passwd pw, *res = NULL;
	char pwbuf[4096], name[64];
	const char *v;
	int n = 0, i;

#define ADD(...) do { if (asprintf(&store[n], __VA_ARGS__) < 0) return -1; envp[n] = store[n]; n++; } while (0)
	if (getpwuid_r(ctx->job.uid, &pw, pwbuf, sizeof(pwbuf), &res) != 0 || !res)
		return -1;
	ADD("PATH=/usr/local/bin:/usr/bin:/bin");
	ADD("LANG=C.UTF-8");
	ADD("HOME=%s", pw.pw_dir);
	ADD("USER=%s", pw.pw_name);
	ADD("LOGNAME=%s", pw.pw_name);
	ADD("JOBFS_CLUSTER=%s", ctx->job.cluster_file);
	if (ctx->config.ucx_tls[0])
		ADD("UCX_TLS=%s", ctx->config.ucx_tls);
	for (i = 0; aws_vars[i]; i++) {
		snprintf(name, sizeof(name), "SPANK_JOBFS_%s", aws_vars[i]);
		v = getenv(name);
		if (v)
			ADD("%s=%s", aws_vars[i], v);
	}
#undef ADD
	envp[n] = NULL;
	store[n] = NULL;
	return 0;
}

/* The first line of the copy's output that says what failed ("jobfs: stage-in of s3://b/k
 * failed: 403 SignatureDoesNotMatch"), else its last line. */
static void failure_line(const char *log, char *out, size_t len)
{
	FILE *f = fopen(log, "r");
	char line[1024];

	if (f) {
		while (fgets(line, sizeof(line), f)) {
			line[strcspn(line, "\n")] = '\0';
			if (strstr(line, "failed") || strstr(line, "error")) {
				snprintf(out, len, "%s", line);
				fclose(f);
				return;
			}
		}
		fclose(f);
	}
	jobfs_log_tail(log, out, len);
}

/* SRC:DST split at the first ':' that does not start "://" (jobfs_stage_spec_check). */
int jobfs_stage_split_spec(const char *spec, char *src, char *dst, size_t len)
{
	const char *p;

	for (p = spec; *p; p++)
		if (*p == ':' && strncmp(p, "://", 3) != 0)
			break;
	if (!*p || (size_t)(p - spec) >= len || strlen(p + 1) >= len)
		return -1;
	snprintf(src, len, "%.*s", (int)(p - spec), spec);
	snprintf(dst, len, "%s", p + 1);
	return 0;
}

/* Runs this node's share of every SRC:DST of `list` as the job user. */
static int run_share(const struct jobfs_context *ctx, bool in, const char *list, char *err, size_t errlen)
{
	const struct jobfs_job *job = &ctx->job;
	const char *verb = in ? "stage-in" : "stage-out";
	char *envp[32], *store[32] = { NULL }, log[PATH_MAX + 32], rank[16], ranks[16];
	char *copy = strdup(list), *save = NULL, *item;
	int rc = -1, i, log_fd = -1;

	if (!copy || stage_env(ctx, envp, store) != 0) {
		snprintf(err, errlen, "%s: cannot prepare the environment of user %s", verb, job->user);
		goto out;
	}
	snprintf(log, sizeof(log), "%s/%s.log", job->job_dir, verb);
	snprintf(rank, sizeof(rank), "%" PRIu32, job->node_index);
	snprintf(ranks, sizeof(ranks), "%" PRIu32, job->node_count);
	for (item = strtok_r(copy, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
		char a[PATH_MAX + 8], b[PATH_MAX + 8], jpath[PATH_MAX + 16], line[JOBFS_MSG_MAX / 2];
		int status = 0, r;

		if (jobfs_stage_split_spec(item, a, b, PATH_MAX) != 0) {
			snprintf(err, errlen, "%s: bad item '%s'", verb, item);
			goto out;
		}
		/* The jobfs side goes through libjobfs ($JOBFS_CLUSTER), not the FUSE mount. */
		snprintf(jpath, sizeof(jpath), "jobfs:%s", in ? b : a);
		char *argv[] = { (char *)ctx->config.jobfs, (char *)verb, "--rank", rank, "--ranks", ranks,
				 "--progress", "lines", "--progress-interval", "30",
				 in ? a : jpath, in ? jpath : b, NULL };

		log_fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (log_fd < 0) {
			snprintf(err, errlen, "%s: cannot create %s: %s", verb, log, strerror(errno));
			goto out;
		}
		r = jobfs_run(argv, envp, job->uid, job->gid, log_fd, log_fd, ctx->config.stage_timeout_s, &status);
		close(log_fd);
		log_fd = -1;
		if (r != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			if (r != 0)
				snprintf(line, sizeof(line), "%s", errno == ETIMEDOUT ? "not done within stage_timeout" : strerror(errno));
			else if (WIFSIGNALED(status))
				snprintf(line, sizeof(line), "killed by signal %d", WTERMSIG(status));
			else
				failure_line(log, line, sizeof(line));
			snprintf(err, errlen, "%s %s -> %s failed on node %s: %s", verb, a, b, job->node, line);
			goto out;
		}
	}
	rc = 0;
out:
	if (log_fd >= 0)
		close(log_fd);
	for (i = 0; store[i]; i++)
		free(store[i]);
	free(copy);
	return rc;
}

/* This node's outcome, for the other nodes: mount/.jobfs-stage/KIND.NODE, a symbolic link whose
 * target is the text. One metadata operation, on the daemon that holds .jobfs-stage, makes it
 * whole (a reader never sees half of it), and no file data is written: a regular file's bytes
 * may belong on a node of the job that has crashed, and such a write waits for the client's
 * timeout and fails (seen in slurm_test.sh, "node failure"), so the others would wait for a
 * mark that never comes from a node that is up. */
static int mark(const struct jobfs_job *job, const char *kind, const char *text)
{
	char dir[PATH_MAX + 32], path[PATH_MAX + 64];
	struct stat here, parent;

	/* Only into the mounted file system, never into the directory under it (a user's
	 * --jobfs-mount directory after a failed prolog unmounted it). */
	snprintf(dir, sizeof(dir), "%s/..", job->mount);
	if (stat(job->mount, &here) != 0 || stat(dir, &parent) != 0)
		return -1;
	if (here.st_dev == parent.st_dev) {
		errno = ENOTCONN;
		return -1;
	}

	snprintf(dir, sizeof(dir), "%s/" MARK_DIR, job->mount);
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		return -1;
	if (chown(dir, job->uid, job->gid) != 0)
		return -1;
	snprintf(path, sizeof(path), "%s/%s.%" PRIu32, dir, kind, job->node_index);
	if (symlink(text, path) != 0 && (errno != EEXIST || unlink(path) != 0 || symlink(text, path) != 0))
		return -1;
	return lchown(path, job->uid, job->gid); /* the file system is the job user's */
}

/* A node's mark: its text in buf; -1 with errno ENOENT while the node has not written it. */
static int read_mark(const char *path, char *buf, size_t len)
{
	ssize_t n = readlink(path, buf, len - 1);

	if (n < 0)
		return -1;
	buf[n] = '\0';
	return 0;
}

/* How often a node waiting for a peer's mark asks slurmctld whether that peer is down: one
 * small RPC per waiting node, not one per 200 ms poll (slurmctld serves the whole cluster). */
#define NODE_CHECK_S 5

/* Whether slurmctld says `node` is down, i.e. will never mark: its epilog (or prolog) does not
 * run. Only the base state DOWN counts: a crashed node is marked DOWN (SlurmdTimeout, or the
 * admin), which ends the job with NODE_FAIL. NO_RESPOND alone is a node slurmctld has not
 * heard from lately, which may still answer and mark; FAIL and DRAIN only refuse new work,
 * the node's epilog runs as usual. A node slurmctld does not answer about is not down (said
 * once in the log, `told`, as the wait goes on). */
static bool node_down(const struct jobfs_job *job, const char *node, bool *told)
{
	node_info_msg_t *msg = NULL;
	bool down = false;
	uint32_t i;

	if (slurm_load_node_single(&msg, (char *)node, SHOW_ALL) != SLURM_SUCCESS) {
		if (!*told)
			slurm_info("spank_jobfs: job %" PRIu32 ": cannot ask slurmctld whether node %s is down (%s); "
				   "waiting for its mark", job->id, node, slurm_strerror(slurm_get_errno()));
		*told = true;
		return false;
	}
	for (i = 0; i < msg->record_count; i++)
		if (msg->node_array[i].name && !strcmp(msg->node_array[i].name, node) &&
		    (msg->node_array[i].node_state & NODE_STATE_BASE) == NODE_STATE_DOWN)
			down = true;
	slurm_free_node_info_msg(msg);
	return down;
}

/* Waits until every node has marked KIND: 0 if all are "ok"; -1 with the first failure.
 * A stage-out reads every mark even after a failure: a node that leaves now may hold the
 * metadata of a mark another node still has to read. A stage-in stops at the first failure:
 * the job ends then, and the sooner its prologs are done the fewer of them read a mark while
 * another node's epilog stops its daemon (such a read waits for that daemon). A node that
 * slurmctld says is down counts as a failure (its mark would never come), named in `err`. */
static int wait_all(const struct jobfs_context *ctx, const char *kind, char *err, size_t errlen)
{
	bool every = strcmp(kind, "in") != 0;

	const struct jobfs_job *job = &ctx->job;
	double deadline = now_s() + ctx->config.stage_timeout_s, check_at = now_s() + NODE_CHECK_S;
	char path[PATH_MAX + 64], text[JOBFS_MSG_MAX];
	char **hosts = NULL;
	size_t count = 0;
	bool told = false;
	uint32_t next = 0;
	int rc = 0;

	/* The names slurmctld knows the nodes by (the prolog's list, kept in the state directory
	 * for the epilog); without them (a state written by an older plugin) only stage_timeout
	 * ends the wait for a node that is gone. */
	if (jobfs_hostlist_expand(job->nodelist, &hosts, &count) != 0 || count != job->node_count) {
		jobfs_hostlist_free(hosts, count);
		hosts = NULL;
		count = 0;
	}
	while (next < job->node_count) {
		snprintf(path, sizeof(path), "%s/" MARK_DIR "/%s.%" PRIu32, job->mount, kind, next);
		if (read_mark(path, text, sizeof(text)) == 0) {
			text[strcspn(text, "\n")] = '\0';
			if (strcmp(text, "ok") != 0 && rc == 0) {
				snprintf(err, errlen, "%s", text);
				rc = -1;
				if (!every)
					goto out;
			}
			next++;
			continue;
		}
		if (errno != ENOENT) {
			if (rc == 0)
				snprintf(err, errlen, "stage-%s: cannot read %s: %s", kind, path, strerror(errno));
			rc = -1;
			goto out;
		}
		if (now_s() > deadline) {
			if (rc == 0)
				snprintf(err, errlen, "stage-%s: node %" PRIu32 " of the job did not finish its share "
					 "within stage_timeout (%u s)", kind, next, ctx->config.stage_timeout_s);
			rc = -1;
			goto out;
		}
		if (count && now_s() >= check_at) {
			check_at = now_s() + NODE_CHECK_S;
			if (node_down(job, hosts[next], &told)) {
				slurm_info("spank_jobfs: job %" PRIu32 ": node %s is down: its stage-%s mark will not come",
					   job->id, hosts[next], kind);
				if (rc == 0)
					snprintf(err, errlen, "stage-%s: node %s of the job is down (its share was not "
						 "copied)", kind, hosts[next]);
				rc = -1;
				if (!every)
					goto out;
				next++;
				continue;
			}
		}
		usleep(200000);
	}
out:
	jobfs_hostlist_free(hosts, count);
	return rc;
}

/* Once a node has read every mark it may stop its daemon; the node that wrote the last mark
 * may still be reading the others' (a few milliseconds). Without this pause its read would
 * wait for a daemon that is gone. */
#define STAGE_OUT_GRACE_S 5

/* Both directions: this node's share, its mark, then everyone's. */
static int stage(const struct jobfs_context *ctx, bool in, const char *list, char *err, size_t errlen)
{
	const char *kind = in ? "in" : "out";
	char others[JOBFS_MSG_MAX];
	double t0 = now_s();
	int rc = -1;

	if (run_share(ctx, in, list, err, errlen) != 0) {
		if (mark(&ctx->job, kind, err) != 0) /* the others then time out */
			slurm_error("spank_jobfs: job %" PRIu32 ": cannot mark stage-%s: %s", ctx->job.id, kind, strerror(errno));
		else if (!in)
			wait_all(ctx, kind, others, sizeof(others));
		goto out;
	}
	if (mark(&ctx->job, kind, "ok") != 0) {
		snprintf(err, errlen, "stage-%s: cannot write %s/" MARK_DIR ": %s", kind, ctx->job.mount, strerror(errno));
		goto out;
	}
	if (wait_all(ctx, kind, err, errlen) != 0)
		goto out;
	slurm_info("spank_jobfs: job %" PRIu32 ": stage-%s done on every node (%.2f s)", ctx->job.id, kind, now_s() - t0);
	rc = 0;
out:
	/* A failed stage-in keeps the file system up until the epilog: no pause there. */
	if (!in && ctx->job.node_count > 1)
		sleep(STAGE_OUT_GRACE_S);
	return rc;
}

int jobfs_stage_in(const struct jobfs_context *ctx, char *err, size_t errlen)
{
	if (!ctx->request.stage_in)
		return 0;
	return stage(ctx, true, ctx->request.stage_in, err, errlen);
}

int jobfs_stage_out(const struct jobfs_context *ctx, char *err, size_t errlen)
{
	if (!ctx->request.stage_out)
		return 0;
	return stage(ctx, false, ctx->request.stage_out, err, errlen);
}

/* An epilog that does not stage out (its node failed earlier) still tells the others, who
 * would wait for it until stage_timeout otherwise. */
void jobfs_stage_out_skipped(const struct jobfs_context *ctx, const char *why)
{
	char text[JOBFS_MSG_MAX + 64];

	if (!ctx->request.stage_out || !ctx->job.mount[0])
		return;
	snprintf(text, sizeof(text), "stage-out skipped on node %s: %s", ctx->job.node, why);
	if (mark(&ctx->job, "out", text) != 0)
		return;
	wait_all(ctx, "out", text, sizeof(text)); /* its outcome is known: a failure */
	if (ctx->job.node_count > 1)
		sleep(STAGE_OUT_GRACE_S);
}
