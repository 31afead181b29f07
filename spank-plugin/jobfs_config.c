/* jobfs_config.c: the plugin's arguments on its plugstack.conf line, one table of name=value
 * items with their defaults (the admin's side; the user's options are in jobfs_options.c):
 *
 *   required /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_jobfs.so storage_dir=/local/nvme \
 *            mount_root=/jobfs replicas=1 chunk_size=4M
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobfs_spank.h"

#ifndef JOBFS_SBINDIR
#define JOBFS_SBINDIR "/usr/local/sbin"
#endif
#ifndef JOBFS_BINDIR
#define JOBFS_BINDIR "/usr/local/bin"
#endif

enum item_type { ITEM_PATH, ITEM_STRING, ITEM_U32, ITEM_NICE, ITEM_SIZE, ITEM_BOOL, ITEM_PORTS };

struct item {
	const char *name;
	enum item_type type;
	size_t offset;
	size_t size;
	const char *fallback; /* the default, parsed like a value */
};

#define ITEM(name, type, field, fallback) \
	{ name, type, offsetof(struct jobfs_config, field), sizeof(((struct jobfs_config *)0)->field), fallback }

static const struct item items[] = {
	ITEM("storage_dir", ITEM_PATH, storage_dir, "/var/tmp/jobfs"),
	ITEM("mount_root", ITEM_PATH, mount_root, "/jobfs"),
	ITEM("state_dir", ITEM_PATH, state_dir, "/run/jobfs"),
	ITEM("jobfsd", ITEM_PATH, jobfsd, JOBFS_SBINDIR "/jobfsd"),
	ITEM("jobfs_fuse", ITEM_PATH, jobfs_fuse, JOBFS_SBINDIR "/jobfs-fuse"),
	ITEM("jobfs", ITEM_PATH, jobfs, JOBFS_BINDIR "/jobfs"),
	ITEM("key_file", ITEM_PATH, key_file, "/etc/munge/munge.key"),
	ITEM("ucx_tls", ITEM_STRING, ucx_tls, ""),
	ITEM("log_level", ITEM_STRING, log_level, "warn"),
	ITEM("daemon_nice", ITEM_NICE, daemon_nice, "-10"),
	ITEM("replicas", ITEM_U32, replicas, "1"),
	ITEM("chunk_size", ITEM_SIZE, chunk_size, "4M"),
	ITEM("stripe_count", ITEM_U32, stripe_count, "0"),
	ITEM("keep_data", ITEM_BOOL, keep_data, "no"),
	ITEM("ports", ITEM_PORTS, port_min, "7200-7999"),
	ITEM("startup_timeout", ITEM_U32, startup_timeout_s, "30"),
	ITEM("stage_timeout", ITEM_U32, stage_timeout_s, "86400"),
};

/* "4M", "64k", "1G", "65536" (binary units), as jobfsd reads them. */
int jobfs_parse_size(const char *text, uint64_t *out)
{
	char *end = NULL;
	unsigned long long v;
	uint64_t mult = 1;

	errno = 0;
	v = strtoull(text, &end, 10);
	if (errno || end == text)
		return -1;
	switch (*end) {
	case 'k': case 'K': mult = 1ull << 10; end++; break;
	case 'm': case 'M': mult = 1ull << 20; end++; break;
	case 'g': case 'G': mult = 1ull << 30; end++; break;
	default: break;
	}
	if (*end == 'i' && end[1] == 'B')
		end += 2;
	else if (*end == 'B' && mult > 1)
		end++;
	if (*end != '\0' || v > UINT64_MAX / mult)
		return -1;
	*out = v * mult;
	return 0;
}

static int parse_bool(const char *v, bool *out)
{
	if (!strcmp(v, "yes") || !strcmp(v, "1") || !strcmp(v, "true")) {
		*out = true;
		return 0;
	}
	if (!strcmp(v, "no") || !strcmp(v, "0") || !strcmp(v, "false")) {
		*out = false;
		return 0;
	}
	return -1;
}

