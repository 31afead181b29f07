/* jobfs_hostlist.c: a Slurm host list ("n[01-03,7],gpu5") expanded into names, in order, for
 * the cluster descriptor every node writes (jobfsd expands the same list itself). One bracket
 * group per name, as Slurm prints node lists of one dimension.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobfs_spank.h"

static int push(char ***hosts, size_t *count, size_t *cap, const char *name)
{
	if (*count == *cap) {
		size_t ncap = *cap ? *cap * 2 : 16;
		char **grown = realloc(*hosts, ncap * sizeof(char *));

		if (!grown)
			return -1;
		*hosts = grown;
		*cap = ncap;
	}
	(*hosts)[*count] = strdup(name);
	if (!(*hosts)[*count])
		return -1;
	(*count)++;
	return 0;
}

/* prefix[ranges]suffix, ranges "1-3,07,9-10" with the width of the lower bound. */
static int expand_item(const char *item, char ***hosts, size_t *count, size_t *cap)
{
	const char *open = strchr(item, '['), *close;
	char prefix[256], suffix[256], ranges[1024], name[600], *r, *save = NULL;

	if (!open)
		return push(hosts, count, cap, item);
	close = strchr(open, ']');
	if (!close || (size_t)(open - item) >= sizeof(prefix) || (size_t)(close - open) >= sizeof(ranges) ||
	    strlen(close + 1) >= sizeof(suffix) || strchr(close + 1, '['))
		return -1;
	memcpy(prefix, item, open - item);
	prefix[open - item] = '\0';
	memcpy(ranges, open + 1, close - open - 1);
	ranges[close - open - 1] = '\0';
	strcpy(suffix, close + 1);
	for (r = strtok_r(ranges, ",", &save); r; r = strtok_r(NULL, ",", &save)) {
		char *end = NULL;
		unsigned long lo = strtoul(r, &end, 10), hi = lo, v;
		int width = (int)(end - r);

		if (end == r)
			return -1;
		if (*end == '-')
			hi = strtoul(end + 1, &end, 10);
		if (*end || hi < lo || hi - lo > 100000)
			return -1;
		for (v = lo; v <= hi; v++) {
			snprintf(name, sizeof(name), "%s%0*lu%s", prefix, width, v, suffix);
			if (push(hosts, count, cap, name) != 0)
				return -1;
		}
	}
	return 0;
}

int jobfs_hostlist_expand(const char *list, char ***hosts, size_t *count)
{
	size_t cap = 0, len = strlen(list), i, start = 0;
	int depth = 0;
	char item[2048];

	*hosts = NULL;
	*count = 0;
	for (i = 0; i <= len; i++) {
		if (list[i] == '[')
			depth++;
		else if (list[i] == ']')
			depth--;
		if ((list[i] == ',' && depth == 0) || list[i] == '\0') {
			if (i > start) {
				if (i - start >= sizeof(item))
					goto fail;
				memcpy(item, list + start, i - start);
				item[i - start] = '\0';
				if (expand_item(item, hosts, count, &cap) != 0)
					goto fail;
			}
			start = i + 1;
		}
	}
	if (*count == 0)
		goto fail;
	return 0;
fail:
	jobfs_hostlist_free(*hosts, *count);
	*hosts = NULL;
	*count = 0;
	errno = EINVAL;
	return -1;
}

void jobfs_hostlist_free(char **hosts, size_t count)
{
	size_t i;

	for (i = 0; i < count; i++)
		free(hosts[i]);
	free(hosts);
}
