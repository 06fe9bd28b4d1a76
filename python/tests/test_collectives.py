"""prioccl's Python package on several ranks (run under mpirun): results against references
computed here, async/poll/synchronize, broadcast, point to point, and clear errors. torch
tensors too when python3-torch is installed (otherwise that part says it is skipped)."""

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
    if p > 1:
        expect_error(lambda: prioccl.reducescatter(np.zeros(2 * p + 1, dtype=np.float32)),
                     "equal parts", "reducescatter of an uneven first dimension")
    # alltoall: part j of rank i lands as part i on rank j
    a = np.repeat(np.arange(p, dtype=np.int64) * 100 + r, 3)
    b = prioccl.alltoall(a)
    check((b == np.repeat(np.arange(p, dtype=np.int64) + 100 * r, 3)).all(), "alltoall")
    prioccl.barrier()

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


def torch_cases(r, p):
    try:
        import torch
    except ImportError:
        if r == 0:
            print("SKIPPED torch cases: python3-torch is not installed", flush=True)
        return
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


def main():
    expect_error(lambda: prioccl.rank(), "not initialised", "rank before init")
    prioccl.init()
    prioccl.init()  # idempotent
    r, p = prioccl.rank(), prioccl.size()
    check(0 <= prioccl.local_rank() < p, "local_rank")
    numpy_cases(r, p)
    torch_cases(r, p)
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
