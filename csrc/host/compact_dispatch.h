// Dispatch of the compaction by element size (elements are copied as raw words), and onto a
// scan engine: from a kernel call (host/compact_call.h) to the CompactProblem of the values'
// word. The CPU runs the problem on its scan engine; CUDA runs the select kernel
// (cuda/engine/select.cuh) on the same call. No ATen, like host/scan_dispatch.h.
//
// An Engine is a callable `engine(problem, geometry, layout)` (host/scan_dispatch.h).
#pragma once

#include "../core/compact_problems.h"
#include "compact_call.h"

namespace parprims::host {

// Calls f(WordTag<Bytes>{}) for an element size of 1, 2, 4, 8 or 16 bytes: elements are
// copied as raw words, so five instantiations cover every dtype.
template <int Bytes>
struct WordTag {
  using type = CompactWord<Bytes>;
};

template <class F>
void with_compact_word(int64_t element_bytes, F&& f) {
  switch (element_bytes) {
    case 1: return f(WordTag<1>{});
    case 2: return f(WordTag<2>{});
    case 4: return f(WordTag<4>{});
    case 8: return f(WordTag<8>{});
    case 16: return f(WordTag<16>{});
    default: TORCH_CHECK(false, "x: elements of ", element_bytes, " bytes are not supported");
  }
}

template <class Word>
CompactArrays<Word> typed_arrays(const CompactCall& c) {
  CompactArrays<Word> a;
  a.mask = c.mask;
  a.source = static_cast<const Word*>(c.source);
  a.values = static_cast<Word*>(c.values);
  a.indices = c.indices;
  a.count = c.count;
  a.capacity = c.capacity;
  return a;
}

// Scans and scatters on a scan engine (the CPU's); the slots past the count are the caller's
// (see CompactRunner).
template <class Engine>
void dispatch_compact(const CompactCall& c, Engine engine) {
  with_compact_word(c.element_bytes, [&](auto tag) {
    using Word = typename decltype(tag)::type;
    engine(CompactProblem<Word>(typed_arrays<Word>(c)), c.geometry, c.layout);
  });
}

}  // namespace parprims::host
