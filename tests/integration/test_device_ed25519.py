"""The device's pure-Python Ed25519 verifier (device/ldp/ed25519.py, RFC 8032 section 5.1.7,
cofactorless) and SHA-512 (device/ldp/sha512.py), run by the real `micropython` interpreter
(and, as a cross-check, by CPython) on RFC 8032 section 7.1 TEST 1-3, on 80 seeded random
keys/messages signed by `cryptography` with their tampered variants, and SHA-512 against
hashlib for every length 0..300 and the padding boundaries. Each interpreter runs the one
driver script once over one JSON file of cases."""
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (Ed25519PrivateKey,
                                                               Ed25519PublicKey)

from ldpfleet.provision import device_runner

ROOT = Path(__file__).resolve().parents[2]
DEVICE = ROOT / "device"

P = 2 ** 255 - 19
L = 2 ** 252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P

# RFC 8032, section 7.1, TEST 1-3: (SECRET KEY, PUBLIC KEY, MESSAGE, SIGNATURE)
RFC8032 = [
    ("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
     "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
     "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
     "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
    ("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
     "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
     "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da"
     "085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"),
    ("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
     "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
     "af82",
     "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac"
     "18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"),
]

SHA_LENGTHS = list(range(0, 301)) + [510, 511, 512, 639, 640, 641, 1000]

# Runs unchanged on MicroPython and CPython: reads the cases, writes the answers.
DRIVER = r'''
import binascii
import json
import sys

from ldp.ed25519 import verify
from ldp.sha512 import sha512

u = binascii.unhexlify
with open(sys.argv[1]) as f:
    job = json.load(f)
out = {"verify": [verify(u(c[0]), u(c[1]), u(c[2])) for c in job["verify"]],
       "sha512": [binascii.hexlify(sha512(u(m))).decode() for m in job["sha512"]]}
pub, msg, sig = [u(x) for x in job["verify"][0]]
odd = [(pub[:31], msg, sig), (pub + b"\x00", msg, sig), (pub, msg, sig[:63]),
       (pub, msg, sig + b"\x00"), (b"", b"", b""), (None, msg, sig), (pub, None, sig),
       (pub, msg, None), ("x" * 32, msg, sig), (pub, "msg", sig), (pub, msg, 7),
       (list(pub), msg, sig), (pub, msg, "s" * 64)]
out["odd"] = [verify(*a) for a in odd]
out["views"] = [verify(bytearray(pub), bytearray(msg), bytearray(sig)),
                verify(memoryview(pub), memoryview(msg), memoryview(sig))]
with open(sys.argv[2], "w") as f:
    json.dump(out, f)
'''


def micropython():
    try:
        return device_runner.micropython_binary()
    except RuntimeError:
        path = Path(sys.executable).parent / "micropython"
        if path.exists():
            return str(path)
        return shutil.which("micropython") or pytest.skip("no micropython interpreter")


def decodes(enc):
    """Whether 32 bytes decode to a curve point (RFC 8032, section 5.1.3), computed here
    independently of the device code: y < p and (y^2 - 1)/(d y^2 + 1) is a square (with
    x = 0 and the sign bit set refused)."""
    y = int.from_bytes(enc, "little")
    sign, y = y >> 255, y & ((1 << 255) - 1)
    if y >= P:
        return False
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    if x2 == 0:
        return not sign
    return pow(x2, (P - 1) // 2, P) == 1


def crypto_verifies(pub, msg, sig):
    try:
        Ed25519PublicKey.from_public_bytes(pub).verify(sig, msg)
        return True
    except (InvalidSignature, ValueError):
        return False


def flip(data, rng, lo=0, hi=None):
    """`data` with one random bit flipped in bytes lo..hi."""
    hi = len(data) if hi is None else hi
    bit = rng.randrange(lo * 8, hi * 8)
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


RANDOM_CASES = 80
"""Seeded random keys and messages (each with 6 forgeries): ~560 verifies, ~8 s on MicroPython."""


def build_cases():
    """[(pub, msg, sig, expected, label)] and the SHA-512 inputs."""
    cases = []
    for _, pub, msg, sig in RFC8032:
        cases.append((bytes.fromhex(pub), bytes.fromhex(msg), bytes.fromhex(sig), True, "rfc"))
    rng = random.Random(7)
    bad_pubs = []
    while len(bad_pubs) < RANDOM_CASES:
        enc = bytes(rng.getrandbits(8) for _ in range(32))
        if not decodes(enc):
            bad_pubs.append(enc)
    for i in range(RANDOM_CASES):
        secret = bytes(rng.getrandbits(8) for _ in range(32))
        msg = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))
        key = Ed25519PrivateKey.from_private_bytes(secret)
        pub = key.public_key().public_bytes_raw()
        sig = key.sign(msg)
        s = int.from_bytes(sig[32:], "little")
        cases += [
            (pub, msg, sig, True, "valid"),
            (pub, msg, flip(sig, rng, 0, 32), False, "flip R"),
            (pub, msg, flip(sig, rng, 32, 64), False, "flip S"),
            (pub, flip(msg, rng) if msg else b"\x00", sig, False, "flip msg"),
            (flip(pub, rng), msg, sig, False, "flip pub"),
            (pub, msg, sig[:32] + (s + L).to_bytes(32, "little"), False, "S + L"),
            (bad_pubs[i], msg, sig, False, "pub does not decode"),
        ]
    # edge encodings of A: non-canonical y >= p, x = 0 with the sign bit set, y = 1 (the
    # identity, which decodes) and a small-order point with a real signature's R and S
    ident = (1).to_bytes(32, "little")
    pub, msg, sig = cases[3][:3]
    for enc, label in [((P).to_bytes(32, "little"), "y = p"),
                       ((P + 1).to_bytes(32, "little"), "y = p + 1 (non-canonical identity)"),
                       ((2 ** 255 - 1).to_bytes(32, "little"), "y = 2^255 - 1"),
                       ((1 | 1 << 255).to_bytes(32, "little"), "x = 0, sign 1"),
                       (((P - 1) | 1 << 255).to_bytes(32, "little"), "y = -1, x = 0, sign 1")]:
        assert not decodes(enc), label
        cases.append((enc, msg, sig, False, label))
    cases.append((ident, msg, sig, False, "A = identity, unrelated signature"))
    # A = identity: [S]B == R for S = 0, R = identity encodes, so any message verifies
    cases.append((ident, b"anything", ident + bytes(32), True, "A = R = identity, S = 0"))
    cases.append((pub, msg, sig[:32] + L.to_bytes(32, "little"), False, "S = L"))
    sha = [bytes(rng.getrandbits(8) for _ in range(n)) for n in SHA_LENGTHS]
    return cases, sha


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    cases, sha = build_cases()
    tmp = tmp_path_factory.mktemp("ed25519")
    path = tmp / "cases.json"
    path.write_text(json.dumps({"verify": [[c[0].hex(), c[1].hex(), c[2].hex()] for c in cases],
                                "sha512": [m.hex() for m in sha]}))
    driver = tmp / "driver.py"
    driver.write_text(DRIVER)
    return cases, sha, path, driver, tmp


