"""The operator page, ``/ui`` (``streamfix serve --ui``; off by default).

What streamfix did, on one page: the table in force with what was probed
and learned of each row, its requests, added latency and repairs over the
last hour (``activity.py``, ``charts.py``); the recordings (``--record``)
with the upstream's reply beside what the client got and what today's
chain makes of it (``recordings.py``); the unrecognised markup samples;
a probe of a row (``probes.py``); the configuration in force, without
secrets, and a reload (as SIGHUP).

No build step and nothing fetched at run time: HTML made on the server
(``pages.py``, every string escaped by ``html.py``), charts as SVG made on
the server, one small script and one stylesheet of our own
(``static/``, package data). Who may see it and how a browser logs in:
``auth.py``. The routes: ``routes.py`` (``add_ui``, wired by ``app.py``).
This module imports nothing: ``proxy.py`` imports ``activity`` from here.
"""
