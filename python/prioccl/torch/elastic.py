"""horovod.torch.elastic's API over prioccl.shrink(): training that goes on when a rank is lost.

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch in range(state.batch, batches):
                ...                       # forward, backward, optimizer.step()
                state.commit()            # every few batches: the point to come back to
            state.batch = 0

    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, epoch=0, batch=0)
    train(state)

When an op fails because a rank is gone (a PriocclError with a lost peer's code: remote error or
timeout; or DDP's RuntimeError while the communicator has failed that way), every survivor
restores the state of its last commit(), the survivors shrink the communicator to themselves
(prioccl.shrink(): they find out together who is gone), rank 0's state is broadcast to all
(sync()), and the function runs again from there, with a smaller size() and new rank() numbers.
Jobs launched without MPI only (MPI cannot shrink).

DistributedOptimizer, every mode: lagged and delayed set up their fused objects again on the
shrunk communicator at sync(), as a new optimizer would (warm-up again; SSD-SGD's global momentum
starts empty), so a shrunk job trains on exactly as one restarted from the commit.
torch.distributed with backend "prioccl": its default group is made again with the new size
(backend.follow_shrink()); a DDP built on the old one must be built again, in a reset callback.

Unlike Horovod, ranks are never added while a job runs (there is no host discovery): a job that
must grow again restarts (torchrun's elastic restart, or a new launch) and resumes from a
checkpoint of its own (docs/horovod.md, "Elastic training"); check_host_updates() therefore never
interrupts.
"""
import copy
import functools

import torch.distributed as _dist

import prioccl
from prioccl.torch.functions import (broadcast_object, broadcast_optimizer_state,
                                     broadcast_parameters)

if _dist.is_available():
    from prioccl.torch import backend

__all__ = ["run", "State", "ObjectState", "TorchState", "HostsUpdatedInterrupt"]


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's interrupt for a changed set of hosts. prioccl has no host discovery, so nothing
    raises it; it exists for code written against Horovod."""

    def __init__(self, skip_sync=False):
        super().__init__("hosts updated")
        self.skip_sync = skip_sync


def _lost_rank(error):
    """Whether an error says a peer is gone (not a bad argument or a bug): a PriocclError with a
    lost peer's code, or another layer's error raised while the communicator has failed that
    way (DDP turns a failed op into a RuntimeError carrying only its message)."""
    if isinstance(error, prioccl.PriocclError):
        return getattr(error, "code", None) in prioccl._LOST_PEER
    return prioccl._lost_peer()


def _shrink():
    """prioccl.shrink(), then torch.distributed's default group when it is prioccl's."""
    prioccl.shrink()
    if _dist.is_available():
        backend.follow_shrink()


class State:
    """What a training function carries across a lost rank: save() at each commit(), restore()
    after a failure, sync() from rank 0 to all before (re)starting."""

    def __init__(self):
        self._reset_callbacks = []
        self.lost_error = None  # the PriocclError behind the latest reset (run() sets it)

    def register_reset_callbacks(self, callbacks):
        """Functions called after each shrink (the world size changed: rescale a learning rate,
        rebuild a sampler)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):  # noqa: ARG002 - Horovod's signature
        """Horovod's notification of new hosts: prioccl has no discovery, nothing calls it."""

    def commit(self):
        """Saves the state: a lost rank brings every survivor back here."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Never interrupts: ranks are not added while a job runs (see the module's docstring)."""

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError


class ObjectState(State):
    """Keyword arguments become attributes; save() deep-copies them, restore() puts the copies
    back, sync() makes every rank's copies rank 0's (bcast_object). get_rank is Horovod's
    argument, unused here (every rank calls bcast_object alike)."""

    def __init__(self, bcast_object=broadcast_object,
                 get_rank=prioccl.rank, **kwargs):  # noqa: ARG002 - Horovod's signature
        super().__init__()
        self._bcast_object = bcast_object
        self._saved_state = kwargs
        self._set_attrs()

    def save(self):
        self._saved_state = {k: copy.deepcopy(getattr(self, k)) for k in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))


class TorchState(ObjectState):
    """A model's and an optimizer's state (state_dicts, deep-copied at each commit), and any
    keyword arguments as in ObjectState."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model, self.optimizer = model, optimizer
        self._saved_model = self._saved_optimizer = None
        self._save_torch()
        super().__init__(bcast_object=broadcast_object, get_rank=prioccl.rank, **kwargs)

    def _save_torch(self):
        if self.model is not None:
            self._saved_model = copy.deepcopy(self.model.state_dict())
        if self.optimizer is not None:
            self._saved_optimizer = copy.deepcopy(self.optimizer.state_dict())

    def save(self):
        self._save_torch()
        super().save()

    def restore(self):
        if self.model is not None:
            self.model.load_state_dict(self._saved_model)
        if self.optimizer is not None:
            forget = getattr(self.optimizer, "_forget_inflight", None)
            if forget is not None:
                forget()  # its all-reduces failed with the communicator
            self.optimizer.load_state_dict(self._saved_optimizer)
        super().restore()

    def sync(self):
        if self.model is not None:
            broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root_rank=0)
            follow = getattr(self.optimizer, "_follow_shrink", None)
            if follow is not None:  # lagged, delayed: their fused objects, from equal weights
                follow()
        self._save_torch()  # what the ranks now share is the point to come back to
        super().sync()


def run(func):
    """Horovod's elastic.run: func(state, ...) runs after state.sync(); when it fails because a
    rank is gone, the state is restored to its last commit, the communicator shrinks to the
    live ranks, and func runs again after another sync(). Other errors propagate."""
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            if not skip_sync:
                state.sync()
            try:
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            except Exception as e:
                if not _lost_rank(e):
                    raise
                state.lost_error = e  # for a reset callback's log
                state.restore()
                _shrink()
                skip_sync = False
            state.on_reset()
    return wrapper
