/* jobfs_options.c: the user's options, in one table. srun, sbatch and salloc show them in
 * --help; their callbacks check them at submission, so a typo fails at once with a message,
 * not in a prolog later. The prolog and epilog read them back with spank_option_getopt().
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobfs_spank.h"

enum { OPT_JOBFS = 1, OPT_MOUNT, OPT_STAGE_IN, OPT_STAGE_OUT };

static int option_cb(int val, const char *optarg, int remote);

struct spank_option jobfs_options[] = {
	{ "jobfs", "[k=v,...]",
	  "jobfs: give the job a parallel file system over its nodes' local disks, mounted on every "
	  "node ($JOBFS_MOUNT). Layout: chunk_size=SIZE, stripe_count=N, replicas=N",
	  2, OPT_JOBFS, option_cb },
	{ "jobfs-mount", "PATH",
	  "jobfs: mount it at PATH (implies --jobfs; default <mount_root>/<job id>)",
	  1, OPT_MOUNT, option_cb },
	{ "jobfs-stage-in", "SRC:DST",
	  "jobfs: copy SRC (s3://bucket/prefix) into DST (a path in jobfs) before the job starts; repeatable",
	  1, OPT_STAGE_IN, option_cb },
	{ "jobfs-stage-out", "SRC:DST",
	  "jobfs: copy SRC (a path in jobfs) to DST (s3://bucket/prefix) after the job ends; repeatable",
	  1, OPT_STAGE_OUT, option_cb },
	SPANK_OPTIONS_TABLE_END
};

int jobfs_options_register(spank_t sp)
{
	int rc = 0;
	struct spank_option *o;

	for (o = jobfs_options; o->name; o++) {
		spank_err_t e = spank_option_register(sp, o);

		if (e != ESPANK_SUCCESS) {
			slurm_error("spank_jobfs: cannot register --%s: %s", o->name, spank_strerror(e));
			rc = -1;
		}
	}
	return rc;
}

/* --jobfs=chunk_size=1M,stripe_count=2,replicas=2 (every key optional; "" = the defaults). */
int jobfs_request_parse_layout(struct jobfs_request *req, const char *arg, char *err, size_t errlen)
{
	char *copy = NULL, *item, *save = NULL;
	int rc = 0;

	req->enabled = true;
	/* Slurm records an optional argument that was not given as "(null)". */
	if (!arg || !*arg || !strcmp(arg, "(null)"))
		goto out;
	copy = strdup(arg);
	if (!copy) {
		snprintf(err, errlen, "out of memory");
		rc = -1;
		goto out;
	}
	for (item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(item, '='), *end = NULL;
		unsigned long v;
		uint64_t size;

		if (!eq) {
			snprintf(err, errlen, "--jobfs=%s: '%s' is not key=value (chunk_size, stripe_count, replicas)", arg, item);
			rc = -1;
			goto out;
		}
		*eq++ = '\0';
		if (!strcmp(item, "chunk_size")) {
			if (jobfs_parse_size(eq, &size) != 0 || size < (64u << 10) || size > (1u << 30) ||
			    size % (64u << 10)) {
				snprintf(err, errlen, "--jobfs: chunk_size=%s: must be a multiple of 64k up to 1G", eq);
				rc = -1;
				goto out;
			}
			req->chunk_size = size;
			continue;
		}
		errno = 0;
		v = strtoul(eq, &end, 10);
		if (errno || end == eq || *end) {
			snprintf(err, errlen, "--jobfs: %s=%s: not a number", item, eq);
			rc = -1;
			goto out;
		}
		if (!strcmp(item, "replicas") && v >= 1 && v <= 3) {
			req->replicas = (uint32_t)v;
		} else if (!strcmp(item, "replicas")) {
			snprintf(err, errlen, "--jobfs: replicas=%s: must be 1 to 3", eq);
			rc = -1;
			goto out;
		} else if (!strcmp(item, "stripe_count") && v <= 65536) {
			req->stripe_count = (uint32_t)v;
			req->stripe_set = true;
		} else {
			snprintf(err, errlen, "--jobfs: unknown or bad setting %s=%s (chunk_size, stripe_count, replicas)", item, eq);
			rc = -1;
			goto out;
		}
	}
out:
	free(copy);
	return rc;
}

/* SRC:DST, split at the first ':' that does not start "://". One side is an object store URL
 * (s3://...), the other an absolute path in jobfs; #7 gives them their meaning. */
