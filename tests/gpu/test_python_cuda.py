"""CUDA tensors through the Python package (run under mpirun, each rank on GPU rank % devices):
every collective on CUDA tensors gives the bits the same op gives on CPU copies (over whatever
PRIOCCL_TRANSPORT says: staged through pinned host memory over the host transports, as is to
NCCL); DistributedOptimizer trains a CUDA model to weights bitwise identical on every rank and
close to the same training on CPU tensors; lagged mode takes CUDA parameters, delayed mode refuses
them by name. Without torch or a usable GPU it prints why and "no usable GPU" (CTest: skipped).
PRIOCCL_TEST_ON_CPU=1 runs the same script on CPU tensors (the GPU-only checks off): a dry run of
its own logic on a machine without a GPU."""
import os
import sys

import prioccl
from checks import check, finish

try:
    import torch
except ImportError:
    print("no usable GPU: python3-torch is not installed", flush=True)
    sys.exit(0)
ON_CPU = os.environ.get("PRIOCCL_TEST_ON_CPU") == "1"
if not ON_CPU and not torch.cuda.is_available():
    print("no usable GPU: torch.cuda.is_available() is False (torch "
          f"{torch.__version__}, built for CUDA {torch.version.cuda})", flush=True)
    sys.exit(0)

import prioccl.torch as ptorch  # noqa: E402


def bits(t):
    """A tensor's bytes on the host, for bitwise comparison."""
    return t.detach().cpu().contiguous().view(torch.uint8)


def same(gpu, cpu, what):
    check(ON_CPU or gpu.is_cuda, f"{what}: the result is not on the GPU ({gpu.device})")
    check(torch.equal(bits(gpu), bits(cpu)), f"{what}: CUDA result differs from the CPU one")


# Under PRIOCCL_TRANSPORT=nccl every collective runs on the GPU and an op on CPU tensors is
# refused: the reference is then computed here from every rank's input (each a function of its
# rank alone), folded in rank order; bitwise where every order of the reduction agrees (integers,
# or at most two ranks), else within float tolerance.
NCCL = os.environ.get("PRIOCCL_TRANSPORT") == "nccl"


DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64,
          torch.uint8)


def sample(dtype, rank):
    """Rank `rank`'s input of `dtype`: any rank can make every rank's."""
    g = torch.Generator().manual_seed(17 + 31 * rank + DTYPES.index(dtype))
    if dtype.is_floating_point:
        return torch.randn(3001, generator=g).to(dtype)
    return torch.randint(0, 50, (3001,), generator=g).to(dtype)


def folded(xs, op):
    out = xs[0].clone()
    for x in xs[1:]:
        if op in (prioccl.Sum, prioccl.Average):
            out = out + x
        elif op == prioccl.Min:
            out = torch.minimum(out, x)
        else:
            out = torch.maximum(out, x)
    if op == prioccl.Average:
        out = out / len(xs) if out.dtype.is_floating_point else out // len(xs)
    return out.to(xs[0].dtype)


def reference(cpu_op, local):
    """The CPU result of an op: through prioccl on CPU tensors, or under NCCL `local()`."""
    return local() if NCCL else cpu_op()


def same_or_close(gpu, cpu, what, p):
    if NCCL and p > 2 and gpu.dtype.is_floating_point:
        check(torch.allclose(gpu.cpu().double(), cpu.double(), rtol=1e-2, atol=1e-2),
              f"{what}: CUDA result differs from the reference")
    else:
        same(gpu, cpu, what)


