"""The cluster's certificate authority, as GKE's control plane has one.

`gcloud container clusters get-credentials` always writes ``server: https://<endpoint>`` with
the cluster's ``masterAuth.clusterCaCertificate``; with ``container/use_client_certificate``
it authenticates with ``masterAuth.clientCertificate``/``clientKey`` (GKE's legacy client
certificates) instead of the gke-gcloud-auth-plugin, which would need a Google token. So the
emulator serves the same API on a second, TLS port with a per-run CA, a server certificate for
127.0.0.1 and a client certificate it hands out (and does not check: the plain-http port
already has no authentication).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class ClusterTls:
    ca_pem: bytes
    client_cert_pem: bytes
    client_key_pem: bytes
    server_cert: Path
    server_key: Path

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.server_cert, self.server_key)
        return ctx

    def master_auth(self) -> dict[str, str]:
        """``Cluster.masterAuth`` of the GKE API: base64 PEMs, as GKE returns them."""
        b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
        return {
            "clusterCaCertificate": b64(self.ca_pem),
            "clientCertificate": b64(self.client_cert_pem),
            "clientKey": b64(self.client_key_pem),
        }


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _issue(
    subject: str,
    ca_key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    *,
    ca: bool = False,
    server: bool = False,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
    signer = key if ca else ca_key
    return key, builder.sign(signer, hashes.SHA256())


def make_cluster_tls(directory: Path) -> ClusterTls:
    """A fresh CA with a server (127.0.0.1) and a client certificate, written to ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _issue("phantom-gke-ca", None, _name("phantom-gke-ca"), ca=True)  # type: ignore[arg-type]
    srv_key, srv_cert = _issue("127.0.0.1", ca_key, ca_cert.subject, server=True)
    cli_key, cli_cert = _issue("client", ca_key, ca_cert.subject)
    pem = lambda c: c.public_bytes(serialization.Encoding.PEM)  # noqa: E731
    server_cert, server_key = directory / "server.crt", directory / "server.key"
    server_cert.write_bytes(pem(srv_cert) + pem(ca_cert))
    server_key.write_bytes(_key_pem(srv_key))
    server_key.chmod(0o600)
    (directory / "ca.crt").write_bytes(pem(ca_cert))
    return ClusterTls(
        ca_pem=pem(ca_cert),
        client_cert_pem=pem(cli_cert),
        client_key_pem=_key_pem(cli_key),
        server_cert=server_cert,
        server_key=server_key,
    )
