"""prioccl.torch.DistributedOptimizer on several ranks (run under mpirun): P3 and sync give
bitwise-identical weights, P3's priorities follow the forward order, lagged skips exactly the
switch step, and bad arguments raise PriocclError. Skips (saying so) without python3-torch."""
import sys
import time
import warnings

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


class AttentionNet(torch.nn.Module):
    """nn.MultiheadAttention reads its out_proj's parameters without calling out_proj: P3 must
    apply their updates before the attention's own forward."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(64, 32)
        self.attention = torch.nn.MultiheadAttention(8, 2, batch_first=True)
        self.last = torch.nn.Linear(32, 10)

    def forward(self, x):
        h = torch.relu(self.first(x)).view(x.shape[0], 4, 8)
        h, _ = self.attention(h, h, h)
        return self.last(h.reshape(x.shape[0], 32))


def make(seed=0, cls=Net):
    torch.manual_seed(seed)
    net = cls()
    prioccl.broadcast_parameters(net.state_dict(), root_rank=0)
    return net


def batches(steps):
    g = torch.Generator().manual_seed(100 + prioccl.rank())  # every rank its own data
    return [(torch.randn(16, 64, generator=g), torch.randint(0, 10, (16,), generator=g))
            for _ in range(steps)]


def train(net, opt, data, sched=None, clip=None):
    """The Horovod loop; with clip, Horovod's synchronize(), clip, skip_synchronize() idiom."""
    loss_fn = torch.nn.CrossEntropyLoss()
    for x, y in data:
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        if clip:
            opt.synchronize()
            torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()
        if sched:
            sched.step()
    opt.synchronize()


def same_on_every_rank(t):
    lo, hi = t.clone(), t.clone()
    prioccl.allreduce_(lo, op=prioccl.Min)
    prioccl.allreduce_(hi, op=prioccl.Max)
    return torch.equal(lo, hi)


def sgd_of(net, lr=0.05, momentum=0.9, weight_decay=1e-4):
    return torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)


