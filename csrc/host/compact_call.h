// The compaction's kernel call: what host/compact_dispatch.h reads, filled from tensors by
// host/compact_host.cpp. No ATen (host/engine_call.h).
#pragma once

#include "../core/compact_problems.h"
#include "engine_call.h"

namespace parprims::host {

// One flat mask of geometry.len positions, scanned exclusively: slots [0, min(count,
// capacity)) receive the kept elements of `source` (raw words of `element_bytes`) and their
// positions, in order; `count` receives the number kept. The layout is one dense row (the flat
// kernel on CUDA); `dtype` is unused (elements are copied as words).
struct CompactCall : EngineCall {
  const bool* mask = nullptr;
  const void* source = nullptr;  // nullptr when only positions are wanted
  void* values = nullptr;        // (capacity,) of source's dtype; nullptr without source
  int64_t* indices = nullptr;    // (capacity,); nullptr when not wanted
  int64_t* count = nullptr;      // 0-d, zeroed
  int64_t capacity = 0;
  int64_t element_bytes = 1;     // 1, 2, 4, 8 or 16 (1 without source: no element is copied)
};

}  // namespace parprims::host
