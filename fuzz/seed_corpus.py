#!/usr/bin/env python3
"""Fill fuzz/corpus/<target>/ with seeds taken from real rxe captures.

    python3 fuzz/seed_corpus.py [PCAP_DIR ...]

Without arguments the captures come from crates/wire/tests/vectors/rxe/, or from the shared
captures (../shared/captures/rxe/ beside the repository) if that folder is missing. Only the
standard library is used. The corpus directory is git-ignored; rerunning the script is cheap
and idempotent (files are named by the SHA-1 of their contents).

What each target gets:
  wire_packet      the RoCEv2 IP datagrams (IPv4/IPv6 .. ICRC), their UDP payloads (BTH .. ICRC,
                   for parse_transport), and native IB packets rebuilt from them (LRH [GRH] BTH
                   .. ICRC VCRC, with both CRCs recomputed)
  wire_roundtrip   the same datagrams (the target reads them as an `Unstructured` byte stream)
  crc_incremental  the datagrams prefixed by cut points at the IP/UDP/BTH/ICRC boundaries
  mad_parse        the 256-byte MADs found on QP1 (CM MADs of rdma_cm), plus a few synthetic
                   SMP, SA and PMA MADs with a valid common header
  sa_query         the SA MADs of mad_parse (synthetic and captured) and SA queries of every
                   attribute the SA answers (Get and GetTable, with and without ComponentMask
                   bits, PathRecords between real LIDs of topology B), each behind a 2-byte SLID
  perftest_exchange  the byte stream each side of perftest's out-of-band TCP connection (port
                   18515) sent in the captures (upstream perftest 6.06), and the same streams
                   relabelled 6.29 and 6.30 with a legacy negotiation block or a key=value
                   negotiation inserted after the MTU message
  topology_parse   topologies/*.net, crates/fabric/tests/data/*.net and the ibnetdiscover
                   outputs in ../shared/golden/ (real infiniband-diags on ibsim)
  control_proto    not here: `cargo test -p softib-hca --test hostile_control -- --ignored
                   write_control_seeds` writes encoded requests of a real session
  engine_rx        synthetic (no capture needed): step sequences that deliver valid transport
                   bodies (BTH .. pad) of every opcode softib implements to the QPs the target
                   creates, at the PSNs they expect or sent, then pump the loopback wire; the
                   QPNs and R_Keys are derived from the target's HCA seed as the engine does
                   (SplitMix64), so they must follow fuzz_targets/engine_rx.rs if its setup changes
"""

import hashlib
import os
import struct
import sys
import zlib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIRS = [
    os.path.join(REPO, "crates", "wire", "tests", "vectors", "rxe"),
    os.path.join(os.path.dirname(REPO), "shared", "captures", "rxe"),
]
CORPUS = os.path.join(REPO, "fuzz", "corpus")
ROCE_PORT = 4791
# Keep at most this many packets with the same (opcode, length): bandwidth captures repeat
# one packet shape thousands of times.
PER_SHAPE = 2