def p3_equals_sync(data, clip=None, cls=Net, gate_bytes=None):
    """P3 and sync, with a StepLR schedule in the loop (and clipping): bitwise equal weights.
    gate_bytes: p3_gate_bytes (None: the default)."""
    nets, opts = {}, {}
    knobs = {} if gate_bytes is None else {"p3_gate_bytes": gate_bytes}
    for mode in ("sync", "p3"):
        net = make(cls=cls)
        opt = ptorch.DistributedOptimizer(sgd_of(net), net.named_parameters(), mode=mode,
                                          model=net, **knobs)
        check(isinstance(opt, torch.optim.SGD), f"{mode}: the wrapper is a torch.optim.SGD")
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        nets[mode], opts[mode] = net, opt
        start = {k: v.clone() for k, v in net.state_dict().items()}
        train(net, opt, data, sched, clip)
        check(opt.param_groups[0]["lr"] == 0.05 * 0.5 ** (len(data) // 2),
              f"{mode}: the scheduler drove the learning rate")
    what = (f"clip {clip}" if clip else "StepLR") + f", {cls.__name__}, p3_gate_bytes {gate_bytes}"
    for k, v in nets["sync"].state_dict().items():
        check(torch.equal(v, nets["p3"].state_dict()[k]), f"p3 == sync bitwise for {k} ({what})")
        check(not torch.equal(v, start[k]), f"{k} was trained")
        check(same_on_every_rank(v), f"{k} identical on every rank")
    return nets, opts


def synchronize_waits_for_the_gradients(mode):
    """After synchronize(), p.grad is the average even when a rank is late to send its own."""
    net = make()
    opt = ptorch.DistributedOptimizer(sgd_of(net), net.named_parameters(), mode=mode, model=net)
    x = torch.full((4, 64), float(prioccl.rank() + 1))
    reference = make()  # the same computation, averaged by a blocking all-reduce
    torch.nn.CrossEntropyLoss()(reference(x), torch.zeros(4, dtype=torch.int64)).backward()
    for p in reference.parameters():
        prioccl.allreduce_(p.grad, op=prioccl.Average)
    opt.zero_grad()
    if prioccl.rank() == 0:
        time.sleep(0.5)  # the others' all-reduces cannot finish before rank 0 joins
    torch.nn.CrossEntropyLoss()(net(x), torch.zeros(4, dtype=torch.int64)).backward()
    opt.synchronize()
    for (n, p), q in zip(net.named_parameters(), reference.parameters()):
        check(torch.allclose(p.grad, q.grad, rtol=1e-6, atol=1e-7),
              f"{mode}: after synchronize() {n}.grad is the average")
    with opt.skip_synchronize():
        opt.step()
    opt.close()


def lagged_follows_the_users_schedule():
    """Switch decay multiplies the scheduler's rate (StepLR, halving every step) for the update
    only; the warm-up (2 steps) is synchronous; the switch step applies nothing."""
    net = make()
    opt = ptorch.DistributedOptimizer(sgd_of(net, lr=0.1, momentum=0, weight_decay=0),
                                      net.named_parameters(), mode="lagged", warmup_steps=2,
                                      switch_decay=True)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    loss_fn = torch.nn.CrossEntropyLoss()
    data = batches(6)
    for i, (x, y) in enumerate(data):
        user_lr = opt.param_groups[0]["lr"]
        check(abs(user_lr - 0.1 * 0.5 ** i) < 1e-12, f"lagged step {i}: the schedule's lr")
        before = net.last.weight.detach().clone()
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()
        delta = before - net.last.weight.detach()
        if i == 2:  # the switch: no aggregate yet
            check(torch.equal(delta, torch.zeros_like(delta)), "lagged switch step: no update")
        else:
            ratio = 2.0 * (i + 1) / 2 if i < 2 else 0.4
            # The rate the update used, per element (median: float32 rounding of small steps).
            used = (delta / net.last.weight.grad)[net.last.weight.grad.abs() > 1e-3].median()
            expect = user_lr * ratio
            check(abs(used.item() - expect) < 1e-3 * expect,
                  f"lagged step {i}: update at lr {expect} (measured {used.item()})")
        check(opt.param_groups[0]["lr"] == user_lr, f"lagged step {i}: the group keeps the "
                                                      "schedule's lr")
        sched.step()
    before = net.last.weight.detach().clone()
    opt.synchronize()  # the last aggregate (step 5's) is applied now
    check(not torch.equal(before, net.last.weight), "lagged synchronize() applies the last one")
    check(same_on_every_rank(net.last.weight.detach().clone()), "lagged: identical weights")
    opt.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ptorch.DistributedOptimizer(sgd_of(net), net.named_parameters(), mode="lagged",
                                    switch_decay=True).close()
    check(any("switch_decay" in str(w.message) for w in caught),
          "lagged: switch decay without warm-up warns")


def delayed_follows_the_paper():
    """SSD-SGD, k = 3 after one synchronous step: pulls issued at steps 3 and 6 are used at
    steps 4 and 7; weights are identical on every rank only after the warm-up step and after
    synchronize(); a scheduler's lr reaches the mode."""
    net = make()
    opt = ptorch.DistributedOptimizer(sgd_of(net), net.named_parameters(), mode="delayed", k=3,
                                      warmup_steps=1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    loss_fn = torch.nn.CrossEntropyLoss()
    for i, (x, y) in enumerate(batches(8)):
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()
        sched.step()
        used = i in (0, 4, 7)
        check(opt.last_step_synced == used, f"delayed step {i}: used a pull {opt.last_step_synced}")
        same = same_on_every_rank(net.last.weight.detach().clone())
        check(same == (i == 0 or prioccl.size() == 1), f"delayed step {i}: identical {same}")
    opt.synchronize()
    check(same_on_every_rank(net.last.weight.detach().clone()), "delayed: synchronize() gives "
          "the global weights")
    opt.close()
    for kwargs, why in ((dict(nesterov=True, momentum=0.9, lr=0.1), "nesterov"),
                        (dict(dampening=0.1, momentum=0.9, lr=0.1), "dampening")):
        try:
            ptorch.DistributedOptimizer(torch.optim.SGD(net.parameters(), **kwargs),
                                        net.named_parameters(), mode="delayed")
            check(False, f"delayed accepted {why}")
        except prioccl.PriocclError as e:
            check(why in str(e), f"delayed: the error names {why}: {e}")
    try:
        ptorch.DistributedOptimizer(torch.optim.Adam(net.parameters()), net.named_parameters(),
                                    mode="delayed")
        check(False, "delayed accepted Adam")
    except prioccl.PriocclError:
        pass


# A fresh interpreter: whether a 12 MiB malloc is served by a mapping of its own (glibc's
# mallinfo2 hblks) before and after _malloc.prime(), loaded without the package (importing torch
# could free large blocks itself). Prints "<before> <after>": 1 = mapped, 0 = from the heap.
_PRIME_PROBE = r"""
import ctypes, importlib.util, sys
spec = importlib.util.spec_from_file_location("m", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
libc = m._glibc()
if libc is None:
    print("not glibc"); sys.exit(0)
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = Info
def mapped():
    before = libc.mallinfo2().hblks
    p = libc.malloc(12 << 20)
    n = libc.mallinfo2().hblks - before
    libc.free(p)
    return n
print(mapped(), m.prime() and mapped())
"""


def malloc_prime_raises_glibcs_threshold():
    import os
    import subprocess
    path = os.path.join(os.path.dirname(ptorch.__file__), "_malloc.py")
    for env, want in (("1", "1 0"), ("0", "1 False")):
        out = subprocess.run([sys.executable, "-c", _PRIME_PROBE, path], capture_output=True,
                             text=True, env=dict(os.environ, PRIOCCL_TORCH_MALLOC_PRIME=env))
        got = out.stdout.strip()
        if got == "not glibc":
            print("malloc prime: not glibc, not checked", flush=True)
            return
        check(got == want, f"PRIOCCL_TORCH_MALLOC_PRIME={env}: a 12 MiB block mapped before and "
                           f"after prime() = {got!r}, want {want!r} {out.stderr[-300:]}")


def main():
    prioccl.init()
    malloc_prime_raises_glibcs_threshold()
    data = batches(6)
    nets, opts = p3_equals_sync(data)
    pr = opts["p3"]._priority
    check(pr[nets["p3"].first.weight] < pr[nets["p3"].second.weight] < pr[nets["p3"].last.weight],
          "p3 priorities follow the forward order")
    state = opts["p3"].state_dict()
    check(len(state["state"]) == 6 and state["param_groups"][0]["momentum"] == 0.9,
          "state_dict holds the momentum buffers and hyper-parameters")
    opts["sync"].load_state_dict(state)
    p3_equals_sync(data, clip=0.5)
    # One group (the whole net is below the default 256 KiB): the first module updates every
    # parameter; with p3_gate_bytes=0 each module its own.
    check(len(opts["p3"]._apply_at[nets["p3"].first]) == 6, "p3: one group of 6 parameters")
    # The optimizer's automatic groups: the net's 6 small gradients go as one fused op (sync
    # and p3 alike, so still bitwise equal); fusion_bytes=0: 6 ops.
    for fusion, ops in ((None, 1), (0, 6)):
        net = make()
        knobs = {} if fusion is None else {"fusion_bytes": fusion}
        opt = ptorch.DistributedOptimizer(sgd_of(net), net.named_parameters(), model=net,
                                          **knobs)
        before = prioccl.counters()["opsSubmitted"]
        opt.zero_grad()
        torch.nn.CrossEntropyLoss()(net(data[0][0]), data[0][1]).backward()
        opt.step()  # waits for them all (train() would synchronize() after it: all again)
        got = prioccl.counters()["opsSubmitted"] - before
        check(got == ops, f"sync, fusion_bytes {fusion}: {got} ops for one step, not {ops}")
    nets, opts = p3_equals_sync(data, gate_bytes=0)
    check(len(opts["p3"]._apply_at[nets["p3"].first]) == 2, "p3: per module with gates of 0 B")
    for gate_bytes in (0, None):
        nets, opts = p3_equals_sync(data, cls=AttentionNet, gate_bytes=gate_bytes)
        pr, net = opts["p3"]._priority, nets["p3"]
        check(pr[net.first.weight] < pr[net.attention.out_proj.weight] < pr[net.last.weight],
              "p3: out_proj (used inside the attention's forward) updated before the attention")
    for mode in ("sync", "p3"):
        synchronize_waits_for_the_gradients(mode)

    # Lagged, one warm-up step: step 0 applies its own aggregate, step 1 (the switch) applies
    # nothing, step 2 applies step 1's.
    net = make()
    opt = ptorch.DistributedOptimizer(sgd_of(net, momentum=0, weight_decay=0),
                                      net.named_parameters(), mode="lagged", warmup_steps=1)
    loss_fn = torch.nn.CrossEntropyLoss()
    for i, (x, y) in enumerate(data[:3]):
        before = net.last.weight.detach().clone()
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()
        changed = not torch.equal(before, net.last.weight)
        check(changed == (i != 1), f"lagged step {i}: weights changed = {changed}")
    opt.close()
    lagged_follows_the_users_schedule()
    delayed_follows_the_paper()

    sgd = sgd_of(net)
    for bad in (lambda: ptorch.DistributedOptimizer(sgd, net.named_parameters(), mode="fast"),
                lambda: ptorch.DistributedOptimizer(sgd, net.named_parameters(), mode="p3"),
                lambda: ptorch.DistributedOptimizer(sgd, net.named_parameters(), mode="p3",
                                                    model=net, p3_gate_bytes=-1)):
        try:
            bad()
            check(False, "bad arguments accepted")
        except prioccl.PriocclError:
            pass
    finish("torch optimizer")


if __name__ == "__main__":
    main()
