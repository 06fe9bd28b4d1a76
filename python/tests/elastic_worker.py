"""A worker of tests/launch/launch_without_mpi.sh through prioccl.torch.elastic: a small model
trained with DistributedOptimizer inside @hvd.elastic.run, committing every other step. The
launcher kills a rank while they train (mode shrink); the survivors restore their last commit,
shrink to themselves and train on to the last step. Every survivor must end with the same
weights, bit for bit, and with size() one less. Under `python3 -m prioccl.run --min-np 3` the
victim kills itself instead: ELASTIC_KILL="RANK:STEP[,RANK:STEP...]" (SIGKILL at that step). ELASTIC_SAVE=F:
after the shrink, the new rank 0 saves the state the survivors go on from (model, optimizer,
step) to F; ELASTIC_RESUME=F: start from that state instead (a fresh job of the survivors' size,
restarted from the commit: its final weights must equal the shrunk job's, bit for bit). Prints "LAUNCH rank=R joined",
"LAUNCH rank=R lost: ..." (a reset callback), "LAUNCH rank=R ok"."""
import hashlib
import os
import signal
import sys
import time

import torch

import prioccl.torch as hvd

STEPS = int(os.environ.get("ELASTIC_STEPS", "400"))
KILL = os.environ.get("ELASTIC_KILL")  # "rank:step[,rank:step]": those SIGKILL themselves there
SAVE, RESUME = os.environ.get("ELASTIC_SAVE"), os.environ.get("ELASTIC_RESUME")


def main():
    hvd.init()
    me, size = hvd.rank(), hvd.size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                   named_parameters=model.named_parameters())
    step = 0
    if RESUME:
        saved = torch.load(RESUME)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        step = saved["step"]
    state = hvd.elastic.TorchState(model=model, optimizer=opt, step=step)
    resumed = []  # one False per reset, True once a step has completed after it

    def on_reset():
        print(f"LAUNCH rank={me} lost: {state.lost_error}", flush=True)
        resumed.append(False)
    state.register_reset_callbacks([on_reset])
    print(f"LAUNCH rank={me} joined", flush=True)

    @hvd.elastic.run
    def train(state):
        if SAVE and resumed and not resumed[-1] and hvd.rank() == 0:  # synced after a shrink
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "step": state.step}, SAVE)
        while state.step < STEPS:
            if KILL and f"{me}:{state.step}" in KILL.split(","):
                print(f"LAUNCH rank={me} kill_at={time.time():.3f}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            g = torch.Generator().manual_seed(state.step * 1000 + hvd.rank())
            x = torch.randn(16, 32, generator=g)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            state.step += 1
            if resumed and not resumed[-1]:  # the first step done after a shrink
                resumed[-1] = True
                print(f"LAUNCH rank={me} resumed_at={time.time():.3f} size={hvd.size()}",
                      flush=True)
            if state.step % 2 == 0:
                state.commit()
            time.sleep(0.005)  # long enough for the launcher's kill to land mid-training

    train(state)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = hvd.allgather(flat.unsqueeze(0))
    same = all(torch.equal(every[0], every[k]) for k in range(every.shape[0]))
    print(f"LAUNCH rank={me} weights_sha1={hashlib.sha1(flat.numpy().tobytes()).hexdigest()}",
          flush=True)
    lost = 0 if RESUME else int(os.environ.get("ELASTIC_LOST", "1"))
    if not same or hvd.size() != size - lost:
        print(f"LAUNCH rank={me} FAILED: weights equal on every rank: {same}; size {hvd.size()} "
              f"after a start of {size}", flush=True)
        return 1
    hvd.shutdown()
    print(f"LAUNCH rank={me} ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
