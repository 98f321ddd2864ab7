# sublinear_warnings(target): the project's warning set, errors with SUBLINEAR_WERROR.
function(sublinear_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wpedantic)
  if(SUBLINEAR_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
