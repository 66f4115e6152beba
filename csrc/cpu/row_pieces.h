// How the CPU engines cut long rows into pieces: the scan's chunks and spans, the reductions'
// pieces. Torch-free.
#pragma once

#include <cstdint>

namespace parprims::cpu {

// The piece of a long row that one task scans in the three-phase scan (rows up to twice this
// are never split), and the work of one task when rows are scanned in parallel.
constexpr int64_t kRowChunk = 1 << 15;
// The stretch of a long row whose chunks are scanned together (both passes while it is in cache).
constexpr int64_t kSpan = 1 << 20;

// The chunks of a span [begin, begin + len) of a long row: about kRowChunk positions each, a
// multiple of `multiple` of them, lengths differing by at most one. Chunk c is [at(c), at(c + 1)).
struct ChunkBounds {
  int64_t begin, count, quotient, remainder;
  ChunkBounds(int64_t begin_, int64_t len, int64_t multiple) : begin(begin_) {
    count = ((len + kRowChunk - 1) / kRowChunk + multiple - 1) / multiple * multiple;
    quotient = len / count;
    remainder = len % count;
  }
  int64_t at(int64_t c) const { return begin + c * quotient + c * remainder / count; }
};

}  // namespace parprims::cpu
