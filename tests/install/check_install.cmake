# Note [Install layout] (CMakeLists.txt), checked end to end:
#   cmake -DMODE=install -DBUILD=<build> -DSOURCE=<source> -DWORK=<scratch dir> -DVERSION=<v>
#         -DGENERATOR=<generator> -DLIBDIR=<CMAKE_INSTALL_LIBDIR> -DBINDIR=<CMAKE_INSTALL_BINDIR> -P check_install.cmake
#     installs the build into a fresh prefix, builds tests/install/consumer against it with
#     find_package(sublinear) and runs it, and runs the installed `sublinear run --print-env`,
#     which must name the installed preload library;
#   cmake -DMODE=subproject -DSOURCE=<source> -DWORK=<scratch dir> -DGENERATOR=<generator> -P check_install.cmake
#     configures tests/install/subproject, which adds the source tree with add_subdirectory.
cmake_minimum_required(VERSION 3.24)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 600)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "check_install: ${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
if(MODE STREQUAL "install")
  set(prefix ${WORK}/prefix)
  run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix})
  foreach(file ${BINDIR}/sublinear ${LIBDIR}/libsublinear.so ${LIBDIR}/libsublinear_preload.so
               include/sublinear/sublinear.h include/sublinear/version.h ${LIBDIR}/cmake/sublinear/sublinearConfig.cmake)
    if(NOT EXISTS ${prefix}/${file})
      message(FATAL_ERROR "check_install: the install has no ${file}")
    endif()
  endforeach()

  run("configuring the consumer" ${CMAKE_COMMAND} -S ${SOURCE}/tests/install/consumer -B ${WORK}/consumer
      -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
  run("building the consumer" ${CMAKE_COMMAND} --build ${WORK}/consumer)
  run("running the consumer" ${WORK}/consumer/consumer)
  if(NOT out STREQUAL "header ${VERSION} library ${VERSION}\n")
    message(FATAL_ERROR "check_install: the consumer printed '${out}', expected header and library ${VERSION}")
  endif()
  file(READ ${WORK}/consumer/imported.txt imported)
  if(NOT imported STREQUAL "cli=${prefix}/${BINDIR}/sublinear\npreload=${prefix}/${LIBDIR}/libsublinear_preload.so\n")
    message(FATAL_ERROR "check_install: the exported targets point elsewhere:\n${imported}")
  endif()

  run("the installed sublinear --version" ${prefix}/${BINDIR}/sublinear --version)
  if(NOT out STREQUAL "sublinear ${VERSION}\n")
    message(FATAL_ERROR "check_install: the installed sublinear --version printed '${out}'")
  endif()
  run("the installed sublinear run" ${CMAKE_COMMAND} -E env --unset=LD_PRELOAD --unset=CUDA_INJECTION64_PATH
      ${prefix}/${BINDIR}/sublinear run --print-env -- true)
  file(REAL_PATH ${prefix}/${LIBDIR}/libsublinear_preload.so installed_preload)
  string(FIND "${out}" "LD_PRELOAD=${installed_preload}\n" at)
  if(at LESS 0)
    message(FATAL_ERROR "check_install: the installed sublinear run does not preload ${installed_preload}:\n${out}")
  endif()
  message(STATUS "install: find_package(sublinear) builds and runs a consumer; sublinear run finds ${LIBDIR}")
elseif(MODE STREQUAL "subproject")
  run("configuring a parent project" ${CMAKE_COMMAND} -S ${SOURCE}/tests/install/subproject -B ${WORK}/parent
      -G ${GENERATOR} -DSUBLINEAR_SOURCE=${SOURCE} -DSUBLINEAR_CUDA=OFF)
  message(STATUS "${out}")
else()
  message(FATAL_ERROR "check_install: pass -DMODE=install or -DMODE=subproject")
endif()
