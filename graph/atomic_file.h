// Writing an output file so that a reader never sees half of one and a crash leaves nothing
// behind for long: the contents go to a temp file next to the target, are fsync'ed, and the temp is
// renamed over the target (atomic on POSIX), then the folder is fsync'ed.
//
// What it refuses to replace: a target that exists and is not a regular file (a device such as
// /dev/null, a FIFO, a socket, a directory), and a symbolic link unless the caller asks to follow
// it; rename() would otherwise swap the special file for a regular one (as root, --out=/dev/null
// would replace the system's /dev/null).
//
// Temp files are named `.<name>.tmp.<pid>.<random>` and created with O_EXCL (unpredictable, never
// an existing file). A process killed mid-write leaves its temp behind; the next write to the same
// target removes the temps of that target whose pid is no longer alive (kill(pid, 0) == ESRCH).
// Temps of live processes (this one included: another thread may be writing) are kept. Writers on
// different hosts sharing a folder over NFS see each other's pids as dead: do not share a target
// between hosts.
//
// The file gets the mode a plain open(path, O_CREAT | O_TRUNC, 0666) would give it: a new file
// 0666 minus the umask, a replaced file keeps its permission bits.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace mixtrain {

struct AtomicWriteOptions {
  // A symbolic link at `path`: false refuses it (the link and what it points to stay unchanged);
  // true writes atomically to the file the link resolves to (the link itself is kept).
  bool follow_symlinks = false;
};

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents,
                                 const AtomicWriteOptions& options = {});

}  // namespace mixtrain
