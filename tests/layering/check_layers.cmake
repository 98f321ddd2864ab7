# Checks the layering of docs/architecture.md on a source tree: every product source's
# quoted #include names a folder its own layer may include, and no product source is
# longer than 1,000 lines. Run as
#   cmake -DROOT=<tree> [-DMAX_LINES=1000] -P check_layers.cmake
# Prints every violation and fails (exit 1) if there is any.
#
# Layers, lowest first. A folder may include itself and the folders after its name.
# `include` is include/sublinear/ (quoted as "sublinear/..."). The tracer may include the
# allocator's observer interface only (ALLOWED_FILES below), not the allocator itself.
cmake_minimum_required(VERSION 3.24)

set(LAYERS
  "include:include"
  "common:include"
  "device:common,include"
  "allocator:device,common,include"
  "policy:common,include"
  "tracer:device,policy,common,include"
  "runtime:tracer,policy,allocator,device,common,include"
  "workloads:allocator,device,common,include"
  "integrations:workloads,runtime,tracer,policy,allocator,device,common,include"
  "benchmarks:integrations,workloads,runtime,tracer,policy,allocator,device,common,include")
# Single headers of a higher layer that a folder may include: "folder:header".
set(ALLOWED_FILES
  "tracer:allocator/allocation_observer.hpp"
  "tracer:allocator/device_types.hpp")
if(NOT DEFINED MAX_LINES)
  set(MAX_LINES 1000)
endif()

if(NOT ROOT)
  message(FATAL_ERROR "check_layers.cmake: pass -DROOT=<source tree>")
endif()

set(folders)
foreach(entry ${LAYERS})
  string(REPLACE ":" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 below)
  string(REPLACE "," ";" below "${below}")
  set(may_${name} ${name} ${below})
  list(APPEND folders ${name})
endforeach()

# The folder an include path names: "sublinear/x.h" is include/.
function(layer_of path out)
  string(REGEX MATCH "^[^/]+" first "${path}")
  if(first STREQUAL "sublinear")
    set(first include)
  endif()
  set(${out} ${first} PARENT_SCOPE)
endfunction()

set(violations 0)
set(checked 0)
foreach(folder ${folders})
  set(dir ${ROOT}/${folder})
  if(folder STREQUAL "include")
    set(dir ${ROOT}/include/sublinear)
  endif()
  if(NOT IS_DIRECTORY ${dir})
    continue()
  endif()
  file(GLOB_RECURSE sources RELATIVE ${ROOT} ${dir}/*.cpp ${dir}/*.hpp ${dir}/*.h ${dir}/*.cu ${dir}/*.cuh)
  foreach(source ${sources})
    math(EXPR checked "${checked} + 1")
    file(STRINGS ${ROOT}/${source} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    # Lines are counted as newlines (file(STRINGS) would drop empty ones).
    file(READ ${ROOT}/${source} text)
    string(REGEX MATCHALL "\n" newlines "${text}")
    list(LENGTH newlines count)
    if(count GREATER MAX_LINES)
      message("${source}: ${count} lines; a product source has at most ${MAX_LINES}: split it along its components")
      math(EXPR violations "${violations} + 1")
    endif()
    foreach(line ${lines})
      if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\"")
        continue()
      endif()
      set(path ${CMAKE_MATCH_1})
      layer_of(${path} target)
      if(NOT target IN_LIST folders)
        # A path relative to the including file stays in its folder.
        get_filename_component(here ${ROOT}/${source} DIRECTORY)
        if(EXISTS ${here}/${path})
          continue()
        endif()
        message("${source}: #include \"${path}\" names no layer folder; include root-relative paths (\"policy/plan.hpp\")")
        math(EXPR violations "${violations} + 1")
        continue()
      endif()
      if(target IN_LIST may_${folder} OR "${folder}:${path}" IN_LIST ALLOWED_FILES)
        continue()
      endif()
      string(REPLACE ";" ", " may "${may_${folder}}")
      message("${source}: #include \"${path}\": ${folder}/ may include only ${may} (docs/architecture.md)")
      math(EXPR violations "${violations} + 1")
    endforeach()
  endforeach()
endforeach()

if(checked EQUAL 0)
  message(FATAL_ERROR "check_layers.cmake: no sources found under ${ROOT}")
endif()
if(violations GREATER 0)
  message(FATAL_ERROR "${violations} layering violation(s) in ${checked} sources")
endif()
message("layering: ${checked} sources, no include goes up a layer, none over ${MAX_LINES} lines")
