// See atomic_file.h.
#include "graph/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace mixtrain {
namespace {

constexpr int kRandomChars = 12;  // 62^12: ~71 bits, unguessable and never colliding in practice
constexpr int kMaxLinks = 40;     // as the kernel's limit on a path's symbolic links

std::string Error() { return std::strerror(errno); }

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

// The temp-name prefix of `name`'s temps: `.<name>.tmp.`; the pid and the random part follow.
std::string TempPrefix(const std::string& name) { return absl::StrCat(".", name, ".tmp."); }

// The pid in `entry` if it is one of `prefix`'s temps: `<prefix><pid>.<random>`, the random part
// 6 to 32 letters and digits (ours has kRandomChars; mkstemp's, as the CLI's outputs use, 6).
pid_t TempOwner(std::string_view entry, std::string_view prefix) {
  if (!entry.starts_with(prefix)) return 0;
  entry.remove_prefix(prefix.size());
  size_t dot = entry.find('.');
  if (dot == std::string_view::npos) return 0;
  size_t random = entry.size() - dot - 1;
  if (random < 6 || random > 32) return 0;
  for (char c : entry.substr(dot + 1))
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c))) return 0;
  pid_t pid = 0;
  auto [end, ec] = std::from_chars(entry.data(), entry.data() + dot, pid);
  if (ec != std::errc() || end != entry.data() + dot || pid <= 0) return 0;
  return pid;
}

// Removes the temps of `name` in `dir` whose writer is gone. kill(pid, 0) fails with ESRCH only
// when no such process exists; EPERM (another user's live process) and our own pid keep the file.
void RemoveStaleTemps(const std::string& dir, const std::string& name) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;  // creating the temp below reports an unreadable folder
  const std::string prefix = TempPrefix(name);
  const pid_t self = getpid();
  while (dirent* e = readdir(d)) {
    pid_t pid = TempOwner(e->d_name, prefix);
    if (pid == 0 || pid == self) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
      unlinkat(dirfd(d), e->d_name, 0);
  }
  closedir(d);
}

// Follows symbolic links from `path` to a path that is none (it may not exist yet).
absl::Status ResolveLinks(std::string& path) {
  for (int i = 0; i < kMaxLinks; ++i) {
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return absl::OkStatus();
    std::error_code ec;
    std::filesystem::path to = std::filesystem::read_symlink(path, ec);
    if (ec)
      return absl::PermissionDeniedError(absl::StrCat("cannot read the link '", path, "': ", ec.message()));
    path = to.is_absolute() ? to.string() : (std::filesystem::path(path).parent_path() / to).string();
  }
  return absl::InvalidArgumentError(absl::StrCat("'", path, "': more than ", kMaxLinks, " symbolic links"));
}

// OK when `path` is absent or a regular file; `mode` is then its permission bits (or -1 if absent).
absl::Status CheckTarget(const std::string& path, const std::string& asked, int& mode) {
  mode = -1;
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::PermissionDeniedError(absl::StrCat("cannot write '", asked, "': ", Error()));
  }
  if (S_ISREG(st.st_mode)) {
    mode = static_cast<int>(st.st_mode & 0777);
    return absl::OkStatus();
  }
  std::string what = FileKind(st.st_mode);
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    std::string to = std::filesystem::read_symlink(path, ec).string();
    what = absl::StrCat("a symbolic link (to '", to, "'); write to the file itself");
  }
  std::string resolved = path == asked ? "" : absl::StrCat(" (the link resolves to '", path, "')");
  return absl::InvalidArgumentError(
      absl::StrCat("refusing to replace '", asked, "'", resolved, ": it is ", what, ", not a regular file"));
}

// Creates `<dir>/.<name>.tmp.<pid>.<random>` exclusively, so never an existing file or link.
int CreateTemp(const std::string& dir, const std::string& name, mode_t mode, std::string& tmp) {
  static constexpr char kAlnum[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  for (int attempt = 0; attempt < 100; ++attempt) {
    unsigned char bytes[kRandomChars];
    if (getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) return -1;
    std::string suffix;
    for (unsigned char b : bytes) suffix += kAlnum[b % 62];
    tmp = (std::filesystem::path(dir) / absl::StrCat(TempPrefix(name), getpid(), ".", suffix)).string();
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

absl::Status WriteAll(int fd, std::string_view contents) {
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::DataLossError(Error());
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// fsync of the folder makes the rename durable; file systems that cannot sync a folder say EINVAL.
absl::Status SyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::DataLossError(Error());
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  if (rc != 0 && err != EINVAL && err != ENOTSUP) return absl::DataLossError(std::strerror(err));
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents,
                                 const AtomicWriteOptions& options) {
  if (std::filesystem::path(path).filename().empty())
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a file name"));
  std::string target = path;
  if (options.follow_symlinks) {
    absl::Status s = ResolveLinks(target);
    if (!s.ok()) return s;
  }
  int mode = -1;
  if (absl::Status s = CheckTarget(target, path, mode); !s.ok()) return s;

  std::filesystem::path tp(target);
  const std::string name = tp.filename().string();
  const std::string dir = tp.parent_path().empty() ? "." : tp.parent_path().string();
  RemoveStaleTemps(dir, name);

  std::string tmp;
  // 0666 lets the umask decide a new file's mode, as a plain open would; a replaced file keeps its.
  int fd = CreateTemp(dir, name, 0666, tmp);
  if (fd < 0)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create a file next to '", path, "': ", Error()));
  auto fail = [&](const char* what, const std::string& why) {
    if (fd >= 0) close(fd);
    unlink(tmp.c_str());
    return absl::DataLossError(absl::StrCat(what, " '", path, "': ", why));
  };
  if (mode >= 0 && fchmod(fd, static_cast<mode_t>(mode)) != 0) return fail("cannot set the mode of", Error());
  if (absl::Status s = WriteAll(fd, contents); !s.ok()) return fail("writing", std::string(s.message()));
  if (fsync(fd) != 0) return fail("flushing", Error());
  int rc = close(fd);
  fd = -1;
  if (rc != 0) return fail("closing", Error());
  // Checked again: something may have appeared at the target while we wrote.
  if (absl::Status s = CheckTarget(target, path, mode); !s.ok()) {
    unlink(tmp.c_str());
    return s;
  }
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    std::string why = Error();
    unlink(tmp.c_str());
    return absl::PermissionDeniedError(absl::StrCat("cannot write '", path, "': ", why));
  }
  if (absl::Status s = SyncDir(dir); !s.ok())
    return absl::DataLossError(absl::StrCat("'", path, "' was written but its folder could not be synced: ",
                                            s.message()));
  return absl::OkStatus();
}

}  // namespace mixtrain
