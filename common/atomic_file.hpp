// Writing a file the product produces (reports, traces, plots, JSON and CSV figures) so
// that a failed write is an error and never leaves a partial file behind
// (Note [Atomic file writes] in atomic_file.cpp).
#pragma once

#include <string>
#include <string_view>

#include "sublinear/export.h"

namespace sublinear {

// Writes `contents` to `path`. A regular file (or a path that does not exist yet) is
// written under a temporary name in the same directory, synced, closed and renamed over
// `path`: readers see the old file or the whole new one. A path that exists and is not a
// regular file (/dev/full, a FIFO) is written in place, and /dev/stdout, /dev/stderr and
// /dev/fd/N through their descriptor. Every write, sync and close is checked: a full disk,
// a missing directory or a read-only path throws sublinear::error naming `path` and the
// reason, and leaves an existing file as it was.
SUBLINEAR_API void write_file_atomically(const std::string& path, std::string_view contents);

// Throws sublinear::error, as write_file_atomically would, when `path` cannot be written
// (its directory is missing or read-only, or it is a directory), without changing it: for
// commands that write a file after minutes of work to refuse a bad path at once.
SUBLINEAR_API void check_file_writable(const std::string& path);

}  // namespace sublinear
