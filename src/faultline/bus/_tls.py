"""TLS for NATS: a certificate authority and a server certificate of our own, or files of yours.

`make_certificates` calls the `openssl` command line tool, present on nearly
every machine, rather than adding a cryptography library to every install:
it writes a self-signed CA and a server certificate it signed, for the names
and addresses clients dial. Clients verify the server against the CA's
certificate (`client_context`); the CA's key never leaves the folder.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import shutil
import ssl
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from faultline._errors import ServerError

CERT_DAYS = 825
"""How long a made certificate is valid: the longest lifetime clients commonly accept for a server certificate."""
DEFAULT_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True, slots=True)
class TLSFiles:
    """The CA certificate clients verify against, and the server's certificate and key."""

    ca: Path
    cert: Path
    key: Path


class _HalfCloseNotice(logging.Filter):
    """asyncio warns, at every TLS connection's end, that the NATS client asks to keep it half open (TLS cannot);
    it is harmless and would be the only line a clean run prints."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "eof_received()" not in record.getMessage()


_HALF_CLOSE_NOTICE = _HalfCloseNotice()


def client_context(ca: Path) -> ssl.SSLContext:
    """A TLS context that trusts only the certificates `ca` signed, and checks the server's name."""
    logging.getLogger("asyncio").addFilter(_HALF_CLOSE_NOTICE)
    try:
        return ssl.create_default_context(cafile=str(ca))
    except (OSError, ssl.SSLError) as exc:
        raise ServerError(f"TLS CA certificate {ca} cannot be used: {exc}") from None


def make_certificates(folder: Path, names: Sequence[str] = DEFAULT_NAMES) -> TLSFiles:
    """The certificates in `folder`, made with openssl on the first call and reused after.

    `names` are the host names and IP addresses the server certificate is valid for.
    """
    files = TLSFiles(folder / "ca.pem", folder / "server.pem", folder / "server-key.pem")
    if all(path.exists() for path in (files.ca, files.cert, files.key)):
        return files
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ServerError(
            "--tls makes its certificates with the openssl command, which is not installed: install it, or set"
            " nats.tls_cert, nats.tls_key and nats.tls_ca to files of your own"
        )
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    ca_key = folder / "ca-key.pem"
    request = folder / "server.csr"
    extensions = folder / "server.ext"
    alt_names = ",".join(f"IP:{n}" if _is_address(n) else f"DNS:{n}" for n in names)
    extensions.write_text(
        f"subjectAltName={alt_names}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
    )
    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    days = ("-days", str(CERT_DAYS))
    _openssl(openssl, "req", "-x509", *curve, "-keyout", ca_key, "-out", files.ca, *days, "-subj", "/CN=faultline CA")
    _openssl(openssl, "req", *curve, "-keyout", files.key, "-out", request, "-subj", "/CN=faultline nats-server")
    _openssl(
        openssl, "x509", "-req", "-in", request, "-CA", files.ca, "-CAkey", ca_key, "-CAcreateserial",
        "-out", files.cert, *days, "-extfile", extensions,
    )  # fmt: skip
    for path in (ca_key, files.key):
        os.chmod(path, 0o600)
    request.unlink()
    return files


def _openssl(openssl: str, *args: str | Path) -> None:
    done = subprocess.run([openssl, *map(str, args)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ServerError(f"openssl {args[0]} failed while making TLS certificates: {last}")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
