// The CPU engine as the callable that the typed dispatch drives.
#pragma once

#include "engine.h"

namespace parprims::cpu {

struct Engine {
  static constexpr bool kIsCuda = false;  // selects the accumulate type (host/scan_dispatch.h)
  template <class P>
  void operator()(const P& problem, const ScanGeometry& g, const ScanLayout& /*layout*/) const {
    scan(problem, g);
  }
};

}  // namespace parprims::cpu
