"""A worker of tests/launch/launch_without_mpi.sh through prioccl.torch.elastic: a small model
trained with DistributedOptimizer inside @hvd.elastic.run, committing every other step. The
launcher kills a rank while they train (mode shrink); the survivors restore their last commit,
shrink to themselves and train on to the last step. Every survivor must end with the same
weights, bit for bit, and with size() one less. Under `python3 -m prioccl.run --min-np 3` the
victim kills itself instead: ELASTIC_KILL="RANK:STEP[,RANK:STEP...]" (SIGKILL at that step). ELASTIC_SAVE=F:
after the shrink, the new rank 0 saves the state the survivors go on from (model, optimizer,
step) to F; ELASTIC_RESUME=F: start from that state instead (a fresh job of the survivors' size,
restarted from the commit: its final weights must equal the shrunk job's, bit for bit).
ELASTIC_MODE: DistributedOptimizer's mode (sync, p3, lagged, delayed). ELASTIC_DDP=1: DDP over
torch.distributed's backend "prioccl" and a plain SGD instead (the default group is made again
after the shrink; the reset callback builds DDP again). ELASTIC_STALL="RANK:STEP:SECONDS": that
rank's process stops (SIGSTOP) that long at that step (with ELASTIC_LOST=0: nobody may be left
out). Prints "LAUNCH rank=R joined",
"LAUNCH rank=R lost: ..." (a reset callback), "LAUNCH rank=R ok"."""
import hashlib
import os
import signal
import subprocess
import sys
import time

import torch
import torch.distributed as dist

import prioccl.torch as hvd

STEPS = int(os.environ.get("ELASTIC_STEPS", "400"))
KILL = os.environ.get("ELASTIC_KILL")  # "rank:step[,rank:step]": those SIGKILL themselves there
SAVE, RESUME = os.environ.get("ELASTIC_SAVE"), os.environ.get("ELASTIC_RESUME")
# "rank:step:seconds": that rank's process stops (SIGSTOP) at that step for that long
STALL = os.environ.get("ELASTIC_STALL", "-1:-1:0").split(":")
MODE = os.environ.get("ELASTIC_MODE", "sync")
DDP = os.environ.get("ELASTIC_DDP") == "1"


def say(line):
    """One write per line. The workers share one stdout, and print() hands the text and its
    newline to the stream apart (two writes when Python runs unbuffered): CI once got two
    workers' lines run together, "LAUNCH rank=2 okLAUNCH rank=0 ok", and miscounted them."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    if DDP:
        dist.init_process_group("prioccl")  # also makes prioccl's global communicator
    else:
        hvd.init()
    me, size = hvd.rank(), hvd.size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    saved = torch.load(RESUME) if RESUME else None
    if saved:  # before the optimizer: delayed mode takes its global weights from the model's
        model.load_state_dict(saved["model"])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if DDP:
        ddp = [torch.nn.parallel.DistributedDataParallel(model)]
    else:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), mode=MODE,
                                       model=model if MODE == "p3" else None)
    step = 0
    if saved:
        opt.load_state_dict(saved["optimizer"])
        step = saved["step"]
        say(f"LAUNCH rank={me} resumes at step {step}")
    state = hvd.elastic.TorchState(model=model, optimizer=opt, step=step)
    resumed = []  # one False per reset, True once a step has completed after it

    def on_reset():
        say(f"LAUNCH rank={me} lost: {state.lost_error}")
        resumed.append(False)
        if DDP:  # the old one holds the old default group; rank 0's weights broadcast again
            ddp[0] = torch.nn.parallel.DistributedDataParallel(model)
    state.register_reset_callbacks([on_reset])
    say(f"LAUNCH rank={me} joined")

    @hvd.elastic.run
    def train(state):
        if SAVE and resumed and not resumed[-1] and hvd.rank() == 0:  # synced after a shrink
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "step": state.step}, SAVE)
            say(f"LAUNCH rank={me} saved step {state.step}")
        while state.step < STEPS:
            if KILL and f"{me}:{state.step}" in KILL.split(","):
                say(f"LAUNCH rank={me} kill_at={time.time():.3f}")
                os.kill(os.getpid(), signal.SIGKILL)
            if STALL[:2] == [str(me), str(state.step)]:
                # The whole process stops (its progress thread too), as on an overloaded host;
                # a child wakes it. Under PRIOCCL_TIMEOUT_S nobody may count it as gone.
                say(f"LAUNCH rank={me} stalls {STALL[2]} s")
                subprocess.Popen(["sh", "-c", f"sleep {STALL[2]}; kill -CONT {os.getpid()}"])
                os.kill(os.getpid(), signal.SIGSTOP)
            g = torch.Generator().manual_seed(state.step * 1000 + hvd.rank())
            x = torch.randn(16, 32, generator=g)
            loss = (ddp[0] if DDP else model)(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            state.step += 1
            if resumed and not resumed[-1]:  # the first step done after a shrink
                resumed[-1] = True
                say(f"LAUNCH rank={me} resumed_at={time.time():.3f} size={hvd.size()}")
            if state.step % 2 == 0:
                state.commit()
            time.sleep(0.005)  # long enough for the launcher's kill to land mid-training

    train(state)
    if MODE in ("lagged", "delayed"):
        opt.synchronize()  # the last aggregate applied; delayed: every rank on the global weights
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = hvd.allgather(flat.unsqueeze(0))
    same = all(torch.equal(every[0], every[k]) for k in range(every.shape[0]))
    say(f"LAUNCH rank={me} weights_sha1={hashlib.sha1(flat.numpy().tobytes()).hexdigest()}")
    lost = 0 if RESUME else int(os.environ.get("ELASTIC_LOST", "1"))
    world = dist.get_world_size() if DDP else hvd.size()
    if not same or hvd.size() != size - lost or world != hvd.size():
        say(f"LAUNCH rank={me} FAILED: weights equal on every rank: {same}; size {hvd.size()} "
            f"(torch.distributed's {world}) after a start of {size}")
        return 1
    if DDP:
        dist.destroy_process_group()
    hvd.shutdown()
    say(f"LAUNCH rank={me} ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
