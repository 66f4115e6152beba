// The one policy table: threads per block and items per thread of every CUDA scan kernel.
// Larger scanned values (affine pairs, small matrices) take fewer items per thread, so that
// registers and shared memory stay bounded.
#pragma once

#include "../../core/monoids.h"

namespace parprims::cuda {

// Items per thread follow the size of the scanned value: more items amortize the block scan
// and look-back over more elements (thread coarsening), fewer keep registers bounded.
template <class Value>
constexpr int items_for() {
  constexpr int bytes = static_cast<int>(sizeof(Value));
  // Measured on an H200 (benchmarks/NOTES.md): 4-byte scans ran fastest with 16 items (32 lost
  // a third on dense rows), affine pairs with 16.
  return bytes <= 8 ? 16 : bytes <= 16 ? 8 : bytes <= 32 ? 4 : bytes <= 64 ? 2 : 1;
}

template <class Value>
struct FlatPolicy {
  static constexpr int kBytes = static_cast<int>(sizeof(Value));
  static constexpr int kItems = items_for<Value>();
  static constexpr int kThreads = kBytes > 64 ? 64 : 128;
  static constexpr int kTile = kThreads * kItems;
};

// Row-loop scans: a block holds two tiles in registers (the one it scans and the next one's
// loads), so values wider than 4 bytes take half the flat kernel's items per thread: at 16, the
// affine pairs needed 166 registers (128 with spills when capped for 4 blocks per SM).
// Scans of 4-byte inputs into 4-byte values whose combine is one instruction (add, max, min,
// mul of float32 and int32) take small blocks instead: 64 threads x 8 items, 16 blocks per SM
// (H200, tenth session: dense fp32 rows 0.64-0.67 -> 0.91-0.94 of copy bandwidth; bf16 inputs,
// whose threads then load half as many bytes, and logaddexp lost 5-15 % with them). A row
// shorter than a tile leaves threads idle: the row loop takes rows of kMinRowLength or more.
// 8-byte values scanned from 4-byte inputs (float32 affine pairs from float32 gates and inputs,
// int32 -> int64 sums) take the same small blocks, 10 per SM (about 100 registers a thread):
// their 128-thread blocks, 5 per SM, left affine fp32 rows at 0.83 of copy bandwidth. Since
// half inputs are held as loaded (held_run.cuh), 8-byte values from 2-byte inputs (bfloat16
// affine pairs) take them too: (8, 2048, 4096) 0.156 -> 0.148 ms (H200, twentieth session).
// Problems that need more registers (kNeedsMoreRegisters) get a fifth fewer blocks per SM.
// The caps below were measured on an H200 with the kernel_variants harness (rows of 4096):
// small blocks capped for 12 (ptxas fits 14 for 4-byte scans at 70 registers) ran add fp32
// 0.152 -> 0.139 ms and bfloat16 affine pairs 0.146 -> 0.137 ms (14: 0.139, 16 with spills:
// 0.145); float32 affine pairs, at 10 until the row loop stopped waiting for the next tile's
// loads in mid-tile (row_scan.cuh, enter_row), ran 0.229 ms at 10 and 0.220 at 12 after it.
// Cheap bfloat16 scans in 128-thread blocks: 8 (64 registers, a few bytes of spills) ran add
// 0.082 -> 0.080 ms and max 0.114 ms against 7 (72 registers) and 6 (80).
// Combines of one exp (kExp: logaddexp's (max, rest) pairs) take 16 items a thread in the small
// blocks, 10 blocks an SM (96 registers): logaddexp scans of rows of 4096 ran float32 0.293 ->
// 0.239 ms and bfloat16 0.294 -> 0.252 ms (H100) against 8 items at 12 blocks (8 blocks: 0.252
// and 0.262).
template <class Value, int kInputBytes = 0, bool kCostly = false, bool kMoreRegisters = false, bool kExp = false>
struct RowPolicy {
  static constexpr int kBytes = static_cast<int>(sizeof(Value));
  static constexpr bool kSmallBlocks =
      kBytes <= 8 && !kCostly && (kInputBytes == 4 || (kInputBytes == 2 && kBytes == 8));
  static constexpr int kItems = kSmallBlocks ? (kExp ? 16 : 8)
                                : kBytes <= 4 ? items_for<Value>()
                                              : (items_for<Value>() / 2 > 0 ? items_for<Value>() / 2 : 1);
  static constexpr int kThreads = kSmallBlocks || kBytes > 64 ? 64 : 128;
  static constexpr int kTile = kThreads * kItems;
  static constexpr int kMinRowLength = kSmallBlocks ? kTile : kTile / 2;
  // Registers are capped so that this many blocks share an SM (and keep their loads in flight).
  static constexpr int kPlainMinBlocksPerSM = kSmallBlocks ? (kExp ? 10 : 12)
                                             : kBytes <= 4 ? (kInputBytes == 2 && !kCostly ? 8 : 6)
                                             : kBytes <= 8 ? 5 : 2;
  // The packed instance's (row_scan.cuh takes a quarter fewer of these): the caps from before the
  // ones above were raised, which were measured on dense rows only.
  static constexpr int kPackedPlainMinBlocksPerSM = kSmallBlocks ? (kBytes <= 4 ? 16 : kExp ? 8 : 10)
                                                   : kBytes <= 4 ? 6
                                                   : kBytes <= 8 ? 5 : 2;
  static constexpr int with_more_registers(int blocks) {
    return kMoreRegisters && blocks > 2 ? blocks * 4 / 5 : blocks;
  }
  static constexpr int kMinBlocksPerSM = with_more_registers(kPlainMinBlocksPerSM);
  static constexpr int kPackedMinBlocksPerSM = with_more_registers(kPackedPlainMinBlocksPerSM);
  // Whole rows of 4-byte inputs go one block a row (the hardware hands each SM a new block as
  // one ends) instead of a grid of resident blocks walking rows in turn. Measured on an H100
  // with the kernel_variants harness (2^26 elements in rows of 512 to 16384): float32 add and
  // max 0.199 -> 0.183 ms (-8 %), affine pairs 0.284 -> 0.272 (-4 %), logaddexp -3 %, the affine
  // backward -1 %; with bfloat16 inputs rows of 512 to 2048 lost 2-10 % and longer rows tied,
  // so those keep the resident grid.
  static constexpr bool kBlockPerRow = kSmallBlocks && kInputBytes == 4;
};

// Rows shorter than a tile of the row loop's blocks (RowPolicy::kTile: (65536, 256) is the
// common case; the blocks take rows of half their tile or more, with threads idle) take one warp
// a block: the same walk, each row one or a few tiles of 32 x 8 items. Such rows went to the flat
// kernel, which pays a tile counter, a lifted block scan and a look-back per tile. Measured on an
// H200 against it (benchmarks/NOTES.md, "Short rows in one-warp blocks"): rows of 256 to 1000,
// 1.2-1.7x faster (bfloat16 rows of 1024-2000 against the row loop: even); rows of 128 (half the warp's lanes idle) 7 % slower, so a row takes the warp's
// blocks only from a whole tile on. Only cheap scans of up to 8-byte values read from typed
// inputs take this instance (kWarpRows), so that the build gains one kernel per scan problem,
// not one per matrix recurrence or gradient problem.
template <class Value>
struct WarpRowPolicy {
  static constexpr int kThreads = 32;
  static constexpr int kItems = 8;
  static constexpr int kTile = kThreads * kItems;
  static constexpr int kMinRowLength = kTile;
  // 24 one-warp blocks an SM (85 registers a thread) for 4-byte values, 16 for 8-byte ones.
  static constexpr int kMinBlocksPerSM = sizeof(Value) <= 4 ? 24 : 16;
  static constexpr int kPackedMinBlocksPerSM = kMinBlocksPerSM;  // (packed rows never take it)
  static constexpr bool kBlockPerRow = false;
};

template <class P>
constexpr bool kWarpRows = P::kInputBytes > 0 && sizeof(typename P::Value) <= 8 &&
                           !kCostlyCombine<typename P::Monoid> && !P::kNeedsMoreRegisters;

// Column scans: a block of kThreads threads holds 32 neighbouring rows (one per lane) times
// kThreads / 32 stretches of kSteps positions. A thread holds two stretches of values (the one
// it walks and the next one's loads), so wider values take fewer steps; values wider than 64
// bytes (small matrices) take one warp per block, so that a tile's totals fit in shared
// memory, and no second stretch in registers. Four stretches per tile keep the barrier's fold
// of stretch totals short against the stretches' own work.
template <class Value>
struct ColumnPolicy {
  static constexpr int kBytes = static_cast<int>(sizeof(Value));
  static constexpr int kThreads = kBytes > 64 ? 32 : 128;
  static constexpr int kSteps = kBytes <= 8 ? 16 : kBytes <= 16 ? 8 : kBytes <= 32 ? 4 : kBytes <= 64 ? 2 : 1;
  static constexpr bool kPrefetch = kBytes <= 32;
  // Registers are capped (at 128) so that four blocks share an SM: 16 warps, each with two
  // stretches of loads in flight. Even a problem that needs more registers keeps four: the
  // affine backward along a strided time dim ran 0.766 ms with 72 bytes spilled at four blocks,
  // 1.33 ms without spills at three ((8, 4096, 2048) float32, H200).
  static constexpr int kMinBlocksPerSM = kBytes <= 8 ? 4 : 1;
};

// Kernels whose blocks walk whole rows (row-loop, column) cut rows into spans (spans.cuh: a
// summary pass, then the full pass) only when their blocks over rows alone would fill less
// than this fraction of the GPU's block slots: the summary pass reads the inputs a second
// time, so it pays only when most slots would idle.
constexpr double kSpanFreeSlotsFraction = 0.5;
// Spans give the GPU about this many waves of blocks (fewer if spans would get shorter than
// kMinSpanTiles tiles: each span's first tile waits for its loads unhidden).
constexpr int kSpanWaves = 4;
// Rows cut by packed sequences take one wave of spans: their summary pass walks a span only from
// its last sequence start, so a span costs it a search of the offsets more than its positions,
// and fewer, longer spans cost less (H200, 2^26 float32 in 2^16 sequences: 0.337 ms with four
// waves, 0.277 ms with one; benchmarks/NOTES.md).
constexpr int kPackedSpanWaves = 1;
// The row loop's packed instance is compiled for values of up to 32 bytes (scalars, affine
// pairs, complex128 pairs, 2 x 2 matrix recurrences); larger ones (4 x 4 and 8 x 8 matrix
// recurrences, whose kernels spill and cost ptxas the most) keep the flat kernel for packed
// sequences, as before the packed instance existed.
template <class Value>
constexpr bool kPackedRowLoop = sizeof(Value) <= 32;
constexpr int kMinSpanTiles = 4;

// The column kernel gives each lane its own row; with fewer rows than a block's 32 some
// lanes idle, but it still beats the flat kernel's strided walk: packed
// segmented_scan over (1049109, 16) along dim 0 took 0.40 ms with the look-back column kernel
// and 1.20 ms with the flat kernel (H200, 2026-12-01). A single row is contiguous work for the
// flat kernel.
constexpr int kMinColumnRows = 2;

// The row-loop kernel gives each block whole rows when there are at least this many rows per
// SM; fewer rows are cut into spans (spans.cuh) when they are long enough, and go to the flat
// kernel otherwise.
constexpr int kRowLoopRowsPerSM = 2;

// The compaction's scatter (select.cuh): a block of kThreads threads takes a tile of
// consecutive positions, kItems per thread, reading a thread's keep bits (one 16-bit entry)
// and its elements in 64 bytes of wide loads; the kept elements of a tile are staged in shared
// memory (kTile elements at most) before their coalesced store.
template <class Word>
struct SelectPolicy {
  static constexpr int kBytes = static_cast<int>(sizeof(Word));
  static constexpr int kThreads = 256;
  static constexpr int kItems = kBytes <= 4 ? 16 : 64 / kBytes;
  static constexpr int kTile = kThreads * kItems;
  // A block waits for its tile's loads with nothing else to do, so blocks per SM are what hides
  // the wait: registers are capped for 6 (48 registers gave 5).
  static constexpr int kMinBlocksPerSM = 6;
};

}  // namespace parprims::cuda

