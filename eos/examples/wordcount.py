"""The word count of Kafka Streams' Processor API, in this framework: a processor that splits sentences,
counts words in a store, and forwards every count each minute of stream time (punctuation).

    app.add_source("sentences", "text", value_serde="string")
    app.add_processor("words", WordCount, "sentences")
    app.add_state_store(store("word-counts", key_serde="string", value_serde="long"), "words")
    app.add_sink("counts", "word-counts", "words", value_serde="long")

`Milestones` shares the store with it (two processors, one store, one task):

    app.add_processor("milestones", Milestones, "sentences")   # after "words": it sees the sentence counted
    app.connect_processor_and_state_stores("milestones", "word-counts")
    app.add_sink("reached", "word-milestones", "milestones", value_serde="long")
"""

from __future__ import annotations

from collections import Counter

from eos.processor import Processor, ProcessorContext
from eos.records import Record

__all__ = ["WordCount", "Milestones"]


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


class Milestones(Processor):
    """Reads the word count's store (a sibling processor that counted the sentence first, as children run in
    the order they were added) and forwards (word, n) for every multiple n of `every` a word's count
    reached with this sentence."""

    every = 100

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.counts = context.store(WordCount.store_name)

    def process(self, record: Record) -> None:
        for word, times in Counter(record.value.split()).items():
            now = self.counts.get(word) or 0
            for n in range((now - times) // self.every + 1, now // self.every + 1):
                self.context.forward(word, n * self.every)
