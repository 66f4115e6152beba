"""Train a small Mamba language model on packed variable-length batches, on CPU or GPU.

The tasks are the synthetic ones of the Mamba paper, generated on the fly (nothing to download):

- ``copying`` (selective copying): a sequence of noise tokens hides a few data tokens at random
  places; after it come as many marker tokens, and at each marker the model must say the next
  data token, in order. It has to remember what it saw and skip the noise.
- ``induction`` (induction heads): random tokens; somewhere a trigger token is followed by an
  answer token; the sequence ends with the trigger again, and the model must say the answer.

Every batch holds sequences of different lengths packed one after another, described by
``cu_seqlens``, with no padding. The script shows a progress bar (loss, accuracy, tokens/s),
stops when the held-out accuracy reaches ``--target-accuracy``, saves a PNG of the loss and
accuracy curves, and then measures training tokens/s of the same batches packed against padded
to the longest sequence, and of the library's fused scan against the pure-PyTorch reference scan.

    pip install tqdm matplotlib        # or: pip install -e ".[examples]"
    python examples/train_packed.py                      # selective copying, 1.5 minutes on 2 CPU cores
    python examples/train_packed.py --task induction --plot induction.png
"""
import argparse
import copy
import json
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from torch_parprims.nn import MambaLM

NOISE, MARKER = 0, 1  # special token ids; data tokens are 2 .. 2 + vocab - 1
IGNORE = -100  # the target of a position with nothing to predict (cross_entropy's ignore_index)


@dataclass
class Batch:
    ids: torch.Tensor  # (total,) int64, the sequences packed one after another
    targets: torch.Tensor  # (total,) int64, IGNORE where nothing is predicted
    cu_seqlens: torch.Tensor  # (S + 1,) int32
    lengths: torch.Tensor  # (S,) int64

    @property
    def tokens(self) -> int:
        return self.ids.numel()


def _pack(lengths: torch.Tensor) -> torch.Tensor:
    return F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)


def selective_copying_batch(num_seqs, min_len, max_len, num_data, vocab, generator) -> Batch:
    """``num_data`` data tokens hidden in noise, then ``num_data`` markers asking for them in order."""
    lengths = torch.randint(min_len, max_len + 1, (num_seqs,), generator=generator)
    context = lengths - num_data  # the part that holds the data tokens, before the markers
    # Random distinct places in each context, kept in order: the top scores among valid places.
    scores = torch.rand(num_seqs, int(context.max()), generator=generator)
    scores[torch.arange(scores.shape[1]) >= context[:, None]] = -1.0
    places = scores.topk(num_data, dim=1).indices.sort(dim=1).values
    data = torch.randint(2, 2 + vocab, (num_seqs, num_data), generator=generator)

    cu = _pack(lengths).long()
    ids = torch.full((int(cu[-1]),), NOISE, dtype=torch.long)
    targets = torch.full_like(ids, IGNORE)
    ids[(cu[:-1, None] + places).flatten()] = data.flatten()
    markers = (cu[:-1, None] + context[:, None] + torch.arange(num_data)).flatten()
    ids[markers] = MARKER
    targets[markers] = data.flatten()
    return Batch(ids, targets, cu.int(), lengths)


def induction_batch(num_seqs, min_len, max_len, vocab, generator) -> Batch:
    """Random tokens with ``trigger answer`` somewhere; the last token, the trigger, asks for the answer."""
    lengths = torch.randint(min_len, max_len + 1, (num_seqs,), generator=generator)
    cu = _pack(lengths).long()
    ids = torch.randint(2, 2 + vocab, (int(cu[-1]),), generator=generator)
    targets = torch.full_like(ids, IGNORE)
    place = (torch.rand(num_seqs, generator=generator) * (lengths - 3)).long()  # leaves room for the answer
    answer = torch.randint(2, 2 + vocab, (num_seqs,), generator=generator)
    ids[cu[:-1] + place] = MARKER  # the trigger
    ids[cu[:-1] + place + 1] = answer
    ids[cu[1:] - 1] = MARKER
    targets[cu[1:] - 1] = answer
    return Batch(ids, targets, cu.int(), lengths)


def make_batch(args, generator) -> Batch:
    if args.task == "copying":
        return selective_copying_batch(args.seqs_per_batch, args.min_len, args.max_len, args.num_data, args.vocab,
                                       generator)
    return induction_batch(args.seqs_per_batch, args.min_len, args.max_len, args.vocab, generator)


