"""A proxy on Kafka's wire that shows a script each request and its answer."""
import socket
import struct
import threading

from lib.net import free_port, recv_exactly

_SIZE = struct.Struct(">i")


class WireProxy:
    """A TCP proxy on 127.0.0.1 in front of a broker on 127.0.0.1:target_port. A
    broker that advertises the proxy's port (advertised.listeners) has every
    connection of its clients come through it. It reads Kafka's framing (an int32
    size, then the frame) and passes each frame on whole:

        proxy = WireProxy(target_port, port, on_request=f, on_answer=g)
        proxy.port; proxy.bootstrap                  # "127.0.0.1:port"
        proxy.close()                                # or `with WireProxy(...) as proxy:`

    on_request(frame) is called with each request frame (without its size, so the
    header first: api_key int16, api_version int16, correlation_id int32, client_id;
    doze_kafka.parse_request_header reads it) before the frame goes on, in the
    thread of its connection's requests: until it returns, the request is held,
    and the connection's later requests wait behind it. What it returns is the
    request's note. on_answer(note, frame) is called with each answer frame (its
    correlation id first) whose request's note is not None, before the answer goes
    back; if it returns bytes, they go back instead of the frame (a changed
    answer, its correlation id first). Either may be left out. An exception in
    either closes the connection (and is printed by its thread); so does either
    side closing.

    port: where the proxy listens, a free one if left out (a broker that must
    advertise it is started first with a port from free_port(), given here).
    close() stops accepting and closes the connections there are."""

    def __init__(self, target_port, port=None, on_request=None, on_answer=None):
        self.target = ("127.0.0.1", target_port)
        self.port = free_port() if port is None else port
        self.on_request, self.on_answer = on_request, on_answer
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self._sockets, self._lock = set(), threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def close(self):
        self.listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for s in sockets:
            s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:                                   # closed
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets.update((client, server))
            notes = {}                                        # {correlation id: note} of the connection
            threading.Thread(target=self._pass, args=(client, server, notes, True), daemon=True).start()
            threading.Thread(target=self._pass, args=(server, client, notes, False), daemon=True).start()

    def _pass(self, source, dest, notes, requests):
        """Frames from source to dest until either closes: requests (client to
        broker) or answers (broker to client)."""
        try:
            while True:
                size = recv_exactly(source, 4)
                frame = recv_exactly(source, _SIZE.unpack(size)[0])
                if requests:
                    note = self.on_request(frame) if self.on_request else None
                    if note is not None:
                        notes[_SIZE.unpack_from(frame, 4)[0]] = note
                else:
                    note = notes.pop(_SIZE.unpack_from(frame, 0)[0], None)
                    if note is not None and self.on_answer:
                        changed = self.on_answer(note, frame)
                        if changed is not None:                # the answer the client gets instead
                            frame, size = changed, _SIZE.pack(len(changed))
                dest.sendall(size + frame)
        except OSError:                                       # recv_exactly's Closed is one
            pass
        finally:
            for s in (source, dest):
                s.close()
                with self._lock:
                    self._sockets.discard(s)
