// Spans: when a kernel whose blocks each walk whole rows (the row-loop and column kernels)
// would have too few rows to fill the GPU, each row is cut into spans of whole tiles that run
// in parallel. A summary pass (the same kernel, storing no output) writes each span's total, a
// small kernel scans those totals into the carry entering each span, and the full pass starts
// every span from its carry. The summary pass reads the inputs a second time, so spans are
// taken only when most of the GPU would idle without them. The order of every combine is
// fixed: results do not depend on timing.
#pragma once

#include "block.cuh"
#include "policy.cuh"

namespace parprims::cuda {

// How each row is cut, for every pass; computed on the host.
struct SpanPlan {
  int64_t count = 1;        // spans per row
  int64_t length = 0;       // positions per span, whole tiles (the last span may be shorter)
  void* totals = nullptr;   // (count - 1, rows) values: each span's total after the summary
                            // pass, then (after span_carry_kernel) the carry out of it

  // Rows of `len` not cut: one span a row.
  static SpanPlan whole_rows(int64_t len) {
    SpanPlan plan;
    plan.length = len;
    return plan;
  }

  // The positions [begin, end) of span `span` in a row of `len`.
  __host__ __device__ int64_t begin(int64_t span) const { return span * length; }
  __host__ __device__ int64_t end(int64_t span, int64_t len) const {
    return (span + 1) * length < len ? (span + 1) * length : len;
  }
};

// The spans for `units` blocks' worth of rows of `len` positions, on a GPU that runs `resident`
// blocks at once (about `span_waves` spans a block): none (one span) when the units fill
// `kSpanFreeSlotsFraction` of the slots over their waves, or when rows are too short to cut.
inline SpanPlan plan_spans(int64_t units, int64_t len, int64_t tile_length, int64_t resident,
                           int span_waves = kSpanWaves) {
  SpanPlan plan = SpanPlan::whole_rows(len);
  const int64_t waves = (units + resident - 1) / resident;
  if (static_cast<double>(units) >= kSpanFreeSlotsFraction * static_cast<double>(waves * resident)) return plan;
  const int64_t tiles = (len + tile_length - 1) / tile_length;
  int64_t spans = (span_waves * resident + units - 1) / units;
  if (spans > tiles / kMinSpanTiles) spans = tiles / kMinSpanTiles;
  if (spans <= 1) return plan;
  plan.length = (tiles + spans - 1) / spans * tile_length;
  plan.count = (len + plan.length - 1) / plan.length;
  return plan;
}

// Between the passes: turns each row's span totals into the carries out of them (an
// inclusive scan over spans, in place). A block per row: each thread folds a contiguous share
// of the spans, the block scans the threads' folds, and each thread rewalks its share from its
// prefix (a row may have thousands of spans: one thread walking them in turn took most of a
// call's time). `Mon` is the monoid of the totals.
constexpr int kSpanCarryThreads = 128;

template <class Mon>
__global__ void __launch_bounds__(kSpanCarryThreads) span_carry_kernel(const SpanPlan plan, int64_t rows) {
  using T = typename Mon::value_type;
  using Scan = BlockScan<Mon, kSpanCarryThreads>;
  __shared__ typename Scan::Storage storage;
  auto* totals = static_cast<Words<T>*>(plan.totals);
  const int64_t count = plan.count - 1;
  const int64_t share = (count + kSpanCarryThreads - 1) / kSpanCarryThreads;
  const int64_t lo = threadIdx.x * share;
  const int64_t hi = lo + share < count ? lo + share : count;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    T part = Mon::identity();
    for (int64_t s = lo; s < hi; ++s) part = Mon::combine(part, totals[s * rows + row].value);
    T block_total;
    T running = Scan::exclusive(storage, part, block_total);
    for (int64_t s = lo; s < hi; ++s) {
      running = Mon::combine(running, totals[s * rows + row].value);
      totals[s * rows + row].value = running;
    }
    __syncthreads();  // the next row's scan reuses the storage
  }
}

}  // namespace parprims::cuda
