// Dispatch of the compaction onto an engine (CPU or CUDA): from a prepared call
// (host/compact_host.h) to the CompactProblem of the values' element size. Elements are copied
// as raw words, so five instantiations cover every dtype.
//
// An Engine is a callable `engine(problem, geometry, layout)` (host/scan_dispatch.h).
#pragma once

#include "../core/compact_problems.h"
#include "compact_host.h"

namespace parprims::host {

template <class Word, class Engine>
void run_compact_words(const PreparedCompact& c, Engine& engine) {
  CompactProblem<Word> p;
  p.mask = c.mask.const_data_ptr<bool>();
  if (c.source.defined()) {
    p.source = static_cast<const Word*>(c.source.const_data_ptr());
    p.values = static_cast<Word*>(c.values.data_ptr());
  }
  if (c.indices.defined()) p.indices = c.indices.data_ptr<int64_t>();
  p.count = c.count.data_ptr<int64_t>();
  p.capacity = c.capacity;
  // One dense row: the flat kernel on CUDA.
  const ScanLayout layout{/*dense_rows=*/true, /*rows_adjacent=*/false};
  engine(p, c.geometry, layout);
}

// Scans and scatters; the slots past the count are the caller's (see CompactRunner).
template <class Engine>
void dispatch_compact(const PreparedCompact& c, Engine engine) {
  if (!c.launch) return;
  // Positions only: any word type serves, no element is copied.
  const int64_t bytes = c.source.defined() ? c.source.element_size() : 1;
  switch (bytes) {
    case 1: return run_compact_words<CompactWord<1>>(c, engine);
    case 2: return run_compact_words<CompactWord<2>>(c, engine);
    case 4: return run_compact_words<CompactWord<4>>(c, engine);
    case 8: return run_compact_words<CompactWord<8>>(c, engine);
    case 16: return run_compact_words<CompactWord<16>>(c, engine);
    default: TORCH_CHECK(false, "x: elements of ", bytes, " bytes are not supported");
  }
}

}  // namespace parprims::host
