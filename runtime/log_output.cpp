#include "runtime/log_output.hpp"

#include <cerrno>
#include <cstring>

#include "sublinear/error.hpp"

namespace sublinear::runtime {

log_output::log_output(const std::string& path) : path_(path) {
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) {
    throw config_error("sublinear: SUBLINEAR_LOG: cannot open the log file " + path + " for appending: " +
                       std::strerror(errno) + "; give a writable path, or leave out ':PATH' to log to stderr");
  }
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
