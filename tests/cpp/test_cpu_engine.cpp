// The CPU engine (csrc/cpu/engine.h) driven directly, without ATen tensors: problems over plain
// arrays, exact monoids (bicyclic: non-commutative; affine over small integers with
// initial and final states; int64 add), compared with a sequential loop with zero tolerance. Covers short rows,
// long rows through the three-phase chunked scan (> 2 * kRowChunk), packed segments with empty
// ones and segments across chunk boundaries, exclusive, reverse, int32 and int64 offsets, and
// strided (transposed) layouts. Outputs are poisoned, so an unwritten element fails.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/affine_problems.h"
#include "core/scan_problems.h"
#include "cpu/engine.h"

namespace parprims {
namespace {

constexpr int64_t kPoison = -777777;
using cpu::kRowChunk;

// ---- shapes ---------------------------------------------------------------------------------

// `rows` rows of length `len`: row-major (row r at r*len, stride 1 along the scan) or
// transposed (position t of row r at t*rows + r: the scanned dimension is the outer one).
struct Shape {
  int64_t rows = 1;
  int64_t len = 0;
  bool transposed = false;

  int64_t at(int64_t row, int64_t pos) const { return transposed ? pos * rows + row : row * len + pos; }
  int64_t size() const { return rows * len; }
  RowIndexer indexer() const {
    RowIndexer r;
    r.ndim = 1;
    r.sizes[0] = rows;
    r.strides[0] = transposed ? 1 : len;
    r.stride_len = transposed ? rows : 1;
    return r;
  }
};

struct Case {
  Shape shape;
  std::optional<std::vector<int64_t>> offsets;  // none: each row is one segment
  bool offsets_int32 = false;
  bool exclusive = false;
  bool reverse = false;

  std::string describe() const {
    std::ostringstream s;
    s << "rows=" << shape.rows << " len=" << shape.len << (shape.transposed ? " transposed" : "")
      << " segments=" << (offsets ? static_cast<int64_t>(offsets->size()) - 1 : -1)
      << (offsets_int32 ? " (int32)" : "") << " exclusive=" << exclusive << " reverse=" << reverse;
    return s.str();
  }
};

// Owns the offsets storage that a geometry points into.
struct GeometryHolder {
  std::vector<int64_t> o64;
  std::vector<int32_t> o32;
  ScanGeometry g;