namespace parprims::cuda {

// Selective scan: a thread keeps kStatesPerThread states of one (batch, channel) row in
// registers and walks time sequentially; threads_per_channel = N / kStatesPerThread rounded up
// to a power of two (at most 32, a warp; larger N is walked in several state tiles); a block
// holds kThreads / threads_per_channel channels. The forward stages kForwardChunk steps of
// the block's inputs in shared memory at a time; the backward recomputes and walks
// kSelectiveScanCheckpointEvery steps at a time (the forward's checkpoint spacing), keeping the
// recomputed states of those steps in shared memory.
struct SelectiveScanPolicy {
  static constexpr int kThreads = 128;
  // The backward's: four states per thread share each step's fixed work (loads of the step's
  // inputs, the sums over channels and states) among twice the state updates of two.
  static constexpr int kStatesPerThread = 4;
  // The forward's: four states per thread (four threads a channel at N = 16) halve the step
  // loop's shared loads and sums of y over a channel's threads per state update against two.
  // Two won when the staging and the step loop's other work were heavier (tenth session);
  // measured again after them (thirty-second session, H100, (8, 1536, 2048, 16)): four 13 %
  // faster in float32, 9 % in bfloat16 (benchmarks/NOTES.md).
  static constexpr int kForwardStatesPerThread = 4;
  static constexpr int kMaxThreadsPerChannel = 32;
  static constexpr int kForwardChunk = 32;
  // Rounds of a chunk's global loads that a thread holds in registers while the block works on
  // the previous chunk (the rest, only for N <= 8 or N > 32, load when the chunk is staged).
  static constexpr int kPrefetchRounds = 4;
  // The backward's: a chunk of 16 steps of 32 channels (N = 16) is 4 rounds of 128 threads.
  static constexpr int kBackwardPrefetchRounds = 4;
  static constexpr int kBackwardStatePrefetchRounds = 2;  // B and C: 16 states x 16 steps
  // Steps of a whole 16-step chunk that the backward's fixed instance unrolls together (its
  // recompute and walk back run the chunk as rolled groups of them). The chunk unrolled whole
  // made the chunk loop 3.8 K instructions (60 KB of code, each executed once a chunk); in groups
  // of 4 it is 2.3 K, with fewer spills (4 bytes against 12-20) and about 4 % more instructions
  // executed. Measured (H100, (8, 1536, 2048, 16)): backward 1.058 -> 1.049 ms float32, 0.990 ->
  // 0.968 bfloat16, stalls for want of an instruction 0.14 -> 0.08 per issue; groups of 8: 1.076
  // and 0.971 (benchmarks/NOTES.md).
  static constexpr int kBackwardWalkGroup = 4;
  // Blocks per SM the kernels are compiled for (registers capped at 65536 / (blocks * kThreads)):
  // the forward 4 (128 registers: the N = 16 instance needs 125 with four states a thread, no
  // spills), so that (8, 1536, 2048, 16)'s 384 blocks of 32 channels run in one wave on 132 SMs
  // (3 blocks, 168 registers: 2 % slower in bfloat16); the backward 3 (168 registers), which its
  // shared memory (about 64 KB at N = 16 in float) allows, so that (8, 1536, 2048, 16)'s 384
  // blocks of 32 channels run in one wave.
  static constexpr int kForwardMinBlocksPerSM = 4;
  static constexpr int kBackwardMinBlocksPerSM = 3;
};

}  // namespace parprims::cuda
