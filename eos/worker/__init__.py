"""Code that runs inside Spark tasks: the task entry point (`entry`), the batch protocol (`attempt`), the
worker's client cache (`clients`), task runtimes and stores, the processing loops, dead letters and standby
refreshes. Never imports `eos.driver`."""
