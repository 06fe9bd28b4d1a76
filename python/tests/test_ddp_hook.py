"""prioccl.torch.ddp.ddp_comm_hook under torch.nn.parallel.DistributedDataParallel (gloo process
group on loopback, run under mpirun): the same training with DDP's own all-reduce and with the
hook, over DDP's first-iteration bucket rebuild. The hook's weights are bitwise identical on
every rank and match plain DDP's within float tolerance; every bucket went through prioccl with
the designed priority (the first layer's bucket most urgent); failed ops fail the future and
DDP's backward(), never hang. Skips (saying so) without python3-torch."""
import os
import socket
import sys

import prioccl
from checks import check, finish

try:
    import torch
    import torch.distributed as dist
except ImportError:
    print("SKIPPED: python3-torch is not installed", flush=True)
    sys.exit(0)
import prioccl.torch.ddp as pddp

STEPS = 6          # iteration 0 runs before DDP's bucket rebuild, 1.. after it
CAP_BYTES = 10240  # small buckets: the 5 layers below make 4 buckets after the rebuild
WIDTHS = [32, 64, 64, 64, 48, 10]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b)
                                          for a, b in zip(WIDTHS, WIDTHS[1:]))

    def forward(self, x):
        for k, layer in enumerate(self.layers):
            x = layer(x) if k == len(self.layers) - 1 else torch.relu(layer(x))
        return x


def init_gloo(r, p):
    """A gloo process group on loopback; rank 0 picks a free port and broadcasts it."""
    port = torch.zeros(1, dtype=torch.int64)
    if r == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port[0] = s.getsockname()[1]
    prioccl.broadcast_(port, root_rank=0, name="test_ddp_hook.port")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{int(port[0])}", rank=r,
                            world_size=p)


def batches(r):
    g = torch.Generator().manual_seed(100 + r)  # every rank its own data
    return [(torch.randn(16, WIDTHS[0], generator=g), torch.randint(0, 10, (16,), generator=g))
            for _ in range(STEPS)]


def fresh(initial):
    net = Net()
    net.load_state_dict(initial)
    return net


def train(net, data, state=None, hook=None):
    """STEPS steps of SGD with momentum through DDP (its own all-reduce when hook is None)."""
    dist._DEFAULT_FIRST_BUCKET_BYTES = CAP_BYTES  # read by DDP's constructor (torch's knob)
    ddp = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=CAP_BYTES / 2 ** 20)
    if hook is not None:
        ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    for x, y in data:
        opt.zero_grad()
        loss_fn(ddp(x), y).backward()
        opt.step()
    return net


def flat(net):
    return torch.cat([q.detach().reshape(-1) for q in net.parameters()])


def identical_on_every_rank(t, p):
    every = prioccl.allgather(t.view(1, -1).view(torch.int32))  # bits, not values
    return all(torch.equal(every[k], every[0]) for k in range(p))


class Recorder:
    """Wraps the hook and prioccl.allreduce_async_ to see what each bucket held and which prioccl
    op (name, priority, size) it became."""

    def __init__(self, model):
        self.positions = {id(q): k for k, q in enumerate(model.parameters())}
        self.buckets = []  # (iteration, index, parameter positions, is_last)
        self.ops = []      # (name, priority, elements)
        self.iteration = 0  # DDP's: the bucket with is_last() ends one

    def hook(self, state, bucket):
        self.buckets.append((self.iteration, bucket.index(),
                             [self.positions[id(q)] for q in bucket.parameters()],
                             bucket.is_last()))
        self.iteration += bucket.is_last()
        return pddp.ddp_comm_hook(state, bucket)


class FakeBucket:
    """What ddp_comm_hook reads from a GradBucket, around a tensor of our choosing."""

    def __init__(self, buf, index=0):
        self._buf, self._index = buf, index

    def buffer(self):
        return self._buf

    def index(self):
        return self._index

    def parameters(self):
        return []

    def is_last(self):
        return True


def expect_future_error(fut, needle, what):
    try:
        fut.wait()
    except Exception as e:  # noqa: BLE001
        check(needle in str(e), f"{what}: message '{e}' lacks '{needle}'")
        return
    check(False, f"{what}: the future completed without an error")


def check_trace(rec, state, by_model, what):
    """Every bucket became one prioccl op named <state.name>.bucket<index> with the designed
    priority; after the rebuild there are >= 3 buckets and the first layer's is most urgent."""
    check(len(rec.ops) == len(rec.buckets) == state.calls,
          f"{what}: {len(rec.buckets)} buckets, {len(rec.ops)} prioccl ops, {state.calls} calls")
    check(len(rec.ops) > STEPS, f"{what}: only {len(rec.ops)} prioccl ops in {STEPS} steps")
    for (it, index, positions, _), (name, priority, elements) in zip(rec.buckets, rec.ops):
        want = min(positions) if by_model else -index
        check(priority == want, f"{what}: iteration {it} bucket {index} (parameters "
                                f"{positions}) got priority {priority}, want {want}")
        check(name == f"{state.name}.bucket{index}", f"{what}: op name {name}")
    for it in range(1, STEPS):
        seen = [(index, positions) for i, index, positions, _ in rec.buckets if i == it]
        check(len(seen) >= 3, f"{what}: iteration {it} had {len(seen)} buckets (want >= 3)")
        if not seen:
            continue
        check([index for index, _ in seen] == list(range(len(seen))),
              f"{what}: iteration {it}: buckets in the order {[i for i, _ in seen]}")
        first = [index for index, positions in seen if 0 in positions]
        check(len(first) == 1 and first[0] == len(seen) - 1,
              f"{what}: iteration {it}: the first layer is in bucket(s) {first}, not the last")
        prios = {index: state_priority(rec, it, index) for index, _ in seen}
        check(first and prios[first[0]] == min(prios.values())
              and list(prios.values()) == sorted(prios.values(), reverse=True),
              f"{what}: iteration {it}: priorities by bucket index {prios} do not make the first "
              f"layer's bucket the most urgent")


