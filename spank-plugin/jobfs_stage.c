/* jobfs_stage.c: where data is staged in and out (--jobfs-stage-in/--jobfs-stage-out). The
 * copying itself is issue #7's; this file is the hook it fills in.
 *
 * jobfs_stage_in runs in the job prolog on every node, after the file system is mounted there
 * and before any task starts; jobfs_stage_out runs in the job epilog on every node, after the
 * last task of the job ended and before the mount and the daemons go. ctx->job says which node
 * this is (node_index of node_count) and where the file system is (mount, cluster_file); the
 * lists are ctx->request.stage_in / stage_out, "SRC:DST" items separated by ';', already
 * checked by jobfs_stage_spec_check(). A copy must run as the job user (ctx->job.uid/gid).
 *
 * Note for stage-out: the epilogs of a job's nodes are not synchronised, and each stops its
 * node's daemon when it returns; a copy that reads chunks held on other nodes must keep every
 * node's epilog here until it is done (e.g. node 0 copies, the others wait for a marker it
 * writes into jobfs when finished).
 *
 * Until #7 lands, a job that asks for staging fails with a message rather than running
 * without its data (or reporting an upload that did not happen).
 */
#include <stdio.h>

#include "jobfs_spank.h"

int jobfs_stage_in(const struct jobfs_context *ctx, char *err, size_t errlen)
{
	if (!ctx->request.stage_in)
		return 0;
	snprintf(err, errlen, "--jobfs-stage-in is not available in this version of spank_jobfs (%s)",
		 ctx->request.stage_in);
	return -1;
}

int jobfs_stage_out(const struct jobfs_context *ctx, char *err, size_t errlen)
{
	if (!ctx->request.stage_out)
		return 0;
	snprintf(err, errlen, "--jobfs-stage-out is not available in this version of spank_jobfs (%s)",
		 ctx->request.stage_out);
	return -1;
}
