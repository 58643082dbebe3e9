//! softib's packet representation flattened into the JSON keys the test vectors use (the keys
//! of `vectors/scapy_roce.json`, see `vectors/gen_vectors.py`).

use serde_json::{json, Map, Value};
use softib_wire::ip::IpRepr;
use softib_wire::mad;
use softib_wire::packet::RoceV2Repr;

/// The fields of `r` under the vector keys; `icrc` is the ICRC to report (read little-endian).
pub fn repr_view(r: &RoceV2Repr<'_>, icrc: u32) -> Value {
    let t = &r.transport;
    let b = &t.bth;
    let mut m = Map::new();
    let flag = |x: bool| json!(u8::from(x));
    m.insert("opcode".into(), json!(b.opcode.0));
    m.insert("se".into(), flag(b.solicited));
    m.insert("migreq".into(), flag(b.mig_req));
    m.insert("pad".into(), json!(b.pad_count));
    m.insert("tver".into(), json!(b.tver));
    m.insert("pkey".into(), json!(b.pkey.0));
    m.insert("fecn".into(), flag(b.fecn));
    m.insert("becn".into(), flag(b.becn));
    m.insert("dqpn".into(), json!(b.dest_qpn.value()));
    m.insert("ackreq".into(), flag(b.ack_req));
    m.insert("psn".into(), json!(b.psn.value()));
    if let Some(h) = &t.reth {
        m.insert(
            "reth".into(),
            json!({"va": h.va, "rkey": h.rkey.0, "dma_len": h.dma_len}),
        );
    }
    if let Some(h) = &t.aeth {
        m.insert(
            "aeth".into(),
            json!({"syndrome": u8::from(h.syndrome), "msn": h.msn}),
        );
    }
    if let Some(h) = &t.deth {
        m.insert(
            "deth".into(),
            json!({"qkey": h.qkey.0, "src_qp": h.src_qpn.value()}),
        );
    }
    if let Some(h) = &t.immdt {
        m.insert("immdt".into(), json!(h.data));
    }
    if let Some(h) = &t.ieth {
        m.insert("ieth".into(), json!({"rkey": h.rkey.0}));
    }
    if let Some(h) = &t.atomic_eth {
        m.insert(
            "atomiceth".into(),
            json!({"va": h.va, "rkey": h.rkey.0, "swap_add": h.swap_add, "compare": h.compare}),
        );
    }
    if let Some(h) = &t.atomic_ack_eth {
        m.insert("atomicacketh".into(), json!({"orig": h.orig}));
    }
    m.insert("payload_len".into(), json!(r.payload.len()));
    // A MAD (256 bytes on QP0/QP1 with a DETH): its common header, as softib reads it.
    if t.deth.is_some() && b.dest_qpn.value() <= 1 && r.payload.len() == mad::MAD_LEN {
        let h = mad::Packet::new_checked(r.payload)
            .and_then(|p| mad::Repr::parse(&p))
            .expect("a 256-byte MAD has a header");
        m.insert(
            "mad".into(),
            json!({"base_version": h.base_version, "mgmt_class": u8::from(h.mgmt_class),
                   "class_version": h.class_version, "method": u8::from(h.method),
                   "status": h.status, "class_specific": h.class_specific, "tid": h.tid,
                   "attr_id": h.attr_id.0, "attr_mod": h.attr_mod}),
        );
    }
    m.insert("icrc".into(), json!(icrc));
    // The UDP length is not kept in the repr: derive it from the headers and payload.
    let udp_len = 8 + t.header_len() + r.payload.len() + usize::from(b.pad_count) + 4;
    let ip = match &r.ip {
        IpRepr::V4(v4) => {
            m.insert("ip_version".into(), json!(4));
            json!({"tos": v4.tos, "id": v4.ident, "df": u8::from(v4.dont_frag), "ttl": v4.ttl,
                   "sport": r.udp.src_port, "dport": r.udp.dst_port, "udp_len": udp_len,
                   "udp_csum": r.udp.checksum})
        }
        IpRepr::V6(v6) => {
            m.insert("ip_version".into(), json!(6));
            json!({"tclass": v6.traffic_class, "flow": v6.flow_label, "hlim": v6.hop_limit,
                   "sport": r.udp.src_port, "dport": r.udp.dst_port, "udp_len": udp_len,
                   "udp_csum": r.udp.checksum})
        }
    };
    m.insert("ip".into(), ip);
    Value::Object(m)
}

/// Compares `want` (scapy's or tshark's values) with `got` (softib's), key by key, recording
/// every difference as "ctx: key: want X, softib Y". A `null` in `want` means the source could
/// not tell (tshark for CNPs, for instance) and is skipped. With `complete`, `want` must also
/// name every key `got` has (so softib cannot invent a header).
pub fn compare(
    want: &Value,
    got: &Value,
    path: &str,
    complete: bool,
    errors: &mut Vec<String>,
    ctx: &str,
) {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                let p = join(k);
                match g.get(k) {
                    Some(gv) => compare(wv, gv, &p, complete, errors, ctx),
                    None if wv.is_null() => {}
                    None => errors.push(format!("{ctx}: {p}: want {wv}, softib has no {p}")),
                }
            }
            if complete {
                for (k, gv) in g {
                    if !w.contains_key(k) {
                        errors.push(format!("{ctx}: {}: absent, softib reports {gv}", join(k)));
                    }
                }
            }
        }
        (Value::Null, _) => {}
        (w, g) => {
            if w != g {
                errors.push(format!("{ctx}: {path}: want {w}, softib {g}"));
            }
        }
    }
}
