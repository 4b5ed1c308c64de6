"""Production RAG logs: read (:mod:`testset_builder.export.logs`, one registered reader a format), scrub personal
data (:mod:`.scrub`), match retrieved texts back to chunks (:mod:`.matching`), import (:mod:`.importer`)."""
