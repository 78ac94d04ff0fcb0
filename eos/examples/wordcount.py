"""The word count of Kafka Streams' Processor API, in this framework: a processor that splits sentences,
counts words in a store, and forwards every count each minute of stream time (punctuation).

    app.add_source("sentences", "text", value_serde="string")
    app.add_processor("words", WordCount, "sentences")
    app.add_state_store(store("word-counts", key_serde="string", value_serde="long"), "words")
    app.add_sink("counts", "word-counts", "words", value_serde="long")
"""

from __future__ import annotations

from eos.processor import Processor, ProcessorContext
from eos.records import Record

__all__ = ["WordCount"]


class WordCount(Processor):
    store_name = "word-counts"

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.counts = context.store(self.store_name)
        context.schedule(60_000, self.emit, type="stream")

    def process(self, record: Record) -> None:
        for word in record.value.split():
            self.counts.put(word, (self.counts.get(word) or 0) + 1)

    def emit(self, now: int) -> None:
        for word, count in self.counts.all():
            self.context.forward(word, count)
