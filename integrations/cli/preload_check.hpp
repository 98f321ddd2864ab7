// What `sublinear run` checks about the library it preloads, before the command starts.
#pragma once

#include <string>

namespace sublinear::cli {

// The symbol every sublinear preload library exports (integrations/preload/preload.cpp):
// a NUL-terminated string holding the SUBLINEAR_VERSION_STRING it was built with.
inline constexpr const char* kPreloadMarker = "sublinear_preload_version";

// Note [Preload library check]
// Rationale: ld.so skips an LD_PRELOAD entry it cannot load with one "ignored" line and
//   runs the program anyway: `sublinear run --library /etc/passwd -- train` would train
//   for hours without sublinear. Whatever is named must be refused before anything runs.
// Approach: the file is read as ELF, without loading it (loading runs its constructors in
//   this process): a 64-bit shared object for this machine whose dynamic symbol table
//   defines kPreloadMarker, and whose marker holds this program's version (a library
//   from another build may read other settings). The marker's string is found through
//   the section that holds the symbol.
// Limitations: a library that passes can still fail to load in the child (a dependency
//   missing there); `sublinear run` then notices that the child never loaded it (Note
//   [Run supervision] in supervise.hpp).
//
// "" when `path` is a sublinear preload library of this version; otherwise why not, as a
// sentence naming the file.
std::string preload_library_problem(const std::string& path);

}  // namespace sublinear::cli
