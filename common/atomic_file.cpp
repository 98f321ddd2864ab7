// Note [Atomic file writes]
// Rationale: a stream whose error is not read after its last flush and close reports
//   success on a full disk, and a write that fails halfway leaves a truncated file in
//   place of the good one an earlier run wrote. Every file the product writes (reports,
//   traces, figures, plots) goes through write_file_atomically, which does neither.
// Approach: write to a fresh name beside the target (same directory, so same file
//   system), loop over short writes and EINTR, fsync, check close, then rename over the
//   target; any failure removes the temporary and throws naming the target and errno's
//   text. The temporary is created with mode 0666 under the umask, as the file would be,
//   and takes an existing target's permission bits. Symlinks are followed hop by hop: the
//   last target is replaced and the links kept. A path that exists and is not a regular file cannot be
//   renamed over (a device, a FIFO): it is written in place, every write and the close
//   still checked, so /dev/full fails loudly; /dev/stdout, /dev/fd/N and the like (named
//   or linked to) are written through the descriptor, after what the program printed.
// Limitations: the directory is not fsynced after the rename (a crash right then may
//   keep the old file, never a partial one); written in place, a special file may have
//   taken part of the contents before an error.
#include "common/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>

#include "sublinear/error.hpp"

namespace sublinear {
namespace {

[[noreturn]] void fail(const std::string& path, int err, const char* doing = nullptr) {
  std::string what = "cannot write " + path;
  if (doing != nullptr) what += std::string(" (") + doing + ")";
  throw error(what + ": " + std::strerror(err));
}

// Writes all of `contents` to `fd`; 0 or errno.
int write_all(int fd, std::string_view contents) {
  const char* p = contents.data();
  std::size_t left = contents.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return 0;
}

// The descriptor a path names (/dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N), or
// -1. Opened by name, such a path would start a new offset at 0 (and O_TRUNC would empty
// a file the shell redirected there): it is written through the descriptor, where the
// program's own output goes.
int descriptor_of(const std::string& path) {
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (const char* prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    const std::string p(prefix);
    if (path.rfind(p, 0) != 0 || path.size() == p.size() || path.size() > p.size() + 9) continue;
    int fd = 0;
    for (std::size_t i = p.size(); i < path.size(); ++i) {
      if (path[i] < '0' || path[i] > '9') return -1;
      fd = fd * 10 + (path[i] - '0');
    }
    return fd;
  }
  return -1;
}

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Where a write to `given` lands: its symlinks followed hop by hop (the links are kept;
// their last target is written), and the descriptor of the first hop that names one.
struct destination {
  std::string path;
  int fd = -1;
};

destination resolve(const std::string& given) {
  destination d{given};
  for (int hop = 0; hop < 40; ++hop) {
    d.fd = descriptor_of(d.path);
    if (d.fd >= 0) return d;
    struct stat st {};
    if (::lstat(d.path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return d;
    char buf[PATH_MAX];
    const ssize_t n = ::readlink(d.path.c_str(), buf, sizeof buf - 1);
    if (n <= 0) return d;
    const std::string link(buf, static_cast<std::size_t>(n));
    d.path = link.front() == '/' ? link : directory_of(d.path) + "/" + link;
  }
  return d;
}

// A name beside `path` no other writer uses: pid, a per-process counter, and O_EXCL.
std::string temporary_beside(const std::string& path, int attempt) {
  static std::atomic<unsigned> counter{0};
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  return dir + "." + base + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++) + "." +
         std::to_string(attempt);
}

void write_in_place(const std::string& path, std::string_view contents, const std::string& given) {
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) fail(given, errno);
  if (const int err = write_all(fd, contents); err != 0) {
    ::close(fd);
    fail(given, err);
  }
  if (::close(fd) != 0 && errno != EINTR) fail(given, errno, "close");
}

}  // namespace

void write_file_atomically(const std::string& given, std::string_view contents) {
  if (given.empty()) throw error("cannot write a file with an empty name");
  const destination to = resolve(given);
  if (to.fd >= 0) {
    if (to.fd == 1) std::fflush(stdout);  // what the program printed before comes first
    if (to.fd == 2) std::fflush(stderr);
    if (const int err = write_all(to.fd, contents); err != 0) fail(given, err);
    return;
  }
  const std::string& path = to.path;
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) fail(given, EISDIR);
  if (exists && !S_ISREG(st.st_mode)) {
    write_in_place(path, contents, given);
    return;
  }
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 100; ++attempt) {
    tmp = temporary_beside(path, attempt);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST && errno != EINTR) {
      const int err = errno;
      fail(given, err, ("in " + directory_of(path)).c_str());
    }
  }
  if (fd < 0) fail(given, EEXIST, "no free temporary name");
  const auto abandon = [&](int err, const char* doing) {
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(given, err, doing);
  };
  if (exists && ::fchmod(fd, st.st_mode & 07777) != 0) abandon(errno, "permissions");
  if (const int err = write_all(fd, contents); err != 0) abandon(err, nullptr);
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) abandon(errno, "sync");
  if (::close(fd) != 0 && errno != EINTR) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(given, err, "close");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(given, err, "rename");
  }
}

void check_file_writable(const std::string& given) {
  if (given.empty()) throw error("cannot write a file with an empty name");
  const destination to = resolve(given);
  if (to.fd >= 0) {
    if (::fcntl(to.fd, F_GETFL) < 0) fail(given, errno);
    return;
  }
  const std::string& path = to.path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) fail(given, EISDIR);
    if (!S_ISREG(st.st_mode)) {
      if (::access(path.c_str(), W_OK) != 0) fail(given, errno);
      return;
    }
  }
  // The temporary the write will need: create it and remove it.
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string tmp = temporary_beside(path, attempt);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      return;
    }
    if (errno != EEXIST && errno != EINTR) fail(given, errno, ("in " + directory_of(path)).c_str());
  }
}

}  // namespace sublinear
