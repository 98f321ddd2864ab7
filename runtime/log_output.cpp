#include "runtime/log_output.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sublinear/error.hpp"

namespace sublinear::runtime {

std::string log_file_error(const std::string& path, int err, bool existed) {
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  std::string problem, fix;
  switch (err) {
    case ENOENT:
      problem = "its directory " + dir + " does not exist";
      fix = "create it (mkdir -p " + dir + ")";
      break;
    case EACCES:
    case EPERM:
      problem = existed ? "the file is not writable" : "its directory " + dir + " is not writable";
      fix = existed ? "make it writable" : "make the directory writable";
      break;
    case EISDIR:
      problem = "it is a directory";
      fix = "name a file in it (" + path + (path.ends_with("/") ? "" : "/") + "sublinear.log)";
      break;
    case ENOTDIR:
      problem = "a part of " + dir + " is not a directory";
      break;
    case EROFS:
      problem = "its file system is read-only";
      break;
    default:
      problem = "the file cannot be opened";
  }
  return "SUBLINEAR_LOG: cannot open the log file " + path + " for appending: " + problem + " (" +
         std::strerror(err) + "); " + (fix.empty() ? "" : fix + ", ") +
         "give another path, or leave out ':PATH' to log to stderr";
}

log_output::log_output(const std::string& path) : path_(path) {
  if (path.empty()) return;
  const bool existed = ::access(path.c_str(), F_OK) == 0;
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) throw config_error("sublinear: " + log_file_error(path, errno, existed));
}

log_output::~log_output() {
  if (file_ != nullptr) std::fclose(file_);
}

void log_output::write(const std::string& line) noexcept {
  const std::lock_guard lock(mutex_);
  if (file_ != nullptr) {
    const bool ok = std::fputs(line.c_str(), file_) >= 0 && std::fputc('\n', file_) != EOF && std::fflush(file_) == 0;
    if (ok) return;
    const int err = errno;
    std::fclose(file_);
    file_ = nullptr;
    std::fprintf(stderr, "sublinear: SUBLINEAR_LOG: writing the log file %s failed: %s; logging to stderr from here\n",
                 path_.c_str(), std::strerror(err));
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace sublinear::runtime
