"""prioccl's Python package on several ranks (run under mpirun): results against references
computed here, async/poll/synchronize, broadcast, point to point, and clear errors. torch
tensors too when python3-torch is installed (otherwise that part says it is skipped)."""

import time

import numpy as np

import prioccl
from checks import check, finish

def expect_error(fn, needle, what):
    try:
        fn()
    except prioccl.PriocclError as e:
        check(needle in str(e), f"{what}: message '{e}' lacks '{needle}'")
        return
    check(False, f"{what}: no PriocclError")


def numpy_cases(r, p):
    n = 100003
    x = (np.arange(n, dtype=np.float32) % 1000) * (r + 1)
    avg = prioccl.allreduce(x)  # a new array; x unchanged
    want = (np.arange(n, dtype=np.float64) % 1000) * (p * (p + 1) / 2) / p
    check(np.allclose(avg, want, rtol=2 ** -22, atol=0), "float32 average")
    check(x[7] == 7 * (r + 1), "allreduce left its input alone")

    ints = np.full(4099, r + 1, dtype=np.int64)
    prioccl.allreduce_(ints, op=prioccl.Sum, name="ints")
    check((ints == p * (p + 1) // 2).all(), "int64 sum in place, named")

    hs = [prioccl.allreduce_async_(np.full(64, r * 10 + k, dtype=np.int32), op=prioccl.Max,
                                   priority=k) for k in range(8)]
    for k, h in enumerate(hs):
        out = prioccl.synchronize(h)
        check((out == (p - 1) * 10 + k).all(), f"async max #{k}")
        check(prioccl.poll(h), "poll after synchronize")

    state = {"w": np.full(10, float(r), dtype=np.float64), "b": np.full(3, r, dtype=np.int8)}
    prioccl.broadcast_parameters(state, root_rank=p - 1)
    check((state["w"] == p - 1).all() and (state["b"] == p - 1).all(), "broadcast_parameters")

    # broadcast: the root's bits, -0.0 and a NaN payload included (a sum of zeros loses both)
    bits = np.arange(5000, dtype=np.uint32) * 2654435761 + r
    bits[:3] = [0x80000000, 0x7FC01234, 0xFF800001]  # -0.0, quiet NaN with payload, signalling
    mine = bits.view(np.float32)
    root = p - 1
    want_bits = np.arange(5000, dtype=np.uint32) * 2654435761 + root
    want_bits[:3] = bits[:3]
    got = prioccl.broadcast(mine, root_rank=root)  # a new array
    check((got.view(np.uint32) == want_bits).all(), "broadcast bitwise (-0.0, NaN payloads)")
    check((mine.view(np.uint32) == bits).all(), "broadcast left its input alone")
    inplace = np.full(70001, r, dtype=np.int64)
    prioccl.broadcast_(inplace, root_rank=0, name="bcast.inplace")
    check((inplace == 0).all(), "broadcast_ in place, named")
    hs = [prioccl.broadcast_async_(np.full(100, r * 10 + k, dtype=np.int8), root_rank=k % p,
                                   priority=-k) for k in range(4)]
    for k, h in enumerate(hs):
        check((prioccl.synchronize(h) == (k % p) * 10 + k).all(), f"async broadcast #{k}")
    expect_error(lambda: prioccl.broadcast(mine, root_rank=p), "root", "root out of range")
    if p > 1:  # ranks disagree on the root: every rank gets the same error
        expect_error(lambda: prioccl.broadcast(mine, root_rank=r, name="badroot"),
                     "Mismatched broadcast 'badroot'", "root mismatch")

    # reduce: the root gets the sum; the others None
    x = np.arange(3001, dtype=np.int32) + r
    got = prioccl.reduce(x, root_rank=p - 1, op=prioccl.Sum)
    if r == p - 1:
        check((got == p * np.arange(3001) + p * (p - 1) // 2).all(), "reduce sum at the root")
    else:
        check(got is None, "reduce returns None off the root")
    # allgather: concatenated along the first dimension, in rank order
    g = prioccl.allgather(np.full((2, 3), r, dtype=np.float64), name="gather")
    check(g.shape == (2 * p, 3) and all((g[2 * k:2 * k + 2] == k).all() for k in range(p)),
          "allgather rows in rank order")
    # reducescatter: part r of the sum
    t = np.arange(4 * p, dtype=np.float32).reshape(2 * p, 2) + r
    part = prioccl.reducescatter(t, op=prioccl.Sum)
    full = np.arange(4 * p, dtype=np.float32).reshape(2 * p, 2) * p + p * (p - 1) / 2
    check(part.shape == (2, 2) and (part == full[2 * r:2 * r + 2]).all(), "reducescatter part")
    # alltoall: part j of rank i lands as part i on rank j
    a = np.repeat(np.arange(p, dtype=np.int64) * 100 + r, 3)
    b = prioccl.alltoall(a)
    check((b == np.repeat(np.arange(p, dtype=np.int64) + 100 * r, 3)).all(), "alltoall")
    prioccl.barrier()
    v_cases(r, p)

    if p > 1:  # each rank sends its rank to the next
        got = np.zeros(5, dtype=np.float32)
        h_recv = prioccl.recv_async(got, (r - 1) % p, tag=3)
        h_send = prioccl.send_async(np.full(5, r, dtype=np.float32), (r + 1) % p, tag=3)
        prioccl.synchronize(h_send)
        prioccl.synchronize(h_recv)
        check((got == (r - 1) % p).all(), "send/recv ring")

    expect_error(lambda: prioccl.allreduce(np.zeros((4, 4), dtype=np.float32)[:, 1]),
                 "not C-contiguous", "non-contiguous array")
    expect_error(lambda: prioccl.allreduce(np.zeros(4, dtype=np.complex64)), "unsupported dtype",
                 "complex dtype")
    expect_error(lambda: prioccl.allreduce([1, 2]), "expected a numpy array", "a list")
    if p > 1:  # ranks disagree on the count of a named op: every rank gets the same error
        expect_error(lambda: prioccl.allreduce(np.zeros(10 + r, dtype=np.float32), name="bad"),
                     "Mismatched allreduce 'bad'", "count mismatch")
        ok = np.ones(3, dtype=np.float32)
        check((prioccl.allreduce(ok, op=prioccl.Sum) == p).all(), "works after a mismatch")


def gather_rows(k):
    """Rank k's rows for the uneven allgather: k of them (rank 0 has none), each [k, i, c]."""
    return np.array([[k * 100 + i * 10 + c for c in range(3)] for i in range(k)],
                    dtype=np.int32).reshape(k, 3)


def a2a_split(i, j):
    """Rows rank i sends rank j: uneven, zero for some pairs (every third, and i == j == 0)."""
    return (i + 2 * j) % 3


def a2a_rows(i, j):
    """The rows rank i sends rank j, each [i, j, t] as one int64 and its negation."""
    v = np.array([i * 10000 + j * 100 + t for t in range(a2a_split(i, j))], dtype=np.int64)
    return np.stack([v, -v], axis=1).reshape(len(v), 2)


def v_cases(r, p):
    """allgather / alltoall / reducescatter with a first dimension that differs between ranks or
    does not divide into size() parts (the v-collectives), all checked exactly."""
    want = np.concatenate([gather_rows(k) for k in range(p)])
    g = prioccl.allgather(gather_rows(r))
    check(g.shape == (p * (p - 1) // 2, 3) and (g == want).all(), "uneven allgather")
    g = prioccl.allgather(gather_rows(r).reshape(r, 1, 3), name="gather.v")
    check(g.shape == (p * (p - 1) // 2, 1, 3) and (g.reshape(-1, 3) == want).all(),
          "uneven allgather, 3-D, named")
    h = prioccl.allgather_async(np.arange(r + 1, dtype=np.float64) * -1.5, priority=-2,
                                name="gather.async")
    g = prioccl.synchronize(h)
    check((g == np.concatenate([np.arange(k + 1) * -1.5 for k in range(p)])).all(),
          "uneven allgather async, named")
    check(prioccl.allgather(np.zeros((0, 4), dtype=np.int8)).shape == (0, 4),
          "allgather of 0 rows everywhere")
    # One library op: starting it waits for no other rank (the rows are learned inside the op).
    # Rank 0 starts first, the others 0.5 s later.
    if r:
        time.sleep(0.5)
    started = time.monotonic()
    h = prioccl.allgather_async(gather_rows(r), name="gather.early")
    h2 = prioccl.alltoall_async(np.concatenate([a2a_rows(r, j) for j in range(p)]),
                                splits=[a2a_split(r, j) for j in range(p)], name="a2a.early")
    returned = time.monotonic() - started
    check(r or returned < 0.3, f"allgather_async/alltoall_async on rank 0 returned after "
                               f"{returned:.3f} s: they waited for the other ranks")
    check((prioccl.synchronize(h) == want).all(), "allgather started before the other ranks")
    check((prioccl.synchronize(h2) == np.concatenate([a2a_rows(i, r) for i in range(p)])).all(),
          "alltoall with splits started before the other ranks")
    if p > 1:  # every rank raises, then the next op still matches
        expect_error(lambda: prioccl.allgather(np.zeros((1, 3 + (r == p - 1)), dtype=np.int32)),
                     "dimensions after the first", "allgather of mismatched trailing dims")
        expect_error(lambda: prioccl.allgather(np.zeros((1, 2, 3) if r else (1, 3, 2),
                                                        dtype=np.int32), name="gather.shape"),
                     "dimensions after the first", "allgather of the same row size, other shape")
        expect_error(lambda: prioccl.allgather(np.zeros(2, dtype=np.float32 if r else np.int32)),
                     "differ in dtype", "allgather of mismatched dtypes")
        bad = np.zeros((4, 4), dtype=np.int32)[:, 1] if r == 0 else np.zeros(4, dtype=np.int32)
        expect_error(lambda: prioccl.allgather(bad), "not C-contiguous" if r == 0 else
                     "rank(s) [0] failed", "allgather with a local error on rank 0")
        check((prioccl.allgather(gather_rows(r)) == want).all(), "allgather after the errors")

    # alltoall with uneven splits, zeros included; splits as a list, an array, a tensor
    sent = [a2a_split(r, j) for j in range(p)]
    x = np.concatenate([a2a_rows(r, j) for j in range(p)])
    want = np.concatenate([a2a_rows(i, r) for i in range(p)])
    got_splits = [a2a_split(i, r) for i in range(p)]
    out = prioccl.alltoall(x, splits=sent)
    check(out.shape == want.shape and (out == want).all(), "alltoall with uneven splits")
    out, rs = prioccl.alltoall(x, splits=np.array(sent), name="a2a.v",
                               return_received_splits=True)
    check((out == want).all() and rs.dtype == np.int64 and rs.tolist() == got_splits,
          "alltoall with splits, named, received splits")
    h = prioccl.alltoall_async(x, splits=sent, priority=3, name="a2a.async",
                               return_received_splits=True)
    out, rs = prioccl.synchronize(h)
    check((out == want).all() and rs.tolist() == got_splits, "alltoall async with splits")
    out, rs = prioccl.alltoall(np.arange(2 * p, dtype=np.int32), return_received_splits=True)
    check(rs.tolist() == [2] * p and (out == np.concatenate(
        [np.arange(2 * r, 2 * r + 2) for _ in range(p)])).all(), "alltoall, equal splits")
    expect_error(lambda: prioccl.alltoall(x, splits=[len(x) + 1] + [0] * (p - 1)),
                 "summing to the first dimension", "alltoall with splits of a wrong sum")
    if p > 1:  # one rank's splits are wrong: it says why, the others name it
        expect_error(lambda: prioccl.alltoall(x, splits=sent if r else sent[:-1]),
                     "one per rank" if r == 0 else "rank(s) [0] failed",
                     "alltoall with too few splits on rank 0")
        expect_error(lambda: prioccl.alltoall(np.zeros((p, 2 + r), dtype=np.int64),
                                              splits=[1] * p, name="a2a.bad"),
                     "dimensions after the first", "alltoall of mismatched trailing dims")
        check((prioccl.alltoall(x, splits=sent) == want).all(), "alltoall after the errors")

    # reducescatter of a first dimension that does not divide: rank k gets rows // p rows, one
    # more for k < rows % p (Horovod's cut); with p - 1 rows the last rank gets none
    for n in (2 * p + 1, 3 * p + p // 2, p - 1):
        base, extra = divmod(n, p)
        start, rows = r * base + min(r, extra), base + (r < extra)
        t = np.arange(n * 2, dtype=np.int64).reshape(n, 2) * (r + 1) - r
        full = (np.arange(n * 2, dtype=np.int64).reshape(n, 2) * (p * (p + 1) // 2)
                - p * (p - 1) // 2)
        part = prioccl.reducescatter(t, op=prioccl.Sum, name=f"rs.{n}")
        check(part.shape == (rows, 2) and (part == full[start:start + rows]).all(),
              f"reducescatter of {n} rows")
        h = prioccl.reducescatter_async(t, op=prioccl.Max, priority=1)
        top = np.arange(n * 2, dtype=np.int64).reshape(n, 2) * p - (p - 1)
        top = np.maximum(top, np.arange(n * 2, dtype=np.int64).reshape(n, 2))
        check((prioccl.synchronize(h) == top[start:start + rows]).all(),
              f"reducescatter async max of {n} rows")
    if p > 1:  # ranks disagree on the rows: the library fails the op on every rank
        expect_error(lambda: prioccl.reducescatter(np.zeros(2 * p + (r == 0), dtype=np.int32)),
                     "Mismatched", "reducescatter of mismatched first dimensions")


def torch_cases(r, p):
    try:
        import torch
    except ImportError:
        if r == 0:
            print("SKIPPED torch cases: python3-torch is not installed", flush=True)
        return False
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32):
        t = torch.full((1001,), r + 1, dtype=dtype)
        out = prioccl.allreduce(t, op=prioccl.Sum)
        check(bool((out == p * (p + 1) // 2).all()), f"torch {dtype} sum")
    model = torch.nn.Linear(4, 3)
    with torch.no_grad():
        for q in model.parameters():
            q.fill_(r)
    prioccl.broadcast_parameters(model.state_dict(), root_rank=0)
    check(all(bool((q == 0).all()) for q in model.parameters()), "torch broadcast_parameters")
    z = torch.full((33,), -0.0 if r == 0 else 5.0, dtype=torch.bfloat16)
    prioccl.broadcast_(z, root_rank=0)
    check(bool(torch.signbit(z).all()) and bool((z == 0).all()), "torch broadcast_ keeps -0.0")
    expect_error(lambda: prioccl.allreduce(torch.zeros(4, 4).t()), "not contiguous",
                 "non-contiguous tensor")
    # the v-collectives on tensors: uneven allgather (rank 0 has no rows), alltoall with a
    # splits tensor, reducescatter of an odd first dimension
    g = prioccl.allgather(torch.from_numpy(gather_rows(r)), name="torch.gather")
    check(isinstance(g, torch.Tensor) and tuple(g.shape) == (p * (p - 1) // 2, 3) and
          bool((g == torch.from_numpy(np.concatenate([gather_rows(k) for k in range(p)]))).all()),
          "torch uneven allgather")
    x = torch.from_numpy(np.concatenate([a2a_rows(r, j) for j in range(p)]))
    sent = torch.tensor([a2a_split(r, j) for j in range(p)])
    out, rs = prioccl.synchronize(prioccl.alltoall_async(x, splits=sent,
                                                         return_received_splits=True))
    want = torch.from_numpy(np.concatenate([a2a_rows(i, r) for i in range(p)]))
    check(tuple(out.shape) == tuple(want.shape) and bool((out == want).all()) and
          rs.tolist() == [a2a_split(i, r) for i in range(p)], "torch alltoall with splits")
    n = 2 * p + 1
    t = torch.arange(n, dtype=torch.int32) + r
    start, rows = r * 2 + min(r, 1), 2 + (r < 1)
    part = prioccl.reducescatter(t, op=prioccl.Sum)
    check(part.dtype == torch.int32 and
          part.tolist() == [k * p + p * (p - 1) // 2 for k in range(start, start + rows)],
          "torch reducescatter of an odd first dimension")
    return True


def batch_cases(r, p):
    """prioccl._allreduce_batch (DistributedOptimizer's groups, grouped_allreduce_async_): the
    results of the general path, bit for bit; its special cases; names in flight; no op left
    behind by an error or a dropped handle."""
    import time

    import torch

    def ints(rank):  # rank's int64 input: their sum must be exact
        g = torch.Generator().manual_seed(2000 + rank)
        return torch.randint(-2 ** 40, 2 ** 40, (4, 2), generator=g)

    def inputs():
        g = torch.Generator().manual_seed(1000 + r)
        return [torch.randn(3, 5, generator=g), torch.randn(7, generator=g, dtype=torch.float64),
                ints(r), torch.randn(2, 2, 2, generator=g)]

    def drained():  # every op completed and released (_reap: True while ops remain)
        deadline = time.monotonic() + 30
        while prioccl._reap():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True

    names = [f"batch.{k}" for k in range(4)]
    fast = inputs()
    h = prioccl._allreduce_batch(fast, names, [3, 0, 2, 1], op=prioccl.Sum)
    general = inputs()
    with prioccl.group():
        hs = [prioccl.allreduce_async_(t, op=prioccl.Sum, priority=k, name=f"general.{k}")
              for k, t in zip([3, 0, 2, 1], general)]
    out = prioccl.synchronize(h)
    check(out is not None and len(out) == 4 and all(o is t for o, t in zip(out, fast)),
          "batch: synchronize returns its tensors")
    check(prioccl.poll(h), "batch: poll after synchronize")
    for t in hs:
        prioccl.synchronize(t)
    check(all(torch.equal(a, b) for a, b in zip(fast, general)),
          "batch: bitwise the general path's results")
    check(torch.equal(fast[2], sum(ints(i) for i in range(p))), "batch: int64 sum exact")

    # A tensor the general path converts (int16) sends the whole batch through it.
    mixed = [torch.full((5,), r + 1, dtype=torch.int16), torch.full((3,), float(r))]
    out = prioccl.synchronize(prioccl._allreduce_batch(mixed, [None, None], [0, 0],
                                                       op=prioccl.Sum))
    check(out[0].dtype == torch.int16 and out[0].tolist() == [p * (p + 1) // 2] * 5 and
          out[1].tolist() == [p * (p - 1) / 2] * 3, "batch with int16: general path's results")
    expect_error(lambda: prioccl._allreduce_batch([torch.zeros(4, 4).t()], [None], [0]),
                 "not contiguous", "batch with a non-contiguous tensor")

    # Names in flight: the second batch's second name is the first batch's (in one group, so
    # that the first cannot have finished on any rank); the op submitted before it goes on in
    # the background, and nothing is left behind.
    with prioccl.group():
        first = prioccl._allreduce_batch([torch.ones(1000)], ["dup"], [0], op=prioccl.Sum)
        expect_error(lambda: prioccl._allreduce_batch([torch.ones(10), torch.ones(10)],
                                                      ["fresh", "dup"], [0, 0]),
                     "already in flight", "batch: a name in flight")
    check(prioccl.synchronize(first)[0][0].item() == p, "batch: the first op unharmed")
    dropped = prioccl._allreduce_batch([torch.ones(10)], ["dropped"], [0])
    del dropped  # Horovod's rule: a dropped handle never blocks, its op completes anyway
    check(drained(), "batch: every op released after an error and a dropped handle")
    again = prioccl._allreduce_batch([torch.ones(3), torch.ones(3)], ["fresh", "dup"], [0, 0],
                                     op=prioccl.Sum)
    check([t.tolist() for t in prioccl.synchronize(again)] == [[float(p)] * 3] * 2,
          "batch: the names are free again")


def main():
    expect_error(lambda: prioccl.rank(), "not initialised", "rank before init")
    prioccl.init()
    prioccl.init()  # idempotent
    r, p = prioccl.rank(), prioccl.size()
    check(0 <= prioccl.local_rank() < p, "local_rank")
    numpy_cases(r, p)
    if torch_cases(r, p):  # False without torch (it said so)
        batch_cases(r, p)
    # After abort every op fails at once (here or because another rank's abort arrived first),
    # and shutdown still works. A rank may abort while another still finishes its part of the
    # last op, so that last op is a fence whose failure by an abort is expected; every check
    # before it completed on every rank (each rank submitted the fence only after them).
    try:
        prioccl.allreduce(np.ones(4, dtype=np.float32))
    except prioccl.PriocclError as e:
        check("abort" in str(e), f"fence before abort: {e}")
    prioccl.abort()
    expect_error(lambda: prioccl.allreduce(np.ones(4, dtype=np.float32)), "abort", "op after abort")
    finish("python collectives")


if __name__ == "__main__":
    main()
