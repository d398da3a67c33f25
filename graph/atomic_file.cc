// See atomic_file.h.
#include "graph/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace mixtrain {

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  std::filesystem::path target(path);
  if (target.filename().empty())
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a file name"));
  std::string tmpl =
      (target.parent_path() / absl::StrCat(".", target.filename().string(), ".tmpXXXXXX")).string();
  int fd = mkstemp(tmpl.data());
  if (fd < 0)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create a file next to '", path, "': ", std::strerror(errno)));
  auto fail = [&](const char* what) {
    std::string msg = absl::StrCat(what, " '", path, "': ", std::strerror(errno));
    close(fd);
    unlink(tmpl.c_str());
    return absl::DataLossError(msg);
  };
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("writing");
    }
    done += static_cast<size_t>(n);
  }
  // mkstemp creates 0600; give the file the usual permissions.
  fchmod(fd, 0644);
  if (fsync(fd) != 0) return fail("flushing");
  if (close(fd) != 0) {
    unlink(tmpl.c_str());
    return absl::DataLossError(absl::StrCat("closing '", path, "': ", std::strerror(errno)));
  }
  if (std::rename(tmpl.c_str(), path.c_str()) != 0) {
    std::string msg = absl::StrCat("cannot write '", path, "': ", std::strerror(errno));
    unlink(tmpl.c_str());
    return absl::PermissionDeniedError(msg);
  }
  return absl::OkStatus();
}

}  // namespace mixtrain
