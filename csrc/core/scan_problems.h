// Problems: what a scan reads and writes, for the engines to drive.
//
// An engine scans `Monoid` over the values a problem loads, in the order and segments given by a
// ScanGeometry, and hands each result back to the problem. A problem provides
//   using Monoid;                       the operator (its value type is the scanned value)
//   struct Cursor; cursor(row)          per-row base offsets, computed once per row
//   load(cursor, pos) / store(cursor, pos, value)   one element at a physical position
//   at_head(value, row, segment)        the value of a segment's first element (initial states)
//   exclusive_head(row, segment)        the exclusive output at a segment's first element
//   store_final(row, segment, value)    the inclusive value at a segment's last element
//                                       (a no-op unless the problem has final states)
//   load_run<N>(cursor, pos, values) / store_run<N>(cursor, pos, values)
//                                       N consecutive physical positions at once (wide
//                                       accesses); false when not possible (strides, alignment)
// and optionally, for kernels that load a run ahead of its use (the row loop, the column
// kernel), with kHoldsRawRuns = true:
//   RawRun<N, Holder>                   a run as loaded, before conversion to values, its
//                                       elements held in Holder (vector_io.h's layouts)
//   load_raw_run(cursor, pos, raw)      like load_run (false when not possible)
//   load_raw(cursor, pos, k, raw)       element k of the run, from physical position pos
//   from_raw(raw, k)                    element k's value
// ProblemBase gives the defaults. Torch-free.
#pragma once

#include <type_traits>

#include "monoids.h"
#include "scan_geometry.h"
#include "vector_io.h"

namespace parprims {

template <class M>
struct ProblemBase {
  using Monoid = M;
  using Value = typename M::value_type;
  // Bytes of one element of each array a problem reads, where its arrays share one element
  // type; 0 otherwise (kernel policies size their tiles by it).
  static constexpr int kInputBytes = 0;
  // A reduction: nothing is written per element, only each segment's total (store_final).
  static constexpr bool kReductionOnly = false;
  // Runs loaded ahead of their use are held as loaded (RawRun), not as values.
  static constexpr bool kHoldsRawRuns = false;
  // A run holds more than its values (neighbours in time, inputs its store reads): kernels
  // that cap registers to fit more blocks on an SM leave such problems more of them.
  static constexpr bool kNeedsMoreRegisters = false;
  // store() reads inputs (affine_scan's backward reads h_{t-1}). Kernels that store a run
  // element by element then hand it over whole, store_steps<N>(cursor, first, step, values) at
  // positions first + k * step, so that its loads go out together: one by one, each load
  // waits behind the stores before it (they might alias), a memory round trip an element.
  static constexpr bool kStoreReadsInputs = false;
  PP_HD Value at_head(const Value& v, int64_t /*row*/, int64_t /*segment*/) const { return v; }
  PP_HD Value exclusive_head(int64_t /*row*/, int64_t /*segment*/) const { return M::identity(); }
  PP_HD void store_final(int64_t /*row*/, int64_t /*segment*/, const Value& /*v*/) const {}
  template <int N, class Cursor>
  PP_HD bool load_run(const Cursor&, int64_t, Value (&)[N]) const { return false; }
  template <int N, class Cursor>
  PP_HD bool store_run(const Cursor&, int64_t, const Value (&)[N]) const { return false; }
  // The CPU engine converts whole blocks of a row at once, through the problem's load_block
  // and store_block, when this is set (see ScanProblem).
  static constexpr bool kConvertsInBlocks = false;
  // Whether the engine may be handed packed sequences (offsets in the geometry). Problems that
  // never are (the one-scan backwards) say so, and the CUDA engine compiles no packed instance
  // of its row loop for them (the flat kernel would still take such a call).
  static constexpr bool kPackedSequences = true;
};

// Whether a problem replaces ProblemBase's heads (initial states: at_head, exclusive_head) or
// its final states (store_final), read from the type of the member: the engines skip their
// per-tile handling of what a problem does not have.
template <class P>
constexpr bool kHasHeads =
    !std::is_same_v<decltype(&P::at_head), decltype(&ProblemBase<typename P::Monoid>::at_head)> ||
    !std::is_same_v<decltype(&P::exclusive_head), decltype(&ProblemBase<typename P::Monoid>::exclusive_head)>;
template <class P>
constexpr bool kHasFinalStates =
    !std::is_same_v<decltype(&P::store_final), decltype(&ProblemBase<typename P::Monoid>::store_final)>;

struct TwoCursor {
  int64_t in;
  int64_t out;
};

// Reads `In`, scans in `M::value_type` (float for half inputs), writes `Out` (ScanValues
// converts both ways).
template <class M, class In, class Out>
struct ScanProblem : ProblemBase<M> {
  using Value = typename M::value_type;
  using Values = ScanValues<M>;
  static constexpr int kInputBytes = static_cast<int>(sizeof(In));
  using Cursor = TwoCursor;
  const In* in = nullptr;
  Out* out = nullptr;
  RowIndexer in_rows, out_rows;

