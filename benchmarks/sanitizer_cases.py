"""Small calls of every CUDA kernel family, for compute-sanitizer (memcheck, racecheck).

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 benchmarks/sanitizer_cases.py

The pytest suite is too slow under the sanitizer (its references loop over time on the device),
so this script runs the kernels alone: the row-loop kernel (also cut into spans for few long
rows, and in one-warp blocks for short rows), the flat and column scan kernels (the column kernel in one pass and cut into spans), the
affine scan forward and its one-scan backward, the max/min backward, segmented scans, the compaction's select kernel,
segment reductions (random lengths with one long sequence; one row, several, strided, features),
masked reductions, histograms (counts, weights, per sequence), and the selective scan forward
and backward with time segments (packed sequences that end at
segment ends, dense rows, bfloat16, several state tiles). It checks nothing but that every call
completes; the tests check values.
"""
import argparse

import torch

import torch_parprims as pp


def scans(dev):
    for rows, n in ((300, 2100), (270, 1030), (3, 33)):  # row-loop kernel, then the flat kernel
        a = (torch.rand(rows, n, device=dev) * 0.5 + 0.5).requires_grad_()
        b = torch.randn(rows, n, device=dev, requires_grad=True)
        h0 = torch.randn(rows, device=dev, requires_grad=True)
        for rev in (False, True):
            h, f = pp.affine_scan(a, b, -1, h0, reverse=rev)
            (h.square().sum() + f.sum()).backward()  # the one-scan backward
            pp.scan(b.detach(), -1, "add", reverse=rev, exclusive=True)
            pp.scan(b.detach().bfloat16(), -1, "max", reverse=rev)
            pp.scan(b.detach(), -1, "logaddexp", exclusive=rev, reverse=rev)
    # Short rows, more than run at once: one-warp blocks walking several rows each (aligned
    # rows, rows read element by element, bfloat16 rows of several tiles).
    short_a = (torch.rand(4000, 280, device=dev) * 0.5 + 0.5).requires_grad_()
    short_b = torch.randn(4000, 280, device=dev, requires_grad=True)
    h, f = pp.affine_scan(short_a, short_b, -1, torch.randn(4000, device=dev), reverse=True)
    pp.scan(torch.randn(4000, 256, device=dev), -1, "add")
    pp.scan(torch.randn(4000, 256, device=dev), -1, "logaddexp", exclusive=True)
    pp.scan(torch.randn(4000, 600, device=dev)[:, ::2], -1, "max", exclusive=True)
    pp.scan(torch.randn(3000, 1000, device=dev).bfloat16(), -1, "add", reverse=True)
    # Few long rows and one 1-D row: the row loop cut into spans (summary pass, carry, full pass).
    long_a = (torch.rand(5, 40000, device=dev) * 0.5 + 0.5).requires_grad_()
    long_b = torch.randn(5, 40000, device=dev, requires_grad=True)
    h, f = pp.affine_scan(long_a, long_b, -1, reverse=True)
    (h.square().sum() + f.sum()).backward()
    pp.scan(torch.randn(300001, device=dev), 0, "add", exclusive=True)
    pp.scan(torch.randn(3, 70001, device=dev).bfloat16(), -1, "max", reverse=True)
    x = torch.randn(4096, 64, device=dev)  # the column kernel (time strided), cut into spans
    pp.scan(x, 0, "add")
    # The column kernel in one pass (enough rows to fill the GPU, the last block partial), and
    # the affine backward through it.
    a = (torch.rand(2, 300, 4500, device=dev) * 0.5 + 0.5).requires_grad_()
    b = torch.randn(2, 300, 4500, device=dev, requires_grad=True)
    h, f = pp.affine_scan(a, b, 1, reverse=True)
    (h.square().sum() + f.sum()).backward()
    pp.scan(b.detach(), 1, "add", exclusive=True)
    offsets = torch.tensor([0, 5, 5, 1000, 4096], device=dev)
    pp.segmented_scan(x, offsets, 0, "logaddexp")
    pp.affine_scan(torch.rand(4096, 64, device=dev), x, 0, cu_seqlens=offsets)
    # bfloat16 through the column kernel: one pass, and spans over packed sequences.
    pp.affine_scan(a.detach().bfloat16(), b.detach().bfloat16(), 1, torch.randn(2, 4500, device=dev), reverse=True)
    pp.affine_scan(torch.rand(4096, 64, device=dev).bfloat16(), x.bfloat16(), 0, cu_seqlens=offsets)
    # Packed sequences along the contiguous dim: the row loop's packed instance, in spans (one
    # long row; bounds on tile edges, empty sequences, tiles of more sequences than threads)
    # and a block per row (300 rows).
    lengths = [511, 1, 0, 2048, 0, 0, 3000] + torch.randint(0, 9, (3000,)).tolist() + [20000, 3, 0]
    packed = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device=dev)
    y = torch.randn(int(packed[-1]), device=dev)
    for rev in (False, True):
        pp.segmented_scan(y, packed, 0, "add", exclusive=rev, reverse=rev)
        pp.segmented_scan(y.bfloat16(), packed.int(), 0, "max", reverse=rev)
        pp.affine_scan(torch.rand_like(y), y, 0, torch.randn(len(lengths), device=dev), packed, reverse=rev)
    # The max/min backward (one scan over the runs of equal outputs) on each kernel: row loop,
    # flat, spans, column; exclusive and reverse, wide and element-wise runs.
    for shape, dim in (((300, 2100), 1), ((3, 33), 1), ((3, 70001), 1), ((4096, 64), 0), ((300, 1001), 1)):
        t = torch.randint(0, 4, shape, device=dev).float().requires_grad_()
        for rev in (False, True):
            torch.autograd.grad(pp.scan(t, dim, "max", exclusive=rev, reverse=rev), t, torch.randn_like(t))
            torch.autograd.grad(pp.scan(t.bfloat16(), dim, "min", reverse=rev), t, torch.randn(shape, device=dev))
            cut = torch.tensor([0, 0, 1, shape[dim] // 3, shape[dim], shape[dim]], device=dev)
            torch.autograd.grad(pp.segmented_scan(t, cut, dim, "max", exclusive=rev, reverse=rev), t, torch.randn_like(t))
    rows_packed = torch.tensor([0, 100, 100, 611, 1100, 1100], device=dev)
    pp.segmented_scan(torch.randn(300, 1100, device=dev), rows_packed, 1, "logaddexp", reverse=True)
    pp.affine_scan(torch.rand(300, 1100, device=dev), torch.randn(300, 1100, device=dev), 1, cu_seqlens=rows_packed)


def compaction(dev):
    # The select kernel: several tiles, data aligned to a thread's run and not, a capacity that
    # ends inside a tile, elements of 1, 4 and 16 bytes, indices only.
    n = 5 * 4096 + 77
    x = torch.randn(n + 3, device=dev)
    mask = torch.rand(n + 5, device=dev) > 0.4
    for xs, ms in ((x[:n], mask[:n]), (x[3:], mask[5:])):
        pp.compact(xs, ms, capacity=n // 3, return_indices=True)
        pp.compact(xs.to(torch.complex128), ms, capacity=n)
        pp.compact(ms, ms, capacity=n, return_indices=True)
    pp.compact(x[:1000], mask[:1000])  # one tile, exact size


def reductions(dev):
    n = 3 * 4096 + 101
    # Random short sequences, one long one, and empty ones at the end (offsets clamped to n).
    lengths = torch.randint(0, 40, (300,)).tolist() + [5000] + torch.randint(0, 9, (300,)).tolist()
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist(), n], device=dev).clamp(max=n)
    # Long sequences on average (the stream pass), one over several pieces (4096 here).
    warp_offsets = torch.tensor([0, 9000, 9000, 9300, 10800, 10817, n], device=dev)
    for op in ("sum", "mean", "max", "logsumexp"):
        # Along the last dim (rows, a strided view), then packed features along dim 0 (the columns
        # pass: one feature a thread, and 4 side by side read as one word).
        for x, dim in ((torch.randn(n, device=dev), 0), (torch.randn(3, n, device=dev), 1),
                       (torch.randn(2, 2 * n, device=dev)[:, ::2], 1), (torch.randn(n, 8, device=dev), 0),
                       (torch.randn(n, 6, device=dev), 0), (torch.randn(n, 64, device=dev).bfloat16(), 0)):
            for cuts in (offsets, warp_offsets):
                pp.segment_reduce(x, cuts, op, dim)
    h = torch.randn(4, 300, 16, device=dev)
    pp.reduce(h, 1, "mean", torch.rand(4, 300, 1, device=dev) > 0.3)
    pp.reduce(h, -1, "max")
    x = torch.rand(1 << 20, device=dev)
    x[::7] = 0.5  # a crowded bin
    pp.histogram(x, 256, (0.0, 1.0))
    pp.histogram(x, 64, (0.1, 0.9), weights=torch.rand_like(x))
    pp.histogram(x[:5000], 16, (0.0, 1.0), offsets=torch.tensor([0, 100, 100, 4000, 5000], device=dev))


def selective(dev, b, d, L, n, dtype, lengths=None, const=False, time_strided=False):
    def sequence(values):  # (b, d, L), or a (b, L, d) tensor's transposed view
        values = values.to(dtype)
        if time_strided:
            values = values.transpose(1, 2).contiguous().transpose(1, 2)
        return values.requires_grad_()

    u = sequence(torch.randn(b, d, L, device=dev))
    delta = sequence(torch.rand(b, d, L, device=dev) * 0.2)
    A = (-torch.rand(d, n, device=dev) - 0.1).requires_grad_()
    shape, bc_dtype = ((d, n), torch.float32) if const else ((b, n, L), dtype)
    B = torch.randn(shape, device=dev, dtype=bc_dtype, requires_grad=True)
    C = torch.randn(shape, device=dev, dtype=bc_dtype, requires_grad=True)
    D = torch.randn(d, device=dev, requires_grad=True)
    z = sequence(torch.randn(b, d, L, device=dev))
    bias = torch.randn(d, device=dev, requires_grad=True)
    cu, states = None, b
    if lengths is not None:
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device=dev, dtype=torch.int32)
        states = len(lengths)
    h0 = torch.randn(states, d, n, device=dev, requires_grad=True)
    out, last = pp.selective_scan(u, delta, A, B, C, D, z, bias, True, initial_state=h0, cu_seqlens=cu)
    (out.float().square().sum() + last.sum()).backward()


