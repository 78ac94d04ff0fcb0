"""The Application's topology-building methods, one module per family (streams, aggregations, windows),
combined into `eos.Application`."""
