//! Address handles and address vectors: `ibv_create_ah`, `ibv_destroy_ah`,
//! `ibv_init_ah_from_wc`, `ibv_create_ah_from_wc`, and the `ibv_ah_attr` ↔ softib
//! conversions that `ibv_modify_qp`/`ibv_query_qp` share.

use std::ffi::c_int;

use softib::{AddressVector, Gid, GlobalRoute, Lid};
use softib_verbs_abi as abi;

use crate::objects::{free, object, zeroed, Ah, Object, Pd};
use crate::{ffi_errno, ffi_neg, ffi_ptr, refused};

/// softib's address vector for a C `ibv_ah_attr`.
pub(crate) fn av_from_c(a: &abi::IbvAhAttr) -> AddressVector {
    AddressVector {
        dlid: Lid(a.dlid),
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        grh: (a.is_global != 0).then_some(GlobalRoute {
            dgid: Gid(a.grh.dgid.raw),
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        }),
        port_num: a.port_num,
    }
}

/// The C `ibv_ah_attr` of softib's address vector.
pub(crate) fn av_to_c(av: &AddressVector) -> abi::IbvAhAttr {
    let g = av.grh.unwrap_or(GlobalRoute {
        dgid: Gid([0; 16]),
        flow_label: 0,
        sgid_index: 0,
        hop_limit: 0,
        traffic_class: 0,
    });
    abi::IbvAhAttr {
        grh: abi::IbvGlobalRoute {
            dgid: abi::IbvGid { raw: g.dgid.0 },
            flow_label: g.flow_label,
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
        },
        dlid: av.dlid.0,
        sl: av.sl,
        src_path_bits: av.src_path_bits,
        static_rate: av.static_rate,
        is_global: u8::from(av.grh.is_some()),
        port_num: av.port_num,
    }
}

/// The PD behind a program's `ibv_pd`.
pub(crate) fn pd<'a>(p: *mut abi::IbvPd) -> Result<&'a Pd, c_int> {
    // SAFETY: the program passes a PD it allocated.
    unsafe { object::<Pd>(p) }
}

/// `ibv_create_ah`.
pub(crate) extern "C" fn ibv_create_ah(
    pd: *mut abi::IbvPd,
    attr: *mut abi::IbvAhAttr,
) -> *mut abi::IbvAh {
    ffi_ptr(|| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        let p = self::pd(pd)?;
        // SAFETY: the caller passes a readable `ibv_ah_attr`.
        let av = av_from_c(unsafe { &*attr });
        // SAFETY: a PD's context outlives it.
        let ctx = unsafe { crate::objects::ctx_of(p.ctx) };
        let handle = ctx
            .lock()
            .ctx
            .create_ah(ctx.dev, p.handle, av)
            .map_err(|e| refused("ibv_create_ah", &e))?;
        // SAFETY: `ibv_ah` is two pointers and an int.
        let c = unsafe { zeroed::<abi::IbvAh>() };
        let ah = Box::into_raw(Box::new(Ah {
            c,
            magic: Ah::MAGIC,
            handle,
        }));
        // SAFETY: a fresh allocation.
        unsafe {
            let c = &mut *(*ah).c.get();
            c.context = ctx.ibv();
            c.pd = pd;
            c.handle = handle.0;
        }
        Ok(ah as *mut abi::IbvAh)
    })
}

/// `ibv_destroy_ah`.
pub(crate) extern "C" fn ibv_destroy_ah(ah: *mut abi::IbvAh) -> c_int {
    ffi_errno(|| {
        // SAFETY: the program passes an AH it created.
        let a = unsafe { object::<Ah>(ah)? };
        // SAFETY: the AH's fields; its context outlives it.
        let context = unsafe { (*a.c.get()).context };
        // SAFETY: as above.
        let ctx = unsafe { crate::objects::Context::from_ibv(context)? };
        ctx.lock()
            .ctx
            .destroy_ah(ctx.dev, a.handle)
            .map_err(|e| refused("ibv_destroy_ah", &e))?;
        // SAFETY: ours; not used again.
        unsafe { free(a as *const Ah as *mut Ah, |a| a.magic = 0) };
        Ok(())
    })
}

/// The AH handle of a program's `ibv_ah` (for UD sends).
pub(crate) fn handle_of(p: *mut abi::IbvAh) -> Result<softib::AhHandle, c_int> {
    // SAFETY: the program passes an AH it created.
    Ok(unsafe { object::<Ah>(p)? }.handle)
}

