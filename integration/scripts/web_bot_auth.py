#!/usr/bin/env python3
"""A Web Bot Auth agent and its key directory, for the real-Envoy tests of signed agents.

An implementation independent of crawlguard's: keys, RFC 7638 thumbprints and ed25519
signatures come from Python's `cryptography` package, and the RFC 9421 signature base is
built here, from the RFC, not from the sidecar's code.

    web_bot_auth.py keygen                      -> {"d": .., "x": .., "keyid": ..}
    web_bot_auth.py certs DIR                   -> DIR/ca.pem, DIR/cert.pem, DIR/key.pem
                                                   (a CA and a certificate for localhost)
    web_bot_auth.py sign < spec.json            -> {"signature-input": .., "signature": ..}
    web_bot_auth.py serve --cert C --key K --mode ok|big|slow|redirect
                          [--jwks FILE] [--max-age S] [--redirect-to URL]
                                                -> prints "listening on 127.0.0.1:PORT"

`sign` reads {"d", "keyid", "method", "authority", "scheme", "path", "headers": {name:
value}, "components": [...], "created", "expires", "nonce" (optional), "tag" (optional),
"label"}; a component is a name (`@authority`, `signature-agent`) or [name, key] for a
dictionary member (`"signature-agent";key="agent1"`).
"""

import base64
import datetime
import hashlib
import http.server
import json
import os
import socketserver
import ssl
import sys
import threading
import time

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import NameOID


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def unb64url(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def thumbprint(x):
    # RFC 7638 section 3: the required members in lexicographic order, no whitespace.
    canonical = '{"crv":"Ed25519","kty":"OKP","x":"%s"}' % x
    return b64url(hashlib.sha256(canonical.encode()).digest())


def keygen():
    sk = Ed25519PrivateKey.generate()
    d = sk.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                         serialization.NoEncryption())
    x = b64url(sk.public_key().public_bytes(serialization.Encoding.Raw,
                                            serialization.PublicFormat.Raw))
    print(json.dumps({"d": b64url(d), "x": x, "keyid": thumbprint(x)}))


def certs(directory):
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "crawlguard test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    import ipaddress
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    with open(os.path.join(directory, "ca.pem"), "wb") as f:
        f.write(ca.public_bytes(pem))
    with open(os.path.join(directory, "cert.pem"), "wb") as f:
        f.write(cert.public_bytes(pem))
    with open(os.path.join(directory, "key.pem"), "wb") as f:
        f.write(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))


def sf_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_sf_dict_member(value, key):
    # Enough of RFC 8941 for the tests' Signature-Agent dictionaries: members
    # `key="string"` separated by commas.
    for member in value.split(","):
        k, _, v = member.strip().partition("=")
        if k == key:
            return v.strip()
    raise KeyError(key)


def sign(spec):
    sk = Ed25519PrivateKey.from_private_bytes(unb64url(spec["d"]))
    headers = {k.lower(): v for k, v in spec.get("headers", {}).items()}
    scheme, authority, path = spec["scheme"], spec["authority"].lower(), spec["path"]
    idents, lines = [], []
    for c in spec["components"]:
        name, key = (c, None) if isinstance(c, str) else (c[0], c[1])
        ident = sf_string(name) + ("" if key is None else ";key=" + sf_string(key))
        if name == "@authority":
            value = authority
        elif name == "@method":
            value = spec["method"].upper()
        elif name == "@path":
            value = path.split("?")[0]
        elif name == "@target-uri":
            value = "%s://%s%s" % (scheme, authority, path)
        elif name == "@scheme":
            value = scheme
        elif key is not None:
            value = parse_sf_dict_member(headers[name], key)
        else:
            value = headers[name].strip()
        idents.append(ident)
        lines.append("%s: %s" % (ident, value))
    params = "(%s)" % " ".join(idents)
    params += ";created=%d" % spec["created"]
    params += ";expires=%d" % spec["expires"]
    params += ";keyid=" + sf_string(spec["keyid"])
    if spec.get("nonce") is not None:
        params += ";nonce=" + sf_string(spec["nonce"])
    if spec.get("tag") is not None:
        params += ";tag=" + sf_string(spec["tag"])
    base = "\n".join(lines + ['"@signature-params": ' + params])
    sig = base64.b64encode(sk.sign(base.encode("ascii"))).decode()
    label = spec.get("label", "sig1")
    print(json.dumps({"signature-input": "%s=%s" % (label, params),
                      "signature": "%s=:%s:" % (label, sig)}))


class Directory(http.server.BaseHTTPRequestHandler):
    mode, body, max_age, redirect_to = "ok", b"", 60, ""

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path != "/.well-known/http-message-signatures-directory":
            self.send_response(404)
            self.end_headers()
            return
        if self.mode == "slow":
            time.sleep(3600)
            return
        if self.mode == "redirect":
            self.send_response(302)
            self.send_header("location", self.redirect_to)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        body = self.body if self.mode == "ok" else b'{"keys":[' + b" " * 200_000 + b"]}"
        self.send_response(200)
        self.send_header("content-type", "application/http-message-signatures-directory+json")
        self.send_header("cache-control", "max-age=%d" % self.max_age)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def serve(args):
    opts = dict(zip(args[::2], args[1::2]))
    Directory.mode = opts.get("--mode", "ok")
    Directory.max_age = int(opts.get("--max-age", "60"))
    Directory.redirect_to = opts.get("--redirect-to", "")
    if "--jwks" in opts:
        with open(opts["--jwks"], "rb") as f:
            Directory.body = f.read()
    server = Server(("127.0.0.1", int(opts.get("--port", "0"))), Directory)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(opts["--cert"], opts["--key"])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print("listening on 127.0.0.1:%d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "keygen":
        keygen()
    elif cmd == "certs":
        certs(sys.argv[2])
    elif cmd == "sign":
        sign(json.load(sys.stdin))
    elif cmd == "serve":
        serve(sys.argv[2:])
    else:
        sys.exit(__doc__)
