"""``report.json`` (the source of truth, written under a lock by every stage: ``file``) and ``report.md`` (its
tables, rendered from it: ``md``)."""