def selectives(dev):
    selective(dev, 1, 4, 4096, 4, torch.float32, lengths=(512, 0, 0, 300, 212, 1024, 0, 511, 1, 1536, 0))
    selective(dev, 2, 3, 4096, 4, torch.float32, const=True)
    selective(dev, 1, 40, 2048, 16, torch.bfloat16, lengths=(100, 900, 0, 1048))
    # Packed rows cut at sequence starts: an empty segment between two cuts at one start, an empty
    # last one in the forward, a start on a cut (tests/selective_scan_common.py says where).
    selective(dev, 1, 4, 4096, 4, torch.float32, lengths=(900, 0, 1148, 2038, 10, 0))
    selective(dev, 1, 20, 4096, 16, torch.bfloat16, lengths=(900, 0, 1148, 2038, 10, 0))
    # Many channel blocks a group (16 and 6 at N = 16), the second one with time segments; with
    # whole blocks the backward writes its dB/dC partial sums over the checkpoints (also N = 8,
    # 64 channels a block, an odd length).
    selective(dev, 2, 512, 100, 16, torch.float32)
    selective(dev, 2, 128, 1091, 8, torch.float32)
    selective(dev, 1, 192, 2048, 16, torch.float32, lengths=(100, 900, 0, 1048))
    selective(dev, 1, 8, 1536, 80, torch.float32)  # two state tiles
    selective(dev, 2, 20, 1090, 16, torch.float32)  # N = 16, two steps an item, a partial block of channels
    selective(dev, 2, 20, 1091, 16, torch.float32)  # N = 16, one step an item (odd length)
    selective(dev, 2, 20, 1090, 16, torch.bfloat16, time_strided=True)  # one step an item, strided in time
    # The warp-specialized forward (N = 16, no time segments): a partial last chunk and a partial
    # block of channels, with one step an item (odd length; strided in time) and two.
    selective(dev, 2, 40, 301, 16, torch.float32)
    selective(dev, 2, 40, 300, 16, torch.bfloat16, time_strided=True)
    selective(dev, 3, 40, 302, 16, torch.float16)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--only", default="scans,compaction,reductions,selective",
                   help="comma-separated kernel families to run (default: all)")
    args = p.parse_args()
    dev, only = args.device, set(args.only.split(","))
    torch.manual_seed(0)
    if "scans" in only:
        scans(dev)
    if "compaction" in only:
        compaction(dev)
    if "reductions" in only:
        reductions(dev)
    if "selective" in only:
        selectives(dev)
    if dev == "cuda":
        torch.cuda.synchronize()
    print("sanitizer cases: every call completed")


if __name__ == "__main__":
    main()
