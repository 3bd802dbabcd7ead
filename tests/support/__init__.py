"""What the tests share: stream builders and assemblers (``streamutil``),
the detector's split checks (``detectutil``), a scripted loopback upstream
(``upstream_fake``), the per-family cases (``family_cases``) and the
canitoolcall conformance runner with its known failures (``conformance``,
``conformance_known``)."""
