"""A throwaway CA and a server certificate for localhost / 127.0.0.1, made with
the openssl command, for the scripts that start TLS listeners.

    from certs import make_certs, make_client_cert
    keystore, ca = make_certs(directory)   # keystore: key + chain (PEM), ca: the CA (PEM)
    cert, key = make_client_cert(directory, "alice")   # signed by that CA, subject CN=alice
"""
import ssl
import subprocess


def make_certs(d, days=2):
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
            f"{d}/ca.key", "-out", f"{d}/ca.pem", "-days", str(days), "-subj", "/CN=doze-conformance-ca")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
            f"{d}/server.key", "-out", f"{d}/server.csr", "-subj", "/CN=localhost")
    with open(f"{d}/san.ext", "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", f"{d}/server.csr", "-CA", f"{d}/ca.pem", "-CAkey", f"{d}/ca.key",
            "-CAcreateserial", "-out", f"{d}/server.pem", "-days", str(days), "-extfile", f"{d}/san.ext")
    with open(f"{d}/keystore.pem", "w") as f:
        f.write(open(f"{d}/server.key").read() + open(f"{d}/server.pem").read())
    return f"{d}/keystore.pem", f"{d}/ca.pem"


def make_client_cert(d, name, days=2):
    """A client certificate (CN=name) signed by make_certs' CA in d -> (cert, key) paths;
    d/<name>-keystore.pem holds both (a Java client's PEM keystore)."""
    subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                    f"{d}/{name}.key", "-out", f"{d}/{name}.csr", "-subj", f"/CN={name}"], check=True,
                   capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", f"{d}/{name}.csr", "-CA", f"{d}/ca.pem", "-CAkey",
                    f"{d}/ca.key", "-CAcreateserial", "-out", f"{d}/{name}.pem", "-days", str(days)], check=True,
                   capture_output=True)
    with open(f"{d}/{name}-keystore.pem", "w") as f:
        f.write(open(f"{d}/{name}.key").read() + open(f"{d}/{name}.pem").read())
    return f"{d}/{name}.pem", f"{d}/{name}.key"


# The recordings' TLS listeners (scenarios with an SSL or SASL_SSL listener): one
# fixed certificate for localhost / 127.0.0.1 and its CA, valid until 2126, given to
# Kafka and doze inline (KIP-651: ssl.keystore.key, ssl.keystore.certificate.chain),
# so that a recording names no file and replays anywhere. A test key for loopback
# addresses only: it guards nothing.
RECORDING_CA = """-----BEGIN CERTIFICATE-----
MIIBqTCCAU+gAwIBAgIUZlkUIfkb68SP1BzkzctyBgvt3TwwCgYIKoZIzj0EAwIw
KTEnMCUGA1UEAwweZG96ZS1jb25mb3JtYW5jZS1yZWNvcmRpbmdzLWNhMCAXDTI2
MTIwMTE5MTYwNFoYDzIxMjYxMTA3MTkxNjA0WjApMScwJQYDVQQDDB5kb3plLWNv
bmZvcm1hbmNlLXJlY29yZGluZ3MtY2EwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNC
AASM4nvhoypvxqw4PV3QtD14FVqLLNtP79Sb0cFcv3398EanZJRIRud/oyXS6qmL
pIdXvgfJ3JgLc+AllLeLcCx2o1MwUTAdBgNVHQ4EFgQUXQnM4H0bnHXLftq0NWsq
IjfbPsIwHwYDVR0jBBgwFoAUXQnM4H0bnHXLftq0NWsqIjfbPsIwDwYDVR0TAQH/
BAUwAwEB/zAKBggqhkjOPQQDAgNIADBFAiBZoNdDl1SInUPRAXWqbTQG0TIst3Wh
gJs753jattlutgIhAPN0SrSlEiQGO8ZYFkovrfpNeo2+il7QqwgR79uHPeUh
-----END CERTIFICATE-----
"""
RECORDING_SERVER_KEY = """-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg9p7VbmKI6KXO9Fix
8G6UpbLcHwsZm3BpIhyO+hHkXkuhRANCAAQJXdpfCzkbuYToBqUeYoFJbeHtQDpW
zylyj64926RbZvHYMNyiLJJkg/4sOwG3wOrA1pQjhNzkVEdwNtHoehQz
-----END PRIVATE KEY-----
"""
RECORDING_SERVER_CERT = """-----BEGIN CERTIFICATE-----
MIIBnjCCAUWgAwIBAgIUJnOi1W5h0HS/vglEZEGJmsUYMIowCgYIKoZIzj0EAwIw
KTEnMCUGA1UEAwweZG96ZS1jb25mb3JtYW5jZS1yZWNvcmRpbmdzLWNhMCAXDTI2
MTIwMTE5MTYwNFoYDzIxMjYxMTA3MTkxNjA0WjAUMRIwEAYDVQQDDAlsb2NhbGhv
c3QwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAAQJXdpfCzkbuYToBqUeYoFJbeHt
QDpWzylyj64926RbZvHYMNyiLJJkg/4sOwG3wOrA1pQjhNzkVEdwNtHoehQzo14w
XDAaBgNVHREEEzARgglsb2NhbGhvc3SHBH8AAAEwHQYDVR0OBBYEFLaM3ScUIAI9
o9AmSZLyljzblJ4IMB8GA1UdIwQYMBaAFF0JzOB9G5x1y37atDVrKiI32z7CMAoG
CCqGSM49BAMCA0cAMEQCIGqp6Hyre6liYFGkBk/hxV7KgjO7jwkZMSby2gX0ig5W
AiAIz8xEbkxr8TokDlT6Rs+vIQhtvmJvBbwsUgpoJvcoAA==
-----END CERTIFICATE-----
"""
RECORDING_TLS_SETTINGS = {"ssl.keystore.type": "PEM", "ssl.keystore.key": RECORDING_SERVER_KEY,
                          "ssl.keystore.certificate.chain": RECORDING_SERVER_CERT}


def recording_client_context():
    """A client's TLS context that trusts RECORDING_CA and checks the broker's name."""
    return ssl.create_default_context(cadata=RECORDING_CA)