  PP_HD Cursor cursor(int64_t row) const { return {in_rows.row_offset(row), out_rows.row_offset(row)}; }
  PP_HD Value load(const Cursor& c, int64_t pos) const {
    return Values::lift(in[c.in + pos * in_rows.stride_len]);
  }
  PP_HD void store(const Cursor& c, int64_t pos, const Value& v) const {
    out[c.out + pos * out_rows.stride_len] = Values::template result<Out>(v);
  }
  template <int N>
  PP_HD bool load_run(const Cursor& c, int64_t pos, Value (&values)[N]) const {
    In raw[N];
    if (in_rows.stride_len != 1 || !load_wide<N>(in + c.in + pos, raw)) return false;
    PP_UNROLL
    for (int i = 0; i < N; ++i) values[i] = Values::lift(raw[i]);
    return true;
  }
  // Held as loaded in every dtype: no slower than values for float32 (H200: (12288, 2048) add
  // 0.060 ms either way), and a bfloat16 input is then not converted at its load.
  static constexpr bool kHoldsRawRuns = true;
  template <int N, template <class, int> class Holder>
  using RawRun = Holder<In, N>;
  template <class Raw>
  PP_HD bool load_raw_run(const Cursor& c, int64_t pos, Raw& raw) const {
    return in_rows.stride_len == 1 && raw.load_wide(in + c.in + pos);
  }
  template <class Raw>
  PP_HD void load_raw(const Cursor& c, int64_t pos, int k, Raw& raw) const {
    raw.set(k, in[c.in + pos * in_rows.stride_len]);
  }
  template <class Raw>
  PP_HD Value from_raw(const Raw& raw, int k) const {
    return Values::lift(raw.get(k));
  }
  template <int N>
  PP_HD bool store_run(const Cursor& c, int64_t pos, const Value (&values)[N]) const {
    if (out_rows.stride_len != 1) return false;
    Out raw[N];
    PP_UNROLL
    for (int i = 0; i < N; ++i) raw[i] = Values::template result<Out>(values[i]);
    return store_wide<N>(out + c.out + pos, raw);
  }
  // The CPU engine converts half inputs and outputs (2-byte floats scanned in float) a block of
  // n positions [pos, pos + n) at a time, in loops the compiler vectorizes: a bfloat16 store
  // rounds, several integer operations an element, which cost more than the combine when done
  // one by one inside the scan's chain (2 cores: (192, 2048) add 0.26 -> 0.14 ms). Not for
  // float32 accumulated in double, whose conversion is one instruction folded into the load:
  // blocks made its long rows 2x slower. False (nothing done) when the row is strided.
  static constexpr bool kConvertsInBlocks = (sizeof(In) == 2 || sizeof(Out) == 2) && std::is_floating_point_v<Value>;
  bool load_block(const Cursor& c, int64_t pos, int64_t n, Value* values) const {
    if (in_rows.stride_len != 1) return false;
    const In* from = in + c.in + pos;
    for (int64_t i = 0; i < n; ++i) values[i] = Values::lift(from[i]);
    return true;
  }
  bool store_block(const Cursor& c, int64_t pos, int64_t n, const Value* values) const {
    if (out_rows.stride_len != 1) return false;
    Out* to = out + c.out + pos;
    for (int64_t i = 0; i < n; ++i) to[i] = Values::template result<Out>(values[i]);
    return true;
  }
};

// max/min scans that also report, for every output, the position along the scanned dimension
// of the element it came from (-1 for the identity of an exclusive scan).
template <class M, class In>
struct ScanWithIndicesProblem : ProblemBase<M> {
  using Value = typename M::value_type;
  using Scalar = decltype(Value{}.value);
  struct Cursor {
    int64_t in, out, index;
  };
  const In* in = nullptr;
  In* out = nullptr;
  int64_t* index = nullptr;
  RowIndexer in_rows, out_rows, index_rows;

  PP_HD Cursor cursor(int64_t row) const {
    return {in_rows.row_offset(row), out_rows.row_offset(row), index_rows.row_offset(row)};
  }
  PP_HD Value load(const Cursor& c, int64_t pos) const {
    return {static_cast<Scalar>(in[c.in + pos * in_rows.stride_len]), pos};
  }
  PP_HD void store(const Cursor& c, int64_t pos, const Value& v) const {
    out[c.out + pos * out_rows.stride_len] = static_cast<In>(v.value);
    index[c.index + pos * index_rows.stride_len] = v.index;
  }
};

// The bicyclic monoid over int64 pairs (p, q): the exact non-commutative test operator.
struct BicyclicProblem : ProblemBase<Bicyclic> {
  struct Cursor {
    int64_t p_in, q_in, p_out, q_out;
  };
  const int64_t* p_in = nullptr;
  const int64_t* q_in = nullptr;
  int64_t* p_out = nullptr;
  int64_t* q_out = nullptr;
  RowIndexer p_in_rows, q_in_rows, p_out_rows, q_out_rows;

  PP_HD Cursor cursor(int64_t row) const {
    return {p_in_rows.row_offset(row), q_in_rows.row_offset(row), p_out_rows.row_offset(row),
            q_out_rows.row_offset(row)};
  }
  PP_HD Value load(const Cursor& c, int64_t pos) const {
    return {p_in[c.p_in + pos * p_in_rows.stride_len], q_in[c.q_in + pos * q_in_rows.stride_len]};
  }
  PP_HD void store(const Cursor& c, int64_t pos, const Value& v) const {
    p_out[c.p_out + pos * p_out_rows.stride_len] = v.p;
    q_out[c.q_out + pos * q_out_rows.stride_len] = v.q;
  }
};

}  // namespace parprims
