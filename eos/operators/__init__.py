"""Built-in processors behind the Application's DSL (aggregations), written on the public Processor API."""
