"""The pipeline: each hop a named stage behind one `Stage` protocol, run by one consume loop.

`loop` fetches from a source and hands every message to the stage `router` names (or to the
`reject`er, the one place dead letters are written); `rekey` splits OTLP exports per trace,
`assemble` collects a trace's parts until it is whole, `score` numbers, scores and stores it
through the `scoring` and `conversation` processors. `ports` and `parts` are the hand-offs
between stages, `offloaded` the decoders run off the event loop for large messages, `topology`
which loops a daemon runs. The picture: docs/architecture.md.
"""
