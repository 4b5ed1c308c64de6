"""What the stages share about labels, below them: the relevance estimate (:mod:`.features`, :mod:`.systems`,
:mod:`.model`, :mod:`.prior`, fitted and validated by :mod:`.fitting`), the review design (:mod:`.design`) and the
release policy (:mod:`.policy`). Pure functions from records to records; the workspace is the stages'."""