/// What `ibv_init_ah_from_wc` reads in the 40 bytes before a UD payload: a GRH (IPv6, or an
/// InfiniBand GRH), or on RoCEv2 over IPv4 twenty zero bytes and the IPv4 header.
enum GrhArea {
    V4 {
        src: [u8; 4],
        dst: [u8; 4],
        ttl: u8,
        tos: u8,
    },
    V6,
    Unknown,
}

fn ipv4_header_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .enumerate()
        .filter(|(i, _)| *i != 5)
        .map(|(_, c)| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// rdma-core's reading of the area (`get_grh_header_version`): IPv6 when the version
/// nibble says 6 and the last 20 bytes are not a valid IPv4 header.
fn classify(grh: &[u8; 40]) -> GrhArea {
    let v6 = grh[0] >> 4 == 6;
    let ip4 = &grh[20..40];
    let v4 = ip4[0] >> 4 == 4;
    let ihl5 = ip4[0] & 0xf == 5;
    let checksum_ok = ipv4_header_checksum(ip4) == u16::from_be_bytes([ip4[10], ip4[11]]);
    let ipv4 = || GrhArea::V4 {
        src: [ip4[12], ip4[13], ip4[14], ip4[15]],
        dst: [ip4[16], ip4[17], ip4[18], ip4[19]],
        ttl: ip4[8],
        tos: ip4[1],
    };
    if !v6 {
        return if v4 { ipv4() } else { GrhArea::Unknown };
    }
    if ihl5 && checksum_ok {
        ipv4()
    } else {
        GrhArea::V6
    }
}

fn mapped(v4: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&v4);
    g
}

/// The index of `gid` of type `roce_v2` (else IB/RoCE v1) in the port's GID table.
fn find_gid_index(
    context: *mut abi::IbvContext,
    port: u8,
    gid: &[u8; 16],
    roce_v2: bool,
) -> Result<u8, c_int> {
    let want = if roce_v2 {
        abi::gid_type_sysfs::ROCE_V2
    } else {
        abi::gid_type_sysfs::IB_ROCE_V1
    };
    for i in 0..=255u8 {
        let mut g = abi::IbvGid::default();
        let mut t = 0u32;
        if crate::device::ibv_query_gid(context, port, c_int::from(i), &mut g) != 0
            || crate::device::ibv_query_gid_type(context, port, u32::from(i), &mut t) != 0
        {
            return Err(libc::EINVAL);
        }
        if &g.raw == gid && t == want {
            return Ok(i);
        }
    }
    Err(libc::EINVAL)
}

/// `ibv_init_ah_from_wc`: the address vector that answers the sender of a UD receive, as
/// rdma-core builds it (an IPv4 RoCEv2 sender becomes an IPv4-mapped GID).
pub(crate) extern "C" fn ibv_init_ah_from_wc(
    context: *mut abi::IbvContext,
    port_num: u8,
    wc: *mut abi::IbvWc,
    grh: *mut abi::IbvGrh,
    ah_attr: *mut abi::IbvAhAttr,
) -> c_int {
    ffi_neg(|| {
        if wc.is_null() || ah_attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller passes a completion and the buffer it was received into.
        let wc = unsafe { &*wc };
        let mut a = abi::IbvAhAttr {
            dlid: wc.slid,
            sl: wc.sl,
            src_path_bits: wc.dlid_path_bits,
            port_num,
            ..Default::default()
        };
        if wc.wc_flags & abi::wc_flags::GRH != 0 {
            if grh.is_null() {
                return Err(libc::EINVAL);
            }
            // SAFETY: the 40 bytes the receive buffer starts with.
            let area: [u8; 40] = unsafe { *(grh as *const [u8; 40]) };
            let flow = u32::from_be_bytes([area[0], area[1], area[2], area[3]]);
            a.is_global = 1;
            a.grh.flow_label = flow & 0xf_ffff;
            match classify(&area) {
                GrhArea::V4 { src, dst, ttl, tos } => {
                    if dst[0] & 0xf0 == 0xe0 {
                        // No point looking for a multicast GID in the GID table.
                        return Err(libc::EINVAL);
                    }
                    a.grh.sgid_index = find_gid_index(context, port_num, &mapped(dst), true)?;
                    a.grh.dgid = abi::IbvGid { raw: mapped(src) };
                    a.grh.hop_limit = ttl;
                    a.grh.traffic_class = tos;
                }
                GrhArea::V6 => {
                    let mut sgid = [0u8; 16];
                    sgid.copy_from_slice(&area[8..24]);
                    let mut dgid = [0u8; 16];
                    dgid.copy_from_slice(&area[24..40]);
                    if dgid[0] == 0xff {
                        return Err(libc::EINVAL);
                    }
                    let roce_v2 = match area[6] {
                        17 => true,
                        0x1b => false,
                        _ => return Err(libc::EPROTONOSUPPORT),
                    };
                    a.grh.dgid = abi::IbvGid { raw: sgid };
                    a.grh.sgid_index = find_gid_index(context, port_num, &dgid, roce_v2)?;
                    a.grh.hop_limit = area[7];
                    a.grh.traffic_class = ((flow >> 20) & 0xff) as u8;
                }
                GrhArea::Unknown => return Err(libc::EPROTONOSUPPORT),
            }
        }
        // SAFETY: the caller passes a writable `ibv_ah_attr`.
        unsafe { *ah_attr = a };
        Ok(0)
    })
}

