"""A DDP communication hook: torch.nn.parallel.DistributedDataParallel's gradient buckets
all-reduced (averaged) through prioccl instead of the process group, the first layers' bucket
most urgent.

    import prioccl, prioccl.torch.ddp as pddp
    prioccl.init()
    torch.distributed.init_process_group("gloo", ...)     # DDP still needs one (see below)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = pddp.PriorityState(model)
    ddp.register_comm_hook(state, pddp.ddp_comm_hook)
    ...                                                    # train as usual
    state.close()                                          # optional: stops its thread

The process group still carries what DDP does outside the hook (the initial broadcast of the
module's weights and buffers, the bucket-order agreement when buckets are rebuilt, buffer
broadcasts in forward); every gradient goes through prioccl.

Priority (smaller = more urgent). With `model` (the module DDP wraps, or the DDP itself: same
parameters in the same order), a bucket's priority is `priority_base` plus the position in
`model.parameters()` of the earliest parameter it holds. So the bucket holding the model's first
layer gets `priority_base` and later layers' buckets larger numbers. This follows what the bucket
holds rather than its index, on purpose: DDP builds its buckets in reverse parameter order (index
0 = the last layers), but in torch 1.13 with find_unused_parameters=False the first iteration
runs ONE bucket (index 0) holding every parameter, and after that first iteration DDP rebuilds
its buckets in the order gradients became ready, so the number of buckets and what index k holds
change after iteration 0; a rule such as `buckets - 1 - index` would need the bucket count,
which the hook only learns at the last bucket. Without `model`, the priority is
`priority_base - index` (a higher index holds earlier layers, since gradients become ready in
reverse order of use), which needs no count either. Every rank computes the same priorities:
DDP's buckets are the same on every rank (the rebuilt order is rank 0's, broadcast by DDP).

Within one iteration DDP waits for every bucket before backward() returns, so the priority
cannot let the next forward start early; it decides which bucket goes first when several are in
flight together, and how the buckets rank against other prioccl traffic on the communicator.

Matching: ops are named f"{name}.bucket{index}" (`name` defaults to "ddp"). DDP calls the hook
once per bucket per iteration, in index order, with the same buckets on every rank, so the n-th
op of each name matches across ranks, across the rebuild too (bucket k's size may change at the
rebuild, identically on every rank). Give each DDP model its own `name` when several models'
backward passes run concurrently in different threads.

Completion: the hook never blocks. It submits the all-reduce (in place on bucket.buffer(),
op=prioccl.Average: the sum divided by the world size, bitwise identical on every rank) and
returns a torch.futures.Future. One background thread per state synchronizes the handles in
submission order and completes each future with the averaged buffer. A failed op (at submission
or completion) fails its future with the PriocclError's message, so DDP's backward() raises
RuntimeError("... PriocclError: ...") instead of hanging or carrying on. CPU tensors and
prioccl's dtypes (float32, float64, float16, bfloat16, ...) only, as the rest of the package.
"""
import queue
import threading
import weakref

import torch

import prioccl

__all__ = ["PriorityState", "ddp_comm_hook"]

_STOP = object()


def _complete_in_order(work):
    """The background thread: (handle, future, finish) items in submission order; each future
    gets finish(the op's result), or the op's exception. (The torch backend's groups use it too.)"""
    while True:
        item = work.get()
        if item is _STOP:
            return
        handle, fut, finish = item
        try:
            value = finish(prioccl.synchronize(handle))
        except Exception as e:  # noqa: BLE001 - every failure goes to the future, none is lost
            fut.set_exception(e)
            continue
        fut.set_result(value)


def _unwrap(fut):
    """Runs as the returned future's callback: the buffer, or the op's exception raised here,
    which torch turns into an error of the returned (C++) future that DDP's wait rethrows."""
    return fut.value()


def _failable_future():
    """(raw, result): raw for the background thread to complete (a value, or the op's exception),
    result for torch (DDP's reducer, a Work). result gets raw's value, or its error as torch's
    own, through _unwrap: a Python exception set on a future that C++ reads in autograd's thread,
    without the GIL, crashed the process (torch 1.13: a segfault in Reducer::finalize_backward
    when a rank was lost, through the torch backend)."""
    raw = torch.futures.Future()
    return raw, raw.then(_unwrap)


class PriorityState:
    """The state to pass to register_comm_hook with ddp_comm_hook (see the module's docstring).

    model: the module whose parameters() order sets the priorities (None: by bucket index).
    name: the prefix of the ops' names. op: prioccl.Average (the mean, as DDP's default);
    prioccl.Sum gives the sum instead. priority_base: added to every priority.

    After each hook call: `calls` (how many all-reduces were submitted) and `priorities`
    (bucket index -> the priority its latest all-reduce got).
    """

    def __init__(self, model=None, name="ddp", op=prioccl.Average, priority_base=0):
        self.model = model
        self.name = str(name)
        self.op = op
        self.priority_base = int(priority_base)
        self.calls = 0
        self.priorities = {}
        self._positions = None
        self._work = None
        self._thread = None
        self._lock = threading.Lock()

    def _position_of(self, params):
        """The smallest position in model.parameters() of `params` (a bucket's)."""
        if self._positions is None or any(id(p) not in self._positions for p in params):
            self._positions = {id(p): k for k, p in enumerate(self.model.parameters())}
            if any(id(p) not in self._positions for p in params):
                raise prioccl.PriocclError("ddp_comm_hook: PriorityState.model does not hold "
                                           "this bucket's parameters (pass the module DDP wraps)")
        return min(self._positions[id(p)] for p in params)

    def priority(self, bucket):
        """The priority of `bucket`'s all-reduce (the module's docstring says why)."""
        if self.model is not None:
            return self.priority_base + self._position_of(bucket.parameters())
        return self.priority_base - bucket.index()

    def _submit_completion(self, handle, fut, buf):
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._work = queue.Queue()
                self._thread = threading.Thread(target=_complete_in_order, args=(self._work,),
                                                name="prioccl-ddp-hook", daemon=True)
                self._thread.start()
                # The thread holds the queue, not the state: a dropped state stops it.
                weakref.finalize(self, self._work.put, _STOP)
            self._work.put((handle, fut, lambda _: buf))

    def close(self):
        """Waits for the all-reduces in flight (their futures complete) and stops the thread.
        The hook may be used again afterwards (it starts a new thread)."""
        with self._lock:
            thread, work, self._thread = self._thread, self._work, None
        if thread is not None:
            work.put(_STOP)
            thread.join()


_default_state = None


def ddp_comm_hook(state, bucket):
    """DDP communication hook: averages bucket.buffer() over the ranks through prioccl, with the
    bucket's priority; returns a torch.futures.Future of the averaged buffer. `state` is a
    PriorityState (None: a shared default one, priorities by bucket index)."""
    global _default_state
    if state is None:
        if _default_state is None:
            _default_state = PriorityState()
        state = _default_state
    raw, result = _failable_future()
    try:
        buf = bucket.buffer()
        index = bucket.index()
        priority = state.priority(bucket)
        handle = prioccl.allreduce_async_(buf, op=state.op, priority=priority,
                                          name=f"{state.name}.bucket{index}")
    except Exception as e:  # noqa: BLE001 - the future carries it, as a failed op's
        raw.set_exception(e)
        return result
    state.calls += 1
    state.priorities[index] = priority
    state._submit_completion(handle, raw, buf)
    return result
