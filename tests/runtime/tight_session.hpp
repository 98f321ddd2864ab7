// The runtime tests' host stack (cli_test, report_test).
#pragma once

#include <cstddef>

#include "workloads/host_session.hpp"

namespace sublinear::runtime {

// The host stack with 4 KiB pages and one page per segment, so that mapped bytes follow
// live bytes: the test models hold a few MiB, which PyTorch's 2 MiB and 20 MiB segments
// would dwarf, leaving no room for any budget below the traced peak.
class tight_session : public workloads::host_session {
 public:
  tight_session() : host_session(options()) {}

 private:
  static workloads::host_session_options options() {
    workloads::host_session_options o;
    o.granularity = std::size_t{4} << 10;
    o.physical_capacity = std::size_t{2} << 30;
    o.page_segments = true;
    return o;
  }
};

}  // namespace sublinear::runtime
