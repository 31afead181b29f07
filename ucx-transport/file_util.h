// file_util.h: small file helpers shared by the layers.
#pragma once

#include <string>

#include "result.h"

namespace jobfs::transport {

// Writes text to path whole or not at all: into path.tmp, fsync'd, then renamed over path. A
// reader (or a crash) never sees a partial file.
Status write_file_atomically(const std::string& path, const std::string& text);

} // namespace jobfs::transport