def pcap_packets(path):
    """Yields (linktype, bytes) for each record of a classic pcap file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        return
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        print(f"skipping {path}: not a classic pcap file", file=sys.stderr)
        return
    linktype = struct.unpack(endian + "I", data[20:24])[0] & 0x0FFFFFFF
    at = 24
    while at + 16 <= len(data):
        incl = struct.unpack(endian + "I", data[at + 8 : at + 12])[0]
        yield linktype, data[at + 16 : at + 16 + incl]
        at += 16 + incl


def ip_datagram(linktype, frame):
    """The IP datagram inside a link-layer frame, or None."""
    if linktype == 1:  # Ethernet
        at = 12
        while at + 2 <= len(frame) and frame[at : at + 2] in (b"\x81\x00", b"\x88\xa8"):
            at += 4
        if frame[at : at + 2] not in (b"\x08\x00", b"\x86\xdd"):
            return None
        return frame[at + 2 :]
    if linktype in (12, 101):  # raw IP
        return frame
    if linktype == 113:  # Linux cooked capture v1
        return frame[16:] if frame[14:16] in (b"\x08\x00", b"\x86\xdd") else None
    return None


def roce_parts(dgram):
    """(datagram trimmed to its IP length, ip header, udp header, bth..icrc) or None."""
    if not dgram:
        return None
    version = dgram[0] >> 4
    if version == 4 and len(dgram) >= 20:
        ihl = (dgram[0] & 0x0F) * 4
        total = struct.unpack(">H", dgram[2:4])[0]
        proto = dgram[9]
        ip_len, end = ihl, total
    elif version == 6 and len(dgram) >= 40:
        proto = dgram[6]
        ip_len, end = 40, 40 + struct.unpack(">H", dgram[4:6])[0]
    else:
        return None
    if proto != 17 or end > len(dgram) or end < ip_len + 8:
        return None
    dgram = dgram[:end]
    udp = dgram[ip_len : ip_len + 8]
    if struct.unpack(">H", udp[2:4])[0] != ROCE_PORT:
        return None
    udp_len = struct.unpack(">H", udp[4:6])[0]
    bth_to_icrc = dgram[ip_len + 8 : ip_len + udp_len]
    if len(bth_to_icrc) < 16:
        return None
    return dgram, dgram[:ip_len], udp, bth_to_icrc


def crc16_vcrc(data):
    """The IB VCRC: CRC-16, polynomial 0x100B reflected (0xD008), init/xorout 0xFFFF."""
    crc = 0xFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0xD008 if crc & 1 else crc >> 1
    return crc ^ 0xFFFF


def mask_bth(bth_to_end):
    return bth_to_end[:4] + b"\xff" + bth_to_end[5:]


def native_packets(ip_header, bth_to_icrc):
    """Native IB packets (LRH-local and LRH+GRH) carrying the same transport, CRCs recomputed."""
    body = bth_to_icrc[:-4]
    out = []
    for global_route in (False, True):
        grh = b""
        if global_route:
            if len(ip_header) == 40:
                sgid, dgid = ip_header[8:24], ip_header[24:40]
            else:  # IPv4-mapped GIDs, as RoCE uses
                prefix = b"\x00" * 10 + b"\xff\xff"
                sgid, dgid = prefix + ip_header[12:16], prefix + ip_header[16:20]
            paylen = len(body) + 4
            # IPv6-style header: version 6, TClass 0, FlowLabel 0, PayLen, NxtHdr 0x1B, HopLmt 64.
            grh = struct.pack(">IHBB", 6 << 28, paylen, 0x1B, 64) + sgid + dgid
        words = (8 + len(grh) + len(body) + 4) // 4
        if words > 0x7FF:
            continue
        lnh = 3 if global_route else 2
        # VL 0, LVer 0 | SL 0, LNH | DLID 2 | PktLen | SLID 1
        lrh = struct.pack(">BBHHH", 0, lnh, 2, words, 1)
        if global_route:
            g = bytearray(grh)
            g[0] |= 0x0F
            g[1:4] = b"\xff\xff\xff"
            g[7] = 0xFF
            pseudo = b"\xff" * 8 + bytes(g) + mask_bth(body)
        else:
            pseudo = bytes([lrh[0] | 0xF0]) + lrh[1:] + mask_bth(body)
        icrc = struct.pack("<I", zlib.crc32(pseudo) & 0xFFFFFFFF)
        packet = lrh + grh + body + icrc
        out.append(packet + struct.pack("<H", crc16_vcrc(packet)))
    return out


def mad_of(bth_to_icrc):
    """The MAD carried by a UD SEND_ONLY to QP1 or QP0 (BTH, DETH, 256 bytes, ICRC), or None."""
    opcode = bth_to_icrc[0]
    dest_qp = int.from_bytes(bth_to_icrc[5:8], "big")
    if opcode != 0x64 or dest_qp > 1:
        return None
    mad = bth_to_icrc[20:-4]
    pad = (bth_to_icrc[1] >> 4) & 0x3
    mad = mad[: len(mad) - pad] if pad else mad
    return mad if len(mad) == 256 else None


def synthetic_mads():
    """A few MADs with valid common headers for the classes softib decodes."""
    out = []

    def mad(base, mgmt_class, class_ver, method, attr_id, attr_mod=0, status=0, data=b""):
        header = struct.pack(
            ">BBBBHHQHHI",
            base, mgmt_class, class_ver, method, status, 0, 0x1122334455667788, attr_id, 0, attr_mod,
        )
        return (header + data).ljust(256, b"\x00")[:256]

    # LID-routed SMPs: SubnGet(NodeInfo, PortInfo, NodeDescription, GUIDInfo, P_KeyTable).
    for attr in (0x0010, 0x0011, 0x0014, 0x0015, 0x0016, 0x0001, 0x0002, 0x0017, 0x0018, 0x0019):
        out.append(mad(1, 0x01, 1, 0x01, attr))
        out.append(mad(1, 0x01, 1, 0x81, attr, data=bytes(range(232))))
    # Directed-route SMP: hop count 2, hop pointer 0, initial path 0,1,2.
    dr = bytearray(mad(1, 0x81, 1, 0x01, 0x0011))
    dr[4:8] = b"\x00\x00\x00\x02"
    dr[128 + 1] = 1
    dr[128 + 2] = 2
    out.append(bytes(dr))
    # SA: SubnAdmGetTable(PathRecord), SubnAdmGet(NodeRecord), with RMPP and SA headers.
    for attr, method in ((0x0035, 0x12), (0x0011, 0x01), (0x0038, 0x12), (0x0001, 0x01)):
        sa = bytearray(mad(1, 0x03, 2, method, attr))
        sa[24] = 1  # RMPP version
        out.append(bytes(sa))
    # PMA: PerfGet(PortCounters), PerfGet(PortCountersExtended), ClassPortInfo.
    for attr in (0x0012, 0x001D, 0x0001):
        out.append(mad(1, 0x04, 1, 0x01, attr))
        out.append(mad(1, 0x04, 1, 0x81, attr, data=bytes(range(232))))
    return out


# ---- engine_rx ---------------------------------------------------------------------------------
# Mirrors the setup of fuzz_targets/engine_rx.rs: keep the two in step.

ENGINE_SEED = 0x5EED_F022
M64 = (1 << 64) - 1


class SplitMix64:
    """softib-engine's generator (crates/engine/src/rng.rs)."""

    def __init__(self, seed):
        self.state = seed & M64

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & M64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def below(self, n):
        return (self.next_u64() * n) >> 64


