"""The daemon: ``twc run``'s reconcile loop, one pipeline per iteration.

observe (:mod:`twc.reconcile.observe`) → plan (pure, :mod:`twc.reconcile.plan`) → execute
(:mod:`twc.reconcile.act`) → report (:mod:`twc.reconcile.report`), run by
:class:`twc.reconcile.daemon.Daemon`; each name is imported from its own module.
"""
