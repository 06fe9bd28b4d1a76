"""torch.distributed backend "prioccl" (prioccl/torch/backend.py), started without mpirun
(python3 -m prioccl.run): every collective against values computed here, errors raised in the
caller, a new_group (when the id comes through the store), and DDP over "prioccl" against DDP over
gloo on the same data: the same weights on every rank, bitwise, and gloo's within float
tolerance."""
import os
import sys

try:
    import torch
    import torch.distributed as dist
except ImportError:
    print("SKIPPED: no torch")
    sys.exit(0)

import prioccl.torch  # noqa: F401 - registers the backend
from checks import check, finish


def collectives(r, p):
    x = torch.full((5,), float(r + 1))
    dist.all_reduce(x)
    check(torch.equal(x, torch.full((5,), p * (p + 1) / 2)), "all_reduce sum")
    for name, want in (("MAX", p), ("MIN", 1), ("PRODUCT", float(torch.arange(1, p + 1).prod())),
                       ("AVG", (p + 1) / 2)):
        y = torch.tensor([float(r + 1)], dtype=torch.float64)
        dist.all_reduce(y, op=getattr(dist.ReduceOp, name))
        check(y.item() == want, f"all_reduce {name}: {y.item()} != {want}")
    z = torch.arange(4, dtype=torch.int64) * (r + 1)
    work = dist.all_reduce(z, async_op=True)
    work.wait()
    check(torch.equal(z, torch.arange(4) * (p * (p + 1) // 2)), "all_reduce async, int64")
    b = torch.full((3,), float(r))
    dist.broadcast(b, src=p - 1)
    check(torch.equal(b, torch.full((3,), float(p - 1))), "broadcast")
    outs = [torch.empty(2, 3) for _ in range(p)]
    dist.all_gather(outs, torch.full((2, 3), float(r)))
    check(all(torch.equal(o, torch.full((2, 3), float(k))) for k, o in enumerate(outs)),
          "all_gather")
    flat = torch.empty(p * 2)
    dist.all_gather_into_tensor(flat, torch.full((2,), float(r)))
    check(torch.equal(flat, torch.arange(p).repeat_interleave(2).float()), "all_gather_into_tensor")
    out = torch.empty(3)
    dist.reduce_scatter(out, [torch.full((3,), float(k + r)) for k in range(p)])
    check(torch.equal(out, torch.full((3,), float(p * r + p * (p - 1) / 2))), "reduce_scatter")
    out = torch.empty(2)
    dist.reduce_scatter_tensor(out, torch.arange(2 * p, dtype=torch.float32))
    check(torch.equal(out, torch.tensor([2.0 * r, 2.0 * r + 1]) * p), "reduce_scatter_tensor")
    a2a = torch.empty(p)
    dist.all_to_all_single(a2a, torch.arange(p, dtype=torch.float32) + 10 * r)
    check(torch.equal(a2a, torch.arange(p, dtype=torch.float32) * 10 + r), "all_to_all_single")
    sent = [k + 1 for k in range(p)]  # k + 1 rows to rank k
    got = torch.empty(p * (r + 1))
    dist.all_to_all_single(got, torch.full((sum(sent),), float(r)), output_split_sizes=[r + 1] * p,
                           input_split_sizes=sent)
    check(torch.equal(got, torch.arange(p).repeat_interleave(r + 1).float()),
          "all_to_all_single with splits")
    red = torch.full((2,), float(r + 1))
    dist.reduce(red, dst=0)
    check(r != 0 or torch.equal(red, torch.full((2,), p * (p + 1) / 2)), "reduce to 0")
    dist.barrier()
    if p > 1:
        mine, theirs = torch.full((4,), float(r)), torch.empty(4)
        reqs = [dist.isend(mine, (r + 1) % p), dist.irecv(theirs, (r + p - 1) % p)]
        for q in reqs:
            q.wait()
        check(torch.equal(theirs, torch.full((4,), float((r + p - 1) % p))), "isend/irecv ring")
    try:
        dist.all_reduce(torch.ones(1, dtype=torch.int32), op=dist.ReduceOp.BAND)
        check(False, "BAND accepted")
    except RuntimeError as e:
        check("has no" in str(e), f"BAND refused with a clear message: {e}")
    x = torch.ones(3)
    dist.all_reduce(x)  # the group still works after the refusal
    check(torch.equal(x, torch.full((3,), float(p))), "all_reduce after the refusal")


def ddp_against_gloo(r, p, gloo):
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    weights = {}
    for name, group in (("prioccl", None), ("gloo", gloo)):
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 4))
        model.load_state_dict(base.state_dict())
        ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group,
                                                        bucket_cap_mb=0.0005)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(100 + r)
        for _ in range(5):
            opt.zero_grad()
            x = torch.randn(16, 8, generator=gen)
            ddp(x).pow(2).mean().backward()
            opt.step()
        weights[name] = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
    same = torch.empty(p * weights["prioccl"].numel())
    dist.all_gather_into_tensor(same, weights["prioccl"])
    ranks = same.reshape(p, -1)
    check(all(torch.equal(ranks[0], ranks[k]) for k in range(p)),
          "DDP over prioccl: the same weights on every rank, bitwise")
    diff = (weights["prioccl"] - weights["gloo"]).abs().max().item()
    check(diff < 1e-5, f"DDP over prioccl against DDP over gloo: max difference {diff}")


def main():
    if "OMPI_COMM_WORLD_RANK" in os.environ and "RANK" not in os.environ:
        # Started by mpirun: prioccl's communicator comes from MPI (prioccl.init), and the default
        # group adopts it; torch's own store still needs its address (MASTER_PORT from the test).
        os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
        os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        prioccl.torch.init()
        check(prioccl.torch.size() == int(os.environ["WORLD_SIZE"]), "prioccl.init under mpirun")
    dist.init_process_group("prioccl")
    r, p = dist.get_rank(), dist.get_world_size()
    check(dist.get_backend() == "prioccl", f"backend {dist.get_backend()}")
    collectives(r, p)
    gloo = dist.new_group(backend="gloo")
    ddp_against_gloo(r, p, gloo)
    if p > 1 and not os.environ.get("PRIOCCL_COMM_ID"):  # a group of its own, through the store
        sub = dist.new_group(list(range(p - 1)), backend="prioccl")
        if r < p - 1:
            x = torch.ones(2)
            dist.all_reduce(x, group=sub)
            check(torch.equal(x, torch.full((2,), float(p - 1))), "new_group all_reduce")
    dist.barrier()
    dist.destroy_process_group()
    finish("test_torch_backend")


if __name__ == "__main__":
    main()
