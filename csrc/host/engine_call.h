// What every kernel call of the scan engines carries besides its operands: the dtype the
// dispatch switches on, the geometry and the layout. The <family>_call.h headers derive their
// calls from it. c10's scalar types and no ATen: the CUDA kernel units include these headers
// (cuda/launch_context.h says why).
#pragma once

#include <c10/core/ScalarType.h>

#include "../core/scan_geometry.h"

namespace parprims::host {

struct EngineCall {
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  ScanGeometry geometry;
  ScanLayout layout;  // of every operand together: picks the CUDA kernel
};

}  // namespace parprims::host
