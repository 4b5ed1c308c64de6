"""What the stages share about labels, below them (a stage never imports another stage): the relevance estimate
(:mod:`.estimate`, over :mod:`.features`, :mod:`.systems`, :mod:`.model`, :mod:`.prior`, fitted and validated by
:mod:`.fitting`), the LLM judge (:mod:`.judge`) and what judging shares (:mod:`.labelling`), the review queue's
priority (:mod:`.queue`), agreement between labelers (:mod:`.agreement`), the review design (:mod:`.design`) and
the release policy (:mod:`.policy`)."""