static int set_item(struct jobfs_config *c, const struct item *it, const char *value, char *err, size_t errlen)
{
	char *field = (char *)c + it->offset;
	char *end = NULL;
	unsigned long v, hi;
	uint64_t size;

	switch (it->type) {
	case ITEM_PATH:
		if (value[0] != '/') {
			snprintf(err, errlen, "%s=%s: not an absolute path", it->name, value);
			return -1;
		}
		/* fall through */
	case ITEM_STRING:
		if (strlen(value) >= it->size) {
			snprintf(err, errlen, "%s=%s: too long", it->name, value);
			return -1;
		}
		strcpy(field, value);
		return 0;
	case ITEM_U32:
		errno = 0;
		v = strtoul(value, &end, 10);
		if (errno || end == value || *end || v > UINT32_MAX) {
			snprintf(err, errlen, "%s=%s: not a number", it->name, value);
			return -1;
		}
		*(uint32_t *)field = (uint32_t)v;
		return 0;
	case ITEM_NICE: {
		long n;
		errno = 0;
		n = strtol(value, &end, 10);
		if (errno || end == value || *end || n < -20 || n > 19) {
			snprintf(err, errlen, "%s=%s: not a nice value (-20 to 19)", it->name, value);
			return -1;
		}
		*(int *)field = (int)n;
		return 0;
	}
	case ITEM_SIZE:
		if (jobfs_parse_size(value, &size) != 0) {
			snprintf(err, errlen, "%s=%s: not a size (4M, 64k, 1G)", it->name, value);
			return -1;
		}
		*(uint64_t *)field = size;
		return 0;
	case ITEM_BOOL:
		if (parse_bool(value, (bool *)field) != 0) {
			snprintf(err, errlen, "%s=%s: not yes or no", it->name, value);
			return -1;
		}
		return 0;
	case ITEM_PORTS:
		errno = 0;
		v = strtoul(value, &end, 10);
		hi = v;
		if (!errno && end != value && *end == '-')
			hi = strtoul(end + 1, &end, 10);
		if (errno || *end || v == 0 || hi > 65535 || hi < v) {
			snprintf(err, errlen, "%s=%s: not a port range (7200-7999)", it->name, value);
			return -1;
		}
		c->port_min = (uint16_t)v;
		c->port_max = (uint16_t)hi;
		return 0;
	}
	return -1;
}

static int check(const struct jobfs_config *c, char *err, size_t errlen)
{
	if (c->replicas < 1 || c->replicas > 3) {
		snprintf(err, errlen, "replicas=%" PRIu32 ": must be 1 to 3", c->replicas);
		return -1;
	}
	if (c->chunk_size < (64u << 10) || c->chunk_size > (1u << 30) || c->chunk_size % (64u << 10)) {
		snprintf(err, errlen, "chunk_size=%" PRIu64 ": must be a multiple of 64k up to 1G", c->chunk_size);
		return -1;
	}
	if (c->startup_timeout_s == 0) {
		snprintf(err, errlen, "startup_timeout=0: must be at least 1 (seconds)");
		return -1;
	}
	return 0;
}

int jobfs_config_parse(struct jobfs_config *c, int ac, char **av, char *err, size_t errlen)
{
	size_t i;
	int a;

	memset(c, 0, sizeof(*c));
	for (i = 0; i < sizeof(items) / sizeof(items[0]); i++)
		if (set_item(c, &items[i], items[i].fallback, err, errlen) != 0)
			return -1;
	for (a = 0; a < ac; a++) {
		const char *eq = strchr(av[a], '=');
		const struct item *it = NULL;

		for (i = 0; eq && i < sizeof(items) / sizeof(items[0]); i++)
			if (strlen(items[i].name) == (size_t)(eq - av[a]) &&
			    !strncmp(items[i].name, av[a], eq - av[a]))
				it = &items[i];
		if (!it) {
			snprintf(err, errlen, "unknown argument '%s' (spank_jobfs(8) lists them)", av[a]);
			return -1;
		}
		if (set_item(c, it, eq + 1, err, errlen) != 0)
			return -1;
	}
	return check(c, err, errlen);
}