def collectives(dev, r, p):
    for dtype in DTYPES:
        x = sample(dtype, r)
        everyone = [sample(dtype, k) for k in range(p)]
        for op in (prioccl.Sum, prioccl.Min, prioccl.Max, prioccl.Average):
            what = f"allreduce {dtype} op {op}"
            same_or_close(prioccl.allreduce(x.to(dev), op=op, name=what),
                          reference(lambda: prioccl.allreduce(x, op=op, name=what + " cpu"),
                                    lambda: folded(everyone, op)), what, p)
        y = x.to(dev, copy=True)
        prioccl.allreduce_(y, op=prioccl.Sum, name=f"inplace {dtype}")
        same_or_close(y, reference(lambda: prioccl.allreduce(x, op=prioccl.Sum,
                                                                name=f"inplace {dtype} cpu"),
                                   lambda: folded(everyone, prioccl.Sum)), f"allreduce_ {dtype}", p)

    def rows_of(k):
        return torch.arange((k + 1) * 4, dtype=torch.float32).reshape(k + 1, 4) + 100 * k
    rows = rows_of(r)
    same(prioccl.allgather(rows.to(dev), name="ag"),
         reference(lambda: prioccl.allgather(rows, name="ag cpu"),
                   lambda: torch.cat([rows_of(k) for k in range(p)])),
         "allgather (rows differ by rank)")
    b = torch.full((1000,), float(r), dtype=torch.float32)
    same(prioccl.broadcast(b.to(dev), root_rank=p - 1, name="bc"),
         reference(lambda: prioccl.broadcast(b, root_rank=p - 1, name="bc cpu"),
                   lambda: torch.full((1000,), float(p - 1))), "broadcast")
    a = torch.arange(p * 6, dtype=torch.int64) + 1000 * r
    same(prioccl.alltoall(a.to(dev), name="a2a"),
         reference(lambda: prioccl.alltoall(a, name="a2a cpu"),
                   lambda: torch.cat([(torch.arange(p * 6, dtype=torch.int64) + 1000 * k)
                                      [r * 6:(r + 1) * 6] for k in range(p)])), "alltoall")
    s = torch.arange(p * 5, dtype=torch.float32) * (r + 1)
    same(prioccl.reducescatter(s.to(dev), op=prioccl.Sum, name="rs"),
         reference(lambda: prioccl.reducescatter(s, op=prioccl.Sum, name="rs cpu"),
                   lambda: folded([torch.arange(p * 5, dtype=torch.float32) * (k + 1)
                                   for k in range(p)], prioccl.Sum)[r * 5:(r + 1) * 5]),
         "reducescatter")
    # The tensor an op reads is the one the caller's stream computed (queued just before).
    z = torch.zeros(1 << 20, device=dev)
    z.add_(r + 1)
    out = prioccl.allreduce(z, op=prioccl.Sum, name="stream order")
    check(float(out[-1]) == p * (p + 1) / 2, f"stream order: got {float(out[-1])}")
    # ... also on a side stream whose kernels are still running when the op is submitted: a GPU
    # sleep (about 50 ms) holds back the write the op must read (no stream sync in prioccl now:
    # the op waits for an event recorded on the tensor's current stream).
    if not ON_CPU:  # a GPU-only check
        side = torch.cuda.Stream(dev)
        with torch.cuda.stream(side):
            w = torch.zeros(1 << 20, device=dev)
            torch.cuda._sleep(100_000_000)
            w.add_(r + 1)
            out = prioccl.allreduce(w, op=prioccl.Sum, name="stream order, side stream")
            check(float(out[-1]) == p * (p + 1) / 2 and float(out[0]) == p * (p + 1) / 2,
                  f"stream order on a side stream: got {float(out[0])}, {float(out[-1])}")


def model(dev, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 4)).to(dev)


def train(dev, r, **kw):
    net = model(dev)
    opt = ptorch.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                      named_parameters=net.named_parameters(), **kw)
    ptorch.broadcast_parameters(net.state_dict(), root_rank=0)
    g = torch.Generator().manual_seed(100 + r)
    for _ in range(4):
        x = torch.randn(8, 16, generator=g).to(dev)
        y = torch.randint(0, 4, (8,), generator=g).to(dev)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    if hasattr(opt, "close"):
        opt.close()
    return torch.cat([q.detach().reshape(-1) for q in net.parameters()])


def optimizer(dev, r, p):
    w = train(dev, r)
    check(ON_CPU or w.is_cuda, "DistributedOptimizer: the weights left the GPU")
    everyone = prioccl.allgather((w if NCCL else w.cpu()).reshape(1, -1), name="weights")
    check(all(torch.equal(bits(everyone[i]), bits(everyone[0])) for i in range(p)),
          "DistributedOptimizer on CUDA: weights differ between ranks")
    if NCCL:  # training on CPU tensors needs a host transport
        print("note: PRIOCCL_TRANSPORT=nccl: CUDA training not compared with CPU training",
              flush=True)
    else:
        cpu = train(torch.device("cpu"), r)
        check(torch.allclose(w.cpu(), cpu, rtol=1e-4, atol=1e-5),
              f"DistributedOptimizer: CUDA and CPU training differ by "
              f"{float((w.cpu() - cpu).abs().max())}")
    lagged = train(dev, r, mode="lagged")
    check(ON_CPU or lagged.is_cuda, "lagged mode: the weights left the GPU")
    if ON_CPU:
        return
    try:
        train(dev, r, mode="delayed")
        check(False, "delayed mode accepted CUDA parameters")
    except prioccl.PriocclError as e:
        check("CPU parameters" in str(e), f"delayed mode's refusal does not say why: {e}")


def main():
    prioccl.init()
    r, p = prioccl.rank(), prioccl.size()
    if ON_CPU:
        dev = torch.device("cpu")
    else:
        dev = torch.device("cuda", r % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    collectives(dev, r, p)
    optimizer(dev, r, p)
    finish("test_python_cuda")


main()