def engine_ids():
    """The QPNs of the target's six QPs and the keys of its ten registered regions."""
    rng = SplitMix64(ENGINE_SEED)
    first = 0x10 + rng.below(0x1000)  # Hca::new: where QPNs start
    qpns = [first + i for i in range(6)]
    # reg_mr: key = index << 8 | 8 random bits, indices from 1.
    keys = [((i + 1) << 8) | ((rng.next_u64() >> 32) & 0xFF) for i in range(10)]
    return qpns, keys


R1, R2, R3 = 0x1000_0000, 0x2000_0000, 0x3000_0000
# MRS of the target: (address, length) in registration order.
ENGINE_MRS = {
    "all": (R1 + 0x100, 0x800),
    "rw": (R1 + 0xA00, 0x200),
    "ro": (R1 + 0xC80, 0x200),
    "lw": (R1 + 0xF00, 0x400),
    "atom": (R1 + 0x1380, 0x100),
    "ovl": (R1 + 0x700, 0x300),
    "none": (R1 + 0x1500, 0x200),
    "pd2": (R2 + 0x80, 0x300),
    "short": (R3, 0x400),
    "stale": (R1 + 0x100, 0x100),
}
MR_ORDER = list(ENGINE_MRS)
QKEY = 0x11111111


def fill_u64(off):
    """The 8 bytes at `off` of backing region 1 as the target fills them (little-endian)."""
    return int.from_bytes(bytes(((i * 131) + 7) & 0xFF for i in range(off, off + 8)), "little")


def pad_for(n):
    return (4 - n % 4) % 4


def bth(opcode, qpn, psn, pkey=0xFFFF, pad=0, solicited=False, ack_req=True):
    return (
        bytes([opcode, (solicited << 7) | (pad << 4)])
        + struct.pack(">H", pkey)
        + b"\x00"
        + (qpn & 0xFFFFFF).to_bytes(3, "big")
        + bytes([0x80 if ack_req else 0])
        + (psn & 0xFFFFFF).to_bytes(3, "big")
    )


def body(opcode, qpn, psn, eths=b"", payload_len=0, pkey=0xFFFF, solicited=False, seed=0):
    payload = bytes(((i * 29) + seed) & 0xFF for i in range(payload_len))
    pad = pad_for(payload_len)
    return bth(opcode, qpn, psn, pkey, pad, solicited) + eths + payload + b"\x00" * pad


