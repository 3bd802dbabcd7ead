"""The backend's side of the proxy: which rows serve a request (``table``),
choosing, sending, failover and retries (``pool``), token arithmetic for
windows and prompts (``budget``), what each engine says and how it is asked
(``engines``), and reading a reply's body (``body``)."""
