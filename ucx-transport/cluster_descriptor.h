// cluster_descriptor.h: writing the cluster descriptor, the file through which clients find
// the daemons of a job ($JOBFS_CLUSTER; its format is described in client/cluster.h, which
// also reads it). It lives here, below both sides, because jobfsd (cluster-file=) and the
// client (`jobfs local up`) both write it and server/ must not depend on client/.
#pragma once

#include <string>
#include <vector>

#include "status.h"

namespace jobfs::transport {

// The descriptor's text: "version = 1", "daemons = h:p,..." (rank order), "secret = ...".
std::string format_cluster_descriptor(const std::vector<std::string>& daemons, const std::string& secret);

// Writes it atomically (PATH.tmp, fsync, rename to PATH) with mode 0600, since it holds the
// secret. Readers see the old file, or none, or the whole new one.
Status write_cluster_descriptor(const std::string& path, const std::vector<std::string>& daemons,
                                const std::string& secret);

} // namespace jobfs::transport
