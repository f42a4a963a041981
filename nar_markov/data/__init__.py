"""CLRS-30 data (dm-clrs): preprocessing, batching, train stream, validation pool, splits, cache."""
