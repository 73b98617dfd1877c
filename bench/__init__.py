"""``make bench``: twc measured on the embedded environment with the real engine.

Run ``python -m bench [--quick]``; see ``bench/results.md`` for what each figure means
and for the layout of ``bench/results.json``.
"""
