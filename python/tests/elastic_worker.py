"""A worker of tests/launch/launch_without_mpi.sh through prioccl.torch.elastic: a small model
trained with DistributedOptimizer inside @hvd.elastic.run, committing every other step. The
launcher kills a rank while they train (mode shrink); the survivors restore their last commit,
shrink to themselves and train on to the last step. Every survivor must end with the same
weights, bit for bit, and with size() one less. Under `python3 -m prioccl.run --min-np 3` the
victim kills itself instead: ELASTIC_KILL="RANK:STEP" (SIGKILL at that step). Prints "LAUNCH rank=R joined",
"LAUNCH rank=R lost: ..." (a reset callback), "LAUNCH rank=R ok"."""
import os
import signal
import sys
import time

import torch

import prioccl.torch as hvd

STEPS = int(os.environ.get("ELASTIC_STEPS", "400"))
KILL = os.environ.get("ELASTIC_KILL")  # "rank:step": that rank SIGKILLs itself there


def main():
    hvd.init()
    me, size = hvd.rank(), hvd.size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                   named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model=model, optimizer=opt, step=0)
    state.register_reset_callbacks(
        [lambda: print(f"LAUNCH rank={me} lost: {state.lost_error}", flush=True)])
    print(f"LAUNCH rank={me} joined", flush=True)

    @hvd.elastic.run
    def train(state):
        while state.step < STEPS:
            if KILL and [me, state.step] == [int(v) for v in KILL.split(":")]:
                os.kill(os.getpid(), signal.SIGKILL)
            g = torch.Generator().manual_seed(state.step * 1000 + hvd.rank())
            x = torch.randn(16, 32, generator=g)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            state.step += 1
            if state.step % 2 == 0:
                state.commit()
            time.sleep(0.005)  # long enough for the launcher's kill to land mid-training

    train(state)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = hvd.allgather(flat.unsqueeze(0))
    same = all(torch.equal(every[0], every[k]) for k in range(every.shape[0]))
    if not same or hvd.size() != size - 1:
        print(f"LAUNCH rank={me} FAILED: weights equal on every rank: {same}; size {hvd.size()} "
              f"after a start of {size}", flush=True)
        return 1
    hvd.shutdown()
    print(f"LAUNCH rank={me} ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
