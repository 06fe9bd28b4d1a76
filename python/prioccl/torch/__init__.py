"""prioccl.torch: horovod.torch's API over prioccl (`import prioccl.torch as hvd`)."""
from prioccl.torch.compression import Compression
from prioccl.torch.optimizer import DistributedOptimizer
