"""The pipeline: what happens to each decoded trace, in order.

`ingest` turns raw messages into traces (dead-lettering what cannot be decoded) and dispatches
them; `conversation` loads and updates a conversation's state one turn at a time; `scoring` runs
the evaluators (tier 0 on every trace, the sampled judge) and hands results to the sinks;
`stage` is the seam the daemon plugs a processor into.
"""