def deth(qkey, src_qpn):
    return struct.pack(">I", qkey) + b"\x00" + src_qpn.to_bytes(3, "big")


def reth(va, rkey, dma_len):
    return struct.pack(">QII", va, rkey, dma_len)


def atomic_eth(va, rkey, swap_add, compare):
    return struct.pack(">QIQQ", va, rkey, swap_add, compare)


def aeth(syndrome, msn=0):
    return bytes([syndrome]) + msn.to_bytes(3, "big")


def u32be(x):
    return struct.pack(">I", x)


def raw_step(b):
    """Selector 0x00 (raw), meta 0 (port 1, no GRH), little-endian length, the bytes."""
    return b"\x00\x00" + struct.pack("<H", len(b)) + b


PUMP = b"\x90\x07"  # transmit and deliver the wire, up to 8 rounds
TIMEOUT_NEXT = b"\xa0\x02"  # advance to the next deadline and handle_timeout


def engine_seeds():
    """Step sequences for engine_rx, each a list of packet bodies delivered raw, then a pump."""
    qpns, keys = engine_ids()
    q0, q1, q2, q3, q4, q5 = qpns
    k = dict(zip(MR_ORDER, keys))
    a = {name: addr for name, (addr, _) in ENGINE_MRS.items()}
    ACK, RNR, NAK = 0x1F, 0x20, 0x60
    seqs = []

    # QP 4: RC, SRQ, expects 0xFFFFF8, MTU 256 (requests from "QP 0").
    e = 0xFFFFF8
    seqs.append([  # SENDs: FIRST/MIDDLE/LAST, ONLY, ONLY with immediate, FIRST/LAST with imm.
        body(0x00, q4, e, payload_len=256),
        body(0x01, q4, e + 1, payload_len=256),
        body(0x02, q4, e + 2, payload_len=100),
        body(0x04, q4, e + 3, payload_len=50),
        body(0x05, q4, e + 4, u32be(0xC0FFEE), 20, solicited=True),
        body(0x00, q4, e + 5, payload_len=256),
        body(0x03, q4, e + 6, u32be(7), 4),
    ])
    seqs.append([  # WRITEs: FIRST/MIDDLE/LAST, ONLY, ONLY with imm, FIRST/LAST with imm.
        body(0x06, q4, e, reth(a["all"], k["all"], 600), 256),
        body(0x07, q4, e + 1, payload_len=256),
        body(0x08, q4, e + 2, payload_len=88),
        body(0x0A, q4, e + 3, reth(a["rw"], k["rw"], 100), 100),
        body(0x0B, q4, e + 4, reth(a["all"] + 0x100, k["all"], 10) + u32be(9), 10),
        body(0x06, q4, e + 5, reth(a["rw"] + 0x10, k["rw"], 300), 256),
        body(0x09, q4, e + 6, u32be(10), 44),
    ])
    seqs.append([  # READ (3 responses), CmpSwap, FetchAdd, READ of a read-only region,
        # then the READ and the CmpSwap again (duplicates: replayed, not re-executed).
        body(0x0C, q4, e, reth(a["all"], k["all"], 600)),
        body(0x13, q4, e + 3, atomic_eth(a["atom"], k["atom"], 0xDEAD, fill_u64(0x1380))),
        body(0x14, q4, e + 4, atomic_eth(a["atom"] + 8, k["atom"], 3, 0)),
        body(0x0C, q4, e + 5, reth(a["ro"], k["ro"], 100)),
        body(0x0C, q4, e, reth(a["all"] + 256, k["all"], 344)),
        body(0x13, q4, e + 3, atomic_eth(a["atom"], k["atom"], 0xDEAD, fill_u64(0x1380))),
    ])
    seqs.append([  # SEND with invalidate of the write region, then a WRITE to it: R_Key error.
        body(0x17, q4, e, u32be(k["rw"]), 8),
        body(0x0A, q4, e + 1, reth(a["rw"], k["rw"], 16), 16),
    ])
    seqs.append([  # FIRST, LAST with invalidate.
        body(0x00, q4, e, payload_len=256),
        body(0x16, q4, e + 1, u32be(k["ro"]), 8),
    ])
    seqs.append([  # Errors: a PSN gap (one sequence NAK), a WRITE out of bounds, an atomic of
        # the second PD.
        body(0x04, q4, e + 5, payload_len=8),
        body(0x04, q4, e + 6, payload_len=8),
        body(0x0A, q4, e, reth(a["rw"] + 0x1F0, k["rw"], 32), 32),
    ])
    seqs.append([body(0x14, q4, e, atomic_eth(a["pd2"], k["pd2"], 1, 0))])
    seqs.append([body(0x0C, q4, e, reth(a["short"], k["short"], 0x400))])  # backing too short
    q4_seqs = list(seqs)

    # QP 1: RC in RTR, expects 0x7FFFFE, MTU 512, P_Key 0x8001, no atomics.
    e1, pk1 = 0x7FFFFE, 0x8001
    seqs.append([
        body(0x00, q1, e1, payload_len=512, pkey=pk1),
        body(0x02, q1, e1 + 1, payload_len=100, pkey=pk1),
        body(0x0C, q1, e1 + 2, reth(a["all"], k["all"], 1000), pkey=pk1),
        body(0x0A, q1, e1 + 4, reth(a["rw"], k["rw"], 64), 64, pkey=pk1),
        body(0x04, q1, e1 + 5, payload_len=0, pkey=pk1),
        body(0x13, q1, e1 + 6, atomic_eth(a["atom"], k["atom"], 1, 2), pkey=pk1),
    ])
    seqs.append([body(0x04, q1, e1, payload_len=4, pkey=0xFFFF)])  # wrong partition

    # QP 5: RC, no remote access, limited member of partition 1, expects 0x123456.
    e5, pk5 = 0x123456, 0x8001
    seqs.append([
        body(0x04, q5, e5, payload_len=16, pkey=pk5),
        body(0x04, q5, e5 + 1, payload_len=16, pkey=pk5),  # no receive left: RNR NAK
    ])
    seqs.append([body(0x0A, q5, e5, reth(a["all"], k["all"], 4), 4, pkey=pk5)])
    seqs.append([body(0x04, q5, e5, payload_len=4, pkey=0x0001)])  # both limited
    # Its READ of 64 bytes went out at 0x800000: answer it, or let it time out.
    seqs.append([body(0x10, q5, 0x800000, aeth(ACK), 64, pkey=0x0001)])

    # QP 2: UC, connected to itself, expects 0x500, MTU 256.
    e2 = 0x500
    seqs.append([
        body(0x20, q2, e2, payload_len=256),
        body(0x22, q2, e2 + 1, payload_len=100),
        body(0x24, q2, e2 + 2, payload_len=50),
        body(0x25, q2, e2 + 3, u32be(5), 30),
        body(0x26, q2, e2 + 4, reth(a["rw"], k["rw"], 300), 256),
        body(0x28, q2, e2 + 5, payload_len=44),
        body(0x2A, q2, e2 + 6, reth(a["rw"] + 0x100, k["rw"], 16), 16),
        body(0x2B, q2, e2 + 7, reth(a["rw"], k["rw"], 8) + u32be(6), 8),
    ])
    seqs.append([
        body(0x20, q2, e2, payload_len=256),
        body(0x21, q2, e2 + 1, payload_len=256),  # longer than the receive: dropped
        body(0x23, q2, e2 + 2, u32be(1), 4),
        body(0x26, q2, e2 + 3, reth(a["all"], k["all"], 600), 256),
        body(0x27, q2, e2 + 4, payload_len=256),
        body(0x29, q2, e2 + 5, u32be(2), 88),
        body(0x22, q2, e2 + 9, payload_len=4),  # a gap
    ])

    # QP 3: UD, Q_Key 0x11111111.
    seqs.append([
        body(0x64, q3, 0, deth(QKEY, q0), 200),
        body(0x65, q3, 1, deth(QKEY, q1) + u32be(3), 100),  # receive too small
        body(0x64, q3, 2, deth(QKEY, q2), 10),  # receive without LOCAL_WRITE
        body(0x64, q3, 3, deth(QKEY, q3), 600),
        body(0x64, q3, 4, deth(0x22222222, q3), 8),  # wrong Q_Key
    ])

    # QP 0: RC in RTS; its requests went out at 0xFFFFF8 (SEND, 2 packets), 0xFFFFFA (WRITE),
    # 0xFFFFFB (READ of 600: responses 0xFFFFFB..0xFFFFFD), 0xFFFFFE (CmpSwap), 0xFFFFFF
    # (FetchAdd), 0x000000 (SEND with immediate). Responses in order complete all of them.
    seqs.append([
        body(0x11, q0, 0xFFFFF9, aeth(ACK, 1)),
        body(0x11, q0, 0xFFFFFA, aeth(ACK, 2)),
        body(0x0D, q0, 0xFFFFFB, aeth(ACK, 3), 256),
        body(0x0E, q0, 0xFFFFFC, payload_len=256),
        body(0x0F, q0, 0xFFFFFD, aeth(ACK, 3), 88),
        body(0x12, q0, 0xFFFFFE, aeth(ACK, 4) + struct.pack(">Q", 42)),
        body(0x12, q0, 0xFFFFFF, aeth(ACK, 5) + struct.pack(">Q", 43)),
        body(0x11, q0, 0x000000, aeth(ACK, 6)),
    ])
    for syndrome, psn in (
        (RNR | 1, 0xFFFFF8),  # RNR NAK: wait 10 us, resend
        (NAK | 0, 0xFFFFFA),  # PSN sequence error: go back
        (NAK | 1, 0xFFFFFA),  # invalid request
        (NAK | 2, 0xFFFFFB),  # remote access error
        (NAK | 3, 0xFFFFFE),  # remote operational error
        (0x40, 0xFFFFF9),  # reserved syndrome
    ):
        seqs.append([body(0x11, q0, psn, aeth(syndrome))])
    seqs.append([  # an ACK that passes the unfinished READ (implied NAK), a READ response ONLY
        # where FIRST belongs, an atomic ACK for a WRITE
        body(0x11, q0, 0xFFFFFD, aeth(ACK)),
        body(0x10, q0, 0xFFFFFB, aeth(ACK), 256),
        body(0x12, q0, 0xFFFFFA, aeth(ACK) + struct.pack(">Q", 1)),
    ])
    seqs.append([body(0x81, q0, 0, b"\x00" * 16)])  # a CNP
    # QP 4 sent a SEND of 20 bytes at 0x100.
    seqs.append([body(0x11, q4, 0x100, aeth(ACK))])

    # One packet per opcode, to the QP of its transport at the PSN it expects or sent.
    single = {
        0x00: (q4, e, b"", 256), 0x01: (q4, e, b"", 256), 0x02: (q4, e, b"", 16),
        0x03: (q4, e, u32be(1), 16), 0x04: (q4, e, b"", 16), 0x05: (q4, e, u32be(1), 16),
        0x06: (q4, e, reth(a["rw"], k["rw"], 512), 256), 0x07: (q4, e, b"", 256),
        0x08: (q4, e, b"", 16), 0x09: (q4, e, u32be(1), 16),
        0x0A: (q4, e, reth(a["rw"], k["rw"], 16), 16),
        0x0B: (q4, e, reth(a["rw"], k["rw"], 16) + u32be(1), 16),
        0x0C: (q4, e, reth(a["all"], k["all"], 16), 0),
        0x0D: (q0, 0xFFFFFB, aeth(ACK), 256), 0x0E: (q0, 0xFFFFFC, b"", 256),
        0x0F: (q0, 0xFFFFFD, aeth(ACK), 88), 0x10: (q0, 0xFFFFFB, aeth(ACK), 256),
        0x11: (q0, 0xFFFFF8, aeth(ACK), 0),
        0x12: (q0, 0xFFFFFE, aeth(ACK) + struct.pack(">Q", 7), 0),
        0x13: (q4, e, atomic_eth(a["atom"], k["atom"], 1, 2), 0),
        0x14: (q4, e, atomic_eth(a["atom"], k["atom"], 1, 0), 0),
        0x16: (q4, e, u32be(k["none"]), 16), 0x17: (q4, e, u32be(k["none"]), 16),
        0x64: (q3, 0, deth(QKEY, q3), 16), 0x65: (q3, 0, deth(QKEY, q3) + u32be(1), 16),
        0x81: (q0, 0, b"\x00" * 16, 0),
    }
    for op in range(0x20, 0x2C):  # UC: the RC layout
        qpn, _, eths, n = single[op - 0x20]
        if op in (0x26, 0x2A, 0x2B):
            eths = reth(a["rw"], k["rw"], 16 if op != 0x26 else 512) + eths[16:]
        single[op] = (q2, e2, eths, n)
    for op, (qpn, psn, eths, n) in sorted(single.items()):
        seqs.append([body(op, qpn, psn, eths, n)])

    out = []
    for seq in seqs:
        out.append(b"".join(raw_step(p) for p in seq) + PUMP)
    # The QP 4 sequences again after the setup traffic went through: QP 0's requests took
    # 0xFFFFF8..=0x000000, so QP 4 then expects 0x000001.
    for seq in q4_seqs:
        moved = []
        for p in seq:
            psn = (int.from_bytes(p[9:12], "big") + 9) & 0xFFFFFF
            moved.append(p[:9] + psn.to_bytes(3, "big") + p[12:])
        out.append(PUMP + b"".join(raw_step(p) for p in moved) + PUMP)
    # The setup traffic alone: pump, then let the timers fire (QP 5 gives up, QP 0 retries).
    out.append(PUMP + TIMEOUT_NEXT + PUMP + TIMEOUT_NEXT + PUMP)
    out.append(TIMEOUT_NEXT + PUMP + TIMEOUT_NEXT + TIMEOUT_NEXT + PUMP)
    return out


