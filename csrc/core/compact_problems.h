// Stream compaction as a scan problem: predicate -> exclusive scan -> scatter, in one pass of
// the CPU scan engine. (CUDA runs the select kernel, cuda/engine/select.cuh, on the same
// CompactWord types: a tile's kept elements are staged and stored together there, which a
// per-position store cannot do.)
//
// The engine scans the keep flags with Add<int64_t> (exclusive), so each position receives the
// number of kept positions before it: for a kept position, its slot in the output. The store
// scatters the kept element (and its position) to that slot when the slot is below `capacity`;
// store_final receives the inclusive total at the last position: the count. The slots past the
// count are filled afterwards by the op (the count is only known on the device).
//
// Elements are copied as raw words of their size (CompactWord<Bytes>), so one instantiation
// serves every dtype of that size. Torch-free.
#pragma once

#include <cstdint>

#include "scan_problems.h"

namespace parprims {

// A 16-byte element (complex128) copied as two words.
struct alignas(8) Words16 {
  uint64_t lo, hi;
};

template <int Bytes>
struct CompactWordOf;
template <>
struct CompactWordOf<1> { using type = uint8_t; };
template <>
struct CompactWordOf<2> { using type = uint16_t; };
template <>
struct CompactWordOf<4> { using type = uint32_t; };
template <>
struct CompactWordOf<8> { using type = uint64_t; };
template <>
struct CompactWordOf<16> { using type = Words16; };

template <int Bytes>
using CompactWord = typename CompactWordOf<Bytes>::type;

// The bit pattern of a fill value in the values' dtype, filled by the host (at most 16 bytes).
struct FillBits {
  alignas(8) unsigned char bytes[16] = {};
};

// The arrays of one compaction, typed by element word (host/compact_dispatch.h fills them from
// a CompactCall): the kept positions of `mask` go to slots [0, capacity) in order, the element
// of `source` to `values` and the position to `indices`; `count` receives the number kept.
// `source`/`values` null: only the positions (and the count) are wanted; `indices` null: only
// the values. Shared by the CPU's scan problem below and the CUDA select kernel.
template <class Word>
struct CompactArrays {
  const bool* mask = nullptr;
  const Word* source = nullptr;
  Word* values = nullptr;
  int64_t* indices = nullptr;
  int64_t* count = nullptr;
  int64_t capacity = 0;
};

// One row of `len` positions (the flattened mask).
template <class Word>
struct CompactProblem : ProblemBase<Add<int64_t>>, CompactArrays<Word> {
  using Cursor = int64_t;  // unused: a single dense row
  using CompactArrays<Word>::mask;
  using CompactArrays<Word>::source;
  using CompactArrays<Word>::values;
  using CompactArrays<Word>::indices;
  using CompactArrays<Word>::count;
  using CompactArrays<Word>::capacity;

  explicit CompactProblem(const CompactArrays<Word>& arrays) : CompactArrays<Word>(arrays) {}

  PP_HD Cursor cursor(int64_t /*row*/) const { return 0; }
  PP_HD int64_t load(Cursor, int64_t pos) const { return mask[pos] ? 1 : 0; }
  PP_HD void store(Cursor, int64_t pos, int64_t slot) const {
    // The mask is read again rather than carried through the scan: the engine hands back only
    // the scanned value, and the second read hits the cache.
    if (!mask[pos] || slot >= capacity) return;
    if (values != nullptr) values[slot] = source[pos];
    if (indices != nullptr) indices[slot] = pos;
  }
  PP_HD void store_final(int64_t /*row*/, int64_t /*segment*/, int64_t total) const { *count = total; }
};

}  // namespace parprims