def run(kind, job):
    cases, sha, path, driver, tmp = job
    out = tmp / ("out_%s.json" % kind)
    if kind == "micropython":
        argv, env = [micropython(), str(driver)], device_runner.micropython_env(DEVICE)
    else:
        env = dict(os.environ, PYTHONPATH=str(DEVICE))
        argv = [sys.executable, str(driver)]
    proc = subprocess.run(argv + [str(path), str(out)], env=env, cwd=DEVICE,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


@pytest.fixture(scope="module", params=["micropython", "cpython"])
def results(request, job):
    return run(request.param, job)


def test_rfc8032_vectors_are_what_cryptography_computes():
    for secret, pub, msg, sig in RFC8032:
        key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(secret))
        assert key.public_key().public_bytes_raw().hex() == pub
        assert key.sign(bytes.fromhex(msg)).hex() == sig


def test_expectations_agree_with_cryptography(job):
    """Every case's expected answer is also cryptography's (OpenSSL) answer."""
    for pub, msg, sig, expected, label in job[0]:
        assert crypto_verifies(pub, msg, sig) == expected, label


def test_verify(results, job):
    cases = job[0]
    got = results["verify"]
    assert len(got) == len(cases)
    wrong = [(i, c[4]) for i, (c, g) in enumerate(zip(cases, got)) if g is not c[3]]
    assert wrong == []
    labels = [c[4] for c in cases]
    assert labels.count("valid") == RANDOM_CASES and labels.count("rfc") == 3


def test_bad_lengths_and_types_are_false(results):
    assert results["odd"] == [False] * 13
    assert results["views"] == [True, True]


def test_sha512_matches_hashlib(results, job):
    sha = job[1]
    assert results["sha512"] == [hashlib.sha512(m).hexdigest() for m in sha]
