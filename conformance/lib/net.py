"""Loopback ports and exact reads from a socket."""
import socket
import time


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on (at the moment of asking)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, limit_s=30):
    """Wait until something accepts on 127.0.0.1:port; -> seconds waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return time.perf_counter() - t0
        except OSError:
            time.sleep(0.005)
    raise RuntimeError(f"nothing listens on port {port} after {limit_s} s")


class Closed(ConnectionError):
    """The peer closed the connection before all the bytes asked for came."""


def recv_exactly(sock, n):
    """n bytes from a blocking socket; Closed (a ConnectionError) if it closes first.
    doze_kafka.recv_exactly is the same for scripts that import doze_kafka (it raises
    EOFError); this one is for those that do not (realkafka, fuzz, the client matrix)."""
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise Closed("the broker closed the connection")
        data += chunk
    return bytes(data)
