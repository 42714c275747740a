"""A throwaway CA and a server certificate for localhost / 127.0.0.1, made with
the openssl command, for the scripts that start TLS listeners.

    from certs import make_certs
    keystore, ca = make_certs(directory)   # keystore: key + chain (PEM), ca: the CA (PEM)
"""
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
