"""A job's driver JVM keeps few threads in the block-manager pools that remove each batch's broadcasts
(`eos.driver.spark.bound_block_manager_pools`), where Spark's own pools start a thread for every removal, up to
100 each."""

from __future__ import annotations

import json
import subprocess
import sys

FRESH_DRIVER = """
import json, sys, time
from eos.driver.spark import build_spark_context

sc = build_spark_context("local[2]", "threads", dict(kv.split("=", 1) for kv in sys.argv[1:]), for_job=True)
for _ in range(40):  # as many small jobs as a job's driver runs batches in 40 s
    assert sc.parallelize(range(4), 2).map(lambda x: x + 1).sum() == 10
time.sleep(1)  # (the removals of the last jobs' broadcasts run after them)
pools = {}
for thread in sc._jvm.java.lang.Thread.getAllStackTraces().keySet():
    name = str(thread.getName())
    for pool in ("block-manager-ask-thread-pool", "block-manager-storage-async-thread-pool"):
        if name.startswith(pool):
            pools[pool] = pools.get(pool, 0) + 1
print(json.dumps(pools))
sc.stop()
"""


def _pool_threads(*conf: str) -> dict[str, int]:
    done = subprocess.run([sys.executable, "-c", FRESH_DRIVER, *conf], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_job_drivers_block_manager_pools_keep_two_threads_where_sparks_grow_one_per_removal():
    bounded = _pool_threads()
    assert bounded and all(1 <= n <= 2 for n in bounded.values()), bounded
    spark_own = _pool_threads("spark.eos.blockManagerThreads=0")
    assert all(n >= 10 for n in spark_own.values()) and len(spark_own) == 2, spark_own
