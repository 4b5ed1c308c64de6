"""Production RAG logs: read (:mod:`.records`), scrub personal data (:mod:`.scrub`), match retrieved texts back to
chunks (:mod:`.matching`)."""