int jobfs_stage_spec_check(const char *spec, bool in, char *err, size_t errlen)
{
	const char *opt = in ? "--jobfs-stage-in" : "--jobfs-stage-out";
	const char *p, *colon = NULL;
	const char *url, *path;
	size_t url_len;

	for (p = spec; *p; p++)
		if (*p == ':' && strncmp(p, "://", 3) != 0) {
			colon = p;
			break;
		}
	if (strchr(spec, ';') || !colon || colon == spec || !colon[1]) {
		snprintf(err, errlen, "%s=%s: expected SRC:DST (no ';')", opt, spec);
		return -1;
	}
	url = in ? spec : colon + 1;
	url_len = in ? (size_t)(colon - spec) : strlen(colon + 1);
	path = in ? colon + 1 : spec;
	if (url_len <= 5 || strncmp(url, "s3://", 5) != 0) {
		snprintf(err, errlen, "%s=%s: the %s must be an s3://bucket/prefix URL", opt, spec,
			 in ? "source" : "destination");
		return -1;
	}
	if (path[0] != '/') {
		snprintf(err, errlen, "%s=%s: the %s must be an absolute path in jobfs", opt, spec,
			 in ? "destination" : "source");
		return -1;
	}
	return 0;
}

int jobfs_request_add_stage(struct jobfs_request *req, bool in, const char *spec, char *err, size_t errlen)
{
	char **list = in ? &req->stage_in : &req->stage_out;
	size_t old = *list ? strlen(*list) + 1 : 0;
	char *grown;

	if (jobfs_stage_spec_check(spec, in, err, errlen) != 0)
		return -1;
	grown = realloc(*list, old + strlen(spec) + 1);
	if (!grown) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (old)
		grown[old - 1] = ';';
	strcpy(grown + old, spec);
	*list = grown;
	req->enabled = true;
	return 0;
}

static int set_mount(struct jobfs_request *req, const char *path, char *err, size_t errlen)
{
	if (!path || path[0] != '/' || strstr(path, "/../") || strstr(path, "/./") ||
	    (strlen(path) >= 3 && !strcmp(path + strlen(path) - 3, "/..")) || strlen(path) >= sizeof(req->mount)) {
		snprintf(err, errlen, "--jobfs-mount=%s: must be an absolute path without . or .. components",
			 path ? path : "");
		return -1;
	}
	strcpy(req->mount, path);
	req->enabled = true;
	return 0;
}

static int option_cb(int val, const char *optarg, int remote)
{
	char err[JOBFS_MSG_MAX];
	struct jobfs_request *req = &jobfs_ctx.request;
	int rc = -1;

	(void)remote;
	switch (val) {
	case OPT_JOBFS:
		rc = jobfs_request_parse_layout(req, optarg, err, sizeof(err));
		break;
	case OPT_MOUNT:
		rc = set_mount(req, optarg, err, sizeof(err));
		break;
	case OPT_STAGE_IN:
	case OPT_STAGE_OUT:
		rc = jobfs_request_add_stage(req, val == OPT_STAGE_IN, optarg ? optarg : "", err, sizeof(err));
		break;
	default:
		snprintf(err, sizeof(err), "unknown option %d", val);
		break;
	}
	if (rc != 0)
		slurm_error("jobfs: %s", err);
	return rc;
}

/* In the prolog and epilog the callbacks do not run: the options come from the job's record.
 * A repeated stage option keeps only its last value there, so srun/sbatch/salloc pass the
 * whole lists as job control variables (SPANK_JOBFS_STAGE_IN/OUT, see jobfs_srun.c). */
int jobfs_request_from_job(spank_t sp, struct jobfs_request *req, char *err, size_t errlen)
{
	char *optarg = NULL;
	const char *env;
	int rc = 0;

	if (spank_option_getopt(sp, &jobfs_options[0], &optarg) == ESPANK_SUCCESS &&
	    jobfs_request_parse_layout(req, optarg, err, errlen) != 0)
		return -1;
	optarg = NULL;
	if (spank_option_getopt(sp, &jobfs_options[1], &optarg) == ESPANK_SUCCESS &&
	    set_mount(req, optarg, err, errlen) != 0)
		return -1;
	env = getenv("SPANK_JOBFS_STAGE_IN");
	optarg = NULL;
	if (!env && spank_option_getopt(sp, &jobfs_options[2], &optarg) == ESPANK_SUCCESS)
		env = optarg;
	if (env && *env) {
		req->stage_in = strdup(env);
		req->enabled = true;
	}
	env = getenv("SPANK_JOBFS_STAGE_OUT");
	optarg = NULL;
	if (!env && spank_option_getopt(sp, &jobfs_options[3], &optarg) == ESPANK_SUCCESS)
		env = optarg;
	if (env && *env) {
		req->stage_out = strdup(env);
		req->enabled = true;
	}
	return rc;
}
