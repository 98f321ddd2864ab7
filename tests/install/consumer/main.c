/* Prints the header's version and the library's: an install must hold one release. */
#include <stdio.h>

#include <sublinear/sublinear.h>

int main(void) {
  printf("header %s library %s\n", SUBLINEAR_VERSION_STRING, sublinear_version());
  return sublinear_check_setting("SUBLINEAR_BUDGET", "8GiB") == 0 ? 0 : 1;
}
