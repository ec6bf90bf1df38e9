"""Throwaway certificates for tests that speak TLS on loopback: a CA, and leaves for
127.0.0.1 and localhost signed by it, as PEM files (cryptography, a dev dependency)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["Issuer", "issue"]

Issuer = tuple[ec.EllipticCurvePrivateKey, x509.Name]
"""A CA's key and name, as `issue` returns them."""


def issue(directory: Path, name: str, issuer: Issuer | None) -> Issuer:
    """Write `name`.pem and `name`-key.pem in `directory`: a CA if `issuer` is None, else
    a leaf for 127.0.0.1 and localhost signed by `issuer`, valid for a day; return its
    key and name (the issuer of the leaves a CA signs)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject if issuer is None else issuer[1])
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
    else:
        san = x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        )
        builder = builder.add_extension(san, False)
    cert = builder.sign(key if issuer is None else issuer[0], hashes.SHA256())
    (directory / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / f"{name}-key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return key, subject