# ---- sa_query, perftest_exchange, topology_parse ------------------------------------------------

def sa_queries():
    """SA requests (LID-prefixed) for every attribute the SA answers."""
    out = []

    def sa(method, attr, comp_mask=0, data=b"", tid=0x1234):
        header = struct.pack(">BBBBHHQHHI", 1, 0x03, 2, method, 0, 0, tid, attr, 0, 0)
        rmpp = bytes(12)
        sa_hdr = struct.pack(">QHHQ", 0, 0, 0, comp_mask)
        return (header + rmpp + sa_hdr + data).ljust(256, b"\x00")[:256]

    def path(slid, dlid):
        rec = bytearray(64)
        rec[40:42] = dlid.to_bytes(2, "big")  # DLID (PathRecord byte 40)
        rec[42:44] = slid.to_bytes(2, "big")  # SLID
        return bytes(rec)

    for attr in (0x0011, 0x0012, 0x0035, 0x0018, 0x0001):
        for method in (0x01, 0x12):
            out.append(sa(method, attr))
    # NodeRecord by LID, PortInfoRecord by LID and port, PathRecord between LIDs 1..6.
    for lid in range(1, 7):
        out.append(sa(0x01, 0x0011, 1, lid.to_bytes(2, "big")))
        out.append(sa(0x12, 0x0012, 1 | 2, lid.to_bytes(2, "big") + b"\x00\x01"))
        for dlid in range(1, 7):
            out.append(sa(0x12, 0x0035, (1 << 4) | (1 << 5), path(lid, dlid)))
    # Methods and versions the SA refuses.
    out.append(sa(0x02, 0x0011))
    out.append(sa(0x81, 0x0011))
    return [struct.pack(">H", 1 + i % 6) + m for i, m in enumerate(out)]


