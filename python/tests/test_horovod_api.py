"""prioccl.torch as horovod.torch (run under mpirun at 1-4 ranks): the basics, every op with
Horovod's arguments against references computed here, int16 and bool, compression, grouped ops,
autograd through each differentiable op, objects and optimizer state, process sets, duplicate
names in flight and abandoned handles, shape mismatches, join. Skips (saying so) without python3-torch."""
import gc
import json
import os
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
import prioccl.torch as hvd


def raises(fn, kind, needle, what):
    try:
        fn()
    except kind as e:
        check(needle in str(e), f"{what}: message '{e}' lacks '{needle}'")
        return
    except Exception as e:  # noqa: BLE001 - the wrong kind is a failure, reported
        check(False, f"{what}: {type(e).__name__} instead of {kind.__name__}: {e}")
        return
    check(False, f"{what}: no {kind.__name__}")


def basics(r, p):
    check(hvd.is_initialized() and hvd.rank() == r and hvd.size() == p, "rank/size")
    # One host: every rank is local, one cross rank.
    check(hvd.local_rank() == r and hvd.local_size() == p, "local_rank/local_size on one host")
    check(hvd.cross_rank() == 0 and hvd.cross_size() == 1 and hvd.is_homogeneous(), "cross")
    check(hvd.mpi_built() and hvd.mpi_enabled() and hvd.mpi_threads_supported(), "mpi")
    # nccl_built/cuda_built are the library's build (unit.test_abi checks those bits against
    # CMake's configuration); no Gloo.
    feats = prioccl.build_features()
    # Horovod's nccl_built() is NCCL's version code (its alltoall tests compare it with 2700).
    nccl = hvd.nccl_built()
    check((nccl >= 20900 if feats & prioccl.FEATURE_NCCL else nccl == 0)
          and nccl == prioccl.nccl_version()
          and hvd.cuda_built() == bool(feats & prioccl.FEATURE_CUDA) and not hvd.gloo_built(),
          f"nccl_built/cuda_built/gloo_built against the library's features {feats}")
    # The timeline at run time: this rank's file gets the ops between start and stop.
    path = f"/tmp/prioccl-hvd-timeline-{os.getppid()}.%r.json"
    hvd.start_timeline(path)
    hvd.allreduce(torch.ones(8), name="timed")
    hvd.stop_timeline()
    mine = path.replace("%r", str(r))
    with open(mine) as f:
        events = json.load(f)
    os.remove(mine)
    check(any("timed" in str(e.get("args", {})) for e in events), "the timeline names the op")
    raises(lambda: hvd.start_timeline("/nonexistent-prioccl-dir/t.json"), hvd.PriocclError,
           "cannot write", "start_timeline into a missing directory")


