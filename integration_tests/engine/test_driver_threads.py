"""A job's driver JVM keeps few threads in the block-manager pools that remove each batch's broadcasts
(`eos.driver.spark.bound_block_manager_pools`), where Spark's own pools start a thread for every removal, up to
100 each."""

from __future__ import annotations

from integration_tests.helpers import fresh_driver, produce

# The threads of each pool in a context's JVM (Python run in the fresh drivers below).
POOL_THREADS = """
def pool_threads(sc):
    pools = {}
    for thread in sc._jvm.java.lang.Thread.getAllStackTraces().keySet():
        name = str(thread.getName())
        for pool in ("block-manager-ask-thread-pool", "block-manager-storage-async-thread-pool"):
            if name.startswith(pool):
                pools[pool] = pools.get(pool, 0) + 1
    return pools
"""

# One driver: a job's context as the framework makes it, then one with Spark's own pools (0), in the same JVM.
FRESH_DRIVER = POOL_THREADS + """
import json, time
from eos.driver.spark import build_spark_context

found = {}
for threads in ("2", "0"):
    sc = build_spark_context("local[2]", "threads", {"spark.eos.blockManagerThreads": threads}, for_job=True)
    for _ in range(20):  # as many small jobs as a job's driver runs batches in 20 s
        assert sc.parallelize(range(4), 2).map(lambda x: x + 1).sum() == 10
    time.sleep(1)  # (the removals of the last jobs' broadcasts run after them)
    found[threads] = pool_threads(sc)
    sc.stop()
print(json.dumps(found))
"""

# A job's run on a context it starts itself (`ContextStart`, which bounds the pools once the first batch ran:
# `ContextStart.settle`), a batch of one record per partition at a time: the pools counted after each batch.
JOB_DRIVER = POOL_THREADS + """
import json, sys
from pyspark import SparkContext
from eos import Application

bootstrap, source, sink, app_id = sys.argv[1:5]
app = Application(app_id, bootstrap, trigger_interval=0.05, max_records_per_batch=1, first_batch_max_records=1,
                  size_backlog_batches=False, log_level="WARNING")

@app.process(input=source, output=sink, key_serde="string", value_serde="string")
def copy(record):
    return record.key, record.value

found = {}
app.run(master="local[2]", max_batches=12,
        on_batch=lambda report, results: found.update({report.batch: pool_threads(SparkContext._active_spark_context)}))
print(json.dumps(found))
"""


def test_a_job_drivers_block_manager_pools_keep_two_threads_where_sparks_grow_one_per_removal():
    found = fresh_driver(FRESH_DRIVER)
    bounded, spark_own = found["2"], found["0"]
    assert bounded and all(1 <= n <= 2 for n in bounded.values()), found
    # (the first context's idle threads time out only after 60 s: Spark's pools of the second grow past them)
    assert len(spark_own) == 2 and all(n >= 10 for n in spark_own.values()), found


def test_a_jobs_run_bounds_the_pools_once_its_first_batch_ran(kafka, topic_factory, unique_name):
    source, sink = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    produce(kafka.bootstrap_servers, source, ((f"k{i}".encode(), b"v") for i in range(100)))
    found = fresh_driver(JOB_DRIVER, kafka.bootstrap_servers, source, sink, unique_name("app"))
    assert sorted(map(int, found)) == list(range(12)), found
    last = found["11"]
    assert len(last) == 2 and all(1 <= n <= 2 for n in last.values()), found
