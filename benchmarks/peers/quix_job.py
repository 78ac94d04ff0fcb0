"""The peers benchmark's jobs on Quix Streams, exactly-once (run in its own virtualenv).
Arguments: bootstrap job input output consumer-group state-dir [window-ms grace-ms [session-gap-ms]]."""

import sys

from quixstreams import Application

bootstrap, job, source, sink, group, state_dir = sys.argv[1:7]
app = Application(broker_address=bootstrap, consumer_group=group, auto_offset_reset="earliest",
                  processing_guarantee="exactly-once", commit_interval=1.0, state_dir=state_dir)
inputs = app.topic(source, key_deserializer="str", value_deserializer="json")
outputs = app.topic(sink, key_serializer="str", value_serializer="json")
sdf = app.dataframe(topic=inputs)
if job == "stateless":
    sdf = sdf.apply(lambda order: {**order, "total": order["qty"] * order["price"]})
elif job == "pipeline":
    def revenue(order, state):
        total = state.get("revenue", 0) + order["total"]
        state.set("revenue", total)
        return total

    sdf = (sdf.filter(lambda order: order["qty"] >= 2)
              .apply(lambda order: {**order, "total": order["qty"] * order["price"]})
              .apply(revenue, stateful=True))
elif job == "window":  # every update of each window's count: {"start", "end", "value"} under the record's key
    window_ms, grace_ms = int(sys.argv[7]), int(sys.argv[8])
    sdf = sdf.tumbling_window(duration_ms=window_ms, grace_ms=grace_ms).count().current()
elif job == "session":  # every update of each session's count, as the window job's
    grace_ms, gap_ms = int(sys.argv[8]), int(sys.argv[9])
    sdf = sdf.session_window(inactivity_gap_ms=gap_ms, grace_ms=grace_ms).count().current()
else:
    def count(_value, state):
        n = state.get("n", 0) + 1
        state.set("n", n)
        return n

    sdf = sdf.apply(count, stateful=True)
sdf.to_topic(outputs)
app.run()
