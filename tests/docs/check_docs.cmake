# Keeps the docs describing the present: README.md is at most MAX_README_LINES lines (250),
# and no file of the tree (README.md, docs/, sources, tests, scripts) holds a dated
# reference to past work. Run as
#   cmake -DROOT=<tree> [-DMAX_README_LINES=250] -P check_docs.cmake
#   cmake -DFIXTURE=<empty dir> -DMAX_README_LINES=5 -P check_docs.cmake
# Prints every violation with file:line and fails (exit 1) if there is any. FIXTURE first
# writes a tree with one violation of each kind there and checks it (the test that this
# check still finds them; the tree is written here, so no such text sits in the sources).
#
# A dated reference is the word "session" or "sessions" (any case) followed by a number,
# directly or after one space, hyphen or underscore: "session N", "sessions N-M", "since
# session N", also hyphenated or with an underscore. The regex is DATED below. History
# belongs in git log; docs and comments say what is true now (docs/architecture.md).
# Skipped: build trees (build*/), hidden folders, virtual environments and binary files.
cmake_minimum_required(VERSION 3.24)

if(FIXTURE)
  # The word is assembled, so that this file holds no dated reference itself.
  set(w "sess")
  string(APPEND w "ion")
  file(REMOVE_RECURSE "${FIXTURE}")
  file(MAKE_DIRECTORY "${FIXTURE}/docs")
  file(WRITE "${FIXTURE}/README.md" "line\nline\nline\nline\nline\nline\n")
  file(WRITE "${FIXTURE}/docs/notes.md" "Fixed in ${w} 12.\nSee ${w}s 30-31 for more.\nNo date here.\n")
  string(TOUPPER "${w}" W)
  file(WRITE "${FIXTURE}/code.cpp" "// Until ${W}-7 this was slow.\nint x;\n")
  set(ROOT "${FIXTURE}")
endif()
if(NOT ROOT)
  message(FATAL_ERROR "check_docs.cmake: pass -DROOT=<source tree> or -DFIXTURE=<dir>")
endif()
if(NOT DEFINED MAX_README_LINES)
  set(MAX_README_LINES 250)
endif()
set(DATED "[Ss][Ee][Ss][Ss][Ii][Oo][Nn][Ss]?[ _-]?[0-9]+")
set(TEXT_SUFFIXES .md .txt .json .cpp .hpp .h .cu .cuh .c .py .pyi .cmake .sh .toml .cfg .in .yml .yaml .html .svg .csv)

set(violations 0)
macro(report what)
  message("${what}")
  math(EXPR violations "${violations} + 1")
endmacro()

if(NOT EXISTS "${ROOT}/README.md")
  report("README.md: missing")
else()
  # Count newlines: file(STRINGS) would drop the empty lines.
  file(READ "${ROOT}/README.md" readme)
  string(REGEX MATCHALL "\n" newlines "${readme}")
  list(LENGTH newlines n)
  if(n GREATER MAX_README_LINES)
    report("README.md: ${n} lines, more than ${MAX_README_LINES}: move detail to docs/ and link it")
  endif()
endif()

# The files to scan: every text file outside build trees, hidden folders and venvs.
file(GLOB top RELATIVE "${ROOT}" "${ROOT}/*")
set(files)
foreach(entry ${top})
  if(entry MATCHES "^(build|\\.|venv)")
    continue()
  endif()
  if(IS_DIRECTORY "${ROOT}/${entry}")
    file(GLOB_RECURSE found RELATIVE "${ROOT}" "${ROOT}/${entry}/*")
    list(APPEND files ${found})
  else()
    list(APPEND files "${entry}")
  endif()
endforeach()

foreach(f ${files})
  if(f MATCHES "(^|/)(venv|__pycache__|node_modules)/" OR f MATCHES "\\.egg-info/")
    continue()
  endif()
  get_filename_component(name "${f}" NAME)
  get_filename_component(ext "${f}" LAST_EXT)
  if(NOT ext IN_LIST TEXT_SUFFIXES AND NOT name STREQUAL "CMakeLists.txt" AND NOT name STREQUAL "README")
    continue()
  endif()
  file(STRINGS "${ROOT}/${f}" hits REGEX "${DATED}")
  if(NOT hits)
    continue()
  endif()
  # Line numbers, for the message: read the file once more, line by line.
  file(STRINGS "${ROOT}/${f}" lines)
  set(lineno 0)
  foreach(line IN LISTS lines)
    math(EXPR lineno "${lineno} + 1")
    if(line MATCHES "${DATED}")
      string(SUBSTRING "${line}" 0 120 shown)
      report("${f}:${lineno}: dated reference \"${CMAKE_MATCH_0}\": ${shown}")
    endif()
  endforeach()
endforeach()

if(violations GREATER 0)
  message(FATAL_ERROR "${violations} docs violation(s): README.md at most ${MAX_README_LINES} lines, no dated "
                      "references (\"session N\") in the tree; say what is true now, history is in git log")
endif()
message(STATUS "docs check: README.md within ${MAX_README_LINES} lines, no dated references")
