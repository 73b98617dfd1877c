"""The command verbs: what ``twc up``, ``preview``, ``status`` and ``run`` do.

The CLI (:mod:`twc.cli`) parses arguments and calls these. Each verb validates the
fleet file before the engine starts (a bad file is rejected in milliseconds with every
problem listed, and nothing is applied), gathers the desired state's inputs the way the
daemon does (:mod:`twc.commands.common`), and runs the engine through
:mod:`twc.stackrun`. ``run`` wires the daemon (:mod:`twc.loop`) to the real cluster,
engine, Temporal and HTTP server.
"""
