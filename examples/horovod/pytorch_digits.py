"""Horovod's PyTorch MNIST example, as a Horovod user writes it, on scikit-learn's handwritten
digits (8x8 images shipped with python3-sklearn: no download) instead of MNIST. The only line that
names prioccl is the import.

    PYTHONPATH=python mpirun -np 4 /usr/bin/python3 examples/horovod/pytorch_digits.py --epochs 5

--check (a prioccl addition, as is the identical-weights line at the end) compares the first
step's all-reduced gradient with a reference averaged in float64 outside prioccl, prints
`reference_match=1` (or `reference_match=0` and the worst difference) and exits 1 when they differ.
"""
import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed
from sklearn.datasets import load_digits

import prioccl.torch as hvd  # was: import horovod.torch as hvd

parser = argparse.ArgumentParser(description="PyTorch digits example")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size for training")
parser.add_argument("--test-batch-size", type=int, default=100, help="input batch size for testing")
parser.add_argument("--epochs", type=int, default=10, help="number of epochs to train")
parser.add_argument("--lr", type=float, default=0.05,
                    help="learning rate (MNIST's 0.01 learns too slowly on 1400 small images)")
parser.add_argument("--momentum", type=float, default=0.5, help="SGD momentum")
parser.add_argument("--seed", type=int, default=42, help="random seed")
parser.add_argument("--log-interval", type=int, default=10, help="batches between log lines")
parser.add_argument("--fp16-allreduce", action="store_true", default=False,
                    help="use fp16 compression during allreduce")
parser.add_argument("--use-adasum", action="store_true", default=False,
                    help="use adasum algorithm to do reduction")
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0,
                    help="apply gradient predivide factor in optimizer")
parser.add_argument("--batches-per-allreduce", type=int, default=1,
                    help="number of batches processed locally before an allreduce")
parser.add_argument("--check", action="store_true", default=False,
                    help="check the first step's all-reduced gradient against a reference")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=3, padding=1)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(20 * 2 * 2, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 20 * 2 * 2)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def datasets():
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32).view(-1, 1, 8, 8)
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1234))
    train, test = order[:1400], order[1400:]
    return (torch.utils.data.TensorDataset(x[train], y[train]),
            torch.utils.data.TensorDataset(x[test], y[test]))


def train(epoch):
    global worst
    model.train()
    train_sampler.set_epoch(epoch)  # Horovod: a different shard order every epoch
    for batch_idx, (data, target) in enumerate(train_loader):
        first = args.check and epoch == 1 and batch_idx == 0
        if first:
            reference = reference_gradient(epoch)
        optimizer.zero_grad()
        # Split the batch into chunks of args.batch_size, accumulating their gradients.
        for i in range(0, len(data), args.batch_size):
            data_batch = data[i:i + args.batch_size]
            target_batch = target[i:i + args.batch_size]
            loss = F.nll_loss(model(data_batch), target_batch)
            loss.div_(float(len(data)) / len(data_batch))
            loss.backward()
        optimizer.step()
        if first:  # p.grad now holds the all-reduced gradient that step() applied
            worst = max((p.grad.double() - r).abs().max().item() / (r.abs().max().item() or 1.0)
                        for p, r in zip(model.parameters(), reference))
        if batch_idx % args.log_interval == 0 and hvd.rank() == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_sampler)} "
                  f"({100.0 * batch_idx / len(train_loader):.0f}%)]\tLoss: {loss.item():.6f}")


def reference_gradient(epoch):
    """prioccl addition (--check): what the all-reduce (Average) of this first step's gradients
    must give. Every rank's gradient is recomputed here as that rank computes it in train() (the
    same weights, the rank's batch from its own DistributedSampler, the same dropout masks: every
    rank's RNG is in the same state at this point), then averaged in float64. With
    --fp16-allreduce each rank sends its gradient rounded to float16, and so does the reference."""
    with torch.random.fork_rng(devices=[]):
        state = torch.get_rng_state()
        ref = Net()
        ref.load_state_dict(model.state_dict())
        ref.train()
        total = [torch.zeros_like(p, dtype=torch.float64) for p in ref.parameters()]
        for r in range(hvd.size()):
            sampler = torch.utils.data.distributed.DistributedSampler(
                train_dataset, num_replicas=hvd.size(), rank=r)
            sampler.set_epoch(epoch)
            data, target = train_dataset[list(sampler)[:allreduce_batch_size]]
            torch.set_rng_state(state)
            ref.zero_grad()
            for i in range(0, len(data), args.batch_size):
                data_batch = data[i:i + args.batch_size]
                loss = F.nll_loss(ref(data_batch), target[i:i + args.batch_size])
                loss.div_(float(len(data)) / len(data_batch))
                loss.backward()
            for t, p in zip(total, ref.parameters()):
                t += (p.grad.half() if args.fp16_allreduce else p.grad).double()
    return [t / hvd.size() for t in total]


def metric_average(val, name):
    tensor = torch.tensor(val)
    avg_tensor = hvd.allreduce(tensor, name=name)
    return avg_tensor.item()


def test():
    model.eval()
    test_loss = 0.0
    test_accuracy = 0.0
    for data, target in test_loader:
        output = model(data)
        test_loss += F.nll_loss(output, target, reduction="sum").item()
        pred = output.data.max(1, keepdim=True)[1]
        test_accuracy += pred.eq(target.data.view_as(pred)).float().sum().item()
    test_loss /= len(test_sampler)
    test_accuracy /= len(test_sampler)
    test_loss = metric_average(test_loss, "avg_loss")
    test_accuracy = metric_average(test_accuracy, "avg_accuracy")
    if hvd.rank() == 0:
        print(f"\nTest set: Average loss: {test_loss:.4f}, Accuracy: {100.0 * test_accuracy:.2f}%\n")
    return test_loss, test_accuracy


if __name__ == "__main__":
    args = parser.parse_args()
    allreduce_batch_size = args.batch_size * args.batches_per_allreduce

    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # Horovod's example limits threads per process too

    train_dataset, test_dataset = datasets()
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=allreduce_batch_size,
                                               sampler=train_sampler)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=args.test_batch_size,
                                              sampler=test_sampler)

    model = Net()
    lr_scaler = args.batches_per_allreduce * hvd.size() if not args.use_adasum else 1
    optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         backward_passes_per_step=args.batches_per_allreduce,
                                         op=hvd.Adasum if args.use_adasum else hvd.Average,
                                         gradient_predivide_factor=args.gradient_predivide_factor)

    worst = 0.0  # --check: the first step's worst relative difference from the reference
    for epoch in range(1, args.epochs + 1):
        train(epoch)
        loss, accuracy = test()
    # prioccl addition (not in Horovod's script): prove the ranks stayed in step.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    same = int(torch.equal(hvd.broadcast(flat, root_rank=0), flat))
    same = int(hvd.allreduce(torch.tensor([same]), op=hvd.Min).item())
    # A float16 sum rounds at every step: about 5e-4 here; a reduction off by 1% gives 1e-2.
    tolerance = 3e-3 if args.fp16_allreduce else 1e-5
    matched = worst <= tolerance
    if args.check and (hvd.rank() == 0 or not matched):
        print(f"reference_match={int(matched)} rank={hvd.rank()} worst_difference={worst:.3g} "
              "(first step's all-reduced gradient, relative to each tensor's largest element; "
              f"tolerance {tolerance:g})", flush=True)
    if hvd.rank() == 0:
        print(f"RESULT ranks={hvd.size()} epochs={args.epochs} test_accuracy={accuracy:.4f} "
              f"identical_weights={same}", flush=True)
    if not matched:
        sys.exit(1)
