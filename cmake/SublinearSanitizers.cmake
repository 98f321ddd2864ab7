# Global sanitizer flags: SUBLINEAR_SANITIZE=address gives ASan+UBSan, =thread gives TSan,
# =fuzzer ASan+UBSan with libFuzzer's coverage for the fuzz targets (tests/fuzz, built and
# run by scripts/fuzz.sh; Clang only).
if(SUBLINEAR_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(SUBLINEAR_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(SUBLINEAR_SANITIZE STREQUAL "fuzzer")
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "SUBLINEAR_SANITIZE=fuzzer needs Clang (-DCMAKE_CXX_COMPILER=clang++; scripts/fuzz.sh sets it)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(NOT SUBLINEAR_SANITIZE STREQUAL "")
  message(FATAL_ERROR "SUBLINEAR_SANITIZE must be '', 'address', 'thread' or 'fuzzer' (got '${SUBLINEAR_SANITIZE}')")
endif()