def tcp_streams(dirs, port):
    """Per capture and direction, the TCP payload bytes to or from `port`, in sequence order."""
    out = []
    for d in dirs:
        for name in sorted(os.listdir(d)):
            if not name.endswith(".pcap"):
                continue
            flows = {}
            for linktype, frame in pcap_packets(os.path.join(d, name)):
                dgram = ip_datagram(linktype, frame)
                if not dgram or dgram[0] >> 4 != 4 or dgram[9] != 6:
                    continue
                ihl = (dgram[0] & 0x0F) * 4
                total = int.from_bytes(dgram[2:4], "big")
                tcp = dgram[ihl:total]
                if len(tcp) < 20:
                    continue
                sport, dport, seq = struct.unpack(">HHI", tcp[:8])
                if port not in (sport, dport):
                    continue
                payload = tcp[(tcp[12] >> 4) * 4:]
                if payload:
                    flows.setdefault((dgram[12:16], sport), {})[seq] = payload
            for segs in flows.values():
                out.append(b"".join(segs[k] for k in sorted(segs)))
    return out


def perftest_streams(dirs):
    """Real exchanges, plus the same relabelled 6.29 (legacy block) and 6.30 (key=value)."""
    real = [s for s in tcp_streams(dirs, 18515) if len(s) >= 26]
    out = list(real)
    for s in real[:4]:
        head, rest = s[16:26], s[26:]  # sysdata (4+4), MTU (2)
        block = bytearray(312)
        struct.pack_into(">7i", block, 0, 0, 0, 1, 1, 0, 0, 0)
        struct.pack_into(">QQ", block, 32, 65536, 5000)
        struct.pack_into(">8i", block, 48, 0, 1, 0, 0, 0, 0, 0, 0)
        out.append(b"6.29".ljust(16, b"\x00") + head + bytes(block) + rest)
        kv = "".join(f"{k}={v:08x};" for k, v in (
            ("test_method", 0), ("connection_type", 0), ("verb", 2), ("tst", 1),
            ("atomicType", 0), ("test_type", 0), ("report_fmt", 0))).encode()
        kv += b"size=0000000000010000;iters=0000000000001388;max_qp_rd_atom=00000010;"
        out.append(b"6.30".ljust(16, b"\x00") + head + struct.pack(">ii", 0, len(kv)) + kv + rest)
    return out


