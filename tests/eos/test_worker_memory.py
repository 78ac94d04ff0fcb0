"""A worker hands the memory its batch freed back to the system (eos.worker.memory): glibc keeps freed memory in
its arenas, resident, unless asked."""

from __future__ import annotations

import subprocess
import sys

import pytest

from eos.worker import memory

PROBE = """
import sys
from eos.worker.memory import TRIM_ABOVE, free_bytes, release_free_memory

def private_kib():
    fields = dict(line.split(":", 1) for line in open("/proc/self/smaps_rollup").read().splitlines()[1:])
    return int(fields["Private_Dirty"].split()[0])

print(release_free_memory())  # little free yet: nothing done
kept = []
batch = [bytes(2000) + i.to_bytes(4, "big") for i in range(40_000)]  # ~80 MiB through malloc, as a batch makes
for i in range(0, len(batch), 7):
    kept.append(batch[i])  # some live on, scattered among the freed (the next batch's, say)
del batch
free, before = free_bytes(), private_kib()
print(free > TRIM_ABOVE, release_free_memory(), (before - private_kib()) // 1024)
"""


@pytest.mark.skipif(memory.free_bytes() is None, reason="not glibc 2.33 or later: the allocator cannot tell")
def test_the_free_memory_of_a_batch_goes_back_to_the_system():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    nothing, (plenty, trimmed, released_mib) = done.stdout.split("\n")[0], done.stdout.split("\n")[1].split()
    assert nothing == "False"
    assert plenty == "True" and trimmed == "True"
    # of ~69 MiB freed in whole pages between the survivors: 44 MiB every time alone (70 probes, idle or with
    # the cores loaded), 38 once inside the suite; without the trim, none
    assert int(released_mib) > 30, done.stdout
