"""The Python package's host grouping is the library's (priocclCommHostInfo), PRIOCCL_HOST_ID
included: run under mpirun with each rank's PRIOCCL_HOST_ID set to "h<rank // K>" (K = argv[1]),
every rank must see local_rank = rank % K, local_size = the ranks sharing its id, cross_rank =
rank // K and cross_size = the number of ids; homogeneous only when K divides the rank count.
A local all-reduce over the ranks of one host (a process set of them) checks the grouping is used
as well as reported."""
import os
import sys

import numpy

import prioccl
from checks import check, finish

k = int(sys.argv[1])
prioccl.init()
r, p = prioccl.rank(), prioccl.size()
check(os.environ.get("PRIOCCL_HOST_ID") == f"h{r // k}",
      f"PRIOCCL_HOST_ID is {os.environ.get('PRIOCCL_HOST_ID')!r}, not h{r // k} (the launcher)")
hosts = (p + k - 1) // k
mine = min(k, p - (r // k) * k)
check(prioccl.local_rank() == r % k, f"local_rank {prioccl.local_rank()}, want {r % k}")
check(prioccl.local_size() == mine, f"local_size {prioccl.local_size()}, want {mine}")
check(prioccl.cross_rank() == r // k, f"cross_rank {prioccl.cross_rank()}, want {r // k}")
check(prioccl.cross_size() == hosts, f"cross_size {prioccl.cross_size()}, want {hosts}")
check(prioccl.is_homogeneous() == (p % k == 0),
      f"is_homogeneous {prioccl.is_homogeneous()} with {p} ranks, {k} per host")
# The ranks of each host sum their ranks among themselves.
sets = [prioccl.add_process_set(list(range(h * k, min(p, (h + 1) * k)))) for h in range(hosts)]
own = sets[r // k]
got = prioccl.allreduce(numpy.array([r], dtype=numpy.int64), op=prioccl.Sum, process_set=own)
want = sum(range((r // k) * k, min(p, (r // k + 1) * k)))
check(int(got[0]) == want, f"the host's sum of ranks is {int(got[0])}, want {want}")
finish("test_host_groups")