def padded(batch: Batch):
    """The same sequences padded to the longest: ids and targets ``(S, max_len)``."""
    num_seqs, longest = batch.lengths.numel(), int(batch.lengths.max())
    inside = torch.arange(longest)[None, :] < batch.lengths[:, None]
    ids = torch.full((num_seqs, longest), NOISE, dtype=torch.long)
    targets = torch.full((num_seqs, longest), IGNORE, dtype=torch.long)
    ids[inside], targets[inside] = batch.ids, batch.targets  # row-major order is the packed order
    return ids, targets


def loss_and_accuracy(model, batch: Batch, device, packed=True):
    if packed:
        ids, targets = batch.ids[None].to(device), batch.targets[None].to(device)
        logits = model(ids, cu_seqlens=batch.cu_seqlens.to(device))
    else:
        ids, targets = (t.to(device) for t in padded(batch))
        logits = model(ids)  # causal: the padding after a sequence never reaches it
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
    asked = targets != IGNORE
    accuracy = (logits.argmax(-1)[asked] == targets[asked]).float().mean()
    return loss, accuracy


@torch.no_grad()
def evaluate(model, batches, device) -> float:
    model.eval()
    accuracy = sum(loss_and_accuracy(model, b, device)[1].item() for b in batches) / len(batches)
    model.train()
    return accuracy


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_tokens_per_second(model, batches, device, packed=True) -> float:
    """Tokens (real ones, not padding) per second of forward + backward over ``batches``."""
    loss_and_accuracy(model, batches[0], device, packed)[0].backward()  # warm-up
    sync(device)
    start = time.perf_counter()
    for batch in batches:
        loss_and_accuracy(model, batch, device, packed)[0].backward()
    sync(device)
    return sum(b.tokens for b in batches) / (time.perf_counter() - start)


def save_plot(path, history, target, task):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2), dpi=90)
    left.plot(history["step"], history["loss"], lw=0.8)
    left.set(xlabel="step", ylabel="training loss", yscale="log", title=f"{task}: loss")
    right.plot(history["eval_step"], history["eval_accuracy"], marker=".")
    right.axhline(target, color="grey", ls="--", lw=0.8, label=f"target {target:.0%}")
    right.set(xlabel="step", ylabel="held-out accuracy", ylim=(0, 1.02), title=f"{task}: accuracy")
    right.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def train(args, model, device):
    from tqdm import tqdm

    generator = torch.Generator().manual_seed(args.seed)
    held_out = [make_batch(args, torch.Generator().manual_seed(10_000 + i)) for i in range(4)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / args.warmup))
    history = {"step": [], "loss": [], "eval_step": [], "eval_accuracy": []}
    reached, tokens, busy = None, 0, 0.0
    start = time.perf_counter()
    bar = tqdm(range(1, args.steps + 1), desc=args.task, unit="step")
    for step in bar:
        batch = make_batch(args, generator)
        sync(device)
        tick = time.perf_counter()
        loss, accuracy = loss_and_accuracy(model, batch, device)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        sync(device)
        busy += time.perf_counter() - tick
        tokens += batch.tokens
        history["step"].append(step)
        history["loss"].append(loss.item())
        if step % args.eval_every == 0 or step == args.steps:
            held_out_accuracy = evaluate(model, held_out, device)
            history["eval_step"].append(step)
            history["eval_accuracy"].append(held_out_accuracy)
            if held_out_accuracy >= args.target_accuracy:
                reached = (step, time.perf_counter() - start, held_out_accuracy)
                if not args.keep_going:
                    break
        bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{accuracy.item():.2f}",
                        held_out=f"{history['eval_accuracy'][-1]:.2f}" if history["eval_accuracy"] else "-",
                        tok_s=f"{tokens / busy:,.0f}")
    bar.close()
    return history, reached, tokens / busy