/// `ibv_create_ah_from_wc`.
pub(crate) extern "C" fn ibv_create_ah_from_wc(
    pd: *mut abi::IbvPd,
    wc: *mut abi::IbvWc,
    grh: *mut abi::IbvGrh,
    port_num: u8,
) -> *mut abi::IbvAh {
    let mut attr = abi::IbvAhAttr::default();
    let Ok(p) = self::pd(pd) else {
        crate::set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    // SAFETY: a PD's context outlives it.
    let context = unsafe { crate::objects::ctx_of(p.ctx) }.ibv();
    if ibv_init_ah_from_wc(context, port_num, wc, grh, &mut attr) != 0 {
        return std::ptr::null_mut();
    }
    ibv_create_ah(pd, &mut attr)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A RoCEv2 IPv4 receive area as rxe (and softib) write it: 20 zero bytes, then the
    /// IPv4 header with its checksum.
    fn v4_area(src: [u8; 4], dst: [u8; 4]) -> [u8; 40] {
        let mut a = [0u8; 40];
        let h = &mut a[20..];
        h[0] = 0x45;
        h[1] = 0x08;
        h[8] = 64;
        h[9] = 17;
        h[12..16].copy_from_slice(&src);
        h[16..20].copy_from_slice(&dst);
        let c = ipv4_header_checksum(h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        a
    }

    #[test]
    fn an_ipv4_rocev2_area_reads_as_its_addresses() {
        match classify(&v4_area([127, 0, 0, 3], [127, 0, 0, 2])) {
            GrhArea::V4 { src, dst, ttl, tos } => {
                assert_eq!(
                    (src, dst, ttl, tos),
                    ([127, 0, 0, 3], [127, 0, 0, 2], 64, 8)
                );
            }
            _ => panic!("not read as IPv4"),
        }
        assert_eq!(
            mapped([127, 0, 0, 2]),
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 2]
        );
    }

    #[test]
    fn a_grh_reads_as_ipv6_and_garbage_as_unknown() {
        let mut g = [0u8; 40];
        g[0] = 0x60;
        g[6] = 0x1b;
        assert!(matches!(classify(&g), GrhArea::V6));
        // A GRH whose last 20 bytes happen to look like an IPv4 header with a bad checksum
        // is still a GRH.
        let mut g2 = v4_area([1, 2, 3, 4], [5, 6, 7, 8]);
        g2[0] = 0x60;
        g2[30] ^= 0xff;
        assert!(matches!(classify(&g2), GrhArea::V6));
        assert!(matches!(classify(&[0u8; 40]), GrhArea::Unknown));
    }

    #[test]
    fn address_vectors_round_trip() {
        let av = AddressVector {
            dlid: Lid(7),
            sl: 3,
            src_path_bits: 1,
            static_rate: 2,
            grh: Some(GlobalRoute {
                dgid: Gid([9; 16]),
                flow_label: 0x12345,
                sgid_index: 1,
                hop_limit: 64,
                traffic_class: 4,
            }),
            port_num: 1,
        };
        assert_eq!(av_from_c(&av_to_c(&av)), av);
        let local = AddressVector { grh: None, ..av };
        assert_eq!(av_from_c(&av_to_c(&local)), local);
    }
}