def state_priority(rec, it, index):
    for (i, k, _, _), (_, priority, _) in zip(rec.buckets, rec.ops):
        if i == it and k == index:
            return priority
    return None


def hooked(initial, data, by_model, name):
    """Trains with the hook, recording every bucket and prioccl op; returns (net, recorder,
    state)."""
    net = fresh(initial)
    state = pddp.PriorityState(model=net if by_model else None, name=name)
    rec = Recorder(net)
    real = prioccl.allreduce_async_

    def recording_allreduce(tensor, op=prioccl.Average, priority=0, name=None):
        rec.ops.append((name, priority, tensor.numel()))
        return real(tensor, op=op, priority=priority, name=name)

    prioccl.allreduce_async_ = recording_allreduce  # the hook calls prioccl.allreduce_async_
    try:
        train(net, data, state, rec.hook)
    finally:
        prioccl.allreduce_async_ = real
    state.close()
    return net, rec, state


def error_cases(r, p, initial, data):
    state = pddp.PriorityState(name="test_ddp_hook.errors")
    # Rejected at submission (no op reaches the other ranks): the future carries the error.
    fut = pddp.ddp_comm_hook(state, FakeBucket(torch.zeros(8, dtype=torch.complex64)))
    expect_future_error(fut, "PriocclError", "complex bucket")
    fut = pddp.ddp_comm_hook(state, FakeBucket(torch.zeros(8, 2)[:, 0]))
    expect_future_error(fut, "PriocclError", "strided bucket")
    bad_op = pddp.PriorityState(name="test_ddp_hook.bad_op", op=99)  # the C library rejects it
    fut = pddp.ddp_comm_hook(bad_op, FakeBucket(torch.zeros(8)))
    expect_future_error(fut, "invalid reduction op", "reduction op 99")
    check(state.calls == 0 and bad_op.calls == 0,
          f"failed submissions counted as calls ({state.calls}, {bad_op.calls})")
    # A good bucket through the same state still works afterwards.
    t = torch.full((1000,), float(r + 1))
    got = pddp.ddp_comm_hook(state, FakeBucket(t)).wait()
    check(got is t and torch.all(t == (p + 1) / 2).item(), "direct hook call averages in place")
    if p > 1:
        # Ranks disagree on the reduction: the library fails the op on every rank after
        # submission, so the error reaches the future through the background thread.
        bad = pddp.PriorityState(name="test_ddp_hook.mismatch",
                                 op=prioccl.Sum if r == 0 else prioccl.Average)
        fut = pddp.ddp_comm_hook(bad, FakeBucket(torch.ones(100)))
        expect_future_error(fut, "Mismatched", "mismatched op, direct")
        # The same inside DDP: backward() raises instead of hanging.
        ddp = torch.nn.parallel.DistributedDataParallel(fresh(initial))
        ddp.register_comm_hook(bad, pddp.ddp_comm_hook)
        x, y = data[0]
        try:
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            check(False, "DDP backward with a failing prioccl op did not raise")
        except RuntimeError as e:
            check("Mismatched" in str(e), f"DDP backward's error lacks the prioccl message: {e}")
        bad.close()
    state.close()


def main():
    prioccl.init()
    r, p = prioccl.rank(), prioccl.size()
    init_gloo(r, p)
    torch.manual_seed(0)
    initial = Net().state_dict()
    data = batches(r)

    plain = flat(train(fresh(initial), data))  # (a) DDP's own all-reduce over gloo

    net, rec, state = hooked(initial, data, True, "ddp")  # (b) the hook, priorities by model
    ours = flat(net)
    check(identical_on_every_rank(ours, p), "hook: weights differ between ranks")
    check(torch.allclose(ours, plain, rtol=1e-5, atol=1e-6),
          f"hook against plain DDP: max difference {(ours - plain).abs().max().item():.3g}")
    check(not torch.equal(ours, torch.cat([v.reshape(-1) for v in initial.values()])),
          "hook: the weights did not move")
    check_trace(rec, state, True, "hook with model")
    if r == 0:
        for it in (0, 1):
            print(f"iteration {it} buckets (index: parameter positions -> priority): " +
                  ", ".join(f"{k}: {pos} -> {state_priority(rec, it, k)}"
                            for i, k, pos, _ in rec.buckets if i == it), flush=True)

    net, rec, state = hooked(initial, data, False, "ddp_by_index")  # (c) no model: -index
    by_index = flat(net)
    check(identical_on_every_rank(by_index, p), "hook without model: weights differ")
    check(torch.allclose(by_index, plain, rtol=1e-5, atol=1e-6),
          "hook without model against plain DDP")
    check_trace(rec, state, False, "hook without model")

    error_cases(r, p, initial, data)
    dist.destroy_process_group()
    finish("test_ddp_hook")


if __name__ == "__main__":
    main()