def compare_speeds(args, model, device):
    """Training tokens/s of the same batches: packed vs padded, fused vs reference scan."""
    generator = torch.Generator().manual_seed(args.seed + 1)
    batches = [make_batch(args, generator) for _ in range(args.timing_batches)]
    padding = sum(b.lengths.numel() * int(b.lengths.max()) for b in batches) / sum(b.tokens for b in batches)
    results = {
        "packed_tokens_per_s": train_tokens_per_second(model, batches, device, packed=True),
        "padded_tokens_per_s": train_tokens_per_second(model, batches, device, packed=False),
        "padded_to_real_tokens": padding,
    }
    # The reference scan loops over time in Python, and its backward gives every step's slice of
    # B and C a full-size gradient (quadratic in the length): it gets a few short batches.
    small = copy.copy(args)
    small.seqs_per_batch = args.reference_seqs
    small_batches = [make_batch(small, generator) for _ in range(2)]
    reference = copy.deepcopy(model)
    for layer in reference.backbone.layers:
        layer.mixer.scan_impl = "reference"
    results["reference_scan_tokens_per_s"] = train_tokens_per_second(reference, small_batches, device)
    results["fused_scan_tokens_per_s"] = train_tokens_per_second(model, small_batches, device)
    return results


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--task", choices=("copying", "induction"), default="copying")
    p.add_argument("--steps", type=int, default=3000, help="at most this many training steps")
    p.add_argument("--target-accuracy", type=float, default=0.95, help="stop when the held-out accuracy reaches it")
    p.add_argument("--keep-going", action="store_true", help="train all --steps even after reaching the target")
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--seqs-per-batch", type=int, default=32)
    p.add_argument("--min-len", type=int, default=16, help="shortest sequence")
    p.add_argument("--max-len", type=int, default=64, help="longest sequence")
    p.add_argument("--num-data", type=int, default=4, help="copying: data tokens to remember")
    p.add_argument("--vocab", type=int, default=8, help="data tokens (the model adds noise and marker)")
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--d-state", type=int, default=16)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads (default: PyTorch's); 1 is faster when other programs share the cores")
    p.add_argument("--plot", default="train_packed.png", help="where to save the PNG of the curves")
    p.add_argument("--timing-batches", type=int, default=5, help="batches timed for the speed comparisons")
    p.add_argument("--reference-seqs", type=int, default=4, help="sequences per batch timed with the reference scan")
    p.add_argument("--no-speed-comparison", action="store_true")
    p.add_argument("--json", help="also write the results to this JSON file")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.min_len < (args.num_data + 2 if args.task == "copying" else 4) or args.max_len < args.min_len:
        raise SystemExit("--min-len is too short for the task, or --max-len is below it")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    model = MambaLM(vocab_size=2 + args.vocab, d_model=args.d_model, n_layer=args.n_layer, d_state=args.d_state,
                    device=device)
    params = sum(p.numel() for p in model.parameters())
    print(f"MambaLM: {params:,} parameters, {args.n_layer} layers, d_model {args.d_model}, on {device}"
          f"{f' ({torch.get_num_threads()} threads)' if device.type == 'cpu' else ''}")

    history, reached, tokens_per_s = train(args, model, device)
    save_plot(args.plot, history, args.target_accuracy, args.task)
    final = history["eval_accuracy"][-1]
    results = {"task": args.task, "steps": history["step"][-1], "final_accuracy": final,
               "train_tokens_per_s": tokens_per_s, "plot": args.plot}
    if reached:
        step, seconds, accuracy = reached
        results.update(reached_step=step, reached_seconds=seconds)
        print(f"reached {accuracy:.1%} held-out accuracy (target {args.target_accuracy:.0%}) at step {step}, "
              f"after {seconds:.0f} s")
    else:
        print(f"did not reach {args.target_accuracy:.0%}: held-out accuracy {final:.1%} after {args.steps} steps")
    print(f"training: {tokens_per_s:,.0f} tokens/s; curves saved to {args.plot}")

    if not args.no_speed_comparison:
        speeds = compare_speeds(args, model, device)
        results.update(speeds)
        print(f"forward+backward tokens/s on the same batches "
              f"(padding to the longest makes {speeds['padded_to_real_tokens']:.2f}x the tokens):")
        print(f"  packed (cu_seqlens)           {speeds['packed_tokens_per_s']:>12,.0f}")
        print(f"  padded to the longest         {speeds['padded_tokens_per_s']:>12,.0f}   "
              f"(packed is {speeds['packed_tokens_per_s'] / speeds['padded_tokens_per_s']:.2f}x)")
        print(f"and on batches of {args.reference_seqs} sequences:")
        print(f"  fused selective_scan          {speeds['fused_scan_tokens_per_s']:>12,.0f}")
        print(f"  pure-PyTorch reference scan   {speeds['reference_scan_tokens_per_s']:>12,.0f}   "
              f"(fused is {speeds['fused_scan_tokens_per_s'] / speeds['reference_scan_tokens_per_s']:.1f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
