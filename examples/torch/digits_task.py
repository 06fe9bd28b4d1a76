"""What the digits examples share: scikit-learn's handwritten digits (real data shipped with
python3-sklearn, no download) with a fixed train/test split, two models, augmentation and the
learning-rate schedule.

- "mlp": 64-128-64-10, the easy task.
- "cnn": two 3x3 convolutions (16, 32 channels), 2x2 max-pool, 64 hidden units, 10 classes; with
  --augment every training image is shifted by up to one pixel each way and gets N(0, 0.1)
  noise, which makes the task harder to fit (and the optimizer's differences visible).
"""
import math

import torch
from sklearn.datasets import load_digits


def data(cnn):
    """(train x, train y, test x, test y): 1400 training images, 397 held out."""
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    if cnn:
        x = x.view(-1, 1, 8, 8)
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1234))  # fixed split
    train, test = order[:1400], order[1400:]
    return x[train], y[train], x[test], y[test]


def mlp_layers():
    return [torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU()),
            torch.nn.Sequential(torch.nn.Linear(128, 64), torch.nn.ReLU()),
            torch.nn.Linear(64, 10)]


def cnn_stages():
    """The CNN in four pieces (one pipeline stage each) and each piece's input shape."""
    stages = [torch.nn.Sequential(torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU()),
              torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU()),
              torch.nn.Sequential(torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                  torch.nn.Linear(32 * 4 * 4, 64), torch.nn.ReLU()),
              torch.nn.Linear(64, 10)]
    shapes = [(1, 8, 8), (16, 8, 8), (32, 8, 8), (64,)]
    return stages, shapes


def model(name):
    if name == "mlp":
        return torch.nn.Sequential(*mlp_layers())
    return torch.nn.Sequential(*cnn_stages()[0])


def epoch_batches(xtr, ytr, rank, size, batch, g, augment_data=False):
    """One epoch of rank `rank`'s training batches: its shard (every size-th image) in an order
    drawn from g, cut into batches of `batch` (the rest dropped), each augmented with g if asked.
    Determined by g's seed, so any rank can redraw another rank's batches."""
    shard = torch.arange(rank, len(xtr), size)
    perm = shard[torch.randperm(len(shard), generator=g)]
    for s in range(len(shard) // batch):
        idx = perm[s * batch:(s + 1) * batch]
        yield (augment(xtr[idx], g) if augment_data else xtr[idx]), ytr[idx]


def augment(x, g):
    """Each image shifted by -1..1 pixels each way (zero fill) plus N(0, 0.1) noise."""
    padded = torch.nn.functional.pad(x, (1, 1, 1, 1))
    shifts = torch.randint(0, 3, (len(x), 2), generator=g)
    out = torch.stack([padded[i, :, r:r + 8, c:c + 8] for i, (r, c) in enumerate(shifts.tolist())])
    return out + 0.1 * torch.randn(out.shape, generator=g)


def cosine(optimizer, total_steps):
    """Cosine decay from the optimizer's lr to 0 over total_steps, stepped once per step,
    through torch.optim.lr_scheduler as a user would write it."""
    def factor(step):
        return 0.5 * (1 + math.cos(math.pi * min(step, total_steps) / total_steps))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def identical_weights(model):
    """True on every rank when every rank holds bitwise the same weights (their element-wise min
    and max over the ranks agree): checked, not assumed."""
    import prioccl
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    lo, hi = flat.clone(), flat.clone()
    prioccl.allreduce_(lo, op=prioccl.Min)
    prioccl.allreduce_(hi, op=prioccl.Max)
    return bool(torch.equal(lo, hi))


def reference_gradient(model, make_model, batches, loss_fn):
    """The average over `batches` (one (x, y) per rank) of the loss gradient at `model`'s weights,
    computed here in float64 on a fresh copy: what the all-reduce (Average) of every rank's
    gradient must give, with no prioccl involved."""
    with torch.random.fork_rng(devices=[]):  # making the copy draws initial weights
        ref = make_model().double()
    ref.load_state_dict(model.state_dict())
    total = [torch.zeros_like(p) for p in ref.parameters()]
    for x, y in batches:
        ref.zero_grad()
        loss_fn(ref(x.double()), y).backward()
        for t, p in zip(total, ref.parameters()):
            t += p.grad
    return [t / len(batches) for t in total]


def worst_difference(params, reference):
    """The largest |p.grad - reference| of any tensor, relative to that tensor's largest
    reference element (0 when they match exactly)."""
    worst = 0.0
    for p, r in zip(params, reference):
        scale = r.abs().max().item() or 1.0
        worst = max(worst, (p.grad.double() - r).abs().max().item() / scale)
    return worst
