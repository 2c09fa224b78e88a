"""``openrknn serve``: run the board server (see openrknn/runtime/server.py and docs/deployment.md)."""
from __future__ import annotations

import argparse
import errno
import os
import socket
import ssl
import sys
from typing import Any

from openrknn import log
from openrknn.runtime import protocol
from openrknn.runtime.server import ServeSettings, default_token_path, load_or_create_token, serve, tls_context


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve this board to PCs: init_runtime(target=..., device_id='host:port')")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: reach it via an adb/ssh tunnel; 0.0.0.0 for the LAN)")
    p.add_argument("--port", type=int, default=protocol.DEFAULT_PORT, help="TCP port (default %(default)s; 0 = any free)")
    p.add_argument("--token-file", default=None,
                   help="where the token is kept (default ~/.config/openrknn/server_token; made 0600 on first start)")
    p.add_argument("--tls-cert", default=None, help="PEM certificate: serve over TLS (with --tls-key)")
    p.add_argument("--tls-key", default=None, help="PEM private key of --tls-cert")
    p.add_argument("--device-name", default=None, help="name reported to clients (default: host name)")
    p.add_argument("--max-contexts", type=int, default=4, help="models loaded at once (default %(default)s)")
    p.add_argument("--max-clients", type=int, default=16, help="connections at once (default %(default)s)")
    p.add_argument("--max-frame-mb", type=int, default=protocol.DEFAULT_MAX_FRAME_MB,
                   help="largest message, MiB (bounds model size; default %(default)s)")
    p.add_argument("--idle-timeout", type=float, default=600.0, help="close a silent connection after N s")
    p.add_argument("--auth-timeout", type=float, default=5.0,
                   help="a new connection must finish TLS and send its token within N s (default %(default)s)")
    p.add_argument("--port-file", default=None, help="write the bound port there once listening (for scripts)")
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    protocol._msgpack()   # refuse now (naming the 'serve' extra), not at the first client
    if (args.tls_cert is None) != (args.tls_key is None):
        log.error("serve: --tls-cert and --tls-key go together")
        return 1
    if min(args.max_contexts, args.max_clients, args.max_frame_mb) < 1:
        log.error("serve: --max-contexts, --max-clients and --max-frame-mb must be at least 1")
        return 1
    if not args.auth_timeout > 0 or not args.idle_timeout > 0:
        log.error("serve: --auth-timeout and --idle-timeout must be positive seconds")
        return 1
    token_path = args.token_file or default_token_path()
    try:
        token, created = load_or_create_token(token_path)
    except UnicodeDecodeError:
        log.error(f"serve: token file {token_path} is not text (a token is 16+ ASCII characters); delete it "
                  "to make a new one, or write the token there")
        return 1
    except OSError as e:
        log.error(f"serve: cannot use the token file {token_path}: {e.strerror or e}; "
                  "pass --token-file with a writable path")
        return 1
    except ValueError as e:
        log.error(f"serve: {e}")
        return 1
    if created:
        print(f"token: {token}", flush=True)
        log.info(f"serve: a new token was stored in {token_path} (mode 0600); "
                 "give it to the PC as OPENRKNN_TOKEN or in ~/.config/openrknn/devices.yaml")
    tls = None
    if args.tls_cert:
        tls = _tls(args.tls_cert, args.tls_key, tls_context)
        if tls is None:
            return 1
    settings = ServeSettings(token=token, device=args.device_name or socket.gethostname(),
                             max_frame_bytes=args.max_frame_mb * 1024 * 1024, max_contexts=args.max_contexts,
                             max_clients=args.max_clients, idle_timeout_s=args.idle_timeout,
                             auth_timeout_s=args.auth_timeout, tls=tls)

    def ready(port: int) -> None:
        if args.port_file:
            with open(args.port_file + ".tmp", "w", encoding="ascii") as handle:
                handle.write(f"{port}\n")
            os.replace(args.port_file + ".tmp", args.port_file)
        sys.stdout.flush()

    try:
        serve(args.host, args.port, settings, ready)
    except OSError as e:   # raised while binding: the port is taken, privileged or the address is not ours
        fix = {errno.EADDRINUSE: "another program (or another openrknn serve) uses it; stop it or pick another "
                                 "--port",
               errno.EACCES: "ports below 1024 need root; pick a --port above 1023",
               errno.EADDRNOTAVAIL: "this machine has no such address; use 127.0.0.1 or 0.0.0.0"}.get(
                   e.errno, "check --host and --port")
        log.error(f"serve: cannot listen on {args.host}:{args.port}: {e.strerror or e} ({fix})")
        return 1
    return 0


def _tls(cert: str, key: str, make: Any) -> Any:
    """The TLS context, or None after an E line naming the file and the fix."""
    for label, path in (("--tls-cert", cert), ("--tls-key", key)):
        if not os.path.isfile(path):
            log.error(f"serve: {label} {path} does not exist; make one (see docs/deployment.md, TLS) or fix the path")
            return None
    try:
        return make(cert, key)
    except ssl.SSLError as e:
        log.error(f"serve: cannot use --tls-cert {cert} with --tls-key {key}: {e.reason or e} (both must be PEM "
                  "files and the key must belong to the certificate)")
    except OSError as e:
        log.error(f"serve: cannot read --tls-cert {cert} / --tls-key {key}: {e.strerror or e}")
    return None
