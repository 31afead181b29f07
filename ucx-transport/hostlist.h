// hostlist.h: Slurm host lists ("n[01-03,7],gpu5") expanded into host names, so a static
// group can be given as a Slurm node list (jobfsd daemons=n[1-4]:7070, or daemons=slurm for
// $SLURM_JOB_NODELIST). Shared by jobfsd and the Slurm plugin.
#pragma once

#include <string>
#include <vector>

#include "result.h"

namespace jobfs {

// Expands a Slurm host list: comma-separated items, each a name with any number of bracket
// groups of comma-separated numbers and ranges ("a-b"; a leading zero fixes the width, as
// Slurm does). Order and duplicates are kept. Errors name the bad part.
Result<std::vector<std::string>> hostlist_expand(const std::string& list);

// Expands a daemons= value into host:port entries: items are host[:port] with host a Slurm
// host list; an item without a port gets default_port (0: a port is required). The value
// "slurm" stands for $SLURM_JOB_NODELIST (or $SLURM_NODELIST).
Result<std::vector<std::string>> daemon_list_expand(const std::string& value, uint16_t default_port);

} // namespace jobfs
