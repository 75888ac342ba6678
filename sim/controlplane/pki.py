"""The certificates and keys of one simulated cluster's upstream control plane.

A real cluster's control plane authenticates everyone with X.509 client certificates signed
by the cluster CA (kubeadm's layout): kube-apiserver's serving certificate, the admin's
and the control-plane components' client certificates, one client certificate per kubelet
(`system:node:<name>` in `system:nodes`, what the Node authorizer and NodeRestriction key
on), the kubelets' serving certificates (kube-apiserver verifies them when it proxies
`kubectl logs`), the apiserver's client certificate for kubelets, and the ServiceAccount
token signing key. Every simulated cluster makes its own, so clusters side by side never
trust each other. ECDSA P-256 keys: generating one takes microseconds, not RSA's tens of
milliseconds per node.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)
# The first address of the service range (--service-cluster-ip-range): the `kubernetes`
# Service's ClusterIP, which in-cluster clients dial.
SERVICE_IP = "10.0.0.1"
APISERVER_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, as PEM files."""

    cert: Path
    key: Path


def _write(path: Path, data: bytes, mode: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    tmp.replace(path)
    return path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class ClusterPKI:
    """A CA under `directory` and the certificates it issues (files written on issue)."""

    def __init__(self, directory: Path, *, name: str = "compute-domain-sim") -> None:
        self.directory = Path(directory)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name}-ca")])
        self._ca_cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca = KeyPair(
            _write(
                self.directory / "ca.crt",
                self._ca_cert.public_bytes(serialization.Encoding.PEM),
                0o644,
            ),
            _write(self.directory / "ca.key", _key_pem(self._ca_key), 0o600),
        )

    @property
    def ca_pem(self) -> bytes:
        return self._ca_cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        name: str,
        common_name: str,
        *,
        organizations: Sequence[str] = (),
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
    ) -> KeyPair:
        """A leaf certificate `<name>.crt` / `<name>.key` for a client, a server or both."""
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        now = datetime.datetime.now(datetime.UTC)
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self._ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        alt_names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        alt_names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ip_addresses]
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        return KeyPair(
            _write(
                self.directory / f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644
            ),
            _write(self.directory / f"{name}.key", _key_pem(key), 0o600),
        )

    def apiserver_serving(self, addresses: Sequence[str]) -> KeyPair:
        return self.issue(
            "apiserver",
            "kube-apiserver",
            dns_names=APISERVER_NAMES,
            ip_addresses=[*addresses, SERVICE_IP],
            server=True,
        )

    def client(self, name: str, user: str, groups: Sequence[str] = ()) -> KeyPair:
        """A client certificate: kube-apiserver reads the user from CN, groups from O."""
        return self.issue(name, user, organizations=groups, client=True)

    def node_client(self, node: str) -> KeyPair:
        return self.client(f"kubelet-{node}-client", f"system:node:{node}", ["system:nodes"])

    def kubelet_serving(self, node: str, address: str) -> KeyPair:
        return self.issue(
            f"kubelet-{node}-serving",
            f"system:node:{node}",
            organizations=["system:nodes"],
            dns_names=[node],
            ip_addresses=[address],
            server=True,
        )

    def service_account_keys(self) -> KeyPair:
        """The key kube-apiserver signs ServiceAccount tokens with (`key`, SEC1 PEM) and the
        public key it verifies them by (`cert`, a PEM public key)."""
        key = ec.generate_private_key(ec.SECP256R1())
        public = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        private = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
        return KeyPair(
            _write(self.directory / "sa.pub", public, 0o644),
            _write(self.directory / "sa.key", private, 0o600),
        )
