"""CLRS-30 data (dm-clrs): preprocessing, the train stream, the validation pool, the split cache."""
