"""prioccl.torch.DistributedOptimizer on several ranks (run under mpirun): P3 and sync give
bitwise-identical weights, P3's priorities follow the forward order, lagged skips exactly the
switch step, and bad arguments raise PriocclError. Skips (saying so) without python3-torch."""
import sys

import prioccl
from checks import check, finish

try:
    import torch
except ImportError:
    print("SKIPPED: python3-torch is not installed", flush=True)
    sys.exit(0)
import prioccl.torch as ptorch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(64, 48)
        self.second = torch.nn.Linear(48, 32)
        self.last = torch.nn.Linear(32, 10)

    def forward(self, x):
        return self.last(torch.relu(self.second(torch.relu(self.first(x)))))


def make(seed=0):
    torch.manual_seed(seed)
    net = Net()
    prioccl.broadcast_parameters(net.state_dict(), root_rank=0)
    return net


def batches(steps):
    g = torch.Generator().manual_seed(100 + prioccl.rank())  # every rank its own data
    return [(torch.randn(16, 64, generator=g), torch.randint(0, 10, (16,), generator=g))
            for _ in range(steps)]


def train(net, opt, data):
    loss_fn = torch.nn.CrossEntropyLoss()
    for x, y in data:
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()
    opt.synchronize()


def same_on_every_rank(t):
    lo, hi = t.clone(), t.clone()
    prioccl.allreduce_(lo, op=prioccl.Min)
    prioccl.allreduce_(hi, op=prioccl.Max)
    return torch.equal(lo, hi)


def main():
    prioccl.init()
    data = batches(6)
    nets, opts = {}, {}
    for mode in ("sync", "p3"):
        net = make()
        sgd = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
        opt = ptorch.DistributedOptimizer(sgd, net.named_parameters(), mode=mode, model=net)
        nets[mode], opts[mode] = net, opt
    start = {k: v.clone() for k, v in nets["sync"].state_dict().items()}
    for mode in ("sync", "p3"):
        train(nets[mode], opts[mode], data)
    for k, v in nets["sync"].state_dict().items():
        check(torch.equal(v, nets["p3"].state_dict()[k]), f"p3 == sync bitwise for {k}")
        check(not torch.equal(v, start[k]), f"{k} was trained")
        check(same_on_every_rank(v), f"{k} identical on every rank")
    pr = opts["p3"]._priority
    check(pr[nets["p3"].first.weight] < pr[nets["p3"].second.weight] < pr[nets["p3"].last.weight],
          "p3 priorities follow the forward order")

    # Lagged, one warm-up step: step 0 applies its own aggregate, step 1 (the switch) applies
    # nothing, step 2 applies step 1's.
    net = make()
    sgd = torch.optim.SGD(net.parameters(), lr=0.05)
    opt = ptorch.DistributedOptimizer(sgd, net.named_parameters(), mode="lagged", warmup_steps=1)
    loss_fn = torch.nn.CrossEntropyLoss()
    for i, (x, y) in enumerate(data[:3]):
        before = net.last.weight.detach().clone()
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()
        changed = not torch.equal(before, net.last.weight)
        check(changed == (i != 1), f"lagged step {i}: weights changed = {changed}")
    opt.close()

    # Delayed (SSD-SGD), k = 3 after one synchronous step: the weights are the global ones (equal
    # on every rank) exactly at steps 0, 3 and 6; in between each rank moves on its own gradient.
    net = make()
    sgd = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    opt = ptorch.DistributedOptimizer(sgd, net.named_parameters(), mode="delayed", k=3,
                                      warmup_steps=1)
    for i, (x, y) in enumerate(data[:7]):
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()
        boundary = i in (0, 3, 6)
        check(opt.last_step_synced == boundary, f"delayed step {i}: synced {opt.last_step_synced}")
        same = same_on_every_rank(net.last.weight.detach().clone())
        check(same == (boundary or prioccl.size() == 1), f"delayed step {i}: identical {same}")
    opt.close()

    for bad in (lambda: ptorch.DistributedOptimizer(sgd, net.named_parameters(), mode="fast"),
                lambda: ptorch.DistributedOptimizer(sgd, net.named_parameters(), mode="p3")):
        try:
            bad()
            check(False, "bad arguments accepted")
        except prioccl.PriocclError:
            pass
    finish("torch optimizer")


if __name__ == "__main__":
    main()