def allreduce_cases(r, p):
    x = torch.arange(1000, dtype=torch.float32) * (r + 1)
    tri = p * (p + 1) / 2
    want = torch.arange(1000, dtype=torch.float64) * tri
    avg = hvd.allreduce(x, name="avg")
    check(torch.allclose(avg.double(), want / p, rtol=1e-6), "allreduce averages by default")
    check(torch.equal(x, torch.arange(1000, dtype=torch.float32) * (r + 1)), "input unchanged")
    check(torch.equal(hvd.allreduce(x, op=hvd.Sum).double(), want), "op=Sum")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        s = hvd.allreduce(x, average=False)
    check(torch.equal(s.double(), want) and any("deprecated" in str(m.message) for m in w),
          "average=False sums and warns")
    raises(lambda: hvd.allreduce(x, average=True, op=hvd.Sum), ValueError, "supersedes",
           "average and op")
    raises(lambda: hvd.allreduce(x, op=hvd.Adasum), hvd.PriocclError, "Adasum", "Adasum")
    ints = torch.full((33,), r + 2, dtype=torch.int64)
    check(torch.equal(hvd.allreduce(ints, op=hvd.Product),
                      torch.full((33,), int(torch.arange(2, p + 2).prod()))), "Product")
    check(torch.equal(hvd.allreduce(ints, op=hvd.Min), torch.full((33,), 2)), "Min")
    check(torch.equal(hvd.allreduce(ints, op=hvd.Max), torch.full((33,), p + 1)), "Max")
    # prescale before the sum, postscale after: post * sum(pre * x)
    scaled = hvd.allreduce(x.double(), op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    check(torch.allclose(scaled, want * 1.5, rtol=1e-12), "prescale/postscale")
    inplace = x.clone()
    hvd.allreduce_(inplace, op=hvd.Average, prescale_factor=2.0)
    check(torch.allclose(inplace.double(), 2 * want / p, rtol=1e-6), "allreduce_ prescale")
    # Integers scale as Horovod's do: in float64, truncated toward zero (pre before the sum, on
    # each rank; post after); int16 through int32 alike. Booleans refuse a factor.
    neg = torch.full((9,), -7 - r, dtype=torch.int64)
    for dt in (torch.int64, torch.int32, torch.int16):
        got = hvd.allreduce(neg.to(dt), op=hvd.Sum, prescale_factor=0.3, postscale_factor=1.5)
        pre = sum(int(-(7 + k) * 0.3) for k in range(p))  # int() truncates toward zero
        check(got.dtype == dt and torch.equal(got, torch.full((9,), int(pre * 1.5), dtype=dt)),
              f"prescale/postscale on {dt}: {got.tolist()} vs {int(pre * 1.5)}")
    raises(lambda: hvd.allreduce(torch.ones(3, dtype=torch.bool), op=hvd.Max,
                                 prescale_factor=2.0), ValueError, "numeric", "factor on bool")
    h = hvd.allreduce_async(x, name="async", op=hvd.Sum, priority=-1)
    check(torch.equal(hvd.synchronize(h).double(), want) and hvd.poll(h), "allreduce_async")
    # int16: exact (through int32), wrapping like int16 arithmetic; Average truncates
    big = torch.full((17,), 30000 - r, dtype=torch.int16)
    total = sum(30000 - k for k in range(p))
    wrapped = (total + 32768) % 65536 - 32768
    check(torch.equal(hvd.allreduce(big, op=hvd.Sum), torch.full((17,), wrapped,
                                                                 dtype=torch.int16)),
          "int16 sum wraps as int16")
    neg = torch.full((5,), -7 - 3 * r, dtype=torch.int16)
    exact = sum(-7 - 3 * k for k in range(p))
    want_avg = -((-exact) // p)  # toward zero
    got = hvd.allreduce(neg)
    check(got.dtype == torch.int16 and torch.equal(got, torch.full((5,), want_avg,
                                                                   dtype=torch.int16)),
          f"int16 average truncates toward zero ({got[0]} vs {want_avg})")
    check(torch.equal(hvd.allreduce(neg, op=hvd.Min), torch.full((5,), -7 - 3 * (p - 1),
                                                                 dtype=torch.int16)), "int16 min")
    # bool: Sum and Max are OR, Min and Prod AND; travels as uint8
    flags = torch.tensor([r == 0, True, False, r == p - 1])
    ors = hvd.allreduce(flags, op=hvd.Sum)
    check(torch.equal(ors.view(torch.uint8), torch.tensor([1, 1, 0, 1], dtype=torch.uint8)),
          f"bool Sum is OR, bytes 0/1 ({ors.view(torch.uint8).tolist()})")
    check(torch.equal(hvd.allreduce(flags, op=hvd.Min),
                      torch.tensor([p == 1, True, False, p == 1])), "bool AND")
    raises(lambda: hvd.allreduce(flags), hvd.PriocclError, "bool", "bool average")
    # compression: fp16 on the wire, the reduction in fp16, the result back in float32
    v = torch.linspace(-3, 3, 999) * (r + 1) / 3
    comp = hvd.allreduce(v, op=hvd.Sum, compression=hvd.Compression.fp16)
    ref = hvd.allreduce(v.half(), op=hvd.Sum).float()
    check(comp.dtype == torch.float32 and torch.equal(comp, ref), "fp16 compression")
    check(hvd.Compression.bf16.compress(v)[0].dtype == torch.bfloat16, "bf16 compressor")
    # grouped: the same results as one by one
    ts = [torch.full((n,), float(r + n)) for n in (1, 100, 7000)]
    outs = hvd.grouped_allreduce(ts, op=hvd.Sum, name="grp")
    check(all(torch.equal(o, torch.full_like(t, sum(k + t.numel() for k in range(p))))
              for o, t in zip(outs, ts)), "grouped_allreduce")
    hvd.grouped_allreduce_(ts, op=hvd.Max)
    check(all(torch.equal(t, torch.full_like(t, p - 1 + t.numel())) for t in ts),
          "grouped_allreduce_ in place")
    hs = hvd.grouped_allreduce_async([x, x * 2], op=hvd.Sum)
    got = hvd.synchronize(hs)
    check(torch.equal(got[1].double(), 2 * want), "grouped_allreduce_async")


def other_ops(r, p):
    rows = torch.arange((r + 1) * 3, dtype=torch.int16).reshape(r + 1, 3) + 1000 * r
    g = hvd.allgather(rows)
    want = torch.cat([torch.arange((k + 1) * 3, dtype=torch.int16).reshape(k + 1, 3) + 1000 * k
                      for k in range(p)])
    check(g.dtype == torch.int16 and torch.equal(g, want), "allgather int16, uneven rows")
    b = torch.tensor([r % 2 == 0] * (r + 1))
    check(torch.equal(hvd.allgather(b), torch.tensor([k % 2 == 0 for k in range(p)
                                                      for _ in range(k + 1)])), "allgather bool")
    bits = torch.arange(100, dtype=torch.int16) * (r + 1) - 50
    check(torch.equal(hvd.broadcast(bits, root_rank=p - 1),
                      torch.arange(100, dtype=torch.int16) * p - 50), "broadcast int16")
    splits = [k + 1 for k in range(p)]  # rank r sends k + 1 rows to rank k
    send = torch.cat([torch.full((k + 1, 2), 100 * r + k, dtype=torch.int16) for k in range(p)])
    out, got = hvd.alltoall(send, splits=splits)
    want = torch.cat([torch.full((r + 1, 2), 100 * k + r, dtype=torch.int16) for k in range(p)])
    check(torch.equal(out, want) and got.tolist() == [r + 1] * p, "alltoall int16 with splits")
    eq = hvd.alltoall(torch.arange(2 * p, dtype=torch.float32) + 10 * r)
    check(torch.equal(eq, torch.tensor([10.0 * k + 2 * r + j for k in range(p)
                                        for j in range(2)])), "alltoall without splits")
    h = hvd.alltoall_async(send, splits)
    out2, got2 = hvd.synchronize(h)
    check(torch.equal(out2, out) and torch.equal(got2, got), "alltoall_async returns both")
    t = torch.arange(2 * p + 1, dtype=torch.float64) + r  # does not divide: rank 0 a row more
    part = hvd.reducescatter(t, op=hvd.Sum)
    lo = r * 2 + min(r, 1)
    n = 3 if r == 0 else 2
    full = torch.arange(2 * p + 1, dtype=torch.float64) * p + p * (p - 1) / 2
    check(torch.equal(part, full[lo:lo + n]), "reducescatter uneven")
    check(torch.allclose(hvd.reducescatter(t, postscale_factor=2.0), 2 * full[lo:lo + n] / p),
          "reducescatter average, postscale")
    hvd.barrier()


def autograd_cases(r, p):
    """Horovod's gradients: an allreduce's is the same reduction of the output gradients; an
    allgather's and a broadcast's average them over the ranks; a reducescatter's gathers them,
    times size() for a Sum (Horovod's test_torch.py checks each)."""
    w = torch.arange(6, dtype=torch.float64) + r  # the loss weights differ per rank
    wsum = sum(torch.arange(6, dtype=torch.float64) + k for k in range(p))
    x = torch.ones(6, dtype=torch.float64, requires_grad=True)
    (hvd.allreduce(x, op=hvd.Sum) * w).sum().backward()
    check(torch.equal(x.grad, wsum), "allreduce gradient = sum of the output gradients")
    x = torch.ones(6, dtype=torch.float64, requires_grad=True)
    (hvd.broadcast(x, root_rank=0) * w).sum().backward()
    check(torch.equal(x.grad, wsum / p if r == 0 else torch.zeros(6, dtype=torch.float64)),
          "broadcast gradient: the root gets the average, the others zero")
    x = torch.ones(r + 1, 2, dtype=torch.float64, requires_grad=True)
    y = hvd.allgather(x)  # sum(k + 1) rows
    coeff = torch.arange(y.numel(), dtype=torch.float64).reshape(y.shape) * (r + 1)
    (y * coeff).sum().backward()
    start = sum(k + 1 for k in range(r))
    base = torch.arange(y.numel(), dtype=torch.float64).reshape(y.shape)[start:start + r + 1]
    check(torch.allclose(x.grad, base * tri(p) / p, rtol=1e-15),
          "allgather gradient: my rows of the averaged grads")
    splits = [k + 1 for k in range(p)]
    x = torch.ones(sum(splits), dtype=torch.float64, requires_grad=True)
    out, _ = hvd.alltoall(x, splits=splits)
    (out * (r + 1)).sum().backward()
    want = torch.cat([torch.full((k + 1,), float(k + 1), dtype=torch.float64) for k in range(p)])
    check(torch.equal(x.grad, want), "alltoall gradient: back to where each row came from")
    x = torch.ones(2 * p, dtype=torch.float64, requires_grad=True)
    (hvd.reducescatter(x) * (r + 1)).sum().backward()  # Average
    want = torch.cat([torch.full((2,), k + 1.0, dtype=torch.float64) for k in range(p)])
    check(torch.equal(x.grad, want), "reducescatter gradient (Average)")
    x = torch.ones(2 * p, dtype=torch.float64, requires_grad=True)
    (hvd.reducescatter(x, op=hvd.Sum) * (r + 1)).sum().backward()
    check(torch.equal(x.grad, want * p), "reducescatter gradient (Sum): size() times Average's")


def sparse_cases(r, p):
    """sparse_allreduce_async: ranks hold different numbers of entries (rank 0 none), the same
    index on several ranks adds up; Sum and Average against the dense all-reduce."""
    dense = torch.zeros(6, 3, dtype=torch.float64)
    for k in range(r):
        dense[(k * 2 + r) % 6] += k + r + 1.5
    mine = dense.to_sparse()
    for op in (hvd.Sum, hvd.Average):
        got = hvd.sparse_allreduce_async(mine, name=f"sparse.{op}", op=op)()
        want = hvd.allreduce(dense, op=op)
        check(got.is_sparse and torch.allclose(got.to_dense(), want, rtol=1e-15),
              f"sparse_allreduce_async op={op} against the dense all-reduce")
    raises(lambda: hvd.sparse_allreduce_async(dense, name="not.sparse"), ValueError, "sparse",
           "sparse_allreduce of a dense tensor")


def tri(p):
    return p * (p + 1) / 2


def objects_and_state(r, p):
    obj = {"rank": r, "list": [r] * 3, "t": torch.full((2,), float(r))}
    got = hvd.broadcast_object(obj if r == p - 1 else None, root_rank=p - 1)
    check(got["rank"] == p - 1 and torch.equal(got["t"], torch.full((2,), float(p - 1))),
          "broadcast_object")
    every = hvd.allgather_object(("x" * r, r))
    check(every == [("x" * k, k) for k in range(p)], "allgather_object (sizes differ)")
    torch.manual_seed(r)  # different weights and optimizer state on every rank
    net = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(net.parameters(), lr=0.1 * (r + 1), momentum=0.9)
    if r == 0 or p == 1:
        for _ in range(2):
            opt.zero_grad()
            net(torch.randn(5, 4)).sum().backward()
            opt.step()
    hvd.broadcast_parameters(net.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    mine = torch.cat([opt.state[q]["momentum_buffer"].flatten() for q in net.parameters()]
                     + [torch.tensor([opt.param_groups[0]["lr"]])])
    check(torch.equal(hvd.broadcast(mine, 0), mine), "broadcast_optimizer_state: root's, bitwise")
    flat = torch.cat([q.detach().flatten() for q in net.parameters()])
    check(torch.equal(hvd.broadcast(flat, 0), flat), "broadcast_parameters")
    # A new optimizer gets its state as Horovod makes it: zero gradients on what requires one,
    # one step of the wrapped optimizer (no all-reduce: only this rank steps), then the root's.
    frozen = torch.nn.Parameter(torch.ones(3), requires_grad=False)
    fresh = hvd.DistributedOptimizer(
        torch.optim.SGD(list(net.parameters()) + [frozen], lr=0.1, momentum=0.9),
        named_parameters=list(net.named_parameters()) + [("frozen", frozen)])
    hvd.broadcast_optimizer_state(fresh, root_rank=0)
    check(all(q.grad is not None and not q.grad.any() for q in net.parameters())
          and frozen.grad is None and len(fresh.state_dict()["state"]) == 2,
          "broadcast_optimizer_state of a new optimizer: zero grads, a state for each trained one")


def process_sets(r, p):
    if p < 2:
        raises(lambda: hvd.add_process_set([0, 1]), hvd.PriocclError, "[0, 1)", "rank out of range")
        return
    evens = hvd.add_process_set([k for k in range(p) if k % 2 == 0])
    odds = hvd.add_process_set(hvd.ProcessSet(range(1, p, 2)))
    mine, other = (evens, odds) if r % 2 == 0 else (odds, evens)
    check(mine.included() and not other.included() and mine.rank() == r // 2, "membership")
    s = hvd.allreduce(torch.tensor([float(r)]), op=hvd.Sum, process_set=mine, name="sub")
    check(s.item() == sum(k for k in range(p) if k % 2 == r % 2), "allreduce in a process set")
    g = hvd.allgather(torch.tensor([r]), process_set=mine)
    check(g.tolist() == mine.ranks, "allgather in a process set")
    raises(lambda: hvd.allreduce(torch.ones(1), process_set=other), hvd.PriocclError,
           "is not in", "op in a set this rank is not in")
    # root_rank is a global rank in a process set too (Horovod's rule): the set's last member.
    root = mine.ranks[-1]
    b = hvd.broadcast(torch.tensor([float(r)]), root, process_set=mine, name="sub.bcast")
    check(b.item() == root, "broadcast in a process set from a global root_rank")
    o = hvd.broadcast_object({"from": r}, root_rank=root, process_set=mine)
    check(o == {"from": root}, "broadcast_object in a process set from a global root_rank")
    red = prioccl.reduce(torch.tensor([1.0]), root_rank=root, op=prioccl.Sum, process_set=mine)
    check((red.item() == len(mine.ranks)) if r == root else red is None,
          "reduce in a process set to a global root_rank")
    raises(lambda: hvd.broadcast(torch.ones(1), other.ranks[0], process_set=mine),
           hvd.PriocclError, "is not a rank of", "broadcast from a root outside the set")
    raises(lambda: hvd.add_process_set([0, 1] if r == 0 else [0, p - 1] if p > 2 else [1]),
           hvd.PriocclError, "different process sets", "ranks disagree on a set") \
        if p > 2 else None
    hvd.barrier(process_set=mine)
    check(hvd.remove_process_set(odds) and hvd.remove_process_set(evens)
          and not hvd.remove_process_set(hvd.global_process_set), "remove_process_set")
    raises(lambda: hvd.allreduce(torch.ones(1), process_set=mine), hvd.PriocclError,
           "not registered", "op in a removed set")


def names_and_handles(r, p):
    t = torch.full((1000,), float(r))
    if p > 1:
        # Rank 0's op cannot finish before the others submit theirs, after the barrier.
        if r == 0:
            h = hvd.allreduce_async(t, name="dup", op=hvd.Sum)
            raises(lambda: hvd.allreduce_async(t, name="dup"), hvd.PriocclError,
                   "already in flight", "duplicate name in flight")
            hvd.barrier()
        else:
            hvd.barrier()
            h = hvd.allreduce_async(t, name="dup", op=hvd.Sum)
        check(hvd.synchronize(h)[0].item() == tri(p - 1), "the first op of the name")
    again = hvd.allreduce(t, name="dup", op=hvd.Sum)  # finished: the name is free again
    check(again[0].item() == tri(p - 1), "a name reused after synchronize")
    # A name stays taken until synchronize(), whether or not the op has finished meanwhile (it
    # may, on any rank but the last to submit), and whether or not its caller still holds the
    # handle (Horovod's handle map keeps it): Horovod's duplicate-name tests submit a name twice
    # in a row and drop the first handle.
    if p > 1:
        mine = torch.full((8,), float(r))
        if r == 0:
            hvd.barrier()
            hvd.allreduce_async(mine, name="kept", op=hvd.Sum)  # handle dropped
        else:
            kept = hvd.allreduce_async(mine, name="kept", op=hvd.Sum)
            hvd.barrier()
        hvd.barrier()  # the op may have finished by now, or not: the name is taken either way
        raises(lambda: hvd.allreduce_async(mine, name="kept"), ValueError, "already in flight",
               "a finished, unsynchronized op's name")
        if r:
            check(hvd.synchronize(kept)[0].item() == tri(p - 1), "the kept op's result")
            again = hvd.synchronize(hvd.allreduce_async(mine, name="kept", op=hvd.Sum))
        else:
            kept_handles = [h for h in hvd.mpi_ops._handles if not hvd.mpi_ops._taken(h)]
            check(len(kept_handles) == 1, f"the dropped handle kept: {kept_handles}")
            hvd.synchronize(kept_handles[0])
            again = hvd.allreduce(mine, name="kept", op=hvd.Sum)
        check(again[0].item() == tri(p - 1), "the name free after synchronize()")
    # An abandoned handle of prioccl's own API never blocks: rank 0 drops its handle while the
    # others have not submitted yet (they wait in a barrier that rank 0 reaches only
    # afterwards); the op finishes in the background, and then its name is free.
    buf = torch.full((4096,), float(r + 1))
    if r == 0:
        h = prioccl.allreduce_async_(buf, name="abandoned", op=hvd.Sum)
        start = time.monotonic()
        del h
        gc.collect()
        check(time.monotonic() - start < 1.0, "dropping a pending handle returns at once")
        hvd.barrier()
    else:
        hvd.barrier()
        hvd.allreduce_(buf, name="abandoned", op=hvd.Sum)
    hvd.barrier()
    deadline = time.monotonic() + 30
    while prioccl._orphans and time.monotonic() < deadline:  # completed in the background
        prioccl._reap()
        time.sleep(0.01)
    check(not prioccl._orphans and buf[0].item() == tri(p), "the abandoned op still completed")


def shapes(r, p):
    """Same element count, different shapes: every rank raises (Horovod's rule), naming its own
    shape; named or not, for allreduce, broadcast, reduce and reducescatter (its first dimension
    divisible by size() or not: the plain and the v-call)."""
    if p == 1:
        return
    t = torch.ones((2, 3) if r == 0 else (3, 2))
    mine = "[2, 3]" if r == 0 else "[3, 2]"
    raises(lambda: hvd.allreduce(t, name="shaped"), hvd.PriocclError, "tensor shape digest",
           "named allreduce, shapes differ")
    raises(lambda: hvd.allreduce(t), hvd.PriocclError, f"(shape {mine})",
           "unnamed allreduce, shapes differ")
    raises(lambda: hvd.broadcast(t, 0), hvd.PriocclError, "tensor shape digest",
           "broadcast, shapes differ")
    raises(lambda: prioccl.reduce(t, 0), hvd.PriocclError, "tensor shape digest",
           "reduce, shapes differ")
    for rows in (p, 2 * p + 1):
        uneven = torch.ones((rows, 6) if r == 0 else (rows, 2, 3))
        raises(lambda: hvd.reducescatter(uneven, name=f"shaped.{rows}"), hvd.PriocclError,
               "shape", f"reducescatter of {rows} rows, shapes after the first differ")
    flat = torch.ones(6)  # 1-D against 2-D of the same count differs too
    raises(lambda: hvd.allreduce(flat if r == 0 else t.reshape(2, 3)), hvd.PriocclError,
           "shape", "1-D against 2-D")
    same = hvd.allreduce(torch.ones(2, 3), name="shaped", op=hvd.Sum)
    check(same.shape == (2, 3) and bool((same == p).all()), "the same shapes still reduce")


def joins(r, p):
    """The last rank joins at once; the others run named and unnamed ops, which it answers with
    the identity, then join; all learn the last rank to join; names and unnamed ops match on
    every rank afterwards."""
    if r == p - 1:
        last = hvd.join()
    else:
        x = torch.full((5, 4), float(r + 1))
        avg = hvd.allreduce(x)  # unnamed, Average: divides by size() with the joined rank
        check(bool((avg == tri(p - 1) / p).all()), f"average with a joined rank: {avg[0, 0]}")
        s = hvd.allreduce(torch.full((3,), r + 1, dtype=torch.int16), name="j16", op=hvd.Sum)
        check(s.dtype == torch.int16 and bool((s == tri(p - 1)).all()), "int16 with a joined rank")
        mn = hvd.allreduce(torch.tensor([float(r + 5)]), op=hvd.Min)
        check(mn.item() == 5.0, "Min ignores the joined rank")
        b = hvd.broadcast(torch.full((7,), float(r)), 0, name="jb")
        check(bool((b == 0).all()), "broadcast from rank 0 with a joined rank")
        hvd.barrier()
        raises(lambda: hvd.allgather(torch.ones(2, 2)), hvd.PriocclError, "joined",
               "allgather with a joined rank")
        last = hvd.join()
    lasts = hvd.allgather_object(last)
    check(len(set(lasts)) == 1 and (p == 1 or lasts[0] != p - 1),
          f"every rank names the same last rank to join, not the first: {lasts}")
    after = hvd.allreduce(torch.ones(3), op=hvd.Sum)  # unnamed ops numbered alike everywhere
    check(bool((after == p).all()), "an unnamed op after the join")
    again = hvd.allreduce(torch.ones(3, dtype=torch.int16), name="j16", op=hvd.Sum)
    check(bool((again == p).all()), "a name answered for the joined rank, reused")


def main():
    hvd.init()
    r, p = hvd.rank(), hvd.size()
    basics(r, p)
    allreduce_cases(r, p)
    other_ops(r, p)
    autograd_cases(r, p)
    sparse_cases(r, p)
    objects_and_state(r, p)
    process_sets(r, p)
    names_and_handles(r, p)
    shapes(r, p)
    joins(r, p)
    finish("python horovod_api")


main()