  explicit GeometryHolder(const Case& c) {
    g.rows = c.shape.rows;
    g.len = c.shape.len;
    g.exclusive = c.exclusive;
    g.reverse = c.reverse;
    if (c.offsets) {
      g.segments.num_segments = static_cast<int64_t>(c.offsets->size()) - 1;
      g.segments.offsets_are_int64 = !c.offsets_int32;
      if (c.offsets_int32) {
        o32.assign(c.offsets->begin(), c.offsets->end());
        g.segments.offsets = o32.data();
      } else {
        o64 = *c.offsets;
        g.segments.offsets = o64.data();
      }
    }
  }
};

std::vector<int64_t> segment_bounds(const Case& c) {
  return c.offsets ? *c.offsets : std::vector<int64_t>{0, c.shape.len};
}

// Calls f(segment, pos) for the positions of each segment in scan order, with `first` set at a
// segment's first element.
template <class F>
void for_each_in_scan_order(const Case& c, F&& f) {
  const auto bounds = segment_bounds(c);
  for (size_t k = 0; k + 1 < bounds.size(); ++k) {
    const int64_t s = bounds[k], e = bounds[k + 1];
    for (int64_t i = 0; i < e - s; ++i) f(static_cast<int64_t>(k), c.reverse ? e - 1 - i : s + i, i == 0);
  }
}

// Runs the engine twice: through cpu::scan (whichever strategy it picks) and, for rows longer
// than one chunk, through the chunked three-phase path of every row explicitly.
template <class P, class Reset>
void run_both(const P& problem, const ScanGeometry& g, Reset reset, const std::function<void(const char*)>& check) {
  reset();
  cpu::scan(problem, g);
  check("cpu::scan");
  if (g.len > kRowChunk && g.rows > 0) {
    reset();
    const cpu::RowScanner<P> scanner{problem, g};
    for (int64_t row = 0; row < g.rows; ++row) scanner.chunked_row(row);
    check("chunked_row");
    reset();
    for (int64_t row = 0; row < g.rows; ++row) scanner.whole_row(row);
    check("whole_row");
  }
}

// ---- the bicyclic monoid: exact and non-commutative --------------------------------------------

void check_bicyclic(const Case& c, unsigned seed = 0) {
  SCOPED_TRACE(c.describe());
  const Shape& sh = c.shape;
  std::mt19937_64 rng(seed + 17 * sh.len + sh.rows);
  std::uniform_int_distribution<int64_t> dist(0, 3);
  std::vector<int64_t> p(sh.size()), q(sh.size());
  for (auto& v : p) v = dist(rng);
  for (auto& v : q) v = dist(rng);

  // The sequential loop.
  std::vector<int64_t> want_p(sh.size(), kPoison), want_q(sh.size(), kPoison);
  for (int64_t row = 0; row < sh.rows; ++row) {
    Bicyclic::value_type acc = Bicyclic::identity();
    for_each_in_scan_order(c, [&](int64_t, int64_t pos, bool first) {
      if (first) acc = Bicyclic::identity();
      const int64_t i = sh.at(row, pos);
      if (c.exclusive) want_p[i] = acc.p, want_q[i] = acc.q;
      acc = Bicyclic::combine(acc, {p[i], q[i]});
      if (!c.exclusive) want_p[i] = acc.p, want_q[i] = acc.q;
    });
  }

  GeometryHolder geo(c);
  std::vector<int64_t> out_p, out_q;
  BicyclicProblem problem;
  problem.p_in = p.data();
  problem.q_in = q.data();
  problem.p_in_rows = problem.q_in_rows = problem.p_out_rows = problem.q_out_rows = sh.indexer();
  auto reset = [&] {
    out_p.assign(sh.size(), kPoison);
    out_q.assign(sh.size(), kPoison);
    problem.p_out = out_p.data();
    problem.q_out = out_q.data();
  };
  run_both(problem, geo.g, reset, [&](const char* path) {
    SCOPED_TRACE(path);
    int64_t bad = 0;
    for (int64_t i = 0; i < sh.size() && bad < 5; ++i) {
      if (out_p[i] != want_p[i] || out_q[i] != want_q[i]) {
        ADD_FAILURE() << "element " << i << ": got (" << out_p[i] << ", " << out_q[i] << "), want ("
                      << want_p[i] << ", " << want_q[i] << ")";
        ++bad;
      }
    }
  });
}

// ---- affine with initial and final states, exact ------------------------------------------------

// AffineProblem over doubles holding small integers (gates in {-1, 0, 1}), so every value is
// exact and the comparison has zero tolerance.
void check_affine(const Case& c, bool with_initial, unsigned seed = 0) {
  SCOPED_TRACE(c.describe() + (with_initial ? " initial" : ""));
  const Shape& sh = c.shape;
  const auto bounds = segment_bounds(c);
  const int64_t segments = static_cast<int64_t>(bounds.size()) - 1;
  std::mt19937_64 rng(seed + 31 * sh.len + sh.rows);
  std::uniform_int_distribution<int> gate(-1, 1), input(-2, 2), init(-9, 9);
  std::vector<double> a(sh.size()), b(sh.size()), h0(segments * sh.rows);
  for (auto& v : a) v = gate(rng);
  for (auto& v : b) v = input(rng);
  for (auto& v : h0) v = init(rng);

  const double poison = static_cast<double>(kPoison);
  std::vector<double> want_h(sh.size(), poison), want_final(segments * sh.rows, poison);
  for (int64_t row = 0; row < sh.rows; ++row) {
    double h = 0;
    for_each_in_scan_order(c, [&](int64_t seg, int64_t pos, bool first) {
      if (first) h = with_initial ? h0[seg * sh.rows + row] : 0.0;
      const int64_t i = sh.at(row, pos);
      if (c.exclusive) want_h[i] = h;
      h = a[i] * h + b[i];
      if (!c.exclusive) want_h[i] = h;
      const bool last = c.reverse ? pos == bounds[seg] : pos == bounds[seg + 1] - 1;
      if (last) want_final[seg * sh.rows + row] = h;
    });
  }

  GeometryHolder geo(c);
  std::vector<double> out_h, out_final;
  AffineProblem<double, double> problem;
  problem.a = a.data();
  problem.b = b.data();
  problem.initial = with_initial ? h0.data() : nullptr;
  problem.rows = sh.rows;
  problem.a_rows = problem.b_rows = problem.h_rows = sh.indexer();
  auto reset = [&] {
    out_h.assign(sh.size(), poison);
    out_final.assign(segments * sh.rows, poison);  // empty segments keep the poison
    problem.h = out_h.data();
    problem.final_state = out_final.data();
  };
  run_both(problem, geo.g, reset, [&](const char* path) {
    SCOPED_TRACE(path);
    int64_t bad = 0;
    for (int64_t i = 0; i < sh.size() && bad < 5; ++i) {
      if (out_h[i] != want_h[i]) {
        ADD_FAILURE() << "h[" << i << "] = " << out_h[i] << ", want " << want_h[i];
        ++bad;
      }
    }
    for (int64_t i = 0; i < segments * sh.rows && bad < 10; ++i) {
      if (out_final[i] != want_final[i]) {
        ADD_FAILURE() << "final[" << i << "] = " << out_final[i] << ", want " << want_final[i];
        ++bad;
      }
    }
  });
}

// ---- the cases ------------------------------------------------------------------------------

// Offsets over `len` with empty segments at the start, in the middle and at the end.
std::vector<int64_t> offsets_with_empties(int64_t len) {
  std::vector<int64_t> o{0, 0};
  if (len >= 3) {
    o.push_back(1);
    o.push_back(len / 3);
    o.push_back(len / 3);  // empty
    o.push_back(len / 2);
  }
  o.push_back(len);
  o.push_back(len);  // empty at the end
  return o;
}

// Random segment lengths (a third of them empty) summing to `len`.
std::vector<int64_t> random_offsets(int64_t len, int64_t mean, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, 2 * mean);
  std::bernoulli_distribution empty(1.0 / 3);
  std::vector<int64_t> o{0};
  while (o.back() < len) o.push_back(std::min(len, o.back() + (empty(rng) ? 0 : dist(rng))));
  o.push_back(len);
  return o;
}

// Segments that start exactly at, end exactly at, and straddle the chunked path's first chunk
// boundaries, an empty one on each.
std::vector<int64_t> chunk_boundary_offsets(int64_t len) {
  const cpu::ChunkBounds bounds(0, std::min(len, cpu::kSpan), cpu::RowScanner<BicyclicProblem>::kInterleave);
  std::vector<int64_t> o{0, 5};
  for (int64_t c = 1; c < std::min<int64_t>(bounds.count, 4); ++c) {
    const int64_t b = bounds.at(c);
    o.insert(o.end(), {b - 1, b, b, b + 1});
  }
  o.push_back(len);
  return o;
}

template <class F>
void for_each_direction(F&& f) {
  for (bool exclusive : {false, true})
    for (bool reverse : {false, true}) f(exclusive, reverse);
}

TEST(CpuEngine, BicyclicShortRows) {
  for (int64_t len : {0, 1, 2, 7, 31, 32, 33, 100}) {
    for (int64_t rows : {1, 3, 64}) {
      for (bool transposed : {false, true}) {
        for_each_direction([&](bool exclusive, bool reverse) {
          Case c{{rows, len, transposed}, std::nullopt, false, exclusive, reverse};
          check_bicyclic(c);
        });
      }
    }
  }
}

TEST(CpuEngine, BicyclicShortSegmentsWithEmptyOnes) {
  for (int64_t len : {0, 1, 5, 33, 257}) {
    for (bool transposed : {false, true}) {
      for (bool int32 : {false, true}) {
        for_each_direction([&](bool exclusive, bool reverse) {
          check_bicyclic({{4, len, transposed}, offsets_with_empties(len), int32, exclusive, reverse});
          if (len > 0) {
            check_bicyclic({{2, len, transposed}, random_offsets(len, 4, len), int32, exclusive, reverse});
          }
        });
      }
    }
  }
}

TEST(CpuEngine, BicyclicLongChunkedRows) {
  for (int64_t len : {2 * kRowChunk + 1, 3 * kRowChunk, 3 * kRowChunk + 12345}) {
    for (int64_t rows : {1, 2}) {
      for_each_direction([&](bool exclusive, bool reverse) {
        check_bicyclic({{rows, len, false}, std::nullopt, false, exclusive, reverse});
      });
    }
  }
  // Strided long rows.
  check_bicyclic({{3, 2 * kRowChunk + 77, true}, std::nullopt, false, false, true});
  // Rows of several spans: the carry goes from span to span.
  for_each_direction([&](bool exclusive, bool reverse) {
    check_bicyclic({{1, 2 * cpu::kSpan + 4321, false}, std::nullopt, false, exclusive, reverse});
  });
  check_bicyclic({{1, cpu::kSpan + 17, false}, random_offsets(cpu::kSpan + 17, 5000, 3), false, false, true});
}

TEST(CpuEngine, BicyclicLongSegmentedRows) {
  const int64_t len = 3 * kRowChunk + 999;
  for_each_direction([&](bool exclusive, bool reverse) {
    check_bicyclic({{1, len, false}, chunk_boundary_offsets(len), false, exclusive, reverse});
    check_bicyclic({{2, len, false}, offsets_with_empties(len), true, exclusive, reverse});
    check_bicyclic({{1, len, false}, random_offsets(len, 3000, 7), false, exclusive, reverse});
  });
  // Many tiny segments over a long row, transposed.
  check_bicyclic({{2, 2 * kRowChunk + 5, true}, random_offsets(2 * kRowChunk + 5, 3, 11), false, true, true});
}

TEST(CpuEngine, AffineStatesShortRows) {
  for (int64_t len : {1, 2, 17, 64}) {
    for (bool with_initial : {false, true}) {
      for_each_direction([&](bool exclusive, bool reverse) {
        check_affine({{3, len, false}, std::nullopt, false, exclusive, reverse}, with_initial);
        check_affine({{3, len, true}, offsets_with_empties(len), false, exclusive, reverse}, with_initial);
        // Four rows interleaved sequence by sequence, and one more alone.
        check_affine({{5, len, false}, offsets_with_empties(len), false, exclusive, reverse}, with_initial);
      });
    }
  }
}

TEST(CpuEngine, AffineStatesLongChunkedRows) {
  const int64_t len = 2 * kRowChunk + 4321;
  for (bool with_initial : {false, true}) {
    for_each_direction([&](bool exclusive, bool reverse) {
      check_affine({{1, len, false}, std::nullopt, false, exclusive, reverse}, with_initial);
      check_affine({{1, len, false}, chunk_boundary_offsets(len), true, exclusive, reverse}, with_initial);
    });
  }
}

// A scan that widens its input (int32 in, int64 out), as add over integers does.
TEST(CpuEngine, AddInt32ToInt64) {
  const Shape sh{2, 2 * kRowChunk + 3, false};
  std::vector<int32_t> in(sh.size());
  for (int64_t i = 0; i < sh.size(); ++i) in[i] = static_cast<int32_t>((i * 7919) % 2001) - 1000 + (1 << 20);
  ScanProblem<Add<int64_t>, int32_t, int64_t> problem;
  problem.in = in.data();
  problem.in_rows = problem.out_rows = sh.indexer();
  std::vector<int64_t> out;
  auto reset = [&] {
    out.assign(sh.size(), kPoison);
    problem.out = out.data();
  };
  ScanGeometry g;
  g.rows = sh.rows;
  g.len = sh.len;
  run_both(problem, g, reset, [&](const char* path) {
    SCOPED_TRACE(path);
    for (int64_t row = 0; row < sh.rows; ++row) {
      int64_t acc = 0;
      for (int64_t t = 0; t < sh.len; ++t) {
        acc += in[sh.at(row, t)];
        if (out[sh.at(row, t)] != acc) {
          FAIL() << "row " << row << " pos " << t << ": " << out[sh.at(row, t)] << " != " << acc;
        }
      }
    }
  });
}

// The strategy switch depends on the thread count: run the long cases under several.
TEST(CpuEngine, ThreadCounts) {
  const int saved = at::get_num_threads();
  const int64_t len = 2 * kRowChunk + 9;
  for (int threads : {1, 2, 4}) {
    at::set_num_threads(threads);
    SCOPED_TRACE("threads=" + std::to_string(threads));
    check_bicyclic({{1, len, false}, chunk_boundary_offsets(len), false, false, false});
    check_bicyclic({{3, len, false}, std::nullopt, false, true, true});
  }
  at::set_num_threads(saved);
}

}  // namespace
}  // namespace parprims
