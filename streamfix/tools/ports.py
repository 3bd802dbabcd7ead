"""Whether a port can be listened on, in one line when not: checked before
``serve`` (``cli.start_problems``) and ``model`` start, and said the same
way when ``serve``'s own bind fails after the check."""

from __future__ import annotations


def port_problem(host: str, port: int) -> str | None:
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return f"--host {host}: cannot listen there ({exc})"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as s:
        # as aiohttp binds: SO_REUSEADDR (a port in TIME_WAIT is free)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as exc:
            return listen_problem(host, port, exc)
    return None


def listen_problem(host: str, port: int, exc: OSError) -> str:
    import errno as errno_module

    if exc.errno == errno_module.EADDRINUSE:
        return (
            f"port {port} on {host} is already in use (another streamfix?): "
            "stop it or give --port N"
        )
    if exc.errno == errno_module.EACCES:
        return f"port {port} on {host} needs privileges: give --port N above 1023"
    if exc.errno == errno_module.EADDRNOTAVAIL:
        return f"--host {host} is not an address of this machine"
    return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
