// Dispatch of the compaction onto an engine (CPU or CUDA): from a kernel call
// (host/compact_call.h) to the CompactProblem of the values' element size. Elements are copied
// as raw words, so five instantiations cover every dtype. No ATen, like host/scan_dispatch.h.
//
// An Engine is a callable `engine(problem, geometry, layout)` (host/scan_dispatch.h).
#pragma once

#include "../core/compact_problems.h"
#include "compact_call.h"

namespace parprims::host {

template <class Word, class Engine>
void run_compact_words(const CompactCall& c, Engine& engine) {
  CompactProblem<Word> p;
  p.mask = c.mask;
  p.source = static_cast<const Word*>(c.source);
  p.values = static_cast<Word*>(c.values);
  p.indices = c.indices;
  p.count = c.count;
  p.capacity = c.capacity;
  engine(p, c.geometry, c.layout);
}

// Scans and scatters; the slots past the count are the caller's (see CompactRunner).
template <class Engine>
void dispatch_compact(const CompactCall& c, Engine engine) {
  switch (c.element_bytes) {
    case 1: return run_compact_words<CompactWord<1>>(c, engine);
    case 2: return run_compact_words<CompactWord<2>>(c, engine);
    case 4: return run_compact_words<CompactWord<4>>(c, engine);
    case 8: return run_compact_words<CompactWord<8>>(c, engine);
    case 16: return run_compact_words<CompactWord<16>>(c, engine);
    default: TORCH_CHECK(false, "x: elements of ", c.element_bytes, " bytes are not supported");
  }
}

}  // namespace parprims::host