def topology_texts():
    out = []
    folders = [os.path.join(REPO, "topologies"), os.path.join(REPO, "crates", "fabric", "tests", "data")]
    for folder in folders:
        if os.path.isdir(folder):
            for name in sorted(os.listdir(folder)):
                if name.endswith(".net"):
                    with open(os.path.join(folder, name), "rb") as f:
                        out.append(f.read())
    golden = os.path.join(os.path.dirname(REPO), "shared", "golden")
    for root, _, files in os.walk(golden):
        for name in sorted(files):
            if "ibnetdiscover" in name and "stderr" not in name:
                with open(os.path.join(root, name), "rb") as f:
                    out.append(f.read())
    return out


def main(argv):
    dirs = argv[1:] or [d for d in DEFAULT_DIRS if os.path.isdir(d)][:1]
    seeds = {t: set() for t in ("wire_packet", "wire_roundtrip", "crc_incremental", "mad_parse")}
    seeds["engine_rx"] = set(engine_seeds())
    seeds["topology_parse"] = set(topology_texts())
    if not dirs:
        write_seeds({t: seeds[t] for t in ("engine_rx", "topology_parse")})
        sys.exit("no capture directory found; pass one as an argument (engine_rx and topology_parse seeds written)")
    shapes = {}
    for d in dirs:
        for name in sorted(os.listdir(d)):
            if not name.endswith(".pcap"):
                continue
            for linktype, frame in pcap_packets(os.path.join(d, name)):
                parts = roce_parts(ip_datagram(linktype, frame) or b"")
                if parts is None:
                    continue
                dgram, ip_header, udp, bth_to_icrc = parts
                mad = mad_of(bth_to_icrc)
                if mad is not None:
                    seeds["mad_parse"].add(mad)
                shape = (bth_to_icrc[0], len(dgram))
                shapes[shape] = shapes.get(shape, 0) + 1
                if shapes[shape] > PER_SHAPE:
                    continue
                seeds["wire_packet"].update([dgram, bth_to_icrc])
                seeds["wire_packet"].update(native_packets(ip_header, bth_to_icrc))
                seeds["wire_roundtrip"].add(dgram)
                ip_len = len(ip_header)
                cuts = struct.pack("<HHH", ip_len, ip_len + 8, len(dgram) - 4)
                seeds["crc_incremental"].add(cuts + dgram)
    seeds["mad_parse"].update(synthetic_mads())
    seeds["sa_query"] = set(sa_queries())
    seeds["sa_query"].update(
        struct.pack(">H", 3) + m for m in seeds["mad_parse"] if m[1] == 0x03
    )
    seeds["perftest_exchange"] = set(perftest_streams(dirs))
    write_seeds(seeds)


def write_seeds(seeds):
    for target, items in seeds.items():
        out = os.path.join(CORPUS, target)
        os.makedirs(out, exist_ok=True)
        for item in items:
            with open(os.path.join(out, hashlib.sha1(item).hexdigest()), "wb") as f:
                f.write(item)
        print(f"{target}: {len(items)} seeds in {os.path.relpath(out, REPO)}")


if __name__ == "__main__":
    main(sys.argv)
