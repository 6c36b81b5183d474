"""A self-signed certificate for the lab's TLS listener, generated on start with ``cryptography``.

The certificate names ``localhost``, ``127.0.0.1`` and ``::1`` (subjectAltName) so a client can verify it against
any of the lab's loopback addresses when it trusts the certificate file itself (``cafile=cert_path``). It carries the
extensions strict verifiers ask for (key identifiers, key usage, serverAuth) so Python 3.13's
``VERIFY_X509_STRICT`` default accepts it too.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: How long the certificate is valid. A lab runs for minutes to hours; one day before "now" absorbs clock skew.
VALIDITY = dt.timedelta(days=7)
BACKDATE = dt.timedelta(days=1)


@dataclass(frozen=True, slots=True)
class CertFiles:
    """PEM files of a generated certificate: ``cert_path`` is what a client trusts, ``key_path`` stays private."""

    cert_path: Path
    key_path: Path
    directory: Path  #: the temporary directory holding both; removed by :func:`remove_cert_files`


def generate_self_signed(directory: Path | None = None, hosts: Sequence[str] = ()) -> CertFiles:
    """Generate a P-256 key and a self-signed certificate for the loopback names and ``hosts`` (the address the
    server binds when it is not loopback: an IP literal or a name); write both as PEM.

    ``directory`` defaults to a new temporary directory (mode 0700, as :func:`tempfile.mkdtemp` makes it).
    """
    target = Path(tempfile.mkdtemp(prefix="latscope-lab-tls-")) if directory is None else directory
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "localhost"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "latscope lab"),
        ]
    )
    now = dt.datetime.now(dt.UTC)
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALIDITY)
        .add_extension(
            x509.SubjectAlternativeName(_names(("localhost", "127.0.0.1", "::1", *hosts))),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path = target / "lab-cert.pem"
    key_path = target / "lab-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    return CertFiles(cert_path=cert_path, key_path=key_path, directory=target)


def _names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    """Subject alternative names for ``hosts``: IP addresses as such, anything else as a DNS name; each once."""
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def remove_cert_files(files: CertFiles) -> None:
    """Delete the generated files and their directory (missing files are fine)."""
    for path in (files.cert_path, files.key_path):
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty (someone put files there) or already gone: leave it
        files.directory.rmdir()
