"""The caller's side of the proxy: the key check and errors in OpenAI's
shape (``guards``), a request read and checked (``validate``), the streamed
response with its hold-back (``stream``) and error bodies and relayed
replies (``replies``). Named ``caller`` rather than ``client``: the proxy is
itself an HTTP client of its upstreams."""
