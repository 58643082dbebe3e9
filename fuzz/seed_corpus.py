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


def main(argv):
    dirs = argv[1:] or [d for d in DEFAULT_DIRS if os.path.isdir(d)][:1]
    if not dirs:
        sys.exit("no capture directory found; pass one as an argument")
    seeds = {t: set() for t in ("wire_packet", "wire_roundtrip", "crc_incremental", "mad_parse")}
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
    for target, items in seeds.items():
        out = os.path.join(CORPUS, target)
        os.makedirs(out, exist_ok=True)
        for item in items:
            with open(os.path.join(out, hashlib.sha1(item).hexdigest()), "wb") as f:
                f.write(item)
        print(f"{target}: {len(items)} seeds in {os.path.relpath(out, REPO)}")


if __name__ == "__main__":
    main(sys.argv)
