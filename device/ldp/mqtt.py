"""A small MQTT 3.1.1 client with the `umqtt.simple` API (connect, publish, subscribe,
set_callback, check_msg, wait_msg, ping, disconnect) for the device loop.

Differences that matter in the field (see device/README.md): every packet goes out in one
write and TCP_NODELAY is set after connect (no Nagle/delayed-ACK stalls); every read has a
deadline (`timeout` seconds), so a dead connection surfaces as OSError instead of a hang;
a QoS 1 publish returns only after its PUBACK; `last_rx` (ticks_ms of the last packet
from the broker) lets the caller detect a silent broker with PINGREQ/PINGRESP.

TLS as in current `umqtt.simple`: pass `ssl=` an `ssl.SSLContext` (see `tls_context`); the
TCP socket is wrapped after connect with `server_hostname` = the broker host, and the port
defaults to 8883. Reads keep their deadlines: polling an SSL socket also reports bytes that
are already decrypted and buffered.
"""
import select
import socket
import struct
import time
from micropython import const

ETIMEDOUT = const(110)
ECONNRESET = const(104)


class MQTTException(Exception):
    pass


def _remaining_length(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | 0x80 if n else b)
        if not n:
            return out


def _utf8(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("!H", len(b)) + b


class MQTTClient:
    def __init__(self, client_id, server, port=0, user=None, password=None, keepalive=0,
                 timeout=5, ssl=None):
        self.client_id = client_id
        self.server = server
        self.ssl = ssl
        self.port = port or (8883 if ssl else 1883)
        self.user = user
        self.pswd = password
        self.keepalive = keepalive
        self.timeout = timeout
        self.sock = None
        self.poller = None
        self.cb = None
        self.pid = 0
        self.last_rx = time.ticks_ms()
        self.lw_topic = None
        self.lw_msg = None
        self.lw_qos = 0
        self.lw_retain = False

    def set_callback(self, f):
        """f(topic: bytes, msg: bytes) for every PUBLISH received."""
        self.cb = f

    def set_last_will(self, topic, msg, retain=False, qos=0):
        self.lw_topic, self.lw_msg, self.lw_qos, self.lw_retain = topic, msg, qos, retain

    # --- transport --------------------------------------------------------------------------
    def _send(self, pkt):
        mv = memoryview(pkt)
        sent = 0
        while sent < len(pkt):
            n = self.sock.write(mv[sent:])
            if not n:
                raise OSError(ETIMEDOUT)
            sent += n

    def _wait_readable(self, deadline):
        while True:
            left = time.ticks_diff(deadline, time.ticks_ms())
            if left <= 0:
                raise OSError(ETIMEDOUT)
            for _, ev in self.poller.poll(left):
                if ev & (select.POLLHUP | select.POLLERR) and not ev & select.POLLIN:
                    raise OSError(ECONNRESET)
                return

    def _read(self, n, deadline):
        buf = bytearray(n)
        got = 0
        mv = memoryview(buf)
        while got < n:
            self._wait_readable(deadline)
            k = self.sock.readinto(mv[got:])
            if k == 0:
                raise OSError(ECONNRESET)  # the broker closed the connection
            if k is not None:
                got += k
        return buf

    def _read_packet(self, deadline):
        """(first byte, body) of the next packet."""
        op = self._read(1, deadline)[0]
        n = 0
        shift = 0
        while True:
            b = self._read(1, deadline)[0]
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
            if shift > 21:
                raise MQTTException("bad remaining length")
        body = self._read(n, deadline) if n else b""
        self.last_rx = time.ticks_ms()
        return op, body

    def _deadline(self):
        return time.ticks_add(time.ticks_ms(), int(self.timeout * 1000))

    # --- session ----------------------------------------------------------------------------
    def connect(self, clean_session=True):
        ai = socket.getaddrinfo(self.server, self.port, 0, socket.SOCK_STREAM)[0]
        self.sock = socket.socket(ai[0], ai[1], ai[2])
        try:
            self.sock.settimeout(self.timeout)
            self.sock.connect(ai[-1])
            try:
                self.sock.setsockopt(6, 1, 1)  # IPPROTO_TCP, TCP_NODELAY
            except OSError:
                pass  # a stack without the option: packets still go out in one write each
            if self.ssl is not None:
                # The handshake verifies the broker's certificate chain and name; a failure
                # raises here (OSError or ValueError) and the caller retries with backoff.
                self.sock = self.ssl.wrap_socket(self.sock, server_hostname=self.server)
            self.poller = select.poll()
            self.poller.register(self.sock, select.POLLIN)
            flags = 0x02 if clean_session else 0
            payload = _utf8(self.client_id)
            if self.lw_topic:
                flags |= 0x04 | (self.lw_qos & 1) << 3 | (self.lw_qos & 2) << 3 | (0x20 if self.lw_retain else 0)
                payload += _utf8(self.lw_topic) + _utf8(self.lw_msg)
            if self.user is not None:
                flags |= 0x80
                payload += _utf8(self.user)
                if self.pswd is not None:
                    flags |= 0x40
                    payload += _utf8(self.pswd)
            var = b"\x00\x04MQTT\x04" + bytes((flags,)) + struct.pack("!H", self.keepalive)
            self._send(b"\x10" + _remaining_length(len(var) + len(payload)) + var + payload)
            deadline = self._deadline()
            op, body = self._read_packet(deadline)
            if op != 0x20 or len(body) != 2:
                raise MQTTException("expected CONNACK")
            if body[1] != 0:
                raise MQTTException(body[1])
            return body[0] & 1
        except Exception:
            self.close()
            raise

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None
        self.poller = None

    def disconnect(self):
        try:
            if self.sock is not None:
                self._send(b"\xe0\x00")
        finally:
            self.close()

    def ping(self):
        self._send(b"\xc0\x00")

    def _next_pid(self):
        self.pid = self.pid % 65535 + 1
        return self.pid

    def publish(self, topic, msg, retain=False, qos=0):
        """QoS 0, or QoS 1 returning after the PUBACK (OSError on timeout)."""
        topic = topic.encode() if isinstance(topic, str) else topic
        head = 0x30 | (qos & 3) << 1 | (1 if retain else 0)
        var = _utf8(topic)
        pid = 0
        if qos:
            pid = self._next_pid()
            var += struct.pack("!H", pid)
        self._send(bytes((head,)) + _remaining_length(len(var) + len(msg)) + var + msg)
        if qos == 0:
            return
        deadline = self._deadline()
        while True:
            op, body = self._read_packet(deadline)
            if op == 0x40 and len(body) == 2 and struct.unpack("!H", body)[0] == pid:
                return
            self._handle(op, body)

    def subscribe(self, topic, qos=0):
        """Subscribe and wait for the SUBACK (messages arriving meanwhile go to the callback)."""
        topic = topic.encode() if isinstance(topic, str) else topic
        pid = self._next_pid()
        var = struct.pack("!H", pid) + _utf8(topic) + bytes((qos,))
        self._send(b"\x82" + _remaining_length(len(var)) + var)
        deadline = self._deadline()
        while True:
            op, body = self._read_packet(deadline)
            if op == 0x90 and len(body) >= 3 and struct.unpack("!H", body[:2])[0] == pid:
                if body[2] == 0x80:
                    raise MQTTException("subscription refused")
                return
            self._handle(op, body)

    def _handle(self, op, body):
        """Dispatch one received packet; returns the packet type handled."""
        kind = op & 0xF0
        if kind == 0x30:
            tlen = struct.unpack("!H", body[:2])[0]
            topic = bytes(body[2:2 + tlen])
            pos = 2 + tlen
            qos = (op >> 1) & 3
            if qos:
                pid = struct.unpack("!H", body[pos:pos + 2])[0]
                pos += 2
            msg = bytes(body[pos:])
            if qos == 1:
                self._send(b"\x40\x02" + struct.pack("!H", pid))
            elif qos == 2:
                raise MQTTException("QoS 2 not supported")
            if self.cb:
                self.cb(topic, msg)
        return kind

    def wait_msg(self):
        """Wait up to `timeout` for a packet and handle it; returns its type, or None if
        nothing arrived in time."""
        if not self.poller.poll(int(self.timeout * 1000)):
            return None
        op, body = self._read_packet(self._deadline())
        return self._handle(op, body)

    def poll_msg(self, ms):
        """Wait up to `ms` milliseconds for a packet, then handle every packet waiting."""
        if self.poller.poll(ms):
            self.check_msg()

    def check_msg(self):
        """Handle every packet already waiting, without blocking; None if there was none."""
        kind = None
        while self.sock is not None and self.poller.poll(0):
            op, body = self._read_packet(self._deadline())
            kind = self._handle(op, body)
        return kind


def pem_to_der(data):
    """The first certificate of a PEM file as DER (MicroPython's mbedTLS build loads DER);
    DER input is returned unchanged."""
    if not data.startswith(b"-----BEGIN"):
        return data
    from binascii import a2b_base64
    lines = data.split(b"\n")
    body = bytearray()
    for line in lines[1:]:
        line = line.strip()
        if line.startswith(b"-----END"):
            return a2b_base64(bytes(body))
        body.extend(line)
    raise ValueError("unterminated PEM certificate")


def tls_context(ca_data):
    """A client SSLContext that requires a broker certificate signed by the CA in `ca_data`
    (PEM or DER bytes); the host name is checked against the certificate at wrap time."""
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=pem_to_der(ca_data))
    return ctx
