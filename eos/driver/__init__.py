"""The driver: the run loop (`runner`), the micro-batch planner, start-up checks, task assignment and
placement on executors, and every call into Spark's JVM (`spark`)."""
